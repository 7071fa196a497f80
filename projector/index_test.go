package projector_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	mrand "math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// indexPicture is what an index says: the session summaries and every
// session's span with its digest.
type indexPicture struct {
	Sessions []projector.SessionSummary
	Spans    []projector.RecordSpan
	Digests  []string
}

func pictureOf(t testing.TB, ix *projector.Index) string {
	p := indexPicture{Sessions: ix.Sessions(0)}
	for _, sp := range ix.Spans() {
		p.Digests = append(p.Digests, sp.Digest())
		p.Spans = append(p.Spans, sp)
	}
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wholeFold folds the whole stream into a new index, with no snapshot.
func wholeFold(t *testing.T, st *events.Store) (*projector.Index, int) {
	t.Helper()
	ix := &projector.Index{}
	n := 0
	if err := ix.Update(context.Background(), st, func() { n++ }); err != nil {
		t.Fatal(err)
	}
	return ix, n
}

func loadIndex(t *testing.T, st *events.Store) (*projector.Index, int) {
	t.Helper()
	n := 0
	ix, err := projector.LoadIndex(context.Background(), st, nil, func() { n++ })
	if err != nil {
		t.Fatal(err)
	}
	return ix, n
}

// samePicture compares an index with the whole fold, and its spans and
// export with the in-memory record.
func samePicture(t *testing.T, st *events.Store, got *projector.Index) {
	t.Helper()
	want, _ := wholeFold(t, st)
	if g, w := pictureOf(t, got), pictureOf(t, want); g != w {
		t.Fatalf("index differs from the whole fold:\n got %s\nwant %s", g, w)
	}
	rec, err := projector.ReadRecord(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range rec.Sessions {
		ids = append(ids, s.ID)
	}
	var exp, mem bytes.Buffer
	if _, err := projector.Export(context.Background(), st, got, ids, &exp, nil); err != nil {
		t.Fatal(err)
	}
	rec.WriteSessions(&mem, ids)
	if !bytes.Equal(exp.Bytes(), mem.Bytes()) {
		t.Fatalf("streamed export (%d bytes) differs from the in-memory record (%d bytes)", exp.Len(), mem.Len())
	}
	for _, s := range rec.Sessions {
		sp, ok := got.Span(s.ID)
		var b bytes.Buffer
		rec.WriteSessions(&b, []string{s.ID})
		if !ok || sp.Lines != len(rec.Lines(s.ID)) || sp.Bytes != int64(b.Len()) || sp.Digest() != schemas.HashHex(b.Bytes()) {
			t.Fatalf("span of %s = %+v (digest %s), the record holds %d lines, %d bytes, digest %s", s.ID, sp, sp.Digest(), len(rec.Lines(s.ID)), b.Len(), schemas.HashHex(b.Bytes()))
		}
	}
}

// Sessions of every kind (calls answered, refused and left in flight,
// approvals decided, expired and used, profile switches, sessions closed
// and abandoned) are recorded while each keeps the index and saves it. At
// every step the index loaded from its snapshot equals the whole fold of
// the stream, and after a session that closed, loading it folds nothing.
func TestIndexFromItsSnapshotEqualsTheWholeFold(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	ctx := context.Background()
	st, dir := tempStore(t)
	key, err := projector.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := mrand.New(mrand.NewSource(seed))
	closed := 0
	for n := 0; n < 12; n++ {
		audit := filepath.Join(dir, "calls-"+strconv.Itoa(n%3)+".aarl")
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit,
			Argv: []string{"srv", strconv.Itoa(n)}, IndexEvery: time.Duration(1+rnd.Intn(30)) * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := crashSession(ctx, rnd, sess, []string{"dev", "prod"}); err != nil {
			t.Fatal(err)
		}
		ix, folded := loadIndex(t, st)
		samePicture(t, st, ix)
		last := ix.Sessions(0)[len(ix.Sessions(0))-1]
		if last.Ended != nil {
			closed++
			if folded != 0 {
				t.Errorf("session %d closed and saved the index, yet loading it folded %d events", n, folded)
			}
		}
	}
	if closed == 0 {
		t.Fatal("no session closed; the test proved nothing about saving")
	}
}

// The index is a cache: a snapshot that does not match the stream is
// thrown away and the stream folded whole, whatever is wrong with it.
func TestIndexSnapshotIsNeverTrustedOverTheStream(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, st *events.Store, head []byte)
	}{
		{"a head from another stream", func(t *testing.T, st *events.Store, head []byte) {
			put(t, st, "index.v1.head", bytes.Replace(head, []byte(`"digest":"`), []byte(`"digest":"00`), 1))
		}},
		{"a head folded past the stream's end", func(t *testing.T, st *events.Store, head []byte) {
			put(t, st, "index.v1.head", bytes.Replace(head, []byte(`"at":{"seq":`), []byte(`"at":{"seq":9`), 1))
		}},
		{"a chunk rewritten after its head (a save cut short)", func(t *testing.T, st *events.Store, _ []byte) {
			b, _, err := st.IndexGet(ctx, "index.v1.chunk.0")
			if err != nil {
				t.Fatal(err)
			}
			put(t, st, "index.v1.chunk.0", bytes.Replace(b, []byte(`"calls":`), []byte(`"calls":7`), 1))
		}},
		{"a head that is not JSON", func(t *testing.T, st *events.Store, _ []byte) {
			put(t, st, "index.v1.head", []byte("{"))
		}},
		{"a head of another version", func(t *testing.T, st *events.Store, head []byte) {
			put(t, st, "index.v1.head", bytes.Replace(head, []byte(`"version":1`), []byte(`"version":2`), 1))
		}},
		{"a head that counts more sessions", func(t *testing.T, st *events.Store, head []byte) {
			put(t, st, "index.v1.head", bytes.Replace(head, []byte(`"sessions":`), []byte(`"sessions":1`), 1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := sessionsStore(t, 3, 1)
			ix, _ := loadIndex(t, st)
			if err := ix.Save(ctx, st); err != nil {
				t.Fatal(err)
			}
			if _, folded := loadIndex(t, st); folded != 0 {
				t.Fatalf("a sound snapshot was not used: %d events folded", folded)
			}
			head, _, err := st.IndexGet(ctx, "index.v1.head")
			if err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, st, head)
			got, folded := loadIndex(t, st)
			if _, all := wholeFold(t, st); folded != all {
				t.Errorf("folded %d events, want the whole stream's %d", folded, all)
			}
			samePicture(t, st, got)
		})
	}
}

func put(t *testing.T, st *events.Store, key string, val []byte) {
	t.Helper()
	if _, err := st.IndexPut(context.Background(), key, val); err != nil {
		t.Fatal(err)
	}
}

// Catch-up never appends to a record file that holds anything but what
// the stream says was written to it, wherever the difference is, and
// completes one that a crash left short, wherever it was cut, without
// reading the whole session when the cut is past a mark.
func TestCatchUpRefusesARecordItCannotAccountFor(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	ctx := context.Background()
	st, dir := tempStore(t)
	audit := filepath.Join(dir, "calls.aarl")
	// Session 1 is short; session 2 holds more than two marks of lines
	// (a mark every 4 MiB), in lines of 30 KB: few of them to sign and
	// commit.
	var ends []int64
	for _, calls := range []int{3, 150} {
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
		if err != nil {
			t.Fatal(err)
		}
		var last *events.Receipt
		for i := 0; i < calls; i++ {
			tool := "echo-" + strconv.Itoa(i) + string(bytes.Repeat([]byte("x"), 30000))
			if calls > 100 && i == calls/2 {
				tool = "long-" + string(bytes.Repeat([]byte("y"), 150<<10)) // longer than a compare piece
			}
			c := schemas.WrapCall{CallID: sess.NextCallID(), ToolID: tool,
				RequestDigest: schemas.HashHex([]byte("x")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
			if _, err := sess.Intent(c.Intent()); err != nil {
				t.Fatal(err)
			}
			if last, err = sess.Outcome(c.Answered(schemas.HashHex(nil), 1)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := last.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(audit)
		ends = append(ends, fi.Size())
	}
	whole, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := loadIndex(t, st)
	spans := ix.SpansFor(audit)
	if len(spans) != 2 || len(spans[1].Marks) < 2 {
		t.Fatalf("spans %d, marks of the long session %d; want 2 and at least 2", len(spans), len(spans[1].Marks))
	}
	second := spans[1].Marks[1].Bytes + spans[1].Offset
	flip := func(at int64) func([]byte) []byte {
		return func(b []byte) []byte {
			b = bytes.Clone(b)
			b[at] ^= 0x01
			return b
		}
	}
	for i, tc := range []struct {
		name    string
		edit    func([]byte) []byte
		refused bool
	}{
		{"an edited line in an earlier session", flip(ends[0] / 2), true},
		{"an edited line early in the last session", flip(ends[0] + 100), true},
		{"an edited last line", flip(ends[1] - 10), true},
		{"a line removed from the middle", func(b []byte) []byte {
			i := bytes.IndexByte(b[second:], '\n') + int(second) + 1
			j := bytes.IndexByte(b[i:], '\n') + i + 1
			return append(bytes.Clone(b[:i]), b[j:]...)
		}, true},
		{"bytes added after the last line", func(b []byte) []byte { return append(bytes.Clone(b), "{}\n"...) }, true},
		{"cut before the last session began", func(b []byte) []byte { return b[:ends[0]-5] }, true},
		{"cut short past the second mark, mid-line", func(b []byte) []byte { return b[:second+77] }, false},
		{"cut short before the first mark", func(b []byte) []byte { return b[:ends[0]+1000] }, false},
		{"cut exactly at the last session's start", func(b []byte) []byte { return b[:ends[0]] }, false},
		{"cut short inside a line of 150 KiB", func(b []byte) []byte { return b[:bytes.Index(b, []byte("long-"))+100<<10] }, false},
		{"a changed byte inside a line of 150 KiB, cut after it", func(b []byte) []byte {
			i := bytes.Index(b, []byte("long-"))
			return flip(int64(i) + 90<<10)(b[:i+140<<10])
		}, true},
		{"cut short with a changed byte before the cut", func(b []byte) []byte { return flip(second + 10)(b[:second+77]) }, true},
	} {
		if raceDetector && i%3 != 0 {
			continue // a third of them under the race detector: make test runs all without it
		}
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(audit, tc.edit(whole), 0o600); err != nil {
				t.Fatal(err)
			}
			tail, off, err := ix.CatchUp(ctx, st, audit)
			got, _ := os.ReadFile(audit)
			if tc.refused {
				if err == nil && len(got) > 16<<20 {
					// Too large to read whole before the session starts:
					// the check beside the relay finds it.
					err = ix.CheckFile(ctx, audit)
				}
				if !errors.Is(err, projector.ErrRecordDiverged) {
					t.Fatalf("CatchUp = %v, want ErrRecordDiverged", err)
				}
				if !bytes.Equal(got, tc.edit(whole)) {
					t.Fatal("a refused record file was changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, whole) {
				t.Fatalf("completed file (%d bytes) is not the record (%d bytes)", len(got), len(whole))
			}
			if off != int64(len(whole)) || tail != spans[1].Tail {
				t.Fatalf("CatchUp = %s, %d; want %s, %d", tail, off, spans[1].Tail, len(whole))
			}
		})
	}
	if err := os.WriteFile(audit, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ix.CheckFile(ctx, audit); err != nil {
		t.Fatalf("CheckFile of the intact record: %v", err)
	}
	if err := os.WriteFile(audit, flip(3)(whole), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ix.CheckFile(ctx, audit); !errors.Is(err, projector.ErrRecordDiverged) || !bytes.Contains([]byte(err.Error()), []byte(spans[0].Session)) {
		t.Fatalf("CheckFile of an edited first session = %v, want ErrRecordDiverged naming %s", err, spans[0].Session)
	}
}

// Whatever the index folder holds, loading it never panics and never
// yields anything but the whole fold of the stream: a snapshot that does
// not decode, or does not match, is thrown away.
func FuzzIndexSnapshot(f *testing.F) {
	ctx := context.Background()
	st := sessionsStore(f, 2, 3)
	whole := &projector.Index{}
	if err := whole.Update(ctx, st, nil); err != nil {
		f.Fatal(err)
	}
	if err := whole.Save(ctx, st); err != nil {
		f.Fatal(err)
	}
	head, _, err := st.IndexGet(ctx, "index.v1.head")
	if err != nil {
		f.Fatal(err)
	}
	chunk, _, err := st.IndexGet(ctx, "index.v1.chunk.0")
	if err != nil {
		f.Fatal(err)
	}
	want := pictureOf(f, whole)
	f.Add(head, chunk)
	f.Add([]byte(`{"version":1,"at":{"seq":1},"sessions":0,"chunks":[]}`), []byte(`[]`))
	f.Add(head, []byte(`[{"summary":{"id":"X"},"span":{"session":"Y"}}]`))
	f.Fuzz(func(t *testing.T, h, c []byte) {
		put(t, st, "index.v1.head", h)
		put(t, st, "index.v1.chunk.0", c)
		ix, err := projector.LoadIndex(ctx, st, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := pictureOf(t, ix); got != want && !bytes.Equal(h, head) {
			t.Fatalf("a spoiled snapshot was trusted:\n got %s\nwant %s", got, want)
		}
	})
}

// sessionsStore returns a store in a temporary directory that holds n
// sessions of every kind (crashSession), drawn from seed; it is closed at
// the test's end.
func sessionsStore(t testing.TB, n int, seed int64) *events.Store {
	t.Helper()
	ctx := context.Background()
	st, dir := tempStore(t)
	rnd := mrand.New(mrand.NewSource(seed))
	for range n {
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: filepath.Join(dir, "calls.aarl")})
		if err != nil {
			t.Fatal(err)
		}
		if err := crashSession(ctx, rnd, sess, []string{"dev"}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// A session that had its record file checked whole notes the file as it
// closes it, so the next start need not read it again; a write to the
// file after that, even one that puts the same length back, changes what
// the kernel says of it, and the next start reads the whole file again
// and refuses the edit.
func TestACheckedRecordFileIsReadAgainOnlyAfterAWrite(t *testing.T) {
	ctx := context.Background()
	st, dir := tempStore(t)
	audit := filepath.Join(dir, "calls.aarl")
	for range 2 {
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
		if err != nil {
			t.Fatal(err)
		}
		c := schemas.WrapCall{CallID: sess.NextCallID(), ToolID: "echo", RequestDigest: schemas.HashHex([]byte("x")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
		if _, err := sess.Intent(c.Intent()); err != nil {
			t.Fatal(err)
		}
		if _, err := sess.Outcome(c.Answered(schemas.HashHex(nil), 1)); err != nil {
			t.Fatal(err)
		}
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	head, _, err := st.IndexGet(ctx, "index.v1.head")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(head, []byte(`"files":{"`+audit+`"`)) {
		t.Fatalf("the closed, checked record file is not noted in the index head: %s", head)
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0x01 // inside the first session's open line
	if err := os.WriteFile(audit, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
	if !errors.Is(err, projector.ErrRecordDiverged) {
		t.Fatalf("OpenSession on a record edited after it was noted = %v, want ErrRecordDiverged", err)
	}
}

// tempStore opens a store in a temporary directory, closed at the test's
// end, and returns it with the directory (for record files).
func tempStore(t testing.TB) (*events.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := events.Open(context.Background(), events.Config{Dir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st, dir
}
