package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/events/platform"
)

// envWithout returns env without the variables named.
func envWithout(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// TestRuntimeDirSquattedByAnotherUser: with XDG_RUNTIME_DIR unset, another
// user who created aegis-<uid> in the temp directory first used to block
// every 'aegis wrap --policy' of this user (and every 'aegis approve').
// The runtime directory now lives in the state directory, so a real wrap
// serves approvals and a real 'aegis approve' reaches it, and the planted
// directory is never used.
func TestRuntimeDirSquattedByAnotherUser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant a directory owned by another user")
	}
	l := newLive(t, scriptedPolicy)
	tmp := filepath.Join(l.dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o1777) // a shared temp directory, like /tmp
	planted := filepath.Join(tmp, fmt.Sprintf("aegis-%d", os.Geteuid()))
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	l.env = append(envWithout(os.Environ(), "XDG_RUNTIME_DIR", "TMPDIR"), "TMPDIR="+tmp, "USER=tester")

	w := l.wrap(false)
	w.initialize()
	if a := w.call(2, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	if out, _, code := l.aegisStdout("approvals", "--state-dir", l.state); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("aegis approvals: exit %d\n%s", code, out)
	}
	if out, code := l.aegis("approve", id, "--state-dir", l.state); code != 0 {
		t.Fatalf("aegis approve %s: exit %d\n%s", id, code, out)
	}
	if a := w.call(3, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	w.finish()
	if out, code := l.aegis("verify", l.audit); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}

	// The planted directory was not touched; the credentials were in the
	// state directory (and are gone now that the wrap has exited).
	ents, err := os.ReadDir(planted)
	if err != nil || len(ents) != 0 {
		t.Errorf("planted directory: %v, %d entries", err, len(ents))
	}
	fi, err := os.Stat(filepath.Join(l.state, "run"))
	if err != nil {
		t.Fatalf("runtime directory in the state directory: %v", err)
	}
	if a, err := platform.PathAccess(filepath.Join(l.state, "run"), fi); err != nil || a.Perm != 0o700 || !a.Owned {
		t.Errorf("runtime directory mode %v", fi.Mode())
	}
	ents, _ = os.ReadDir(filepath.Join(l.state, "run"))
	for _, e := range ents {
		t.Errorf("left in the runtime directory: %s", e.Name())
	}

	// Without --state-dir, approve looks in the default state directory and
	// says where to look instead.
	l.env = append(l.env, "XDG_STATE_HOME="+filepath.Join(l.dir, "xdg-state"))
	out, code := l.aegis("approve", id)
	if code != 1 || !strings.Contains(out, "pass the same --state-dir") {
		t.Errorf("aegis approve without --state-dir: exit %d\n%s", code, out)
	}
}
