package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// fakeProxy is the proxy side of one session's approval channel: a real
// event store opened with approvals on, as aegis wrap opens it, listening
// for the session with a handler that keeps pending approvals the way the
// proxy's projection does. Its credentials file is in runtimeDir.
type fakeProxy struct {
	session string
	creds   events.Creds

	mu      sync.Mutex
	pending map[string]events.PendingApproval
	used    map[string]bool
	got     []events.ApprovalRequest
}

// fakeProxies counts the fake proxies started, so that their approvals'
// request times interleave in the order they were started, whatever the
// clock does between two starts.
var fakeProxies atomic.Int64

// requestEpoch is the fixed time the fake approvals were requested after.
var requestEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func startFakeProxy(t *testing.T, runtimeDir string, ids ...string) *fakeProxy {
	t.Helper()
	n := fakeProxies.Add(1)
	st, err := events.Open(context.Background(), events.Config{Dir: filepath.Join(t.TempDir(), "state"), Approvals: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	f := &fakeProxy{pending: map[string]events.PendingApproval{}, used: map[string]bool{}}
	if f.session, err = st.NewSession(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		f.pending[id] = events.PendingApproval{
			ApprovalID: id, ToolID: "fs.write", RequestDigest: "sha256:" + strings.Repeat("a", 64),
			// The i-th approval of the n-th proxy: a proxy started later
			// has its first approval between the first two of the one before.
			RequestedAt: requestEpoch.Add(time.Duration(2*i)*time.Hour + time.Duration(n)*time.Second),
			ExpiresAt:   time.Now().UTC().Add(5 * time.Minute),
		}
	}
	l, err := st.ListenApprovals(f.session, f.handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f.creds = l.Creds()
	path, err := events.WriteApprovalCreds(runtimeDir, f.creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { events.RemoveApprovalCreds(path) })
	return f
}

func (f *fakeProxy) handle(req events.ApprovalRequest) events.ApprovalReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	if req.Op == events.OpList {
		rep := events.ApprovalReply{OK: true}
		for _, p := range f.pending {
			rep.Pending = append(rep.Pending, p)
		}
		return rep
	}
	if f.used[req.ApprovalID] {
		return events.ApprovalReply{Error: "approval " + req.ApprovalID + " was already used"}
	}
	if _, ok := f.pending[req.ApprovalID]; !ok {
		return events.ApprovalReply{Error: "unknown approval " + req.ApprovalID}
	}
	delete(f.pending, req.ApprovalID)
	f.used[req.ApprovalID] = true
	return events.ApprovalReply{OK: true, Message: fmt.Sprintf("%s: %s of %s recorded", req.ApprovalID, req.Op, "fs.write")}
}

func (f *fakeProxy) requests() []events.ApprovalRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]events.ApprovalRequest(nil), f.got...)
}

// decisions are the approve and deny requests the proxy received.
func (f *fakeProxy) decisions() []events.ApprovalRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []events.ApprovalRequest
	for _, r := range f.got {
		if r.Op != events.OpList {
			out = append(out, r)
		}
	}
	return out
}

// runtimeEnv is an environment whose runtime directory is fresh.
func runtimeEnv(t *testing.T) (map[string]string, string) {
	t.Helper()
	xdg := t.TempDir()
	env := map[string]string{"XDG_RUNTIME_DIR": xdg, "USER": "alice"}
	dir, err := events.RuntimeDir(func(k string) string { return env[k] }, "")
	if err != nil {
		t.Fatal(err)
	}
	return env, dir
}

// runApprovalCmd runs one of the approval commands in-process. Once the
// command is in the command table it goes through Main.Run; until then the
// command function is called and its error rendered as Run renders it.
func runApprovalCmd(t *testing.T, env map[string]string, name string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	for _, c := range m.commands() {
		if c.name == name {
			code := m.Run(context.Background(), append([]string{name}, args...))
			return code, out.String(), errb.String()
		}
	}
	fn := map[string]func(*Main, context.Context, []string) error{
		"approve": (*Main).runApprove, "deny": (*Main).runDeny, "approvals": (*Main).runApprovals,
	}[name]
	code := m.exit(fn(m, context.Background(), args))
	return code, out.String(), errb.String()
}

