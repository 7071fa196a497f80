package projector_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

// signedPrefix returns a signed checkpoint of the first n lines of the
// record file at path.
func signedPrefix(t *testing.T, key projector.PrivateKey, path string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")[:n]
	var tree projector.TreeHasher
	for _, l := range lines {
		tree.Add([]byte(strings.TrimSuffix(l, "\n")))
	}
	root, _ := tree.Root()
	note, err := projector.SignCheckpoint(key, schemas.Checkpoint{Origin: projector.CheckpointOrigin(key, path), Size: int64(n), Root: root,
		Tail: schemas.HashHex([]byte(strings.TrimSuffix(lines[n-1], "\n")))})
	if err != nil {
		t.Fatal(err)
	}
	return note
}

// Every line of a record has an inclusion proof in every checkpoint that
// covers it, and every checkpoint a consistency proof to every later one;
// the verifier accepts each, and the prover refuses a record that does not
// hold what a checkpoint covers.
func TestProofsOverARecord(t *testing.T) {
	ctx := context.Background()
	st, audit := recordStore(t)
	dir := filepath.Dir(audit)
	key := projector.InsecureDevKey()
	for range 2 {
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit})
		if err != nil {
			t.Fatal(err)
		}
		calls(t, s, 5)
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys := []ed25519.PublicKey{key.PublicKey()}
	const n = 24 // two sessions: open, 5 × (intent, outcome), close
	for _, size := range []int{1, 2, 7, 12, 16, n} {
		note := signedPrefix(t, key, audit, size)
		for line := 1; line <= size; line++ {
			p, err := projector.ProveInclusion(ctx, audit, int64(line), note)
			if err != nil {
				t.Fatalf("line %d of %d: %v", line, size, err)
			}
			if _, reason := verifier.CheckProof(p, keys); reason != nil {
				t.Fatalf("line %d of %d: %s", line, size, reason.Message)
			}
		}
		for _, old := range []int{1, 3, size} {
			if old > size {
				continue
			}
			p, err := projector.ProveConsistency(ctx, audit, signedPrefix(t, key, audit, old), note)
			if err != nil {
				t.Fatalf("%d to %d: %v", old, size, err)
			}
			if _, reason := verifier.CheckProof(p, keys); reason != nil {
				t.Fatalf("%d to %d: %s", old, size, reason.Message)
			}
		}
	}
	if _, err := projector.ProveInclusion(ctx, audit, n+1, signedPrefix(t, key, audit, n)); err == nil {
		t.Fatal("a proof of a line the checkpoint does not cover")
	}

	// The record changed after the checkpoints were signed: no proof.
	full := signedPrefix(t, key, audit, n)
	b, _ := os.ReadFile(audit)
	cut := filepath.Join(dir, "cut.aarl")
	os.WriteFile(cut, b[:len(b)-10], 0o600)
	if _, err := projector.ProveInclusion(ctx, cut, 1, full); !errors.Is(err, projector.ErrProve) {
		t.Fatalf("a cut record: %v", err)
	}
	edited := filepath.Join(dir, "edited.aarl")
	os.WriteFile(edited, []byte(strings.Replace(string(b), `"seq":3`, `"seq":3 `, 1)), 0o600)
	if _, err := projector.ProveConsistency(ctx, edited, signedPrefix(t, key, audit, 7), full); !errors.Is(err, projector.ErrProve) {
		t.Fatalf("an edited record: %v", err)
	}
}
