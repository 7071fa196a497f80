package verifier

import (
	"bytes"
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
