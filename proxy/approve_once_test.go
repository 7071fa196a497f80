package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/relay"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

// approvalWrap is an `aegis wrap --policy` process driven by a raw host,
// with its own runtime directory so that `aegis approve` finds it.
type approvalWrap struct {
	t   *testing.T
	c   *cli
	env []string
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader

	lines chan string // stderr, line by line
	mu    sync.Mutex
	raw   bytes.Buffer // stderr, every byte
}

func startApprovalWrap(t *testing.T, c *cli, policyText, ttl string, server ...string) *approvalWrap {
	t.Helper()
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	pol := filepath.Join(c.dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &approvalWrap{t: t, c: c, env: append(os.Environ(), "XDG_RUNTIME_DIR="+runtime), lines: make(chan string, 256)}
	args := append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--approval-ttl", ttl, "--"}, server...)
	w.cmd = exec.Command(bin(t, "aegis"), args...)
	w.cmd.Env = w.env
	w.in, _ = w.cmd.StdinPipe()
	out, _ := w.cmd.StdoutPipe()
	stderr, _ := w.cmd.StderrPipe()
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.cmd.Process.Kill(); w.cmd.Wait() })
	w.out = bufio.NewReader(out)
	go func() {
		br := bufio.NewReader(stderr)
		for {
			line, err := br.ReadString('\n')
			w.mu.Lock()
			w.raw.WriteString(line)
			w.mu.Unlock()
			if line != "" {
				w.lines <- strings.TrimSuffix(line, "\n")
			}
			if err != nil {
				close(w.lines)
				return
			}
		}
	}()
	return w
}

// send writes one frame and returns the answer line.
func (w *approvalWrap) send(frame string) string {
	w.t.Helper()
	io.WriteString(w.in, frame+"\n")
	line, err := w.out.ReadString('\n')
	if err != nil {
		w.t.Fatalf("answer to %s: %v", frame, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// initialize opens an MCP session at a version that still has batches.
func (w *approvalWrap) initialize() {
	w.t.Helper()
	if a := w.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); !strings.Contains(a, `"result"`) {
		w.t.Fatalf("initialize: %s", a)
	}
	io.WriteString(w.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
}

// approvalID returns the id of the next approval prompt on stderr.
func (w *approvalWrap) approvalID() string {
	w.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case p, ok := <-w.lines:
			if !ok {
				w.t.Fatal("aegis wrap closed stderr before an approval prompt")
			}
			if i := strings.Index(p, "run: aegis approve "); i >= 0 {
				return strings.Fields(p[i+len("run: aegis approve "):])[0]
			}
		case <-timeout:
			w.t.Fatal("no approval prompt on stderr")
		}
	}
}

func (w *approvalWrap) stderr() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.raw.Bytes())
}

// aegis runs the aegis CLI in the wrap's environment.
func (w *approvalWrap) aegis(args ...string) (string, int) {
	w.t.Helper()
	cmd := exec.Command(bin(w.t, "aegis"), args...)
	cmd.Env = w.env
	b, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatal(err)
	}
	return string(b), code
}

func (w *approvalWrap) approve(id string) {
	w.t.Helper()
	if msg, code := w.aegis("approve", id); code != 0 {
		w.t.Fatalf("aegis approve %s: %d %s", id, code, msg)
	}
}

func (w *approvalWrap) close() {
	w.t.Helper()
	w.in.Close()
	if err := w.cmd.Wait(); err != nil {
		w.t.Fatalf("aegis wrap: %v\n%s", err, w.stderr())
	}
}

// aegisData decodes the data.aegis member of each refusal in an answer
// (an object or a batch array), by id.
func aegisData(t *testing.T, answer string) map[string]map[string]string {
	t.Helper()
	var frames []json.RawMessage
	if strings.HasPrefix(answer, "[") {
		if err := json.Unmarshal([]byte(answer), &frames); err != nil {
			t.Fatalf("answer %s: %v", answer, err)
		}
	} else {
		frames = []json.RawMessage{json.RawMessage(answer)}
	}
	out := map[string]map[string]string{}
	for _, f := range frames {
		var v struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Data struct {
					Aegis map[string]string `json:"aegis"`
				} `json:"data"`
			} `json:"error"`
		}
		if err := json.Unmarshal(f, &v); err != nil {
			t.Fatalf("answer %s: %v", f, err)
		}
		if v.Error == nil {
			out[string(v.ID)] = nil
			continue
		}
		out[string(v.ID)] = v.Error.Data.Aegis
	}
	return out
}

const gateAddPolicy = "version: 1\nrules:\n  - id: gate-add\n    action: pending_approval\n    tool: add\n"

