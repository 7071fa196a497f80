package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

// rawHost runs argv as a host that writes bytes: the MCP handshake, then
// body exactly as given. It reads every line argv writes back until each of
// waitFor (ids as JSON text, such as `1` or `"a"`; an id listed n times
// waits for n answers) has been answered, then closes argv's stdin and
// reads on until argv closes its stdout.
func rawHost(t *testing.T, ctx context.Context, argv []string, body string, waitFor ...string) []map[string]any {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	in, out := startPiped(t, cmd)
	defer cmd.Wait()
	handshake := `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"aegis-e2e","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
	go io.WriteString(in, handshake+body)
	waiting := map[string]int{}
	for _, id := range waitFor {
		waiting[id]++
	}
	closed := false
	if len(waiting) == 0 {
		in.Close()
		closed = true
	}
	var got []map[string]any
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			var batch []map[string]any
			if json.Unmarshal(sc.Bytes(), &batch) != nil {
				t.Fatalf("%v wrote a line that is not JSON: %q", argv, sc.Text())
			}
			got = append(got, batch...)
			continue
		}
		got = append(got, m)
		id, _ := json.Marshal(m["id"])
		if waiting[string(id)]--; waiting[string(id)] <= 0 {
			delete(waiting, string(id))
		}
		if len(waiting) == 0 && !closed {
			in.Close()
			closed = true
		}
	}
	if !closed {
		t.Fatalf("%v closed its output with %v unanswered", argv, waiting)
	}
	return got
}

// answersTo returns the answers whose id is id (as JSON text).
func answersTo(got []map[string]any, id string) []map[string]any {
	var out []map[string]any
	for _, m := range got {
		if b, _ := json.Marshal(m["id"]); string(b) == id {
			if _, ok := m["method"]; !ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// The go-sdk's stdio transport decodes stdin as one JSON stream: it joins
// a value across lines and takes '\r' as white space. A host that splits a
// tools/call over two frames, the first of which also holds an allowed
// call, so got add past a policy that denies it, with nothing recorded.
// Now the frame that leaves a value unfinished is refused under a policy,
// and without one the joined call is recorded as what it is before the
// frame that completes it reaches the server.
func TestSplitCallCannotSmuggleAToolPastPolicy(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	split := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}` + "\r" +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":` + "\n" +
		`{"name":"add","arguments":{"a":40,"b":2}}}` + "\n"
	server := []string{bin(t, "aegis-example-server")}

	// The attack is real: the server runs add directly.
	direct := rawHost(t, ctx, server, split, "1", "3")
	if len(answersTo(direct, "3")) != 1 || !strings.Contains(textOf(answersTo(direct, "3")), "42") {
		t.Fatalf("control: the example server did not run the split add call directly, so this test proves nothing: %v", direct)
	}

	t.Run("under a policy the unfinished frame is refused", func(t *testing.T) {
		c := newCLI(t)
		pol := filepath.Join(c.dir, "policy.yaml")
		if err := os.WriteFile(pol, []byte("version: 1\ndefault: allow\nrules:\n  - id: no-add\n    action: deny\n    tool: add\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		argv := append([]string{bin(t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--"}, server...)
		via := rawHost(t, ctx, argv, split, "1")
		if s := textOf(via); strings.Contains(s, "42") {
			t.Fatalf("the split add ran through aegis: %v", via)
		}
		if a := answersTo(via, "1"); len(a) != 1 || a[0]["error"] == nil {
			t.Fatalf("answers to id 1: %v, want the refusal of the frame", a)
		}
		h := &harness{t: t, audit: c.audit}
		var refusedUnfinished bool
		for _, o := range ofType(h.lines(), "outcome") {
			if r, _ := obj(o, "policy")["reason"].(string); strings.HasPrefix(r, "frame ends inside an unfinished JSON value") {
				refusedUnfinished = true
			}
			if obj(o, "execution")["status"] == "success" {
				t.Errorf("a call of the refused frame is recorded as run: %v", o.Members())
			}
		}
		if !refusedUnfinished {
			t.Error("the record does not say that a frame ending inside an unfinished value was refused")
		}
		if out, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
			t.Fatalf("verify: exit %d\n%s", code, out)
		}
	})

	t.Run("without a policy the joined call is recorded as add", func(t *testing.T) {
		c := newCLI(t)
		via := rawHost(t, ctx, c.wrapArgv(server...), split, "1", "3")
		if !strings.Contains(textOf(answersTo(via, "3")), "42") {
			t.Fatalf("without a policy the call should run as it does directly: %v", via)
		}
		h := &harness{t: t, audit: c.audit}
		ls := h.lines()
		var addCall string
		for _, l := range ofType(ls, "intent") {
			if str(l, "tool_id") == "add" {
				addCall = str(l, "call_id")
			}
		}
		if addCall == "" {
			t.Fatalf("no intent records the add call that the server ran: %v", ofType(ls, "intent"))
		}
		for _, o := range ofType(ls, "outcome") {
			if str(o, "call_id") == addCall && obj(o, "execution")["status"] != "success" {
				t.Errorf("add's outcome %v, want success", o.Members())
			}
		}
		if out, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
			t.Fatalf("verify: exit %d\n%s", code, out)
		}
	})
}

