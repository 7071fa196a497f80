package proxy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/relay"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

// Whatever the host sends, the server receives exactly; whatever the server
// sends, the host receives exactly. cat echoes, so the host must get its own
// bytes back, and every frame is in the stream verbatim.
func TestWrapRelaysHostileBytesExactly(t *testing.T) {
	h := newHarness(t)
	frames := [][]byte{
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`),
		[]byte("not json at all"),
		[]byte("\xff\xfe\x00 invalid utf-8"),
		[]byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\r"), // CRLF: the \r is content
		[]byte(""),
		[]byte("   "),
		[]byte(`{"jsonrpc":"2.0","id":null,"method":"ping"}`),
		[]byte(`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`),
		[]byte(`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/y"}]`),
		[]byte(`{"jsonrpc":"2.0","id":1,`), // truncated
	}
	var input []byte
	for _, f := range frames {
		input = append(append(input, f...), '\n')
	}
	input = append(input, []byte(`{"jsonrpc":"2.0","id":99,"method":"ping"}`)...) // no final newline
	run := h.run([]string{"cat"}, bytes.NewReader(input), 2*time.Second, nil)
	if run.err != nil {
		t.Fatalf("Wrap = %v", run.err)
	}
	if !bytes.Equal(run.out, input) {
		t.Fatalf("host got %d bytes back, sent %d; first difference at %d", len(run.out), len(input), firstDiff(run.out, input))
	}
	want := append(frames, []byte(`{"jsonrpc":"2.0","id":99,"method":"ping"}`))
	for _, kind := range []schemas.Kind{schemas.KindFrameC2S, schemas.KindFrameS2C} {
		got := h.frames(kind)
		if len(got) != len(want) {
			t.Fatalf("%s: %d frames recorded, want %d", kind, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s frame %d recorded as %q, sent %q", kind, i, cut(string(got[i]), 80), cut(string(want[i]), 80))
			}
		}
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A frame just under the limit is relayed byte for byte both ways and
// recorded, by the aegis binary as users run it (under the race detector
// in-process, 16 MiB each way takes most of a minute).
func TestWrapRelaysAFrameJustUnderTheLimitExactly(t *testing.T) {
	// Not parallel: its 16 MiB commits must not wait on the CPU of the
	// tests beside it past the store's acknowledgement timeout.
	c := newCLI(t)
	huge := append(append([]byte(`{"jsonrpc":"2.0","id":7,"method":"notifications/x","params":{"pad":"`), bytes.Repeat([]byte("A"), proxy.MaxFrame-100)...), []byte(`"}}`)...)
	var input []byte
	for _, f := range [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), huge, []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)} {
		input = append(append(input, f...), '\n')
	}
	argv := c.wrapArgv("cat")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("aegis wrap: %v\n%s", err, stderr.String())
	}
	if !bytes.Equal(out, input) {
		t.Fatalf("host got %d bytes back, sent %d; first difference at %d", len(out), len(input), firstDiff(out, input))
	}
	if k := eventKinds(t, c); k["frame.c2s"] != 3 || k["frame.s2c"] != 3 {
		t.Errorf("recorded %d frames from the host and %d from the server, want 3 each", k["frame.c2s"], k["frame.s2c"])
	}
	if vout, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Errorf("verify: exit %d\n%s", code, vout)
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A frame too large to record ends the session; it is never relayed.
func TestWrapOversizedFrameEndsSessionUnrelayed(t *testing.T) {
	h := newHarness(t)
	big := bytes.Repeat([]byte("B"), proxy.MaxFrame+10)
	input := append([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"), append(big, '\n')...)
	run := h.run([]string{"cat"}, bytes.NewReader(input), time.Second, nil)
	if !errors.Is(run.err, relay.ErrFrameTooLarge) {
		t.Fatalf("Wrap = %v, want ErrFrameTooLarge", run.err)
	}
	if bytes.Contains(run.out, []byte("BBBB")) {
		t.Fatal("the oversized frame reached the server and came back")
	}
}

// Attack: a server runs a call, then answers with more than MaxFrame
// bytes, so aegis stops it. The record must say that aegis stopped it and
// why, with the frame's size as far as it was read: the calls it left
// unanswered must not say "child exited before responding", and
// server_exited_first must not say it exited on its own.
func TestOversizedAnswerIsRecordedAsStoppedNotExited(t *testing.T) {
	h := newHarness(t)
	pr, pw := io.Pipe() // the host stays connected
	defer pw.Close()
	go pw.Write([]byte(joinLines(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"huge"}}`,
	)))
	run := h.run([]string{bin(t, "rawserver")}, pr, time.Second, nil)
	var stop *relay.StoppedError
	if !errors.As(run.err, &stop) || !errors.Is(run.err, relay.ErrFrameTooLarge) {
		t.Fatalf("Wrap = %v, want a StoppedError for a frame too large", run.err)
	}
	if run.res.ServerExitedFirst {
		t.Error("WrapResult.ServerExitedFirst is set for a server that aegis stopped")
	}
	if run.res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d (killed by aegis)", run.res.ExitCode, 128+int(syscall.SIGKILL))
	}
	if bytes.Contains(run.out, []byte("xxxx")) {
		t.Error("the oversized answer reached the host")
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 2 {
		t.Fatalf("%d outcomes, want 2", len(outcomes))
	}
	for _, o := range outcomes {
		if e := obj(o, "execution"); e["status"] != "host_denied" || e["reason"] != schemas.ReasonChildFrameTooLarge {
			t.Errorf("outcome of %s: execution %v, want host_denied %q", str(o, "call_id"), e, schemas.ReasonChildFrameTooLarge)
		}
	}
	exit := h.childExited()
	t.Logf("child.exited: %v", exit)
	if exit["server_exited_first"] != false || exit["ended_by"] != "SIGKILL" {
		t.Errorf("child.exited %v, want server_exited_first false, ended_by SIGKILL", exit)
	}
	reason, _ := exit["reason"].(string)
	if !strings.Contains(reason, "the server sent a frame of at least ") || !strings.Contains(reason, "larger than the 16 MiB frame limit") || !strings.Contains(reason, "aegis stopped the server") {
		t.Errorf("child.exited reason %q, want the frame's size and that aegis stopped the server", reason)
	}
	if n, _ := exit["frame_bytes"].(float64); n <= proxy.MaxFrame {
		t.Errorf("child.exited frame_bytes %v, want more than %d", exit["frame_bytes"], proxy.MaxFrame)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// childExited returns the payload of the run's child.exited event.
func (h *harness) childExited() map[string]any {
	h.t.Helper()
	var out []map[string]any
	for _, r := range h.events() {
		if r.Event.Kind == schemas.KindChildExited {
			var m map[string]any
			if err := json.Unmarshal(r.Event.Payload, &m); err != nil {
				h.t.Fatal(err)
			}
			out = append(out, m)
		}
	}
	if len(out) != 1 {
		h.t.Fatalf("%d child.exited events, want 1: %v", len(out), out)
	}
	return out[0]
}

// Every tools/call gets an intent before it is relayed and exactly one
// outcome; answers carry the digest of the server's exact frame, batches
// share digests.
func TestWrapRecordsCallsAnswersAndBatches(t *testing.T) {
	h := newHarness(t)
	call1 := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x"}}}`
	batch := `[{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"one"}},{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"two"}}]`
	failing := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fail"}}`
	ping := `{"jsonrpc":"2.0","id":4,"method":"ping"}`
	input := joinLines(call1, batch, failing, ping)
	run := h.run([]string{bin(t, "rawserver")}, strings.NewReader(input), 2*time.Second, nil)
	if run.err != nil || run.res.ExitCode != 0 {
		t.Fatalf("Wrap = %+v, %v", run.res, run.err)
	}
	answers := strings.Split(strings.TrimSuffix(string(run.out), "\n"), "\n")
	if len(answers) != 4 {
		t.Fatalf("host got %d answers: %q", len(answers), run.out)
	}
	ls := h.lines()
	intents, outcomes := ofType(ls, "intent"), ofType(ls, "outcome")
	if len(intents) != 4 || len(outcomes) != 4 || run.res.Calls != 4 {
		t.Fatalf("%d intents, %d outcomes, %d calls; want 4 each", len(intents), len(outcomes), run.res.Calls)
	}
	wantReq := []string{sha([]byte(call1)), sha([]byte(batch)), sha([]byte(batch)), sha([]byte(failing))}
	wantResp := []string{sha([]byte(answers[0])), sha([]byte(answers[1])), sha([]byte(answers[1])), sha([]byte(answers[2]))}
	wantTool := []string{"echo", "one", "two", "fail"}
	for i := range intents {
		if got := str(intents[i], "request_digest"); got != wantReq[i] {
			t.Errorf("intent %d request_digest %s, want SHA-256 of the exact request bytes %s", i, got, wantReq[i])
		}
		if got := str(intents[i], "tool_id"); got != wantTool[i] {
			t.Errorf("intent %d tool_id %q, want %q", i, got, wantTool[i])
		}
	}
	for i, o := range outcomes {
		if str(o, "call_id") != str(intents[i], "call_id") {
			t.Errorf("outcome %d for %s, intent %s", i, str(o, "call_id"), str(intents[i], "call_id"))
		}
		if got := str(o, "response_digest"); got != wantResp[i] {
			t.Errorf("outcome %d response_digest %s, want %s", i, got, wantResp[i])
		}
		if st := obj(o, "execution")["status"]; st != "success" {
			t.Errorf("outcome %d execution %v, want success (also for a JSON-RPC error)", i, st)
		}
		if st := obj(o, "policy")["status"]; st != "allowed" {
			t.Errorf("outcome %d policy %v", i, st)
		}
		if str(o, "grant_id") != "wrap-passthrough-"+str(o, "call_id") || str(o, "policy_set_hash") != schemas.WrapPassthroughPolicySetHash {
			t.Errorf("outcome %d grant/policy hash: %s %s", i, str(o, "grant_id"), str(o, "policy_set_hash"))
		}
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// Calls the relay cannot follow to an answer are still recorded before
// they are relayed: intent plus a denied, not-executed outcome.
func TestWrapRecordsMalformedCallsBeforeRelaying(t *testing.T) {
	h := newHarness(t)
	cases := []struct{ frame, tool, reason string }{
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"rm"}}`, "rm", "tools/call without an id"},
		{`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"rm"}}`, "rm", "tools/call with a null id"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}`, "<unknown>", schemas.ReasonMalformedCall},
		{`"method": "tools/call", "params": {"name": "rm"}}`, "<unknown>", "frame is not one JSON value but mentions tools/call"},
	}
	var input []string
	for _, c := range cases {
		input = append(input, c.frame)
	}
	run := h.run([]string{"cat"}, strings.NewReader(joinLines(input...)), time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if string(run.out) != joinLines(input...) {
		t.Fatalf("malformed calls were not relayed byte for byte: %q", run.out)
	}
	ls := h.lines()
	intents, outcomes := ofType(ls, "intent"), ofType(ls, "outcome")
	if len(intents) != len(cases) || len(outcomes) != len(cases) {
		t.Fatalf("%d intents and %d outcomes for %d malformed calls", len(intents), len(outcomes), len(cases))
	}
	for i, c := range cases {
		o := outcomes[i]
		if str(intents[i], "request_digest") != sha([]byte(c.frame)) || str(o, "tool_id") != c.tool {
			t.Errorf("case %d: intent digest/tool mismatch: %s %s", i, str(intents[i], "request_digest"), str(o, "tool_id"))
		}
		if p := obj(o, "policy"); p["status"] != "denied" || p["reason"] != c.reason {
			t.Errorf("case %d: policy %v, want denied %q", i, p, c.reason)
		}
		if e := obj(o, "execution"); e["status"] != "host_denied" {
			t.Errorf("case %d: execution %v", i, e)
		}
	}
	// Each malformed call's outcome comes before the next frame's intent:
	// intent and outcome are written back to back, before the relay.
	for i := 0; i+1 < len(ls); i++ {
		if ls[i].Type() == "intent" && ls[i+1].Type() != "outcome" {
			t.Errorf("line %d: intent not followed by its outcome", i)
		}
	}
}

// A tools/call whose deciding members parsers may read differently never
// reaches the server, even without a policy: aegis cannot tell which call
// the server would run, so it could not record what ran. The host gets the
// -32042 refusal, and the record an intent and a denied, not-executed
// outcome. Each frame is named after what it would smuggle past aegis's
// own reading (encoding/json, which matches member names regardless of
// case and lets the last duplicate win).
func TestWrapRefusesAmbiguousCalls(t *testing.T) {
	h := newHarness(t)
	log := filepath.Join(t.TempDir(), "server.log")
	attacks := []struct{ name, frame, answer, reason string }{
		{"a method in another case hides the call",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{"name":"echo"}}`, "1",
			`member "Method", which differs from "method" only in case`},
		{"a duplicate method hides the call",
			`{"jsonrpc":"2.0","id":2,"method":"ping","method":"tools/call","params":{"name":"rm"}}`, "2",
			`duplicate member "method"`},
		{"params in another case renames the tool",
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm"},"Params":{"name":"echo"}}`, "3",
			`member "Params", which differs from "params" only in case`},
		{"params spelled with a long s renames the tool",
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"rm"},"param\u017f":{"name":"echo"}}`, "4",
			`member "paramſ", which differs from "params" only in case`},
		{"an id in another case misroutes the answer",
			`{"jsonrpc":"2.0","id":5,"ID":6,"method":"tools/call","params":{"name":"echo"}}`, "null",
			`member "ID", which differs from "id" only in case`},
		{"a duplicate params.name hides the tool",
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","name":"rm"}}`, "7",
			`params has duplicate member "name"`},
		{"params.Arguments in another case swaps the arguments",
			`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"p":1},"ARGUMENTS":{"p":2}}}`, "8",
			`params has member "ARGUMENTS", which differs from "arguments" only in case`},
	}
	batch := `[{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo"}},{"jsonrpc":"2.0","id":10,"METHOD":"tools/call","params":{"name":"rm"}}]`
	relayed := []string{
		// Names inside arguments, and members that do not decide the call,
		// are the server's business.
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"Name":"x","name":"y"}}}`,
		`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo"},"JSONRPC":"2.0","Jsonrpc":"2.0"}`,
	}
	var frames []string
	for _, a := range attacks {
		frames = append(frames, a.frame)
	}
	frames = append(append(frames, batch), relayed...)
	run := h.run([]string{bin(t, "rawserver"), "-log", log}, strings.NewReader(joinLines(frames...)), 2*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if got, _ := os.ReadFile(log); string(got) != joinLines(relayed...) {
		t.Fatalf("the server received:\n%s\nwant only:\n%s", got, joinLines(relayed...))
	}
	out := string(run.out)
	for _, a := range attacks {
		if !strings.Contains(out, refusal(a.answer, "HOST_DENIED", "ambiguous tools/call: "+a.reason, hintAmbiguous)+"\n") {
			t.Errorf("%s: host did not get the refusal for id %s\nhost got:\n%s", a.name, a.answer, out)
		}
	}
	if r := "[" + refusal("9", "HOST_DENIED", reasonSibling, hintSibling) + "," +
		refusal("10", "HOST_DENIED", `ambiguous tools/call: member "METHOD", which differs from "method" only in case`, hintAmbiguous) + "]\n"; !strings.Contains(out, r) {
		t.Errorf("an ambiguous call in a batch: host did not get %s\nhost got:\n%s", r, out)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != len(attacks)+2+len(relayed) {
		t.Fatalf("%d outcomes, want %d", len(outcomes), len(attacks)+2+len(relayed))
	}
	for i, a := range attacks {
		o := outcomes[i]
		if p := obj(o, "policy"); p["status"] != "denied" || p["reason"] != "ambiguous tools/call: "+a.reason || str(o, "tool_id") != "<unknown>" {
			t.Errorf("%s: outcome %s policy %v, want <unknown> denied %q", a.name, str(o, "tool_id"), p, a.reason)
		}
		if e := obj(o, "execution"); e["status"] != "host_denied" || e["reason"] != "not executed" {
			t.Errorf("%s: execution %v", a.name, e)
		}
	}
	if e := obj(outcomes[len(attacks)], "execution"); e["reason"] != schemas.ReasonSiblingRefused {
		t.Errorf("the well-formed sibling of an ambiguous call: execution %v", e)
	}
	for _, o := range outcomes[len(attacks)+2:] {
		if e := obj(o, "execution"); e["status"] != "success" {
			t.Errorf("relayed call %s: execution %v", str(o, "call_id"), e)
		}
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A tools/call whose method or tool name readers decode differently (a
// lone surrogate escape: kept by JSON.parse, replaced by encoding/json and
// Python; invalid UTF-8: replaced by some, refused by others, stripped by
// a lenient one) is refused like a call with an ambiguous member: no rule
// can name the tool a server would run. Arguments that readers take
// differently are left to the rules' conditions, which refuse them (see
// policy's readArgs); without a policy they are relayed and recorded as
// sent.
func TestWrapRefusesCallsWhoseNameReadersDecodeDifferently(t *testing.T) {
	h := newHarness(t)
	log := filepath.Join(t.TempDir(), "server.log")
	attacks := []struct{ name, frame, answer, reason string }{
		{"a tool name with a lone surrogate escape",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo\ud800"}}`, "1",
			"params.name: a lone UTF-16 surrogate escape, which readers keep, replace or refuse"},
		{"a tool name with invalid UTF-8",
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"ec\xffho\"}}", "2",
			"params.name: invalid UTF-8, which readers replace or refuse"},
		{"a method with invalid UTF-8 that a lenient reader strips",
			"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\xff\",\"params\":{\"name\":\"echo\"}}", "3",
			"method: invalid UTF-8, which readers replace or refuse"},
	}
	relayed := []string{
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"n":1e400,"s":"\ud800"}}}`,
	}
	var frames []string
	for _, a := range attacks {
		frames = append(frames, a.frame)
	}
	frames = append(frames, relayed...)
	run := h.run([]string{bin(t, "rawserver"), "-log", log}, strings.NewReader(joinLines(frames...)), 2*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if got, _ := os.ReadFile(log); string(got) != joinLines(relayed...) {
		t.Fatalf("the server received:\n%s\nwant only:\n%s", got, joinLines(relayed...))
	}
	out := string(run.out)
	for _, a := range attacks {
		if !strings.Contains(out, refusal(a.answer, "HOST_DENIED", "ambiguous tools/call: "+a.reason, "send the method and the tool's name as UTF-8 strings without lone surrogate escapes")+"\n") {
			t.Errorf("%s: host did not get the refusal for id %s\nhost got:\n%s", a.name, a.answer, out)
		}
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != len(attacks)+len(relayed) {
		t.Fatalf("%d outcomes, want %d", len(outcomes), len(attacks)+len(relayed))
	}
	for i, a := range attacks {
		if p := obj(outcomes[i], "policy"); p["status"] != "denied" || p["reason"] != "ambiguous tools/call: "+a.reason {
			t.Errorf("%s: outcome policy %v", a.name, p)
		}
	}
	if e := obj(outcomes[len(attacks)], "execution"); e["status"] != "success" {
		t.Errorf("the call with ambiguous arguments, without a policy: execution %v", e)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A server's answer that parsers read differently must not reach the host
// before the outcome of the call it may answer: JSON.parse reads the
// answers below as answers to calls 1 and 3, where encoding/json reads an
// answer to id 2 and a request. Both calls are recorded as answered, with
// the answer's digest, before the answer is relayed.
func TestWrapRecordsAmbiguousAnswersBeforeRelaying(t *testing.T) {
	h := newHarness(t)
	answers := []string{
		`{"jsonrpc":"2.0","id":1,"ID":2,"result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"content":[]},"Method":"x"}`,
	}
	script := `while IFS= read -r line; do
  case "$line" in
    *'"id":1,'*) printf '%s
' '` + answers[0] + `' ;;
    *'"id":3,'*) printf '%s
' '` + answers[1] + `' ;;
  esac
done`
	input := joinLines(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}`,
	)
	run := h.run([]string{"sh", "-c", script}, strings.NewReader(input), 2*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if string(run.out) != joinLines(answers...) {
		t.Fatalf("host got %q, want the answers unchanged", run.out)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 2 {
		t.Fatalf("%d outcomes, want 2", len(outcomes))
	}
	for i, o := range outcomes {
		if e := obj(o, "execution"); e["status"] != "success" || str(o, "response_digest") != sha([]byte(answers[i])) {
			t.Errorf("call %d: execution %v, response_digest %s; want answered by %s", i+1, e, str(o, "response_digest"), answers[i])
		}
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A server that exits as soon as the host closes stdin did not exit
// first: the session must not say so (nor warn the host that it did).
func TestWrapServerExitOnHostEOFIsNotFirst(t *testing.T) {
	for i := range 20 {
		h := newHarness(t)
		run := h.run([]string{"cat"}, strings.NewReader(joinLines(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)), time.Second, nil)
		if run.err != nil {
			t.Fatal(run.err)
		}
		if run.res.ServerExitedFirst || run.res.ExitCode != 0 {
			t.Fatalf("run %d: result %+v, want exit 0 after the host closed stdin", i, run.res)
		}
	}
}

// A session that sits idle longer than the embedded server's write
// deadline (10 s) still records its next call: the store's connection must
// not have been dropped meanwhile (it was, when the server sent it an
// early PING that nobody read).
func TestWrapRecordsACallAfterSittingIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("idles for 13 s")
	}
	// aegis wrap itself, in a process of its own: it mostly sleeps, so it
	// runs beside the other parallel tests.
	parallel(t)
	c := newCLI(t)
	cmd := exec.Command(c.wrapArgv(bin(t, "rawserver"))[0], c.wrapArgv(bin(t, "rawserver"))[1:]...)
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	var stderr syncBuffer
	cmd.Stderr = &stderr
	go func() {
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)))
		time.Sleep(13 * time.Second)
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)))
		pw.Close()
	}()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("aegis wrap: %v\n%s", err, stderr.String())
	}
	if answers := strings.Count(string(out), "\n"); answers != 2 {
		t.Fatalf("host got %d answers, want 2: %q", answers, out)
	}
	record, err := os.ReadFile(c.audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(record), `"line_type":"outcome"`); n != 2 {
		t.Fatalf("%d outcomes, want 2:\n%s", n, record)
	}
	if _, errOut, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: exit %d: %s", code, errOut)
	}
}

// A server that dies before answering leaves its pending call with the
// documented outcome, and its exit status becomes aegis's.
func TestWrapServerDiesBeforeAnswering(t *testing.T) {
	h := newHarness(t)
	pr, pw := io.Pipe() // the host stays connected
	defer pw.Close()
	go pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"die"}}`)))
	run := h.run([]string{bin(t, "rawserver")}, pr, time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if run.res.ExitCode != 3 || !run.res.ServerExitedFirst {
		t.Fatalf("result %+v, want exit 3 with the server exiting first", run.res)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 1 || obj(outcomes[0], "execution")["reason"] != schemas.ReasonChildExited {
		t.Fatalf("outcomes %v", outcomes)
	}
	// It ended on its own: nothing says aegis ended it.
	if exit := h.childExited(); exit["server_exited_first"] != true || exit["ended_by"] != nil || exit["reason"] != nil {
		t.Errorf("child.exited %v, want server_exited_first true and no ended_by or reason", exit)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A server that neither answers nor exits after the host left is
// terminated after the grace, and its pending call says why.
func TestWrapHostLeavesServerSilent(t *testing.T) {
	h := newHarness(t)
	start := time.Now()
	run := h.run([]string{bin(t, "rawserver"), "-linger"}, strings.NewReader(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang"}}`)), 300*time.Millisecond, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != 1 || obj(outcomes[0], "execution")["reason"] != schemas.ReasonClientClosed {
		t.Fatalf("outcomes %v", outcomes)
	}
	if run.res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d (killed after ignoring SIGTERM)", run.res.ExitCode, 128+int(syscall.SIGKILL))
	}
	t.Logf("ended %v after start", time.Since(start))
}

func TestWrapServerNotFound(t *testing.T) {
	h := newHarness(t)
	run := h.run([]string{"/nonexistent/server"}, strings.NewReader(""), time.Second, nil)
	var se *relay.StartError
	if !errors.As(run.err, &se) || run.res.ExitCode != 127 {
		t.Fatalf("Wrap = %+v, %v; want StartError and 127", run.res, run.err)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("the attempt's record: %s", verifier.Render(r))
	}
}

// SIGTERM to aegis reaches the server; the session still closes signed.
func TestWrapForwardsSignals(t *testing.T) {
	h := newHarness(t)
	sigs := make(chan os.Signal, 1)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang"}}`)))
		time.Sleep(200 * time.Millisecond)
		sigs <- syscall.SIGTERM
	}()
	run := h.run([]string{"sleep", "30"}, pr, time.Second, sigs)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if run.res.ExitCode != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d", run.res.ExitCode, 128+int(syscall.SIGTERM))
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}

// A second run on the same record starts a new session linked to the
// first, and the export from the stream is the same file byte for byte.
func TestWrapRerunLinksSessionsAndExportMatches(t *testing.T) {
	h := newHarness(t)
	in := joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)
	r1 := h.run([]string{bin(t, "rawserver")}, strings.NewReader(in), time.Second, nil)
	r2 := h.run([]string{bin(t, "rawserver")}, strings.NewReader(in), time.Second, nil)
	if r1.err != nil || r2.err != nil {
		t.Fatal(r1.err, r2.err)
	}
	ls := h.lines()
	opens := ofType(ls, "open")
	if len(opens) != 2 {
		t.Fatalf("%d sessions in the record", len(opens))
	}
	if _, ok := opens[0].Get("prev_session_tail"); ok {
		t.Error("first session of an empty record carries prev_session_tail")
	}
	closeLine, _ := os.ReadFile(h.audit)
	firstSession := bytes.SplitAfter(closeLine, []byte("\n"))[len(ls)/2-1]
	if got := str(opens[1], "prev_session_tail"); got != sha(bytes.TrimSuffix(firstSession, []byte("\n"))) {
		t.Errorf("prev_session_tail %s is not the hash of the first session's last line", got)
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
	exported := exportAll(t, h)
	file, _ := os.ReadFile(h.audit)
	if !bytes.Equal(exported, file) {
		t.Fatalf("export differs from the record file")
	}
}

// Many calls in flight on one connection: every call gets its intent and
// outcome, the chain stays in append order (seq and prev_hash), and the
// record verifies.
func TestWrapConcurrentCallsKeepChainOrder(t *testing.T) {
	h := newHarness(t)
	var in strings.Builder
	const n = 300
	for i := 0; i < n; i++ {
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"i":%d}}}`+"\n", i, i)
	}
	run := h.run([]string{bin(t, "rawserver")}, strings.NewReader(in.String()), 5*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	ls := h.lines()
	if got := len(ofType(ls, "outcome")); got != n {
		t.Fatalf("%d outcomes for %d calls", got, n)
	}
	for i, l := range ls {
		if seq, _ := l.Integer("seq"); seq != uint64(i) {
			t.Fatalf("line %d has seq %d", i, seq)
		}
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
	ev := h.events()
	commits := map[uint64]bool{}
	for _, r := range ev {
		commits[r.Pos.Seq] = true
	}
	t.Logf("%d events in %d commits", len(ev), len(commits))
}
