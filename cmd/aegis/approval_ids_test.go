package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/projector"
)

var shellSafeApprovalID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// pendingRows returns what aegis approvals --json lists, by approval id.
func (l *live) pendingRows() map[string]approvalRow {
	l.t.Helper()
	out, stderr, code := l.aegisStdout("approvals", "--json")
	if code != 0 {
		l.t.Fatalf("approvals --json: exit %d\n%s", code, stderr)
	}
	var rows []approvalRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		l.t.Fatalf("approvals --json: %v\n%s", err, out)
	}
	m := map[string]approvalRow{}
	for _, r := range rows {
		m[r.ApprovalID] = r
	}
	return m
}

// gatewayRefusal reads the approval id of a gateway's PENDING_APPROVAL
// refusal.
func gatewayRefusal(t *testing.T, text string) map[string]string {
	t.Helper()
	var r map[string]string
	if err := json.Unmarshal([]byte(text), &r); err != nil || r["code"] != "PENDING_APPROVAL" || r["approval_id"] == "" {
		t.Fatalf("not a pending approval (%v): %s", err, text)
	}
	return r
}

// Attack: over gateway --listen, every session numbered its approvals
// alike. An agent gets a harmless call held in session A, ends A, gets
// another call held in session B; the human runs the aegis approve that
// A's prompt printed, and B's call ran. Ids now carry the session's number
// in the state directory: the id A printed never names B's call, its
// approve is refused, and B's call stays pending.
func TestApprovalIDFromEndedSessionDoesNotApproveAnother(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen and aegis wrap")
	}
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	t.Run("GatewaySessions", func(t *testing.T) {
		l := newLive(t, "")
		h := l.httpGateway(gatewayConfig(l.bin))
		ctx := context.Background()

		a := h.connect(ctx)
		text, _ := callText(t, a, "example__add", map[string]any{"a": 1, "b": 1})
		idA := gatewayRefusal(t, text)["approval_id"]
		if _, ok := l.pendingRows()[idA]; !ok {
			t.Fatalf("%s is not listed as pending", idA)
		}
		a.Close()
		waitFor(t, 30*time.Second, "session A ends", func() bool { _, ok := l.pendingRows()[idA]; return !ok })

		b := h.connect(ctx)
		text, _ = callText(t, b, "example__add", map[string]any{"a": 1000, "b": 1000})
		idB := gatewayRefusal(t, text)["approval_id"]
		if idA == idB {
			t.Fatalf("session B's call is pending under %s, the id session A printed", idB)
		}
		out, code := l.aegis("approve", idA)
		if code != 1 || !strings.Contains(out, "aegis: error: ") || !strings.Contains(out, idA) {
			t.Fatalf("aegis approve %s (session A's, which ended): exit %d\n%s", idA, code, out)
		}
		if _, ok := l.pendingRows()[idB]; !ok {
			t.Fatalf("session B's call %s is no longer pending after the approve of %s", idB, idA)
		}
		// B's call did not ride on anything: sent again, it is held again.
		text, _ = callText(t, b, "example__add", map[string]any{"a": 1000, "b": 1000})
		if again := gatewayRefusal(t, text)["approval_id"]; again == idA || again == idB {
			t.Fatalf("the call sent again is pending under %s", again)
		}
		b.Close()
		h.stop()
	})
	t.Run("WrapRestarts", func(t *testing.T) {
		l := newLive(t, "version: 1\nrules:\n  - id: gate-add\n    action: pending_approval\n    tool: add\n")
		ids := make([]string, 2)
		for run := range 2 {
			w := l.wrap(false)
			w.initialize()
			if a := w.call(1, "tools/call", fmt.Sprintf(`{"name":"add","arguments":{"a":%d,"b":1}}`, run)); !strings.Contains(a, "PENDING_APPROVAL") {
				t.Fatalf("run %d: %s", run, a)
			}
			ids[run] = w.approvalID()
			if run == 0 {
				w.finish()
				continue
			}
			if ids[1] == ids[0] {
				t.Fatalf("the second run's call is pending under %s, the id the first run printed", ids[1])
			}
			out, code := l.aegis("approve", ids[0])
			if code != 1 || !strings.Contains(out, ids[0]) {
				t.Fatalf("aegis approve %s (the first run's): exit %d\n%s", ids[0], code, out)
			}
			if _, ok := l.pendingRows()[ids[1]]; !ok {
				t.Fatalf("the second run's call %s is no longer pending", ids[1])
			}
			if a := w.call(2, "tools/call", `{"name":"add","arguments":{"a":1,"b":1}}`); !strings.Contains(a, "PENDING_APPROVAL") {
				t.Fatalf("the second run's call ran after the approve of the first run's id: %s", a)
			}
			w.finish()
		}
	})
}

