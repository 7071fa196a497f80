package projector_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/verifier"
)

func openStore(t *testing.T, dir string) *events.Store {
	t.Helper()
	st, err := events.Open(context.Background(), events.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

func streamEvents(t *testing.T, st *events.Store) int {
	t.Helper()
	n := 0
	if err := st.Replay(context.Background(), events.Position{}, func(events.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRecordFileOneWriter: two sessions with their own state directories
// (so the state directory's lock cannot stop them) and one record file
// would interleave two chains, and the file would verify as Tampered. The
// second is refused while the first holds the file, whatever path reaches
// it, and writes nothing to its stream; once the first closes, it may.
func TestRecordFileOneWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	audit := filepath.Join(dir, "calls.aarl")
	first := openStore(t, filepath.Join(dir, "a"))
	second := openStore(t, filepath.Join(dir, "b"))
	cfg := func(st *events.Store, path string) projector.SessionConfig {
		return projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: path}
	}
	a, err := projector.OpenSession(ctx, cfg(first, audit))
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.aarl")
	if err := os.Symlink(audit, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.aarl")
	if err := os.Link(audit, hard); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"same path":     audit,
		"relative path": mustRel(t, audit),
		"symbolic link": link,
		"hard link":     hard,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := projector.OpenSession(ctx, cfg(second, path))
			var le *projector.RecordLockedError
			if !errors.As(err, &le) || !errors.Is(err, projector.ErrRecordLocked) {
				t.Fatalf("second OpenSession = %v, want a RecordLockedError", err)
			}
			if le.PID != os.Getpid() {
				t.Errorf("RecordLockedError.PID = %d, want this process %d", le.PID, os.Getpid())
			}
			if !strings.Contains(err.Error(), "in use by process") {
				t.Errorf("error %q does not name the process", err)
			}
		})
	}
	if n := streamEvents(t, second); n != 0 {
		t.Fatalf("the refused sessions wrote %d events to their stream", n)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := projector.OpenSession(ctx, cfg(second, audit))
	if err != nil {
		t.Fatalf("OpenSession after the first closed: %v", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ := os.ReadFile(audit)
	if res := verifier.Verify(bytes.NewReader(rec), verifier.Options{}); res.Verdict != verifier.Verified {
		t.Fatalf("record of two sessions in turn: %s", verifier.Render(res))
	}
}

func mustRel(t *testing.T, path string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestRecordFileLockReleasedOnAbandon: an abandoned session (a store that
// stopped acknowledging) releases the record file too.
func TestRecordFileLockReleasedOnAbandon(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	audit := filepath.Join(dir, "calls.aarl")
	st := openStore(t, filepath.Join(dir, "a"))
	a, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
	if err != nil {
		t.Fatal(err)
	}
	a.Abandon()
	other := openStore(t, filepath.Join(dir, "b"))
	b, err := projector.OpenSession(ctx, projector.SessionConfig{Store: other, Key: projector.InsecureDevKey(), AuditPath: audit})
	if err != nil {
		t.Fatalf("OpenSession after an abandoned session: %v", err)
	}
	b.Close(ctx)
}

// TestPhantomSessionOfAMissingDirectory: a record file whose directory does
// not exist used to be found out only after session.opened was durable, so
// the stream held a session that never ran (listed as killed), and a later
// session on the same path wrote its open line into the record. It is now
// refused before any event.
func TestPhantomSessionOfAMissingDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, filepath.Join(dir, "state"))
	audit := filepath.Join(dir, "missing", "calls.aarl")
	cfg := projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit}
	_, err := projector.OpenSession(ctx, cfg)
	if !errors.Is(err, projector.ErrNoRecordDir) || !strings.Contains(err.Error(), "has no directory "+filepath.Dir(audit)) {
		t.Fatalf("OpenSession into a missing directory = %v", err)
	}
	if n := streamEvents(t, st); n != 0 {
		t.Fatalf("the refused session wrote %d events", n)
	}
	rec, err := projector.ReadRecord(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if ids := rec.SessionsFor(audit); len(ids) != 0 {
		t.Fatalf("the stream lists %d sessions for the refused path", len(ids))
	}

	if err := os.Mkdir(filepath.Dir(audit), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := projector.OpenSession(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(audit)
	if n := bytes.Count(b, []byte(`"line_type":"open"`)); n != 1 {
		t.Fatalf("record holds %d open lines, want 1:\n%s", n, b)
	}
	if res := verifier.Verify(bytes.NewReader(b), verifier.Options{}); res.Verdict != verifier.Verified {
		t.Fatalf("record: %s", verifier.Render(res))
	}
}
