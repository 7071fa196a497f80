package verifier

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"testing"
)

// benchRecord builds a typical record: an open, pairs unsigned intent and
// signed outcome lines, and a close.
func benchRecord(tb testing.TB, pairs int) []byte {
	w := newTestWriter(tb, devKey()).open()
	for i := 1; i <= pairs; i++ {
		id := fmt.Sprintf("call-%d", i)
		w.intent(id).outcome(id)
	}
	return w.close().bytes()
}

func benchmarkVerify(b *testing.B, verify func(*bytes.Reader, Options) Result) {
	record := benchRecord(b, 2000)
	lines := bytes.Count(record, []byte("\n"))
	b.SetBytes(int64(len(record)))
	b.ResetTimer()
	for b.Loop() {
		if res := verify(bytes.NewReader(record), Options{}); res.Verdict != Verified {
			b.Fatalf("Verify: %s", Render(res))
		}
	}
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

func BenchmarkVerify(b *testing.B) {
	benchmarkVerify(b, func(r *bytes.Reader, o Options) Result { return Verify(r, o) })
}

func BenchmarkVerifySequential(b *testing.B) {
	benchmarkVerify(b, func(r *bytes.Reader, o Options) Result { return verifySequential(r, o) })
}

// BenchmarkSignatureCheck compares, in one run, a line's signature check
// as it was (crypto/ed25519.Verify, which decodes the key on every call)
// with the check under a key parsed once, and a key's strict check as it
// was (decode and [8]P with math/big) with parseKey.
func BenchmarkSignatureCheck(b *testing.B) {
	k := devKey()
	pub := pubOf(k)
	msg := []byte(`{"call_id":"call-1","type":"outcome","seq":2}`)
	sig := ed25519.Sign(k, msg)
	b.Run("line/stdlib-verify", func(b *testing.B) {
		for b.Loop() {
			if hasSmallOrderEncoding(sig[:32]) || !ed25519.Verify(pub, msg, sig) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("line/parsed-key", func(b *testing.B) {
		var cache keyCache
		for b.Loop() {
			if !verifyStrict(&cache, pub, msg, sig) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("key/math-big", func(b *testing.B) {
		for b.Loop() {
			c := newEdwards()
			x, y, ok := c.decode(pub)
			if !ok || c.smallOrder(x, y) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("key/parse", func(b *testing.B) {
		for b.Loop() {
			if _, ok := parseKey(pub); !ok {
				b.Fatal("refused")
			}
		}
	})
}
