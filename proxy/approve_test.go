package proxy_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A human approves a pending call from a second process while the proxy
// runs: the same call then goes through once, the next one is pending
// again, and ids that cannot be honoured are refused and recorded.
func TestApproveFromSecondProcess(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	c := newCLI(t)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	pol := filepath.Join(c.dir, "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\nrules:\n  - id: gate\n    action: pending_approval\n    tool: deploy\n"), 0o600)
	log := filepath.Join(c.dir, "server.log")
	args := append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--approval-ttl", "8s", "--"}, bin(t, "rawserver"), "-log", log)
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
	call := func(id, argsJSON string) string {
		t.Helper()
		io.WriteString(in, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"deploy","arguments":`+argsJSON+`}}`+"\n")
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("answer to %s: %v", id, err)
		}
		return line
	}
	approvalID := func() string {
		t.Helper()
		for p := range prompts {
			if i := strings.Index(p, "run: aegis approve "); i >= 0 {
				return strings.Fields(p[i+len("run: aegis approve "):])[0]
			}
		}
		t.Fatal("no approval prompt on stderr")
		return ""
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

	if a := call("1", `{"v":1}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("first call: %s", a)
	}
	id1 := approvalID()
	if list, code := aegis("approvals"); code != 0 || !strings.Contains(list, id1) {
		t.Fatalf("aegis approvals: %d %s", code, list)
	}
	if msg, code := aegis("approve", id1); code != 0 || !strings.Contains(msg, "approved "+id1) {
		t.Fatalf("aegis approve: %d %s", code, msg)
	}
	// The same call with another JSON-RPC id goes through once.
	if a := call("2", `{"v":1}`); !strings.Contains(a, `"result"`) {
		t.Fatalf("approved call: %s", a)
	}
	// Used: the id cannot be approved again, and the next call is pending.
	if msg, code := aegis("approve", id1); code != 1 || !strings.Contains(msg, "already") {
		t.Fatalf("reused approval: %d %s", code, msg)
	}
	if a := call("3", `{"v":1}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("second identical call after the approval was used: %s", a)
	}
	id2 := approvalID()
	// An approval covers the same arguments only.
	if msg, code := aegis("approve", id2); code != 0 {
		t.Fatalf("approve %s: %s", id2, msg)
	}
	if a := call("4", `{"v":2}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("different arguments rode on an approval: %s", a)
	}
	id3 := approvalID()
	if msg, code := aegis("deny", id3, "--reason", "not today"); code != 0 || !strings.Contains(msg, "denied") {
		t.Fatalf("deny: %d %s", code, msg)
	}
	if msg, code := aegis("approve", id3); code != 1 || !strings.Contains(msg, "already denied") {
		t.Fatalf("approve after deny: %d %s", code, msg)
	}
	if msg, code := aegis("approve", "apr-nope-1"); code != 1 {
		t.Fatalf("unknown id: %d %s", code, msg)
	}
	if a := call("5", `{"v":3}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatal(a)
	}
	id4 := approvalID()
	time.Sleep(8500 * time.Millisecond) // past the TTL, long enough for a loaded machine to reach each approve before it
	if msg, code := aegis("approve", id4); code != 1 || !strings.Contains(msg, "expired") {
		t.Fatalf("late approval: %d %s", code, msg)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("aegis wrap: %v", err)
	}
	got, _ := os.ReadFile(log)
	if n := strings.Count(string(got), `"name":"deploy"`); n != 1 {
		t.Fatalf("the server received %d deploy calls, want exactly the approved one:\n%s", n, got)
	}
	h := &harness{t: t, audit: c.audit}
	ls := h.lines()
	if n := len(ofType(ls, "decision")); n != 3 {
		t.Errorf("%d decision lines, want 3 (two approvals, one denial)", n)
	}
	if vout, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: %s", vout)
	}
	// The approved call's outcome names its approval.
	found := false
	for _, o := range ofType(ls, "outcome") {
		if ax := obj(o, "decision_axes"); ax["approval_ref"] == id1 {
			found = true
		}
	}
	if !found {
		t.Error("no outcome carries approval_ref " + id1)
	}
	// The credentials file is gone with the process.
	if left, _ := filepath.Glob(filepath.Join(runtime, "aegis", "approve-*.json")); len(left) != 0 {
		t.Errorf("credentials left behind: %v", left)
	}
}