// Attack: approval ids carried the tool's name as the server gave it. A
// tool named with spaces or < > gave an id that aegis approve refused,
// while the refusal's hint told the user to run it unquoted; pasted into
// a shell, < and > became redirections. Now the id is shell-safe whatever
// the name, and the hint's command, run by a shell exactly as printed,
// approves the call.
func TestApprovalIDOfHostileToolNameIsShellSafe(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "version: 1\nrules:\n  - id: ask everything\n    action: pending_approval\n")
	w := l.wrap(false)
	w.initialize()
	pwned := filepath.Join(l.dir, "pwned")
	tools := []string{
		"rm -rf x", "a<b>c", "> " + pwned, `say "hi" 'there'`, "$(touch " + pwned + ")", "`touch " + pwned + "`",
		"x;touch " + pwned, "déploy\u202eexe", "\x1b[31mred", "*", "~", strings.Repeat("long", 50), strings.Repeat("ü", 200),
	}
	for i, tool := range tools {
		name, _ := json.Marshal(tool)
		a := w.call(i+1, "tools/call", `{"name":`+string(name)+`,"arguments":{"n":`+fmt.Sprint(i)+`}}`)
		var f struct {
			Error struct {
				Data struct{ Aegis map[string]string }
			}
		}
		if err := json.Unmarshal([]byte(a), &f); err != nil || f.Error.Data.Aegis["code"] != "PENDING_APPROVAL" {
			t.Fatalf("tool %q: %v %s", tool, err, a)
		}
		id, hint := f.Error.Data.Aegis["approval_id"], f.Error.Data.Aegis["hint"]
		if !shellSafeApprovalID.MatchString(id) || !strings.HasPrefix(id, "apr-ask_everything-") {
			t.Errorf("tool %q: approval id %q is not 1 to 128 bytes of [A-Za-z0-9._-]", tool, id)
			continue
		}
		if p := w.approvalID(); p != id {
			t.Errorf("tool %q: the prompt names %q, the refusal %q", tool, p, id)
		}
		// The hint's command, as a shell runs it.
		_, command, ok := strings.Cut(hint, "run: ")
		command, _, _ = strings.Cut(command, " (or: ")
		if !ok || command != "aegis approve "+id {
			t.Errorf("tool %q: hint %q", tool, hint)
			continue
		}
		sh := exec.Command("sh", "-c", command)
		sh.Env = append(l.env, "PATH="+l.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		sh.Dir = l.dir
		out, err := sh.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "approved "+id+":") || !strings.Contains(string(out), "  tool:        "+projector.Printable(tool)+"\n") {
			t.Errorf("tool %q: sh -c %q: %v\n%s", tool, command, err, out)
		}
	}
	if _, err := os.Stat(pwned); !os.IsNotExist(err) {
		t.Errorf("a tool's name ran as a command: %s exists", pwned)
	}
	w.finish()
}

// aegis approve says what it approved, as the process that took it
// answered: the session, the tool and the digest of the arguments (which
// aegis approvals showed), so a human sees what ran on their word.
func TestApprovePrintsTheToolArgumentsDigestAndSession(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "version: 1\nrules:\n  - id: gate-add\n    action: pending_approval\n    tool: add\n")
	w := l.wrap(false)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"add","arguments":{"b":3,"a":2}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatal(a)
	}
	id := w.approvalID()
	row, ok := l.pendingRows()[id]
	if !ok || row.Session == "" || len(row.ArgsDigest) != 64 {
		t.Fatalf("approvals lists %+v", row)
	}
	out, stderr, code := l.aegisStdout("approve", id)
	lines := strings.Split(out, "\n")
	want := []string{
		"  session:     " + row.Session,
		"  tool:        add",
		"  args_digest: sha256:" + row.ArgsDigest,
		`  arguments:   {"a":2,"b":3} (13 bytes, sha256 ` + row.ArgsDigest[:16] + "…)",
		"",
	}
	if code != 0 || stderr != "" || len(lines) != 1+len(want) || !strings.HasPrefix(lines[0], "approved "+id+": ") || strings.Join(lines[1:], "\n") != strings.Join(want, "\n") {
		t.Fatalf("aegis approve %s: exit %d, stderr %q, stdout:\n%s\nwant after the first line:\n%s", id, code, stderr, out, strings.Join(want, "\n"))
	}
	// A deny says the same of what it refused.
	if a := w.call(2, "tools/call", `{"name":"add","arguments":{"a":5,"b":5}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatal(a)
	}
	id2 := w.approvalID()
	out, _, code = l.aegisStdout("deny", id2)
	if code != 0 || !strings.Contains(out, "denied "+id2) || !strings.Contains(out, "  session:     "+row.Session+"\n  tool:        add\n  args_digest: sha256:") {
		t.Fatalf("aegis deny %s: exit %d\n%s", id2, code, out)
	}
	w.finish()
}
