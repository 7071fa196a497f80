package projector_test

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

// appendSession writes one session through a Chain into the file at path,
// the way a proxy does: recover the tail, open, append each line with a
// durable write inside the chain's critical section, close.
func appendSession(t *testing.T, path string, key projector.PrivateKey, calls int) {
	t.Helper()
	var tail projector.Tail
	if f, err := os.Open(path); err == nil {
		tail, err = projector.TailOf(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if tail.NeedsNewline {
		if _, err := f.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(e projector.Entry) error {
		if _, err := f.Write(append(e.Bytes, '\n')); err != nil {
			return err
		}
		return f.Sync()
	}
	c, err := projector.NewChain(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenFunc(tail.Hash, commit); err != nil {
		t.Fatal(err)
	}
	add := func(l schemas.Line, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AppendFunc(l, commit); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= calls; i++ {
		call := schemas.WrapCall{
			CallID:        schemas.CallID(uint64(i)),
			ToolID:        "echo",
			RequestDigest: schemas.HashHex([]byte{byte(i)}),
			PolicySetHash: schemas.WrapPassthroughPolicySetHash,
		}
		add(call.Intent().Line())
		switch i % 3 {
		case 0:
			add(call.Answered(schemas.HashHex([]byte{byte(i), 1}), uint64(i)).Line())
		case 1:
			add(call.Refused(schemas.PolicyPendingApproval("apr-gate-echo-1"), "gate").Line())
			add(schemas.Decision{ApprovalID: "apr-gate-echo-1", Verdict: schemas.Rejected("no")}.Line())
		case 2:
			add(call.ChildExited().Line())
		}
	}
	add(schemas.CloseLine(), nil)
}

func TestRoundTripVerifies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.aarl")
	k1, _ := projector.NewPrivateKey(bytes.Repeat([]byte{1}, 32))
	k2, _ := projector.NewPrivateKey(bytes.Repeat([]byte{2}, 32))
	appendSession(t, path, k1, 3)
	appendSession(t, path, k1, 1)
	record, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts verifier.Options
		want string
	}{
		{"unpinned", verifier.Options{}, "Verified (unpinned)"},
		{"pinned", verifier.Options{Keys: []ed25519.PublicKey{k1.PublicKey()}}, "Verified (pinned to " + k1.KeyID() + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := verifier.Verify(bytes.NewReader(record), tc.opts)
			if got := verifier.Label(res); got != tc.want {
				t.Fatalf("Verify = %s", verifier.Render(res))
			}
			if got, want := *res.Coverage, (verifier.Position{Session: 1, Seq: 4}); got != want {
				t.Fatalf("Coverage = %v, want %v", got, want)
			}
		})
	}
	res := verifier.Verify(bytes.NewReader(record), verifier.Options{Keys: []ed25519.PublicKey{k2.PublicKey()}})
	if res.Reason == nil || res.Reason.Code != verifier.UntrustedKey {
		t.Fatalf("pinned to another key: %s", verifier.Render(res))
	}
	// A third session with a rotated key verifies when both are pinned.
	appendSession(t, path, k2, 2)
	record, _ = os.ReadFile(path)
	res = verifier.Verify(bytes.NewReader(record), verifier.Options{Keys: []ed25519.PublicKey{k1.PublicKey(), k2.PublicKey()}})
	if got := verifier.Label(res); got != "Verified (pinned)" {
		t.Fatalf("rotated record: %s", verifier.Render(res))
	}
}

// TestRoundTripByteFlips: changing any single byte of a verified record never
// leaves it Verified.
func TestRoundTripByteFlips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.aarl")
	k, _ := projector.NewPrivateKey(bytes.Repeat([]byte{1}, 32))
	appendSession(t, path, k, 1)
	appendSession(t, path, k, 1)
	record, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if res := verifier.Verify(bytes.NewReader(record), verifier.Options{}); res.Verdict != verifier.Verified {
		t.Fatalf("unflipped record: %s", verifier.Render(res))
	}
	// Every byte gets its low bit flipped; every fifth byte also gets its
	// high bit flipped, which reaches the UTF-8 checks. Two sessions of a
	// call each hold every kind of line and the link between sessions.
	// Positions are spread over the available CPUs. Under the race
	// detector, every seventh flip (make test runs them all without it).
	type flip struct {
		at   int
		mask byte
	}
	var flips []flip
	for i := range record {
		flips = append(flips, flip{i, 0x01})
		if i%5 == 0 {
			flips = append(flips, flip{i, 0x80})
		}
	}
	if raceDetector {
		var sample []flip
		for j := 0; j < len(flips); j += 7 {
			sample = append(sample, flips[j])
		}
		flips = sample
	}
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(record))
			for j := w; j < len(flips); j += workers {
				f := flips[j]
				copy(buf, record)
				buf[f.at] ^= f.mask
				if res := verifier.Verify(bytes.NewReader(buf), verifier.Options{}); res.Verdict == verifier.Verified {
					t.Errorf("flipping byte %d (%q) by %#x still verifies", f.at, record[f.at], f.mask)
					return
				}
			}
		}()
	}
	wg.Wait()
}
