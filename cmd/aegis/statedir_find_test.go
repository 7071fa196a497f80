package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/events"
)

// After aegis init, each server has its own state directory under the
// default one (DEFAULT/NAME): the commands that read one find it without
// --state-dir when it is the only one, and name them all when there are
// several, instead of reading an empty default as if nothing was recorded.
func TestReadingCommandsFindInitsStateDirectory(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"XDG_STATE_HOME": home, "HOME": home}
	base := filepath.Join(home, "aegis")
	mkState := func(name string) {
		t.Helper()
		st, err := events.Open(context.Background(), events.Config{Dir: filepath.Join(base, name)})
		if err != nil {
			t.Fatal(err)
		}
		st.Close(context.Background())
	}
	mkState("everything")
	os.Mkdir(filepath.Join(base, "not-a-state-dir"), 0o700)
	code, out, stderr := run(t, env, "sessions")
	if code != 0 || !strings.Contains(stderr, "aegis: note: reading "+filepath.Join(base, "everything")+", the only state directory under "+base) {
		t.Fatalf("one under the default: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	if code, _, stderr := run(t, env, "events", "list"); code != 0 || !strings.Contains(stderr, "the only state directory") {
		t.Errorf("events list: exit %d\n%s", code, stderr)
	}
	// --state-dir is taken as given, without a note.
	if _, _, stderr := run(t, env, "sessions", "--state-dir", filepath.Join(base, "everything")); strings.Contains(stderr, "note:") {
		t.Errorf("a note with --state-dir: %s", stderr)
	}
	mkState("filesystem")
	_, _, stderr = run(t, env, "sessions")
	if want := "aegis: note: " + base + " holds the state directories of 2 servers (everything, filesystem); name one: --state-dir " + filepath.Join(base, "everything"); !strings.Contains(stderr, want) {
		t.Errorf("several: want %q in\n%s", want, stderr)
	}
	// A default that is a state directory itself is read as it is.
	mkState("")
	if _, _, stderr := run(t, env, "sessions"); strings.Contains(stderr, "note:") {
		t.Errorf("a note for a default that is a state directory: %s", stderr)
	}
}
