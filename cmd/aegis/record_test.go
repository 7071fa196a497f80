package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTwoWrapsOneRecordFile: two real wraps with their own state
// directories (so the state directory's lock does not stop them) and one
// --audit used to append two interleaved chains, and the file verified as
// Tampered. The second wrap now refuses before it starts its server or
// records anything, naming the file and the first wrap's PID; the first
// runs on and its record verifies.
func TestTwoWrapsOneRecordFile(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"first"}}`); !strings.Contains(a, `"first"`) {
		t.Fatalf("echo: %s", a)
	}

	state2 := filepath.Join(l.dir, "state2")
	out, code := l.aegis("wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", state2,
		"--", filepath.Join(l.bin, "aegis-example-server"))
	if code != 1 {
		t.Fatalf("second wrap: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"aegis: error: will not append to " + l.audit,
		fmt.Sprintf("is in use by process %d", w.c.Process.Pid),
		"aegis: hint: a record file has one writer at a time",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("second wrap's output lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := cmd(t, nil, "sessions", "--state-dir", state2); code != 0 || strings.Contains(out, "SESSION") {
		t.Errorf("the refused wrap recorded a session: exit %d\n%s", code, out)
	}

	if a := w.call(2, "tools/call", `{"name":"echo","arguments":{"message":"still"}}`); !strings.Contains(a, `"still"`) {
		t.Fatalf("echo after the refused wrap: %s", a)
	}
	w.finish()
	if out, code := l.aegis("verify", l.audit); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}

	// Once the first has exited, the file is free.
	out, code = l.aegis("wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", state2,
		"--", filepath.Join(l.bin, "aegis-example-server"))
	if code != 0 {
		t.Fatalf("wrap after the first exited: exit %d\n%s", code, out)
	}
	if out, code := l.aegis("verify", l.audit); code != 0 {
		t.Fatalf("verify after two wraps in turn: exit %d\n%s", code, out)
	}
}

// TestWrapIntoMissingDirectory: a wrap whose --audit directory does not
// exist used to write session.opened first and fail after, leaving a
// phantom session listed as killed whose open line a later wrap on the
// same path wrote into the record. It now refuses before any event.
func TestWrapIntoMissingDirectory(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	l.audit = filepath.Join(l.dir, "missing", "calls.aarl")
	out, code := l.aegis("wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--", filepath.Join(l.bin, "aegis-example-server"))
	if code != 1 {
		t.Fatalf("wrap into a missing directory: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"aegis: error: cannot create the record file: " + l.audit + " has no directory " + filepath.Dir(l.audit),
		"aegis: hint: create the directory first",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, out, stderr := l.in("sessions"); code != 0 || strings.Contains(out, "killed") || strings.Contains(out, "SESSION") {
		t.Fatalf("sessions after the refused wrap: exit %d\n%s%s", code, out, stderr)
	}

	if err := os.Mkdir(filepath.Dir(l.audit), 0o700); err != nil {
		t.Fatal(err)
	}
	w := l.wrap(false)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"hi"}}`); !strings.Contains(a, `"hi"`) {
		t.Fatalf("echo: %s", a)
	}
	w.finish()
	if out, code := l.aegis("verify", l.audit); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(l.audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"line_type":"open"`); n != 1 {
		t.Fatalf("record holds %d open lines, want 1:\n%s", n, b)
	}
	code, out, _ = l.in("sessions")
	if code != 0 || strings.Count(out, "closed") != 1 || strings.Contains(out, "killed") {
		t.Fatalf("sessions: exit %d\n%s", code, out)
	}
}
