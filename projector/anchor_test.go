package projector_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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
		prior := fileLines(t, audit)
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit, Anchor: a,
			Checkpoints: projector.CheckpointPolicy{Lines: 3}})
		if err != nil {
			t.Fatal(err)
		}
		for k := range 2 + run {
			calls(t, s, 1)
			// The record's writer signs a checkpoint after a batch of
			// lines that brings 3 or more: let each call's lines be
			// written before the next, or a fast writer takes the
			// session's lines in one batch and signs once, at Close.
			waitFileLines(t, audit, prior+1+2*(k+1))
		}
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
// fileLines is the number of lines of the file at path (0 when there is
// none).
func fileLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// waitFileLines waits until the file at path has at least n lines.
func waitFileLines(t *testing.T, path string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); fileLines(t, path) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d lines, not %d, after 30 s", path, fileLines(t, path), n)
		}
	}
}

// caughtUpAnchor opens st's anchor log under key and waits until it has
// folded the stream.
func caughtUpAnchor(t *testing.T, ctx context.Context, st *events.Store, key projector.PrivateKey) *projector.Anchor {
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
	open := func() *projector.Anchor { return caughtUpAnchor(t, ctx, st, key) }
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
		// Down to the newest below n/2: none under it looked for.
		down, err := tree.LeafIndexesDownTo(texts, n/2)
		if i, ok := down[tlog.RecordHash(texts[n/2-1])]; err != nil || len(down) != n/2+1 || !ok || i != n/2-1 {
			t.Fatalf("found %d leaves down to the newest below %d (%d, %v): %v", len(down), n/2, i, ok, err)
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

// cosignAnchor stores, as an anchor.cosigned event of sess, witness w's
// cosignature of key's anchor checkpoint of size leaves of tr (a note
// line of w's key after the log's signature, as the submitter keeps it).
func cosignAnchor(t *testing.T, st *events.Store, sess string, key projector.PrivateKey, tr *projector.AnchorTree, w note.Signer, size int64) projector.AnchorCosigned {
	t.Helper()
	ctx := context.Background()
	origin := schemas.AnchorOrigin(key.KeyID())
	root, err := tr.Root(size)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := projector.SignAnchorCheckpoint(key, schemas.AnchorCheckpoint{Origin: origin, Size: size, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	text := schemas.NoteText(msg)
	wn, err := note.Sign(&note.Note{Text: string(text)}, w)
	if err != nil {
		t.Fatal(err)
	}
	c := projector.AnchorCosigned{Origin: origin, Size: size, Witness: w.Name(), Note: string(msg) + string(wn[len(text)+1:])}
	ev, err := st.NewEvent(sess, schemas.KindAnchorCosigned, c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Enqueue(ev)
	if err == nil {
		_, err = r.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// witnessSigner returns a note signer under a new key named name.
func witnessSigner(t *testing.T, name string) note.Signer {
	t.Helper()
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// aegis prove anchor reads the witnesses' cosignatures as it reads the
// log: those kept with the snapshot's head (a size is kept only while no
// larger one is cosigned by as many witnesses or more), then only the
// anchor.cosigned events after it; a start keeps them the same way. A head
// whose cosignatures do not check is not trusted: every anchor.cosigned
// event is read again, it says why, and the cosignatures come out the
// same as the whole stream's.
func TestAnchorReaderReadsTheCosignaturesFromTheSnapshot(t *testing.T) {
	const n = 30
	ctx := context.Background()
	st, _ := recordStore(t)
	key := projector.InsecureDevKey()
	origin := schemas.AnchorOrigin(key.KeyID())
	v, _ := projector.AnchorVerifierOf(origin, key.PublicKey())
	sess, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	start := func() *projector.Anchor { return caughtUpAnchor(t, ctx, st, key) }
	a := start()
	for i := range int64(n) {
		if err := appendLeaf(t, st, sess, key, a, i+1, func(i int64) int64 { return i }); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err := projector.LoadAnchor(ctx, st, origin, v)
	if err != nil {
		t.Fatal(err)
	}
	w1, w2, w3 := witnessSigner(t, "witness.example/w1"), witnessSigner(t, "witness.example/w2"), witnessSigner(t, "witness.example/w3")
	for _, c := range []struct {
		w    note.Signer
		size int64
	}{{w1, 10}, {w2, 10}, {w3, 10}, {w1, 20}, {w2, 20}, {w1, n}, {w2, n}} {
		cosignAnchor(t, st, sess, key, tr, c.w, c.size)
	}
	// A start folds them and saves them with the head; the next start
	// begins from them and saves them again.
	for range 2 {
		if err := start().Close(); err != nil {
			t.Fatal(err)
		}
	}
	last := cosignAnchor(t, st, sess, key, tr, w1, n) // after the snapshot
	const cosEvents = 8

	read := func(t *testing.T, wantFolded int, why bool) map[int64]map[string]string {
		t.Helper()
		tree, err := projector.ReadAnchor(ctx, st, key.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		defer tree.Close()
		if tree.Snapshot() != nil || tree.Folded() != 0 {
			t.Fatalf("the log's leaves were not read from the snapshot: %v, %d events folded", tree.Snapshot(), tree.Folded())
		}
		if got := tree.CosignedFolded(); got != wantFolded || (tree.CosignedSnapshot() != nil) != why {
			t.Fatalf("the reader folded %d anchor.cosigned events (the snapshot's not used: %v), want %d", got, tree.CosignedSnapshot(), wantFolded)
		}
		return tree.Cosigned
	}
	full, err := projector.LoadAnchor(ctx, st, origin, v)
	if err != nil {
		t.Fatal(err)
	}
	if full.CosignedFolded() != cosEvents {
		t.Fatalf("the whole stream holds %d anchor.cosigned events, want %d", full.CosignedFolded(), cosEvents)
	}
	kept := func(m map[int64]map[string]string) string {
		out := ""
		for _, size := range []int64{10, 20, n} {
			for _, w := range []note.Signer{w1, w2, w3} {
				if _, ok := m[size][w.Name()]; ok {
					out += fmt.Sprintf("%d:%s ", size, w.Name())
				}
			}
		}
		return fmt.Sprintf("%s(%d sizes)", out, len(m))
	}
	// 20 is cosigned by no more witnesses than 30: not kept.
	if got, want := kept(full.Cosigned), "10:witness.example/w1 10:witness.example/w2 10:witness.example/w3 30:witness.example/w1 30:witness.example/w2 (2 sizes)"; got != want {
		t.Fatalf("the cosignatures kept: %s, want %s", got, want)
	}
	if full.Cosigned[n][w1.Name()] != last.Note {
		t.Fatal("a witness's last cosignature of a size is not the one kept")
	}
	if got := read(t, 1, false); !reflect.DeepEqual(got, full.Cosigned) {
		t.Fatalf("the cosignatures from the snapshot differ from the whole stream's:\n%v\n%v", got, full.Cosigned)
	}

	heads, _ := filepath.Glob(filepath.Join(st.Dir(), events.IndexDir, "anchor.v1.*.head"))
	if len(heads) != 1 {
		t.Fatalf("the anchor log's head files: %v", heads)
	}
	good := readAll(t, heads[0])
	var head map[string]json.RawMessage
	if err := json.Unmarshal(good, &head); err != nil {
		t.Fatal(err)
	}
	type kept1 struct {
		At   events.Position            `json:"at"`
		Last string                     `json:"last"`
		List []projector.AnchorCosigned `json:"list"`
	}
	var cos kept1
	if err := json.Unmarshal(head["cosigned"], &cos); err != nil || len(cos.List) != 5 {
		t.Fatalf("the head's cosignatures: %v, %s", err, head["cosigned"])
	}
	// resign signs k's anchor checkpoint of root at size, with w's line
	// after it.
	resign := func(k projector.PrivateKey, size int64, root tlog.Hash, w note.Signer) string {
		msg, err := projector.SignAnchorCheckpoint(k, schemas.AnchorCheckpoint{Origin: schemas.AnchorOrigin(k.KeyID()), Size: size, Root: root})
		if err != nil {
			t.Fatal(err)
		}
		text := schemas.NoteText(msg)
		wn, _ := note.Sign(&note.Note{Text: string(text)}, w)
		return string(msg) + string(wn[len(text)+1:])
	}
	other, err := projector.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	root20, err := full.Root(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		attack string
		change func(c *kept1)
	}{
		{"a head of an aegis that kept no cosignatures", nil},
		{"a cosignature of a size the log does not have", func(c *kept1) {
			c.List[3].Size, c.List[3].Note = n+10, resign(key, n+10, tlog.Hash{1}, w1)
			c.List[4].Size, c.List[4].Note = n+10, resign(key, n+10, tlog.Hash{1}, w2)
		}},
		{"a cosignature of another root at a size the log has", func(c *kept1) {
			c.List[4].Note = resign(key, n, tlog.Hash{1}, w2)
		}},
		{"a cosignature of a checkpoint signed by another key", func(c *kept1) {
			c.List[4].Note = resign(other, n, tlog.Hash{1}, w2)
		}},
		{"a cosignature without its witness's line", func(c *kept1) {
			c.List[4].Note = c.List[4].Note[:strings.Index(c.List[4].Note, "\n— witness.example/w2 ")+1]
		}},
		{"a cosignature that folding would not keep", func(c *kept1) {
			c.List = append(c.List, projector.AnchorCosigned{Origin: origin, Size: 20, Witness: w3.Name(), Note: resign(key, 20, root20, w3)})
		}},
		{"a position that is not the last cosignature's", func(c *kept1) {
			c.At.Seq--
		}},
		{"a last cosignature that is not the stream's", func(c *kept1) {
			c.Last = schemas.HashHex([]byte("x"))
		}},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			c := cos
			c.List = slices.Clone(cos.List)
			h := maps.Clone(head)
			if tc.change == nil {
				delete(h, "cosigned")
			} else {
				tc.change(&c)
				h["cosigned"], _ = json.Marshal(c)
			}
			b, _ := json.Marshal(h)
			if err := os.WriteFile(heads[0], b, 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(heads[0], good, 0o600)
			if got := read(t, cosEvents, true); !reflect.DeepEqual(got, full.Cosigned) {
				t.Fatalf("the cosignatures from the whole stream differ:\n%v\n%v", got, full.Cosigned)
			}
		})
	}
	if got := read(t, 1, false); !reflect.DeepEqual(got, full.Cosigned) {
		t.Fatal("the restored head's cosignatures are not used")
	}
}