func TestApprovalsListsEveryProcess(t *testing.T) {
	env, dir := runtimeEnv(t)
	a := startFakeProxy(t, dir, "apr-a-1", "apr-a-2")
	b := startFakeProxy(t, dir, "apr-b-1")
	startFakeProxy(t, dir) // nothing pending

	// Left behind by a process that has exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := a.creds
	stale.Session, _ = schemas.NewID(time.Now(), rand.Reader)
	stale.PID = dead.Process.Pid
	stalePath, _ := events.WriteApprovalCreds(dir, stale)
	// Readable by others: never trusted.
	loose := a.creds
	loose.Session, _ = schemas.NewID(time.Now(), rand.Reader)
	loosePath, _ := events.WriteApprovalCreds(dir, loose)
	os.Chmod(loosePath, 0o644)

	code, out, stderr := runApprovalCmd(t, env, "approvals")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "APPROVAL") {
		t.Fatalf("stdout = %q", out)
	}
	for i, want := range []struct{ id, session string }{{"apr-a-1", a.session}, {"apr-b-1", b.session}, {"apr-a-2", a.session}} {
		f := strings.Fields(lines[i+1])
		if f[0] != want.id || f[1] != "fs.write" || f[2] != want.session || !strings.HasPrefix(f[len(f)-3], "in") || f[len(f)-1] != "-" {
			t.Errorf("line %d = %q, want %s of %s", i+1, lines[i+1], want.id, want.session)
		}
	}
	if !strings.Contains(stderr, "aegis: warning: session "+stale.Session+": aegis process ") || !strings.Contains(stderr, "has exited; removed its credentials file") {
		t.Errorf("stderr does not report the stale file: %q", stderr)
	}
	if _, err := os.Stat(stalePath); !os.IsNotExist(err) {
		t.Errorf("stale credentials file still there: %v", err)
	}
	if !strings.Contains(stderr, "aegis: warning: ignoring credentials file "+loosePath+": has mode 0644") {
		t.Errorf("stderr does not report the 0644 file: %q", stderr)
	}

	code, out, _ = runApprovalCmd(t, env, "approvals", "--json")
	var rows []struct {
		Session    string    `json:"session"`
		PID        int       `json:"pid"`
		ApprovalID string    `json:"approval_id"`
		ToolID     string    `json:"tool_id"`
		ExpiresAt  time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("--json: exit %d, %v: %q", code, err, out)
	}
	if len(rows) != 3 || rows[0].ApprovalID != "apr-a-1" || rows[0].Session != a.session || rows[0].PID != os.Getpid() || rows[1].ApprovalID != "apr-b-1" || rows[0].ExpiresAt.IsZero() {
		t.Errorf("--json rows = %+v", rows)
	}
}