// The official TypeScript SDK matches an answer by Number(id), so a server
// that answers call 1 with id "1" answers it. The record must say the call
// was answered, before the host gets the answer, not that the server
// exited first.
func TestWrapRecordsAnswersHostsMatchLoosely(t *testing.T) {
	h := newHarness(t)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"loose"}}`)))
		time.Sleep(500 * time.Millisecond)
		pw.Close()
	}()
	run := h.run([]string{bin(t, "rawserver")}, pr, time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	answer := `{"jsonrpc":"2.0","id":"1","result":{"method":"tools/call"}}`
	if string(run.out) != answer+"\n" {
		t.Fatalf("host got %q, want the server's answer", run.out)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 1 || obj(outcomes[0], "execution")["status"] != "success" || str(outcomes[0], "response_digest") != sha([]byte(answer)) {
		t.Fatalf("outcomes %v, want call-1 answered by the string-id frame", outcomes)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A server that answers an id the host never sent, or a call the policy
// refused, or the same call twice, could put words in the host's mouth:
// such an answer is recorded but never relayed.
func TestWrapDropsForgedAnswers(t *testing.T) {
	h := newHarness(t)
	h.policy = loadPolicy(t, "version: 1\ndefault: allow\nrules:\n  - id: no-rm\n    action: deny\n    tool: rm\n")
	frames := []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"}}`,                           // refused
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"forge","arguments":{"id":2}}}`,   // answers the refused id 2 first
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"forge"}}`,                        // answers the unsent id 424242 first
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"twice"}}`,                        // answers twice
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"forge","arguments":{"id":"6"}}}`, // "6" is call 6 to a loose host: it closes it
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(joinLines(frames...)))
		time.Sleep(500 * time.Millisecond)
		pw.Close()
	}()
	run := h.run([]string{bin(t, "rawserver")}, pr, time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(run.out)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("host line %q: %v", l, err)
		}
		got = append(got, m)
	}
	if a := answersTo(got, "2"); len(a) != 1 || a[0]["error"] == nil {
		t.Errorf("answers to the refused id 2: %v, want only the refusal", a)
	}
	if a := answersTo(got, "424242"); len(a) != 0 {
		t.Errorf("the host got an answer to an id it never sent: %v", a)
	}
	if a := answersTo(got, "5"); len(a) != 1 {
		t.Errorf("answers to id 5: %v, want one", a)
	}
	if a := answersTo(got, "3"); len(a) != 1 {
		t.Errorf("answers to id 3: %v, want one", a)
	}
	dropped := h.count(schemas.KindFrameDropped)
	// The answer to "6" closes call 6 for a host that matches ids by
	// Number(id), so the server's own answer to 6 after it is a second
	// answer, dropped too.
	if dropped != 4 {
		t.Errorf("%d frame.dropped events, want 4 (the answers to 2, to 424242, the second to 5 and the one to 6 after \"6\")", dropped)
	}
	for _, o := range ofType(h.lines(), "outcome") {
		if str(o, "tool_id") == "rm" && obj(o, "execution")["status"] != "host_denied" {
			t.Errorf("the refused call is recorded as %v", o.Members())
		}
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// Two requests with one id in flight make their answers indistinguishable:
// slow and echo both with id 7 ran slow, and the record said echo
// succeeded. The second frame is now refused; the record says the first
// ran and the second never reached the server.
func TestWrapRefusesAnIDReusedInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newCLI(t)
	body := joinLines(
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{"ms":800}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"not me"}}}`,
		`{"jsonrpc":"2.0","id":"7","method":"tools/call","params":{"name":"echo","arguments":{"message":"nor me"}}}`,
		`{"jsonrpc":"2.0","id":7.0,"method":"ping"}`,
	)
	via := rawHost(t, ctx, c.wrapArgv(bin(t, "aegis-example-server")), body, `"7"`, "7", "7", "7")
	var refusals, answers int
	for _, m := range via {
		id, _ := json.Marshal(m["id"])
		if string(id) != "7" && string(id) != `"7"` {
			continue
		}
		if e, _ := m["error"].(map[string]any); e != nil && e["code"] == float64(-32042) {
			refusals++
		} else {
			answers++
		}
	}
	if refusals != 3 || answers != 1 {
		t.Fatalf("%d refusals and %d answers for id 7, want 3 and 1 (slow's): %v", refusals, answers, via)
	}
	if strings.Contains(textOf(via), "me") {
		t.Fatalf("a reused-id echo ran: %v", via)
	}
	h := &harness{t: t, audit: c.audit}
	for _, o := range ofType(h.lines(), "outcome") {
		ex := obj(o, "execution")
		switch str(o, "tool_id") {
		case "slow":
			if ex["status"] != "success" {
				t.Errorf("slow, which ran, is recorded as %v", ex)
			}
		case "echo":
			if ex["status"] != "host_denied" || !strings.HasPrefix(obj(o, "policy")["reason"].(string), "tools/call reuses an id") {
				t.Errorf("the refused echo is recorded as %v", o.Members())
			}
		}
	}
	if out, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
}

// A call that the host cancelled and the server never answered ran on the
// server as far as anyone knows: its outcome says it was cancelled and
// when, never that the server exited first, and the cancellation is an
// event of its own.
func TestWrapRecordsAHostCancellationTruthfully(t *testing.T) {
	h := newHarness(t)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"hang"}}`)))
		time.Sleep(300 * time.Millisecond)
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"5","reason":"user gave up"}}`)))
		time.Sleep(300 * time.Millisecond)
		pw.Close()
	}()
	run := h.run([]string{bin(t, "rawserver")}, pr, time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 1 {
		t.Fatalf("outcomes %v", outcomes)
	}
	ex := obj(outcomes[0], "execution")
	msg, _ := ex["message"].(string)
	if ex["status"] != "trap" || !strings.HasPrefix(msg, "cancelled by the host at +0.") || !strings.HasSuffix(msg, "the server did not answer") {
		t.Fatalf("execution %v, want a trap saying the host cancelled it and the server did not answer", ex)
	}
	if p := obj(outcomes[0], "policy"); p["status"] != "allowed" {
		t.Errorf("policy %v: the call was relayed, so it was allowed", p)
	}
	cancelled := h.count(schemas.KindCallCancelled)
	if cancelled != 1 {
		t.Errorf("%d call.cancelled events, want 1", cancelled)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A server that splits its answer over two lines is read whole by a host
// that decodes its stdin as one stream (the go-sdk client): the call's
// outcome must be durable before the line that completes the answer
// reaches the host.
func TestWrapRecordsAnAnswerSplitAcrossLines(t *testing.T) {
	h := newHarness(t)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"split"}}`)))
		time.Sleep(500 * time.Millisecond)
		pw.Close()
	}()
	run := h.run([]string{bin(t, "rawserver")}, pr, time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 1 || obj(outcomes[0], "execution")["status"] != "success" {
		t.Fatalf("outcomes %v, want the split answer recorded as the call's answer", outcomes)
	}
	if want := `{"jsonrpc":"2.0","id":1,"result":` + "\n" + `{"method":"tools/call"}}` + "\n"; string(run.out) != want {
		t.Fatalf("host got %q, want the answer byte for byte", run.out)
	}
}