// One approval lets one call run. After a single `aegis approve`, a batch
// of five identical calls does not run five times on it: one call may
// take the approval, the four others are pending again (each with its own
// approval id), so the batch is refused whole, and the approval the
// refused batch would have used is kept for the next try. Approving the
// four new ids and the one of the next call lets a batch of five run,
// each call on its own approval.
func TestOneApprovalRunsOneCallOfABatch(t *testing.T) {
	c := newCLI(t)
	calls := filepath.Join(c.dir, "calls.log")
	w := startApprovalWrap(t, c, gateAddPolicy, "10m", bin(t, "aegis-example-server"), "-calls", calls)
	w.initialize()
	add := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}`, id)
	}
	batch := func(first int) string {
		var fs []string
		for i := range 5 {
			fs = append(fs, add(first+i))
		}
		return "[" + strings.Join(fs, ",") + "]"
	}
	ran := func() int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "add")
	}

	if d := aegisData(t, w.send(add(1)))["1"]; d["code"] != "PENDING_APPROVAL" {
		t.Fatalf("first call: %v", d)
	}
	first := w.approvalID()
	w.approve(first)

	answers := aegisData(t, w.send(batch(10)))
	if n := ran(); n != 0 {
		t.Fatalf("one approval ran %d calls of a batch of five", n)
	}
	var again []string
	kept := 0
	for id, d := range answers {
		switch {
		case d == nil:
			t.Errorf("call %s of the refused batch got a result", id)
		case d["code"] == "PENDING_APPROVAL":
			again = append(again, d["approval_id"])
		case d["code"] == "HOST_DENIED" && strings.Contains(d["hint"], "approval "+first+" is kept"):
			kept++
		default:
			t.Errorf("call %s: %v", id, d)
		}
	}
	if len(again) != 4 || kept != 1 {
		t.Fatalf("batch after one approval: %d pending again, %d keeping the approval; want 4 and 1: %v", len(again), kept, answers)
	}
	for range again {
		w.approvalID() // their prompts
	}

	// The kept approval lets the same call through once, alone.
	if a := w.send(add(20)); !strings.Contains(a, `"result"`) || ran() != 1 {
		t.Fatalf("the call the approval was kept for: %s (ran %d)", a, ran())
	}
	if d := aegisData(t, w.send(add(21)))["21"]; d["code"] != "PENDING_APPROVAL" {
		t.Fatalf("an approval ran twice: %v", d)
	}
	again = append(again, w.approvalID())

	// Five approvals, five calls.
	for _, id := range again {
		w.approve(id)
	}
	for id, d := range aegisData(t, w.send(batch(30))) {
		if d != nil {
			t.Errorf("call %s of a batch with an approval each: %v", id, d)
		}
	}
	if n := ran(); n != 6 {
		t.Errorf("the server ran add %d times, want 6 (one per approval)", n)
	}
	w.close()

	h := &harness{t: t, audit: c.audit}
	refs := map[string]int{}
	for _, o := range ofType(h.lines(), "outcome") {
		if ref, _ := obj(o, "decision_axes")["approval_ref"].(string); ref != "" {
			refs[ref]++
			if e := obj(o, "execution"); e["status"] != "success" {
				t.Errorf("the outcome citing %s: %v", ref, e)
			}
		}
	}
	if len(refs) != 6 {
		t.Errorf("%d approvals cited, want 6: %v", len(refs), refs)
	}
	for ref, n := range refs {
		if n != 1 {
			t.Errorf("approval %s cited by %d outcomes", ref, n)
		}
	}
	if refs[first] != 1 {
		t.Errorf("the first approval is cited %d times", refs[first])
	}
	if vout, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: %s", vout)
	}
}

// Concurrent calls in the gateway never share one approval: of eight
// identical calls sent at once after one `aegis approve`, exactly one runs.
func TestOneApprovalRunsOneOfConcurrentGatewayCalls(t *testing.T) {
	c := newCLI(t)
	calls := filepath.Join(c.dir, "calls.log")
	config := filepath.Join(c.dir, "aegis.yaml")
	os.WriteFile(config, []byte(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
    args: [-calls, `+calls+`]
profiles:
  observer:
    allow: [example.add]
activation:
  default_profile: observer
rules:
  - id: gate-add
    action: pending_approval
    tool: example__add
`), 0o600)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = env
	stderr, _ := cmd.StderrPipe()
	prompts := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			prompts <- sc.Text()
		}
		close(prompts)
	}()
	ctx := t.Context()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aegis gateway: %v", err)
	}
	call := func() (string, bool) {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__add", Arguments: map[string]any{"a": 2, "b": 3}})
		if err != nil {
			return err.Error(), true
		}
		var text string
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return text, r.IsError
	}
	text, isErr := call()
	var refusal struct {
		Code       string `json:"code"`
		ApprovalID string `json:"approval_id"`
		Hint       string `json:"hint"`
	}
	if json.Unmarshal([]byte(text), &refusal); !isErr || refusal.Code != "PENDING_APPROVAL" || !strings.Contains(refusal.Hint, "aegis approve "+refusal.ApprovalID) {
		t.Fatalf("first call: %s", text)
	}
	approve := exec.Command(bin(t, "aegis"), "approve", refusal.ApprovalID)
	approve.Env = env
	if out, err := approve.CombinedOutput(); err != nil {
		t.Fatalf("aegis approve: %v %s", err, out)
	}

	const n = 8
	results := make(chan bool, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			text, isErr := call()
			results <- !isErr && text == "5"
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	ok := 0
	for r := range results {
		if r {
			ok++
		}
	}
	b, _ := os.ReadFile(calls)
	if ok != 1 || strings.Count(string(b), "add") != 1 {
		t.Errorf("%d of %d concurrent calls ran on one approval (server log %q), want 1", ok, n, b)
	}
	cs.Close()
	cmd.Wait()

	h := &harness{t: t, audit: c.audit}
	cited := 0
	for _, o := range ofType(h.lines(), "outcome") {
		if obj(o, "decision_axes")["approval_ref"] == refusal.ApprovalID {
			cited++
		}
	}
	if cited != 1 {
		t.Errorf("%d outcomes cite %s, want 1", cited, refusal.ApprovalID)
	}
}