func TestApproveFindsTheProcessThatHoldsTheID(t *testing.T) {
	env, dir := runtimeEnv(t)
	a := startFakeProxy(t, dir, "apr-a-1")
	b := startFakeProxy(t, dir, "apr-b-1")

	code, out, stderr := runApprovalCmd(t, env, "approve", "apr-a-1")
	if code != 0 || out != "apr-a-1: approve of fs.write recorded\n  session:     "+a.session+"\n" || stderr != "" {
		t.Fatalf("approve: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	got := a.decisions()
	if len(got) != 1 || got[0].Op != events.OpApprove || got[0].ApprovalID != "apr-a-1" ||
		!strings.HasPrefix(got[0].By, "alice@") || !strings.Contains(got[0].By, fmt.Sprintf(", pid %d", os.Getpid())) {
		t.Errorf("proxy a got %+v", got)
	}
	if got := b.decisions(); len(got) != 0 {
		t.Errorf("proxy b, which does not hold the id, got %+v", got)
	}

	// Used: no process holds it any more, and nothing is sent.
	code, out, stderr = runApprovalCmd(t, env, "approve", "apr-a-1")
	if code != 1 || out != "" || !strings.Contains(stderr, "aegis: error: approval apr-a-1 is not pending in any running aegis process (2 of 2 asked)") || !strings.Contains(stderr, "aegis: hint: run 'aegis approvals'") {
		t.Errorf("second approve: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// With --session the process itself says why.
	code, _, stderr = runApprovalCmd(t, env, "approve", "--session", a.session, "apr-a-1")
	if code != 1 || !strings.Contains(stderr, "aegis: error: session "+a.session+" refused to approve apr-a-1: approval apr-a-1 was already used") || !strings.Contains(stderr, "aegis: hint: ") {
		t.Errorf("approve --session of a used id: exit %d, stderr %q", code, stderr)
	}
	if got := a.decisions(); len(got) != 2 {
		t.Errorf("proxy a got %d decisions, want 2", len(got))
	}

	// deny, flags after the id.
	code, out, stderr = runApprovalCmd(t, env, "deny", "apr-b-1", "--reason", "not on production")
	if code != 0 || !strings.Contains(out, "apr-b-1: deny of fs.write recorded") {
		t.Fatalf("deny: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got := b.decisions(); len(got) != 1 || got[0].Op != events.OpDeny || got[0].Reason != "not on production" {
		t.Errorf("proxy b got %+v", got)
	}
}

func TestApproveAskForASessionWhenTheIDIsAmbiguous(t *testing.T) {
	env, dir := runtimeEnv(t)
	a := startFakeProxy(t, dir, "apr-gate-1")
	b := startFakeProxy(t, dir, "apr-gate-1")
	code, _, stderr := runApprovalCmd(t, env, "approve", "apr-gate-1")
	if code != 1 || !strings.Contains(stderr, "approval apr-gate-1 is pending in 2 sessions") || !strings.Contains(stderr, "aegis: hint: choose one with --session ID") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if len(a.decisions())+len(b.decisions()) != 0 {
		t.Fatal("an ambiguous approval was sent")
	}
	code, _, stderr = runApprovalCmd(t, env, "approve", "apr-gate-1", "--session", b.session)
	if code != 0 || len(b.decisions()) != 1 || len(a.decisions()) != 0 {
		t.Errorf("approve --session: exit %d, stderr %q, a %v, b %v", code, stderr, a.decisions(), b.decisions())
	}
}

func TestApproveOneProcessSaysWhyItRefuses(t *testing.T) {
	env, dir := runtimeEnv(t)
	startFakeProxy(t, dir, "apr-1")
	code, out, stderr := runApprovalCmd(t, env, "deny", "apr-9")
	if code != 1 || out != "" || !strings.Contains(stderr, "refused to deny apr-9: unknown approval apr-9") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestApproveWithoutCredentialsFindsNothing(t *testing.T) {
	_, dir := runtimeEnv(t)
	p := startFakeProxy(t, dir, "apr-1")
	other, _ := runtimeEnv(t)

	code, out, stderr := runApprovalCmd(t, other, "approve", "apr-1")
	if code != 1 || out != "" || !strings.Contains(stderr, "aegis: error: no aegis process of yours is running with an approval channel") || !strings.Contains(stderr, "aegis: hint: ") {
		t.Errorf("approve: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = runApprovalCmd(t, other, "approvals")
	if code != 0 || !strings.HasPrefix(out, "no pending approvals: no aegis process") {
		t.Errorf("approvals: exit %d, stdout %q", code, out)
	}
	if got := p.requests(); len(got) != 0 {
		t.Errorf("the proxy was reached: %+v", got)
	}
}

// The aegis binary run with another runtime directory finds no process,
// and the running one hears nothing.
func TestApproveBinaryWithoutCredentials(t *testing.T) {
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	_, dir := runtimeEnv(t)
	p := startFakeProxy(t, dir, "apr-1")
	bin := filepath.Join(bins(t), "aegis")
	for _, args := range [][]string{{"approve", "apr-1"}, {"deny", "apr-1", "--session", p.session}, {"approvals"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"XDG_RUNTIME_DIR=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if strings.Contains(stderr.String(), fmt.Sprintf("unknown command %q", args[0])) {
			t.Skipf("aegis %s is not in the command table yet", args[0])
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		switch args[0] {
		case "approvals":
			if code != 0 || !strings.HasPrefix(stdout.String(), "no pending approvals: no aegis process") {
				t.Errorf("aegis %v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
			}
		default:
			if code != 1 || !strings.Contains(stderr.String(), "no aegis process of yours is running with an approval channel") {
				t.Errorf("aegis %v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
			}
		}
	}
	if got := p.requests(); len(got) != 0 {
		t.Errorf("the proxy was reached: %+v", got)
	}
}

func TestApproveProcessThatStoppedListening(t *testing.T) {
	env, dir := runtimeEnv(t)
	p := startFakeProxy(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := p.creds
	gone.Session, _ = schemas.NewID(time.Now(), rand.Reader)
	gone.URL = "nats://" + ln.Addr().String()
	ln.Close()
	events.WriteApprovalCreds(dir, gone)
	code, _, stderr := runApprovalCmd(t, env, "approve", "apr-1", "--session", gone.Session)
	if code != 1 || !strings.Contains(stderr, "aegis: error: no aegis process is listening for session "+gone.Session+" (it may have exited)") || !strings.Contains(stderr, "aegis: hint: ") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runApprovalCmd(t, env, "approvals")
	if code != 1 || !strings.Contains(stderr, "aegis: warning: no aegis process is listening for session "+gone.Session) || !strings.Contains(stderr, "could not list the approvals of 1 of 2 aegis processes") {
		t.Errorf("approvals: exit %d, stderr %q", code, stderr)
	}
}

func TestApprovalUsageErrors(t *testing.T) {
	env, _ := runtimeEnv(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"approve"}, "approve: missing APPROVAL_ID"},
		{[]string{"approve", "a", "b"}, "approve: want one APPROVAL_ID, got 2 arguments"},
		{[]string{"approve", "a b"}, `approve: bad APPROVAL_ID "a b"`},
		{[]string{"approve", strings.Repeat("a", 300)}, "approve: bad APPROVAL_ID"},
		{[]string{"approve", "apr-1", "--session", "a.>"}, `approve: bad --session "a.>"`},
		{[]string{"approve", "apr-1", "--reason", "x"}, "approve: flag provided but not defined: -reason"},
		{[]string{"deny", "--bogus", "apr-1"}, "deny: flag provided but not defined: -bogus"},
		{[]string{"deny", "apr-1", "--reason"}, "deny: flag needs an argument: -reason"},
		{[]string{"approvals", "x"}, `approvals: unexpected argument "x"`},
	}
	for _, tc := range cases {
		code, out, stderr := runApprovalCmd(t, env, tc.args[0], tc.args[1:]...)
		if code != 2 || out != "" || !strings.Contains(stderr, "aegis: error: "+tc.want) || !strings.Contains(stderr, "aegis: hint: ") {
			t.Errorf("aegis %q: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, stderr, tc.want)
		}
	}
	for _, name := range []string{"approve", "deny", "approvals"} {
		code, out, stderr := runApprovalCmd(t, env, name, "-h")
		if code != 0 || !strings.HasPrefix(out, "Usage:\n  aegis "+name) || stderr != "" {
			t.Errorf("aegis %s -h: exit %d, stdout %q, stderr %q", name, code, out, stderr)
		}
	}
	// "--" ends the flags: an id that starts with a dash.
	_, dir := runtimeEnv(t)
	env2 := map[string]string{"XDG_RUNTIME_DIR": filepath.Dir(dir)}
	p := startFakeProxy(t, dir, "-apr")
	code, _, stderr := runApprovalCmd(t, env2, "approve", "--", "-apr")
	if code != 0 || len(p.decisions()) != 1 {
		t.Errorf("approve -- -apr: exit %d, stderr %q", code, stderr)
	}
}
