package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	if want := "aegis: note: " + base + " holds the state directories of 2 servers (everything, filesystem); name one: --name everything"; !strings.Contains(stderr, want) {
		t.Errorf("several: want %q in\n%s", want, stderr)
	}
	// --name chooses one by the name aegis init gave the server, in every
	// command that reads a state directory.
	for _, args := range [][]string{
		{"sessions"}, {"events", "list"}, {"pins"}, {"export", "--out", filepath.Join(t.TempDir(), "x.aarl")},
	} {
		code, out, stderr := run(t, env, append(args, "--name", "filesystem")...)
		if code != 0 || strings.Contains(stderr, "note:") {
			t.Errorf("%v --name filesystem: exit %d\nstdout: %s\nstderr: %s", args, code, out, stderr)
		}
	}
	if code, _, stderr := run(t, env, "replay", "--name", "filesystem", "last"); code != 1 || !strings.Contains(stderr, "no session") {
		t.Errorf("replay --name of an empty store: exit %d\n%s", code, stderr)
	}
	// A name with no state directory says which there are; --name and
	// --state-dir together are a usage error.
	code, _, stderr = run(t, env, "sessions", "--name", "git")
	if code != 1 || !strings.Contains(stderr, `no state directory for the server "git"`) || !strings.Contains(stderr, ": everything, filesystem") {
		t.Errorf("an unknown name: exit %d\n%s", code, stderr)
	}
	for _, name := range []string{"../filesystem", "..", "a/b"} {
		if code, _, stderr := run(t, env, "sessions", "--name", name); code != exitUsage {
			t.Errorf("--name %q: exit %d\n%s", name, code, stderr)
		}
	}
	if code, _, stderr := run(t, env, "sessions", "--name", "everything", "--state-dir", base); code != exitUsage {
		t.Errorf("--name with --state-dir: exit %d\n%s", code, stderr)
	}
	// A default that is a state directory itself is read as it is.
	mkState("")
	if _, _, stderr := run(t, env, "sessions"); strings.Contains(stderr, "note:") {
		t.Errorf("a note for a default that is a state directory: %s", stderr)
	}
}

// Without XDG_RUNTIME_DIR (so always on macOS) each process keeps its
// approval credentials in its own state directory: aegis approvals finds
// the processes of every server aegis init set up, and --name keeps to one.
func TestApprovalsFindInitsServersWithoutARuntimeDirectory(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"XDG_STATE_HOME": home, "HOME": home, "USER": "alice"}
	base := filepath.Join(home, "aegis")
	getenv := func(k string) string { return env[k] }
	for _, s := range []struct{ name, id string }{{"everything", "apr-e-1"}, {"filesystem", "apr-f-1"}} {
		dir := filepath.Join(base, s.name)
		st, err := events.Open(context.Background(), events.Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		st.Close(context.Background())
		rt, err := events.RuntimeDir(getenv, dir)
		if err != nil {
			t.Fatal(err)
		}
		startFakeProxy(t, rt, s.id)
	}
	code, out, stderr := runApprovalCmd(t, env, "approvals")
	if code != 0 || !strings.Contains(out, "apr-e-1") || !strings.Contains(out, "apr-f-1") {
		t.Fatalf("approvals: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	code, out, stderr = runApprovalCmd(t, env, "approvals", "--name", "filesystem")
	if code != 0 || strings.Contains(out, "apr-e-1") || !strings.Contains(out, "apr-f-1") {
		t.Fatalf("approvals --name filesystem: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	if code, out, stderr := runApprovalCmd(t, env, "approve", "--name", "everything", "apr-e-1"); code != 0 {
		t.Fatalf("approve --name everything: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	if code, _, stderr := runApprovalCmd(t, env, "deny", "--name", "filesystem", "apr-e-1"); code != 1 {
		t.Fatalf("deny of another server's approval: exit %d\n%s", code, stderr)
	}
}

// The examples of the reading commands' help run as written after aegis
// init, with no --state-dir: a user copies them from aegis help.
func TestHelpExamplesRunAfterInit(t *testing.T) {
	t.Parallel()
	bin := bins(t)
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + bin + ":/usr/bin:/bin"}
	initCmd := exec.Command(filepath.Join(bin, "aegis"), "init", "--name", "server-everything", "--", filepath.Join(bin, "aegis-example-server"))
	initCmd.Env = env
	out, err := initCmd.Output()
	if err != nil {
		t.Fatalf("aegis init: %v", err)
	}
	entry := hostJSON(t, out, "Claude Desktop")["mcpServers"]["server-everything"]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	launch := exec.Command(entry.Command, entry.Args...)
	launch.Env = env
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: launch}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}}); err != nil || res.IsError {
		t.Fatalf("call echo: %v %+v", err, res)
	}
	cs.Close()

	ran := 0
	for _, command := range []string{"sessions", "replay", "pins", "export", "approvals"} {
		help, err := exec.Command(filepath.Join(bin, "aegis"), "help", command).Output()
		if err != nil {
			t.Fatal(err)
		}
		wd := t.TempDir() // one per command: an example may use the one before
		for _, line := range strings.Split(string(help), "\n") {
			example, ok := strings.CutPrefix(line, "  $ ")
			if !ok || strings.Contains(example, "--hub") || strings.Contains(example, "--follow") {
				continue
			}
			sh := exec.Command("sh", "-c", strings.ReplaceAll(example, "~", home))
			sh.Env, sh.Dir = env, wd
			if b, err := sh.CombinedOutput(); err != nil {
				t.Errorf("aegis help %s: %s: %v\n%s", command, example, err, b)
			}
			ran++
		}
	}
	if ran < 8 {
		t.Errorf("ran %d examples", ran)
	}
}