// An approved call that is not used before its approval expires does not
// go through later: the allowance expires with the approval, the lapse is
// recorded, and the call is pending again with a new approval id. The
// relay's clock is injected, so no test time passes.
func TestApprovedAllowanceExpiresWithItsApproval(t *testing.T) {
	serialOnly(t)
	h := newHarness(t)
	h.policy = loadPolicy(t, testPolicy)
	log := filepath.Join(t.TempDir(), "server.log")
	argv := []string{bin(t, "rawserver"), "-log", log}

	var mu sync.Mutex
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	handles := make(chan func(proxy.ApprovalOp) proxy.ApprovalReply, 1)
	hostIn, hostW := io.Pipe()
	hostR, hostOut := io.Pipe()
	var prompt bytes.Buffer
	done := make(chan wrapRun, 1)
	go func() {
		ctx := context.Background()
		res, err := relay.Wrap(ctx, relay.Config{
			Open: func(*sandbox.Fact) (*projector.Session, error) {
				return projector.OpenSession(ctx, projector.SessionConfig{Store: h.store, Key: h.key, AuditPath: h.audit, Argv: argv, Version: "test"})
			},
			Stdin: hostIn, Stdout: hostOut, Stderr: io.Discard, Argv: argv, Grace: 2 * time.Second,
			Policy: h.policy, ApprovalTTL: time.Minute, Now: clock, Prompt: &prompt,
			Approvals: func(_ string, handle func(proxy.ApprovalOp) proxy.ApprovalReply) (func(), error) {
				handles <- handle
				return func() {}, nil
			},
		})
		hostOut.Close()
		if res.Session != nil {
			if cerr := res.Session.Close(ctx); err == nil {
				err = cerr
			}
		}
		done <- wrapRun{res: res, err: err}
	}()
	handle := <-handles
	br := bufio.NewReader(hostR)
	send := func(id int) map[string]string {
		t.Helper()
		fmt.Fprintf(hostW, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"deploy","arguments":{"v":1}}}`+"\n", id)
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("answer to %d: %v", id, err)
		}
		return aegisData(t, line)[fmt.Sprint(id)]
	}

	first := send(1)
	if first["code"] != "PENDING_APPROVAL" || first["approval_id"] != "apr-gate-deploy-deploy-1.1" { // session 1 of its state directory
		t.Fatalf("first call: %v", first)
	}
	if rep := handle(proxy.ApprovalOp{Op: "approve", ApprovalID: first["approval_id"], By: "test"}); !rep.OK {
		t.Fatalf("approve: %+v", rep)
	}
	advance(time.Minute) // the approval's expiry: no longer usable
	second := send(2)
	if second == nil {
		t.Fatal("an approval was used at its expiry")
	}
	if second["code"] != "PENDING_APPROVAL" || second["approval_id"] == first["approval_id"] || second["approval_id"] == "" {
		t.Fatalf("the call after the approval expired: %v, want pending under a new approval id", second)
	}
	if rep := handle(proxy.ApprovalOp{Op: "approve", ApprovalID: first["approval_id"], By: "test"}); rep.OK || !strings.Contains(rep.Error, "expired unused") {
		t.Errorf("approving the lapsed id again: %+v", rep)
	}
	// Inside its time, an approval still lets its call through once.
	if rep := handle(proxy.ApprovalOp{Op: "approve", ApprovalID: second["approval_id"], By: "test"}); !rep.OK {
		t.Fatalf("approve: %+v", rep)
	}
	advance(59 * time.Second)
	if third := send(3); third != nil {
		t.Fatalf("the call approved in time: %v", third)
	}
	hostW.Close()
	run := <-done
	if run.err != nil {
		t.Fatal(run.err)
	}
	if got, _ := os.ReadFile(log); strings.Count(string(got), `"deploy"`) != 1 {
		t.Errorf("the server received:\n%s\nwant only the call approved in time", got)
	}
	lapsed := 0
	for _, r := range h.events() {
		if r.Event.Kind != schemas.KindApprovalExpired {
			continue
		}
		var p map[string]string
		json.Unmarshal(r.Event.Payload, &p)
		if p["approval_id"] == first["approval_id"] && p["reason"] == "approved, but not used before it expired" {
			lapsed++
		}
	}
	if lapsed != 1 {
		t.Errorf("%d approval.expired events for the lapsed approval, want 1", lapsed)
	}
	refs := 0
	for _, o := range ofType(h.lines(), "outcome") {
		if ref := obj(o, "decision_axes")["approval_ref"]; ref == first["approval_id"] {
			t.Errorf("an outcome cites the lapsed approval: %v", o.Members())
		} else if ref == second["approval_id"] {
			refs++
		}
	}
	if refs != 1 {
		t.Errorf("%d outcomes cite the approval used in time, want 1", refs)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// The approver sees what they approve, and a hostile host cannot use it
// to rewrite the operator's terminal: the tool name and the arguments of a
// pending call reach stderr and `aegis approvals` escaped, with the
// arguments cut and their digest shown.
func TestHostileArgumentsCannotRewriteTheApproversTerminal(t *testing.T) {
	c := newCLI(t)
	w := startApprovalWrap(t, c, "version: 1\nrules:\n  - id: ask\n    action: pending_approval\n", "10m", bin(t, "rawserver"))
	long := strings.Repeat("a", 2000)
	// ESC sequences that clear the screen, set the title, recolour; a C1
	// CSI; a bell; a bidi override that reverses what follows; a newline.
	args := `{"cmd":"\u001b[2J\u001b[1;1Haegis: approved, nothing to check\u202e","nl":"a\nb","pad":"` + long + `"}`
	canon, err := schemas.Canonicalize([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	frame := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deploy\u001b]0;owned\u0007\u009b2J","arguments":` + args + `}}`
	if d := aegisData(t, w.send(frame))["1"]; d["code"] != "PENDING_APPROVAL" || !strings.HasPrefix(d["hint"], "run: aegis approve ") || d["reason"] == "" {
		t.Fatalf("refusal: %v", d)
	}
	w.approvalID()
	list, code := w.aegis("approvals")
	if code != 0 {
		t.Fatalf("aegis approvals: %d %s", code, list)
	}
	js, code := w.aegis("approvals", "--json")
	if code != 0 {
		t.Fatalf("aegis approvals --json: %d %s", code, js)
	}
	w.close()
	stderr := string(w.stderr())

	for name, text := range map[string]string{"the stderr prompt": stderr, "aegis approvals": list, "aegis approvals --json": js} {
		for _, bad := range []string{"\x1b", "\a", "\u009b", "\u202e"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s holds a raw %q:\n%q", name, bad, text)
			}
		}
	}
	for name, text := range map[string]string{"the stderr prompt": stderr, "aegis approvals": list} {
		for _, want := range []string{`\u001b[2J\u001b[1;1Haegis: approved`, `\u202e`, `"nl":"a\nb"`, fmt.Sprintf("aaaa…(%d bytes, sha256 %s…)", len(canon), sha(canon)[:16])} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not show %q:\n%q", name, want, text)
			}
		}
		if strings.Contains(text, long[:600]) {
			t.Errorf("%s shows the arguments uncut", name)
		}
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(js), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("aegis approvals --json: %v %s", err, js)
	}
	if a, _ := rows[0]["arguments"].(string); !strings.HasPrefix(a, `{"cmd":"\u001b[2J`) || len(a) > 512 || rows[0]["arguments_bytes"] != float64(len(canon)) {
		t.Errorf("--json arguments %q (%v bytes)", a, rows[0]["arguments_bytes"])
	}
	if tool, _ := rows[0]["tool_id"].(string); tool != "deploy\x1b]0;owned\a\u009b2J" {
		t.Errorf("--json tool_id %q, want the name as sent (escaped only in the text)", tool)
	}
}
