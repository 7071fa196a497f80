package projector_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
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
		return appendLeaf(t, st, sess, key, a, i, index)
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

// appendLeaf appends to a a record checkpoint of i lines of a record "/x"
// as a session would, its event's entry index given by index.
func appendLeaf(t *testing.T, st *events.Store, sess string, key projector.PrivateKey, a *projector.Anchor, i int64, index func(int64) int64) error {
	t.Helper()
	ctx := context.Background()
	cp := schemas.Checkpoint{Origin: "aegis/" + key.KeyID() + "/x", Size: i, Tail: schemas.HashHex([]byte{byte(i), byte(i >> 8)})}
	note, err := projector.SignCheckpoint(key, cp)
	if err != nil {
		t.Fatal(err)
	}
	return a.Append(ctx, note, func(e projector.AnchorEntry) (events.Position, error) {
		e.Index = index(e.Index)
		ev, err := st.NewEvent(sess, schemas.KindRecordCheckpoint, projector.RecordCheckpoint{AuditPath: "/x", Origin: cp.Origin, Note: string(note), Anchor: &e})
		if err != nil {
			return events.Position{}, err
		}
		r, err := st.Enqueue(ev)
		if err != nil {
			return events.Position{}, err
		}
		return r.Wait(ctx)
	})
}

// A recording process's anchor log starts from the snapshot kept in the
// index folder: with N leaves snapshotted, a start folds none of the N
// record checkpoint events again, and appends on from there into a log
// that a full rebuild from the stream checks (its last signed checkpoint
// has the root of every leaf). A snapshot whose hashes file was damaged
// is thrown away and the log rebuilt from the stream, every event.
func TestAnchorStartsFromItsSnapshot(t *testing.T) {
	const n = 200
	ctx := context.Background()
	st, _ := recordStore(t)
	key := projector.InsecureDevKey()
	sess, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	same := func(i int64) int64 { return i }
	open := func() *projector.Anchor {
		t.Helper()
		a, err := projector.OpenAnchor(st, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := open()
	for i := range int64(n) {
		if err := appendLeaf(t, st, sess, key, a, i+1, same); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := open()
	if got := b.Replayed(); got != 0 {
		t.Fatalf("a start with %d leaves snapshotted folded %d events again, want none", n, got)
	}
	if err := appendLeaf(t, st, sess, key, b, n+1, same); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	origin := schemas.AnchorOrigin(key.KeyID())
	v, _ := projector.AnchorVerifierOf(origin, key.PublicKey())
	if tree, err := projector.LoadAnchor(ctx, st, origin, v); err != nil || tree.Size() != n+1 {
		t.Fatalf("the log rebuilt from the stream after appends from the snapshot: %v, %d leaves; want %d", err, tree.Size(), n+1)
	}

	// A stored hash of the snapshot damaged: rebuilt from the stream.
	hashes, _ := filepath.Glob(filepath.Join(st.Dir(), events.IndexDir, "anchor.v1.*.hashes"))
	if len(hashes) != 1 {
		t.Fatalf("the anchor log's hashes files: %v", hashes)
	}
	f, err := os.OpenFile(hashes[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	var one [1]byte
	f.ReadAt(one[:], fi.Size()-1)
	one[0] ^= 1
	f.WriteAt(one[:], fi.Size()-1)
	f.Close()
	c := open()
	if got := c.Replayed(); got != n+1 {
		t.Fatalf("a start from a damaged snapshot folded %d events, want all %d", got, n+1)
	}
	if err := appendLeaf(t, st, sess, key, c, n+2, same); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if tree, err := projector.LoadAnchor(ctx, st, origin, v); err != nil || tree.Size() != n+2 {
		t.Fatalf("the log rebuilt from the stream after a rebuilt snapshot: %v, %d leaves; want %d", err, tree.Size(), n+2)
	}
	d := open()
	defer d.Close()
	if d.Replayed() != 0 {
		t.Fatalf("a start after the rebuilt snapshot folded %d events, want none", d.Replayed())
	}
}

// aegis prove anchor (and a rotation's seal) reads the anchor log as a
// start does, from the snapshot, on a store opened read-only: with N
// leaves snapshotted it folds none of the N record checkpoint events and
// writes nothing to the index folder; with the snapshot's hashes file
// damaged it folds all N, says why, and proves every leaf with the same
// bytes.
func TestAnchorReaderStartsFromTheSnapshot(t *testing.T) {
	const n = 100
	ctx := context.Background()
	st, _ := recordStore(t)
	key := projector.InsecureDevKey()
	sess, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	a, err := projector.OpenAnchor(st, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(n) {
		if err := appendLeaf(t, st, sess, key, a, i+1, func(i int64) int64 { return i }); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	dir := st.Dir()
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ro, err := events.Open(ctx, events.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	var texts [][]byte
	for i := range int64(n) {
		cp := schemas.Checkpoint{Origin: "aegis/" + key.KeyID() + "/x", Size: i + 1, Tail: schemas.HashHex([]byte{byte(i + 1), byte((i + 1) >> 8)})}
		note, err := projector.SignCheckpoint(key, cp)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, schemas.NoteText(note))
	}
	index := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		files, _ := filepath.Glob(filepath.Join(dir, events.IndexDir, "*"))
		for _, f := range files {
			m[f] = string(readAll(t, f))
		}
		return m
	}
	// bundles proves every leaf in the log's last checkpoint.
	bundles := func(wantFolded int, snapshot bool) []byte {
		t.Helper()
		tree, err := projector.ReadAnchor(ctx, ro, key.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		defer tree.Close()
		if got := tree.Folded(); got != wantFolded || (tree.Snapshot() == nil) != snapshot {
			t.Fatalf("the reader folded %d events (snapshot not used: %v), want %d", got, tree.Snapshot(), wantFolded)
		}
		leaves, err := tree.LeafIndexes(texts)
		if err != nil || len(leaves) != n {
			t.Fatalf("found %d of %d leaves: %v", len(leaves), n, err)
		}
		var out []byte
		for _, text := range texts {
			idx := leaves[tlog.RecordHash(text)]
			path, err := tree.ProveLeaf(idx, tree.Size())
			if err != nil {
				t.Fatal(err)
			}
			b := schemas.AnchorBundle{Bundle: schemas.BundleV1, RecordCheckpoint: string(text), AnchorIndex: idx, AnchorCheckpoint: string(tree.Note())}
			for _, h := range path {
				b.AnchorPath = append(b.AnchorPath, schemas.ProofHash(h))
			}
			j, _ := json.Marshal(b)
			out = append(append(out, j...), '\n')
		}
		return out
	}
	before := index()
	fromSnapshot := bundles(0, true)
	if after := index(); len(after) != len(before) {
		t.Fatalf("the reader changed the index folder: %d files, then %d", len(before), len(after))
	} else {
		for f, b := range before {
			if after[f] != b {
				t.Fatalf("the reader wrote %s", f)
			}
		}
	}

	hashes, _ := filepath.Glob(filepath.Join(dir, events.IndexDir, "anchor.v1.*.hashes"))
	if len(hashes) != 1 {
		t.Fatalf("the anchor log's hashes files: %v", hashes)
	}
	b := readAll(t, hashes[0])
	b[len(b)-1] ^= 1
	if err := os.WriteFile(hashes[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if full := bundles(n, false); !bytes.Equal(full, fromSnapshot) {
		t.Fatalf("the proofs from the whole stream differ from those from the snapshot:\n%s\n%s", full, fromSnapshot)
	}
}

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