// Without a policy, a host frame that names no tools/call is relayed
// before the relay reads its requests, and read right after. An answer can
// overtake that reading (the server runs as soon as the frame reaches it):
// it must still be matched and relayed, and an answer to an id never sent
// must still be dropped. Thousands of pings in one burst make the race
// common (under the race detector, as make test runs it, every run has
// some); each is answered exactly once.
func TestWrapMatchesAnswersThatOvertakeTheReadingOfTheirRequest(t *testing.T) {
	h := newHarness(t)
	const n = 3000
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i)
		if i == n/2 {
			b.WriteString(`{"jsonrpc":"2.0","id":"f","method":"tools/call","params":{"name":"forge","arguments":{"id":999999}}}` + "\n")
		}
	}
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, b.String())
		time.Sleep(time.Second)
		pw.Close()
	}()
	run := h.run([]string{bin(t, "rawserver")}, pr, 2*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	seen := map[string]int{}
	for l := range strings.Lines(string(run.out)) {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("host line %q: %v", l, err)
		}
		seen[string(m.ID)]++
	}
	for i := range n {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Fatalf("ping %d answered %d times, want once (%d lines in all)", i, c, len(seen))
		}
	}
	if seen["999999"] != 0 || seen[`"f"`] != 1 {
		t.Fatalf("answers to the forged id: %d, to the call: %d; want 0 and 1", seen["999999"], seen[`"f"`])
	}
	dropped := h.count(schemas.KindFrameDropped)
	if dropped != 1 {
		t.Fatalf("%d frame.dropped events, want 1 (the answer to the id never sent)", dropped)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}
