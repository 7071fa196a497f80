package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

// aegis wrap in front of a server that rewrites a tool's description after
// the first call and sends notifications/tools/list_changed: the host's
// next call to it is refused with the approval to act on, 'aegis approve'
// from a second process pins the new definition, and the call goes
// through. 'aegis pins' lists the pins across sessions, and 'aegis pins
// reset' removes one, recorded, so that the next session pins it again.
func TestWrapRugPullRefusedUntilApprovedAndPinsCommand(t *testing.T) {
	c := newCLI(t)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	pol := filepath.Join(c.dir, "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\n"), 0o600)
	server := []string{bin(t, "pinserver"), "-changes", "describe"}
	args := append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--"}, server...)
	cmd := exec.Command(bin(t, "aegis"), args...)
	cmd.Env = env
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	prompts := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			prompts <- sc.Text()
		}
		close(prompts)
	}()
	br := bufio.NewReader(out)
	ask := func(frame string) map[string]any {
		t.Helper()
		io.WriteString(in, frame+"\n")
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("answer to %s: %v", frame, err)
			}
			var m map[string]any
			json.Unmarshal([]byte(line), &m)
			if _, ok := m["id"]; ok {
				return m
			}
		}
	}
	aegis := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin(t, "aegis"), args...)
		cmd.Env = env
		b, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(b), code
	}
	// A host that lists with id "1" gets its answer matched as 1 too.
	ask(`{"jsonrpc":"2.0","id":"1","method":"tools/list"}`)
	if a := ask(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"u"}}}`); a["error"] != nil {
		t.Fatalf("first call: %v", a)
	}
	ask(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	a := ask(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"u"}}}`)
	ag := refusedAegis(a)
	if ag == nil || ag["code"] != "PENDING_APPROVAL" {
		t.Fatalf("call to the rewritten tool: %v", a)
	}
	id := ag["approval_id"].(string)
	for p := range prompts {
		if strings.Contains(p, "aegis approve "+id+" to pin it") {
			break
		}
	}
	if msg, code := aegis("approve", id); code != 0 || !strings.Contains(msg, "pinned to its new definition") {
		t.Fatalf("aegis approve: %d %s", code, msg)
	}
	if a := ask(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"v"}}}`); a["error"] != nil {
		t.Fatalf("call after the re-pin: %v", a)
	}
	in.Close()
	io.Copy(io.Discard, br)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("aegis wrap: %v", err)
	}

	key := schemas.WrapServerKey(server)
	list, errs, code := c.aegis("pins", "--state-dir", c.state, "--json")
	var pins []map[string]any
	if code != 0 || json.Unmarshal([]byte(list), &pins) != nil || len(pins) != 2 {
		t.Fatalf("aegis pins --json: %d %s %s", code, list, errs)
	}
	for _, p := range pins {
		if p["server"] != key {
			t.Fatalf("pin of server %v, want %q", p["server"], key)
		}
		if p["tool"] == "fetch" && !strings.HasPrefix(p["reason"].(string), "approved apr-pin-fetch-") {
			t.Fatalf("fetch's pin: %v", p)
		}
	}
	if out, errs, code := c.aegis("pins", "reset", "--state-dir", c.state, "--server", key, "--tool", "fetch"); code != 0 || !strings.Contains(out, "reset the pin of fetch") {
		t.Fatalf("aegis pins reset: %d %s %s", code, out, errs)
	}
	if out, _, code := c.aegis("pins", "--state-dir", c.state); code != 0 || strings.Contains(out, "fetch") || !strings.Contains(out, "echo") {
		t.Fatalf("aegis pins after the reset: %d %s", code, out)
	}
	// The state directory pins one server: --tool alone names its tool,
	// and fetch's pin is gone already.
	if _, errs, code := c.aegis("pins", "reset", "--state-dir", c.state, "--tool", "fetch"); code != 1 || !strings.Contains(errs, "no such pin") {
		t.Fatalf("reset --tool without --server: %d %s", code, errs)
	}
	// aegis replay tells the story of the session: the pins, the change.
	list, _, _ = c.aegis("sessions", "--state-dir", c.state, "--json")
	var sessions []map[string]any
	if json.Unmarshal([]byte(list), &sessions) != nil || len(sessions) != 1 {
		t.Fatalf("aegis sessions: %s", list)
	}
	replay, errs, code := c.aegis("replay", "--state-dir", c.state, sessions[0]["id"].(string))
	for _, want := range []string{"pinned    tool fetch of " + key, "TOOL CHANGED: fetch of " + key + " changed since it was pinned (description)",
		"on_tool_change: pending_approval", "(approved " + id + ")"} {
		if code != 0 || !strings.Contains(replay, want) {
			t.Errorf("aegis replay does not say %q: %d\n%s%s", want, code, replay, errs)
		}
	}
}
