package projector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// recordStore opens a store in a temp dir, closed with the test, and
// names a record file beside it.
func recordStore(t *testing.T) (*events.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := events.Open(context.Background(), events.Config{Dir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st, filepath.Join(dir, "calls.aarl")
}

// calls records n answered calls in sess, each waited for.
func calls(t *testing.T, sess *projector.Session, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		c := schemas.WrapCall{CallID: sess.NextCallID(), ToolID: "echo", RequestDigest: schemas.HashHex([]byte("x")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
		r, err := sess.Intent(c.Intent())
		if err == nil {
			_, err = r.Wait(ctx)
		}
		if err == nil {
			r, err = sess.Outcome(c.Answered(schemas.HashHex([]byte("y")), 1))
		}
		if err == nil {
			_, err = r.Wait(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkNotes checks every note of the sidecar against the record file:
// signed by key, and the root of the file's first Size lines. It returns
// the sizes.
func checkNotes(t *testing.T, audit string, key projector.PrivateKey) []int64 {
	t.Helper()
	b, err := os.ReadFile(audit + projector.CheckpointsSuffix)
	if err != nil {
		t.Fatal(err)
	}
	record, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(record), "\n")
	v, err := projector.CheckpointVerifier(key.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	// Each note ends in its signature line and is followed by an empty
	// line: the sidecar is text, empty line, signature, empty line, …
	parts := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if len(parts)%2 != 0 {
		t.Fatalf("the sidecar is not notes followed by empty lines:\n%s", b)
	}
	for i := 0; i < len(parts); i += 2 {
		msg := parts[i] + "\n\n" + parts[i+1] + "\n"
		n, err := note.Open([]byte(msg), note.VerifierList(v))
		if err != nil {
			t.Fatalf("note %d: %v\n%s", i/2, err, msg)
		}
		cp, err := schemas.ParseCheckpoint([]byte(n.Text))
		if err != nil {
			t.Fatal(err)
		}
		if cp.Origin != projector.CheckpointOrigin(key, audit) {
			t.Errorf("origin %q", cp.Origin)
		}
		if int(cp.Size) > len(lines)-1 {
			t.Fatalf("checkpoint of %d lines, the file holds %d", cp.Size, len(lines)-1)
		}
		var tree projector.TreeHasher
		for _, l := range lines[:cp.Size] {
			tree.Add([]byte(strings.TrimSuffix(l, "\n")))
		}
		root, _ := tree.Root()
		if root != cp.Root || cp.Tail != schemas.HashHex([]byte(strings.TrimSuffix(lines[cp.Size-1], "\n"))) {
			t.Fatalf("checkpoint of %d lines does not match the file's first %d lines", cp.Size, cp.Size)
		}
		sizes = append(sizes, cp.Size)
	}
	return sizes
}

// A record file gets a signed checkpoint every few lines and at close,
// each over the file's lines as they stand; a later session resumes the
// tree from the last checkpoint the stream holds, including after a
// session that signed none, so its checkpoints cover the whole file.
func TestLiveCheckpointsCoverTheRecord(t *testing.T) {
	ctx := context.Background()
	st, audit := recordStore(t)
	key := projector.InsecureDevKey()
	open := func(p projector.CheckpointPolicy) *projector.Session {
		t.Helper()
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit, Checkpoints: p})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	lines := func() int64 {
		b, _ := os.ReadFile(audit)
		return int64(bytes.Count(b, []byte("\n")))
	}

	s1 := open(projector.CheckpointPolicy{Lines: 4})
	calls(t, s1, 2)
	// The file projection writes lines in batches and signs at a batch's
	// end: wait for the checkpoint of the first lines before writing
	// more, so that a loaded machine does not write all at once at close.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(audit + projector.CheckpointsSuffix); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after 5 lines")
		}
	}
	calls(t, s1, 3)
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sizes := checkNotes(t, audit, key)
	if len(sizes) < 2 || sizes[len(sizes)-1] != lines() {
		t.Fatalf("checkpoints at %v for a file of %d lines: want one after 4 lines or more, and one at close", sizes, lines())
	}
	for i := range len(sizes) - 1 {
		prev := int64(0)
		if i > 0 {
			prev = sizes[i-1]
		}
		if sizes[i]-prev < 4 {
			t.Fatalf("checkpoints at %v: one came before 4 more lines", sizes)
		}
	}

	// A session that signs none, then one that does: its tree resumes
	// from s1's last checkpoint and takes in s2's lines from the file.
	s2 := open(projector.CheckpointPolicy{Off: true})
	calls(t, s2, 2)
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s3 := open(projector.CheckpointPolicy{Lines: 1000, Interval: 50 * time.Millisecond})
	calls(t, s3, 1)
	// The interval, not the line count, signs this one.
	deadline := time.Now().Add(10 * time.Second)
	for n := len(sizes); len(checkNotes(t, audit, key)) == n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after the interval")
		}
	}
	if err := s3.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sizes = checkNotes(t, audit, key)
	if sizes[len(sizes)-1] != lines() {
		t.Fatalf("the last checkpoint covers %d lines of %d", sizes[len(sizes)-1], lines())
	}

	// Each checkpoint is an event of the stream first.
	var got []projector.RecordCheckpoint
	if err := st.Replay(ctx, events.Position{}, func(r events.Record) error {
		if r.Event.Kind == schemas.KindRecordCheckpoint {
			var c projector.RecordCheckpoint
			if err := json.Unmarshal(r.Event.Payload, &c); err != nil {
				return err
			}
			got = append(got, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sizes) {
		t.Fatalf("%d checkpoint events, %d notes in the sidecar", len(got), len(sizes))
	}
	for i, e := range got {
		if e.Size != sizes[i] || e.AuditPath != audit {
			t.Errorf("event %d: %+v, note of %d lines", i, e, sizes[i])
		}
	}
}
