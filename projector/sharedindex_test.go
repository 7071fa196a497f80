package projector_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// Sessions of one process on a shared index (the HTTP sessions of aegis
// gateway --listen) continue each other's record files as sessions with
// indexes of their own do: a session that opens a file another session
// of the process just closed links to its last line, so the file holds
// exactly what the stream says; sessions open at once on other files are
// unaffected; and the shared index is saved for the next start with
// every session in it.
func TestSessionsOnASharedIndexContinueEachOthersFiles(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, filepath.Join(dir, "state"))
	shared, err := projector.NewSharedIndex(ctx, st, nil, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	x, y := filepath.Join(dir, "calls.aarl"), filepath.Join(dir, "calls-2.aarl")
	open := func(path string) *projector.Session {
		t.Helper()
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: path, Shared: shared})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	call := func(s *projector.Session) {
		t.Helper()
		c := schemas.WrapCall{CallID: s.NextCallID(), ToolID: "echo", RequestDigest: schemas.HashHex([]byte("x")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
		for _, f := range []func() (*events.Receipt, error){
			func() (*events.Receipt, error) { return s.Intent(c.Intent()) },
			func() (*events.Receipt, error) { return s.Outcome(c.Answered(schemas.HashHex([]byte("y")), 1)) },
		} {
			r, err := f()
			if err == nil {
				_, err = r.Wait(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	s1 := open(x)
	other := open(y) // open beside the others throughout
	call(s1)
	call(other)
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a tick of the shared index between them
	s2 := open(x)
	call(s2)
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	shared.Close()

	rec, err := projector.ReadRecord(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for path, ids := range map[string][]string{x: {s1.ID(), s2.ID()}, y: {other.ID()}} {
		var want bytes.Buffer
		if _, err := rec.WriteSessions(&want, ids); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s differs from the export of its sessions:\n%s\nwant:\n%s", filepath.Base(path), got, want.Bytes())
		}
	}
	if _, _, err := st.IndexGet(ctx, "index.v1.head"); err != nil {
		t.Fatalf("the shared index was not saved: %v", err)
	}
	ix, err := projector.LoadIndex(ctx, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ix.Sessions(0)); n != 3 {
		t.Errorf("the saved index holds %d sessions, want 3", n)
	}
}
