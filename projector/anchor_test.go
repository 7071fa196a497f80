package projector_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// sidecarNotes returns the signed notes of a record's sidecar.
func sidecarNotes(t *testing.T, audit string) [][]byte {
	t.Helper()
	f, err := os.Open(audit + projector.CheckpointsSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 2*schemas.MaxNote)
	var out [][]byte
	for {
		n, err := schemas.ReadNote(br)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
}

// Every record checkpoint a session signs is a leaf of the state
// directory's anchor log, in the order they were made, across sessions
// and process restarts (a new Anchor rebuilds the log from the stream and
// appends after it); the log's last signed checkpoint proves each leaf.
func TestAnchorLogHoldsEveryRecordCheckpoint(t *testing.T) {
	ctx := context.Background()
	st, audit := recordStore(t)
	key := projector.InsecureDevKey()
	for run := range 2 {
		a, err := projector.OpenAnchor(st, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit, Anchor: a,
			Checkpoints: projector.CheckpointPolicy{Lines: 3}})
		if err != nil {
			t.Fatal(err)
		}
		calls(t, s, 2+run)
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	notes := sidecarNotes(t, audit)
	if len(notes) < 3 {
		t.Fatalf("%d record checkpoints, want several", len(notes))
	}
	origin := schemas.AnchorOrigin(key.KeyID())
	v, err := projector.AnchorVerifierOf(origin, key.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	tree, err := projector.LoadAnchor(ctx, st, origin, v)
	if err != nil {
		t.Fatal(err)
	}
	if tree.Size() != int64(len(notes)) {
		t.Fatalf("the anchor log holds %d leaves, the sidecar %d checkpoints", tree.Size(), len(notes))
	}
	n, err := note.Open(tree.Note(), note.VerifierList(v))
	if err != nil {
		t.Fatal(err)
	}
	c, err := schemas.ParseAnchorCheckpoint([]byte(n.Text))
	if err != nil || c.Size != tree.Size() || c.Origin != origin {
		t.Fatalf("last anchor checkpoint %+v, %v", c, err)
	}
	for i, cp := range notes {
		text := schemas.NoteText(cp)
		idx, ok := tree.LeafIndex(text)
		if !ok || idx != int64(i) {
			t.Fatalf("record checkpoint %d is leaf %d (%v)", i, idx, ok)
		}
		p, err := tree.ProveLeaf(idx, c.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckRecord(p, c.Size, c.Root, idx, tlog.RecordHash(text)); err != nil {
			t.Fatalf("leaf %d: %v", i, err)
		}
	}
}

// An anchor log in the stream that does not add up (a leaf out of its
// place, as a forged or misplaced event would put it) is refused when it
// is rebuilt, and a process on that stream appends nothing to it: its
// record checkpoints stop, rather than extend a log no one can check.
func TestAnchorLogThatDoesNotAddUpIsRefused(t *testing.T) {
	ctx := context.Background()
	st, _ := recordStore(t)
	key := projector.InsecureDevKey()
	sess, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	appendCP := func(a *projector.Anchor, i int64, index func(int64) int64) error {
		cp := schemas.Checkpoint{Origin: "aegis/" + key.KeyID() + "/x", Size: i, Tail: schemas.HashHex([]byte{byte(i)})}
		note, err := projector.SignCheckpoint(key, cp)
		if err != nil {
			t.Fatal(err)
		}
		return a.Append(ctx, note, func(e projector.AnchorEntry) error {
			e.Index = index(e.Index)
			ev, err := st.NewEvent(sess, schemas.KindRecordCheckpoint, projector.RecordCheckpoint{AuditPath: "/x", Origin: cp.Origin, Note: string(note), Anchor: &e})
			if err != nil {
				return err
			}
			r, err := st.Enqueue(ev)
			if err == nil {
				_, err = r.Wait(ctx)
			}
			return err
		})
	}
	a, err := projector.OpenAnchor(st, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := func(i int64) int64 { return i }
	for i := range int64(2) {
		if err := appendCP(a, i+1, same); err != nil {
			t.Fatal(err)
		}
	}
	if err := appendCP(a, 3, func(i int64) int64 { return i + 3 }); err != nil {
		t.Fatal(err)
	}
	origin := schemas.AnchorOrigin(key.KeyID())
	v, _ := projector.AnchorVerifierOf(origin, key.PublicKey())
	if _, err := projector.LoadAnchor(ctx, st, origin, v); !errors.Is(err, projector.ErrAnchor) {
		t.Fatalf("a leaf out of its place: %v, want ErrAnchor", err)
	}
	b, err := projector.OpenAnchor(st, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := appendCP(b, 4, same); !errors.Is(err, projector.ErrAnchor) {
		t.Fatalf("an append to a log that does not add up: %v, want ErrAnchor", err)
	}
}
