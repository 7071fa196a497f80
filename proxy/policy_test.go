package proxy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

const testPolicy = `version: 1
default: allow
rules:
  - id: no-rm
    action: deny
    tool: rm
    reason: rm is not allowed here
  - id: gate-deploy
    action: pending_approval
    tool: deploy
  - id: rate-search
    action: rate_limit
    tool: search
    rate: { max: 1, per_seconds: 3600 }
`

func loadPolicy(t *testing.T, text string) *policy.Set {
	t.Helper()
	set, err := policy.Parse("policy.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// The words of the refusal frames, as a host reads them.
const (
	hintDenied     = "do not retry; the policy must change for this call to run"
	hintRate       = "retry once the rate window has passed"
	reasonSibling  = "another call in this batch was refused, and a batch is refused whole"
	hintSibling    = "send this call again without the refused ones"
	hintUnreadable = "send it as one JSON-RPC object on one line"
	hintAmbiguous  = "send each member once, with its name in lower case"
)

// refusal is the -32042 frame that refuses the call with id (raw JSON):
// data.aegis holds its code, hint, layer and reason, keys sorted.
func refusal(id, code, reason, hint string) string {
	return `{"error":{"code":-32042,"data":{"aegis":{"code":` + jsonString(code) + `,"hint":` + jsonString(hint) + `,"layer":"wrap","reason":` +
		jsonString(reason) + `}},"message":"aegis wrap refused this tools/call"},"id":` + id + `,"jsonrpc":"2.0"}`
}

// pendingRefusal is the refusal of a call pending approval.
func pendingRefusal(id, approvalID, reason string) string {
	hint := "run: aegis approve " + approvalID + " (or: aegis deny " + approvalID + "), then send the same call again: the approval lets it through once"
	return `{"error":{"code":-32042,"data":{"aegis":{"approval_id":` + jsonString(approvalID) + `,"code":"PENDING_APPROVAL","hint":` + jsonString(hint) +
		`,"layer":"wrap","reason":` + jsonString(reason) + `}},"message":"aegis wrap refused this tools/call"},"id":` + id + `,"jsonrpc":"2.0"}`
}

func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// Refused calls never reach the server, the host gets exactly the refusal
// frame, and the record says why; everything else still flows.
func TestPolicyRefusedCallsNeverReachServer(t *testing.T) {
	h := newHarness(t)
	h.policy = loadPolicy(t, testPolicy)
	log := filepath.Join(t.TempDir(), "server.log")
	frames := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,                                                                                      // not a call: relayed
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm","arguments":{"p":"/"}}}`,                                                     // denied
		`{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"deploy","arguments":{"v":1}}}`,                                                 // pending
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search","arguments":{}}}`,                                                        // first in budget
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search","arguments":{}}}`,                                                        // over budget
		`[{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo"}},{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"rm"}}]`, // refused whole
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"rm"}}`,                                                                                  // notification: recorded, not relayed, not answered
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo"}}`,                                                                         // allowed
		`{"jsonrpc":"2.0","id":9,"method":"frobnicate"}`,                                                                                                  // unknown method: the server's to answer
	}
	run := h.run([]string{bin(t, "rawserver"), "-log", log}, strings.NewReader(joinLines(frames...)), 2*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	got, _ := os.ReadFile(log)
	want := joinLines(frames[0], frames[3], frames[7], frames[8])
	if string(got) != want {
		t.Fatalf("the server received:\n%s\nwant only:\n%s", got, want)
	}
	out := string(run.out)
	// The approval id ends in the session's number in its state directory
	// (1: the first session of a fresh one) and the session's first approval.
	for _, r := range []string{refusal("2", "POLICY_DENIED", "rm is not allowed here", hintDenied),
		pendingRefusal(`"d"`, "apr-gate-deploy-deploy-1.1", "a human must approve this call (rule gate-deploy)"),
		refusal("5", "RATE_LIMITED", "rate limit exceeded for `rate-search` (1 per 3600s)", hintRate),
		"[" + refusal("6", "HOST_DENIED", reasonSibling, hintSibling) + "," + refusal("7", "POLICY_DENIED", "rm is not allowed here", hintDenied) + "]"} {
		if !strings.Contains(out, r+"\n") {
			t.Errorf("host did not get %s\nhost got:\n%s", r, out)
		}
	}
	if strings.Contains(out, "-32601") {
		t.Error("aegis synthesized -32601")
	}
	ls := h.lines()
	outcomes := ofType(ls, "outcome")
	byCall := map[string]map[string]any{}
	for _, o := range outcomes {
		byCall[str(o, "call_id")] = o.Members()
	}
	check := func(call, tool, status, reason, rule string) {
		t.Helper()
		o := byCall[call]
		if o == nil || o["tool_id"] != tool {
			t.Fatalf("%s: outcome %v, want tool %s", call, o, tool)
		}
		p := o["policy"].(map[string]any)
		if p["status"] != status || (reason != "" && p["reason"] != reason) {
			t.Errorf("%s %s policy %v, want %s %q", call, tool, p, status, reason)
		}
		if o["policy_set_hash"] != h.policy.Hash() {
			t.Errorf("%s policy_set_hash %v, want the real hash", call, o["policy_set_hash"])
		}
		if ax := o["decision_axes"].(map[string]any); ax["matched_rule"] != rule && !(rule == "" && ax["matched_rule"] == nil) {
			t.Errorf("%s matched_rule %v, want %q", call, ax["matched_rule"], rule)
		}
		if status != "allowed" {
			e := o["execution"].(map[string]any)
			c := o["capability"].(map[string]any)
			if e["status"] != "host_denied" || c["reason"] != schemas.ReasonPolicyBlocked {
				t.Errorf("%s execution %v capability %v", call, e, c)
			}
		}
	}
	check("call-1", "rm", "denied", "rm is not allowed here", "no-rm")
	check("call-2", "deploy", "pending_approval", "", "gate-deploy")
	check("call-3", "search", "allowed", "", "rate-search")
	check("call-4", "search", "rate_limited", "rate limit exceeded for `rate-search` (1 per 3600s)", "rate-search")
	check("call-5", "echo", "allowed", "", "")
	if e := byCall["call-5"]["execution"].(map[string]any); e["reason"] != schemas.ReasonSiblingRefused {
		t.Errorf("allowed sibling in a refused batch: %v", e)
	}
	check("call-6", "rm", "denied", "", "no-rm")
	check("call-7", "rm", "denied", "", "no-rm") // the notification
	check("call-8", "echo", "allowed", "", "")
	if e := byCall["call-8"]["execution"].(map[string]any); e["status"] != "success" {
		t.Errorf("allowed call: %v", e)
	}
	if p := byCall["call-2"]["policy"].(map[string]any); p["approval_id"] != "apr-gate-deploy-deploy-1.1" {
		t.Errorf("approval id %v", p["approval_id"])
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
	if n := len(h.frames(schemas.KindFrameRefusal)); n != 4 {
		t.Errorf("%d refusal frames recorded, want 4 (the notification gets none)", n)
	}
}

// Under a policy, a frame that names tools/call but that aegis cannot read
// as a call does not reach the server undecided: a lenient server might
// run it, and no rule can be asked about it. Each frame is named after
// what it would hide from the policy. A readable call without a string
// params.name still goes through (no server runs it), and a tool named
// "<unknown>" is decided like any other.
func TestPolicyRefusesCallsItCannotRead(t *testing.T) {
	h := newHarness(t)
	h.policy = loadPolicy(t, testPolicy+`  - id: no-unknown
    action: deny
    tool: "<unknown>"
`)
	log := filepath.Join(t.TempDir(), "server.log")
	unnamed := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`
	allowed := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}`
	hidden := []struct{ name, frame string }{
		{"a byte order mark hides rm", "\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"}}`},
		{"single quotes hide rm", `{'jsonrpc':'2.0','id':3,'method':'tools/call','params':{'name':'rm'}}`},
		{"a method in an array hides rm", `{"jsonrpc":"2.0","id":4,"method":["tools/call"],"params":{"name":"rm"}}`},
	}
	batch := `[{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"}},"tools/call"]`
	named := `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"<unknown>"}}`
	frames := []string{unnamed}
	for _, c := range hidden {
		frames = append(frames, c.frame)
	}
	frames = append(frames, batch, named, allowed)
	run := h.run([]string{bin(t, "rawserver"), "-log", log}, strings.NewReader(joinLines(frames...)), 2*time.Second, nil)
	if run.err != nil {
		t.Fatal(run.err)
	}
	if got, _ := os.ReadFile(log); string(got) != joinLines(unnamed, allowed) {
		t.Fatalf("the server received:\n%s\nwant only:\n%s", got, joinLines(unnamed, allowed))
	}
	out := string(run.out)
	nullID := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if d, ok := aegisData(t, line)["null"]; ok && len(aegisData(t, line)) == 1 && d["code"] == "HOST_DENIED" && d["hint"] == hintUnreadable && d["reason"] != "" {
			nullID++
		}
	}
	if nullID != len(hidden) {
		t.Errorf("%d refusals with a null id, want one for each unreadable frame (%d)\nhost got:\n%s", nullID, len(hidden), out)
	}
	for _, r := range []string{"[" + refusal("5", "HOST_DENIED", reasonSibling, hintSibling) + "," +
		refusal("null", "HOST_DENIED", "batch element is not an object but mentions tools/call", hintUnreadable) + "]",
		refusal("6", "POLICY_DENIED", "denied by rule `no-unknown`", hintDenied)} {
		if !strings.Contains(out, r+"\n") {
			t.Errorf("host did not get %s\nhost got:\n%s", r, out)
		}
	}
	byCall := map[string]schemas.Line{}
	for _, o := range ofType(h.lines(), "outcome") {
		byCall[str(o, "call_id")] = o
	}
	// Relayed (the server log above), and recorded as the record
	// format's wrap records it: denied, not executed.
	if p := obj(byCall["call-1"], "policy"); p["reason"] != schemas.ReasonMalformedCall {
		t.Errorf("the unnamed call: policy %v", p)
	}
	for i, c := range hidden {
		o := byCall["call-"+strconv.Itoa(i+2)]
		if p, e := obj(o, "policy"), obj(o, "execution"); p["status"] != "denied" || e["reason"] != "not executed" || str(o, "tool_id") != "<unknown>" {
			t.Errorf("%s: outcome %s policy %v execution %v", c.name, str(o, "tool_id"), p, e)
		}
	}
	if p := obj(byCall["call-6"], "policy"); p["reason"] != "batch element is not an object but mentions tools/call" {
		t.Errorf("the unreadable batch element: policy %v", p)
	}
	if o := byCall["call-7"]; str(o, "tool_id") != "<unknown>" || obj(o, "policy")["status"] != "denied" || obj(o, "decision_axes")["matched_rule"] != "no-unknown" {
		t.Errorf("a tool named <unknown>: outcome %v, want it decided by no-unknown", o.Members())
	}
	if r := h.verify(); r.Verdict != verifier.Verified {
		t.Fatalf("verify: %s", verifier.Render(r))
	}
}
