package projector_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/witness"
	"github.com/aegis-dev/aegis/events/witness/witnesstest"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// A real witness (litewitness) cosigns the anchor log's checkpoints as
// sessions make them: the first submission learns the witness's size
// from its 409 (also after a restart, when the witness holds the log's
// earlier size), the next ones carry consistency proofs, and each
// cosignature is an anchor.cosigned event that verifies under the
// witness's key. A witness that cannot be reached delays nothing. A
// forked history, another checkpoint of the same size under the same
// key, is refused (409), and so is one that does not extend what the
// witness cosigned (422).
func TestWitnessCosignsTheAnchorLog(t *testing.T) {
	ctx := context.Background()
	w := witnesstest.Start(t, "witness.example/w1")
	st, audit := recordStore(t)
	key := projector.InsecureDevKey()
	origin, vkey, err := projector.AnchorVerifierKey(key.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	w.AddLog(t, origin, vkey)
	policy, err := schemas.ParseWitnessPolicy([]byte(w.PolicyLine("w1") +
		// Nothing listens on port 9 of this host.
		"witness down 2b1f1c8e64c0b8b13bd5a71d0a4ec3a5a0f6a1d1b7a8c2d3e4f5061728394a5b http://127.0.0.1:9\n" +
		"group g any w1 down\nquorum g\n"))
	if err != nil {
		t.Fatal(err)
	}

	run := func(n int) int64 {
		t.Helper()
		a, err := projector.OpenAnchor(st, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		cosigned := make(chan projector.AnchorCosigned, 64)
		stop := a.StartWitnessing(projector.WitnessingConfig{Policy: policy, Interval: 100 * time.Millisecond,
			Cosigned: func(c projector.AnchorCosigned) { cosigned <- c }})
		defer func() {
			stop()
			if err := a.Close(); err != nil {
				t.Error(err)
			}
		}()
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit, Anchor: a,
			Checkpoints: projector.CheckpointPolicy{Lines: 2}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		calls(t, s, n)
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%d calls took %v beside an unreachable witness", n, d)
		}
		want := tree(t, st, key).Size()
		for timeout := time.After(20 * time.Second); ; {
			select {
			case c := <-cosigned:
				if c.Size == want {
					return want
				}
			case <-timeout:
				t.Fatalf("the witness did not cosign the anchor log's %d leaves within 20 s", want)
			}
		}
	}
	first := run(3)
	size := run(2) // a new process: the witness holds `first` leaves
	if size <= first {
		t.Fatalf("anchor log of %d leaves after %d", size, first)
	}

	tr := tree(t, st, key)
	got := tr.Cosigned[size]["witness.example/w1"]
	av, _ := projector.AnchorVerifierOf(origin, key.PublicKey())
	n, err := note.Open([]byte(got), note.VerifierList(av, policy.Witnesses[0].Verifier))
	if err != nil || len(n.Sigs) != 2 {
		t.Fatalf("the stored cosigned checkpoint does not verify under the log's and the witness's keys: %v\n%s", err, got)
	}

	// The cosignatures as the process kept them with the snapshot: a
	// reader reads no anchor.cosigned event again.
	rd, err := projector.ReadAnchor(ctx, st, key.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if rd.CosignedSnapshot() != nil || rd.CosignedFolded() != 0 || !reflect.DeepEqual(rd.Cosigned, tr.Cosigned) {
		t.Fatalf("the cosignatures kept with the snapshot (%v, %d events read again):\n%v\nthe stream's:\n%v", rd.CosignedSnapshot(), rd.CosignedFolded(), rd.Cosigned, tr.Cosigned)
	}

	// A fork: another root at the size the witness cosigned.
	c := schemas.AnchorCheckpoint{Origin: origin, Size: size, Root: [32]byte{1}}
	fork, err := projector.SignAnchorCheckpoint(key, c)
	if err != nil {
		t.Fatal(err)
	}
	client := &witness.Client{URL: w.URL}
	// The specification says 409; litewitness v0.6.1 answers 422, the
	// answer to a proof that does not hold. The submitter takes both as a
	// fork.
	_, err = client.AddCheckpoint(ctx, size, nil, fork)
	var conflict *witness.ConflictError
	if !(errors.As(err, &conflict) && conflict.Size == size) && !errors.Is(err, witness.ErrProof) {
		t.Fatalf("a forked checkpoint of the cosigned size: %v, want 409 with size %d or 422", err, size)
	}
	// And a larger tree that does not extend the cosigned one.
	c.Size++
	fork, _ = projector.SignAnchorCheckpoint(key, c)
	if _, err = client.AddCheckpoint(ctx, size, [][32]byte{{2}}, fork); !errors.Is(err, witness.ErrProof) {
		t.Fatalf("a checkpoint that does not extend the cosigned one: %v, want 422", err)
	}
}

// tree rebuilds key's anchor log from the stream.
func tree(t *testing.T, st *events.Store, key projector.PrivateKey) *projector.AnchorTree {
	t.Helper()
	origin := schemas.AnchorOrigin(key.KeyID())
	v, err := projector.AnchorVerifierOf(origin, key.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := projector.LoadAnchor(context.Background(), st, origin, v)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
