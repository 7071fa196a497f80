package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// rpcError returns the JSON-RPC error inside err, as a host's go-sdk client
// gets it, and its data.aegis.
func rpcError(t *testing.T, what string, err error) (*jsonrpc.Error, map[string]string) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("%s: %v (%T) is not a JSON-RPC error", what, err, err)
	}
	if we.Code == 0 {
		t.Errorf("%s: code 0: %q", what, we.Message)
	}
	var data struct {
		Aegis map[string]string `json:"aegis"`
	}
	if len(we.Data) > 0 {
		if err := json.Unmarshal(we.Data, &data); err != nil {
			t.Errorf("%s: data %s: %v", what, we.Data, err)
		}
	}
	return we, data.Aegis
}

// wantAegis checks the members of data.aegis that want names.
func wantAegis(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: data.aegis.%s = %q, want %q (data.aegis %v)", what, k, got[k], v, got)
		}
	}
}

// TestWrapRefusalsThroughTheSDK: each kind of refusal of aegis wrap reaches
// a go-sdk client as the JSON-RPC error -32042 with data.aegis.layer
// "wrap" and its code.
func TestWrapRefusalsThroughTheSDK(t *testing.T) {
	c := newCLI(t)
	pol := filepath.Join(c.dir, "policy.yaml")
	os.WriteFile(pol, []byte(`version: 1
rules:
  - {id: no-echo, action: deny, tool: echo, reason: echo is off}
  - {id: gate-add, action: pending_approval, tool: add}
  - {id: one-slow, action: rate_limit, tool: slow, rate: {max: 1, per_seconds: 3600}}
`), 0o600)
	cmd := exec.Command(bin(t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--", bin(t, "aegis-example-server"))
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aegis wrap: %v", err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) error {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		return err
	}
	if err := call("slow", map[string]any{"ms": 1}); err != nil {
		t.Fatalf("first slow: %v", err)
	}
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want map[string]string
	}{
		{"PolicyDenied", "echo", map[string]any{"message": "hi"}, map[string]string{"layer": "wrap", "code": "POLICY_DENIED", "reason": "echo is off"}},
		{"PendingApproval", "add", map[string]any{"a": 1, "b": 2}, map[string]string{"layer": "wrap", "code": "PENDING_APPROVAL", "approval_id": "apr-gate-add-add-1.1"}}, // session 1 of the state directory
		{"RateLimited", "slow", map[string]any{"ms": 1}, map[string]string{"layer": "wrap", "code": "RATE_LIMITED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			we, aegis := rpcError(t, tc.tool, call(tc.tool, tc.args))
			if we.Code != -32042 || we.Message != "aegis wrap refused this tools/call" {
				t.Errorf("error %d %q", we.Code, we.Message)
			}
			wantAegis(t, tc.tool, aegis, tc.want)
		})
	}
}

// TestGatewayPromptsAndErrors drives the gateway with a go-sdk client:
// prompts and resource templates follow the profile (absent from the
// lists, refused when asked for, shown again after a switch, with the
// host told), every prompts/get and resources/read has a call.verdict, and
// every refusal carries a real JSON-RPC code and the seed's payload.
func TestGatewayPromptsAndErrors(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	c := newCLI(t)
	every := mcptest.EverythingServer(t)
	args, _ := json.Marshal(every[1:])
	config := filepath.Join(c.dir, "aegis.yaml")
	os.WriteFile(config, []byte(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
  everything:
    command: `+every[0]+`
    args: `+string(args)+`
profiles:
  observer:
    allow: [example.echo, example.add]
    resources: [example://readme, example://missing]
    allowed_transitions: [writer]
  writer:
    extends: observer
    prompts: ["example.*", "everything.*"]
    resources: ["demo://resource/**"]
    allowed_transitions: [observer]
activation:
  default_profile: observer
error_disclosure: verbose
rules:
  - {id: no-add, action: deny, tool: example__add, reason: adding is off}
`), 0o600)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	ctx := t.Context()
	promptsChanged := make(chan struct{}, 16)
	resourcesChanged := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { promptsChanged <- struct{}{} },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { resourcesChanged <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aegis gateway: %v", err)
	}
	prompts := func() []string {
		t.Helper()
		res, err := cs.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, p := range res.Prompts {
			n = append(n, p.Name)
		}
		slices.Sort(n)
		return n
	}
	templates := func() []string {
		t.Helper()
		res, err := cs.ListResourceTemplates(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, rt := range res.ResourceTemplates {
			n = append(n, rt.URITemplate)
		}
		return n
	}
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Errorf("the host was not told that the %s list changed", what)
		}
	}
	toolText := func(name string, args map[string]any) (string, bool) {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var text string
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return text, r.IsError
	}

	// observer: no prompt, no template.
	if got := prompts(); len(got) != 0 {
		t.Errorf("observer sees prompts %v", got)
	}
	if got := templates(); len(got) != 0 {
		t.Errorf("observer sees resource templates %v", got)
	}

	// Protocol-level refusals: -32042, data.aegis.layer "gateway".
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "example__greet", Arguments: map[string]string{"name": "x"}})
	we, aegis := rpcError(t, "hidden prompt", err)
	if we.Code != -32042 || we.Message != "aegis gateway refused this prompts/get (AEGIS_PROMPT_DENIED): prompt not permitted in active profile" {
		t.Errorf("hidden prompt: %d %q", we.Code, we.Message)
	}
	wantAegis(t, "hidden prompt", aegis, map[string]string{"layer": "gateway", "code": "AEGIS_PROMPT_DENIED", "prompt": "example.greet",
		"active_profile": "observer", "hint": "prompt requires a profile that allows it", "required_profile": "writer"})

	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///etc/passwd"})
	we, aegis = rpcError(t, "read outside the profile", err)
	if we.Code != -32042 || we.Message != "aegis gateway refused this resources/read (AEGIS_RESOURCE_DENIED): resource not permitted in active profile" {
		t.Errorf("read outside the profile: %d %q", we.Code, we.Message)
	}
	wantAegis(t, "read outside the profile", aegis, map[string]string{"layer": "gateway", "code": "AEGIS_RESOURCE_DENIED", "uri": "file:///etc/passwd",
		"active_profile": "observer", "hint": "resource not permitted in active profile"})

	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/1"})
	if _, aegis := rpcError(t, "templated read outside the profile", err); aegis["code"] != "AEGIS_RESOURCE_DENIED" {
		t.Errorf("templated read outside the profile: %v", aegis)
	}

	// Not refusals: what a server itself would answer.
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "example://missing"})
	if we, _ := rpcError(t, "unknown resource", err); we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, "not found") {
		t.Errorf("unknown resource: %d %q %s", we.Code, we.Message, we.Data)
	}
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "nobody__nothing"})
	if we, _ := rpcError(t, "unknown prompt", err); we.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("unknown prompt: %d %q", we.Code, we.Message)
	}

	// Tool refusals are results, as upstream: isError, the payload as text.
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       map[string]string
	}{
		{"HiddenTool", "example__slow", map[string]any{"ms": 1}, map[string]string{"code": "AEGIS_CAP_DENIED", "capability": "example.slow", "active_profile": "observer"}},
		{"RuleDenied", "example__add", map[string]any{"a": 1, "b": 2}, map[string]string{"code": "POLICY_DENIED", "capability": "example.add", "reason": "adding is off"}},
	} {
		text, isErr := toolText(tc.tool, tc.args)
		var payload map[string]string
		if !isErr || json.Unmarshal([]byte(text), &payload) != nil {
			t.Errorf("%s: %q %v", tc.name, text, isErr)
			continue
		}
		wantAegis(t, tc.name, payload, tc.want)
		// Only a pending approval names one; an empty id would send a
		// user to approve nothing.
		if id, has := payload["approval_id"]; has {
			t.Errorf("%s: approval_id %q in a refusal that asks for no approval", tc.name, id)
		}
	}
	if text, isErr := toolText("nobody__nothing", nil); !isErr || !strings.Contains(text, "unknown tool") {
		t.Errorf("unknown tool: %q %v", text, isErr)
	}

	// writer: the prompts and templates appear, and the host is told.
	if text, _ := toolText("aegis__set_profile", map[string]any{"name": "writer"}); text != "code=OK active=writer approval=" {
		t.Fatalf("switch to writer: %q", text)
	}
	wait(promptsChanged, "prompt")
	wait(resourcesChanged, "resource")
	got := prompts()
	if !slices.Contains(got, "example__greet") || !slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "everything__") }) {
		t.Errorf("writer's prompts %v", got)
	}
	if tl := templates(); !slices.ContainsFunc(tl, func(u string) bool { return strings.HasPrefix(u, "demo://resource/") }) {
		t.Errorf("writer's resource templates %v", tl)
	}
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "example__greet", Arguments: map[string]string{"name": "aegis"}})
	if err != nil || len(pr.Messages) == 0 {
		t.Errorf("prompt as writer: %v %v", pr, err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/1"}); err != nil {
		t.Errorf("templated read as writer: %v", err)
	}
	// The server's own error on a read it cannot serve is passed on, code
	// and all.
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/not-a-number"}); err != nil {
		we, _ := rpcError(t, "templated read the server refuses", err)
		t.Logf("server-everything on an id it does not have: %d %q", we.Code, we.Message)
		if strings.Contains(we.Message, "calling ") {
			t.Errorf("the server's error is not passed on as it was: %q", we.Message)
		}
	}

	// observer again: they go away again.
	if text, _ := toolText("aegis__set_profile", map[string]any{"name": "observer"}); text != "code=OK active=observer approval=" {
		t.Fatalf("switch to observer: %q", text)
	}
	wait(promptsChanged, "prompt")
	if got := prompts(); len(got) != 0 {
		t.Errorf("observer sees prompts %v after the switch back", got)
	}
	if got := templates(); len(got) != 0 {
		t.Errorf("observer sees resource templates %v after the switch back", got)
	}
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "example__greet", Arguments: map[string]string{"name": "x"}})
	if _, aegis := rpcError(t, "prompt after the switch back", err); aegis["code"] != "AEGIS_PROMPT_DENIED" {
		t.Errorf("prompt after the switch back: %v", aegis)
	}
	cs.Close()

	// Every prompts/get and resources/read has its verdict.
	out, stderr, code := c.aegis("events", "list", "--state-dir", c.state, "--json")
	if code != 0 {
		t.Fatalf("events list: %s", stderr)
	}
	verdicts := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var e struct {
			Kind    string `json:"kind"`
			Payload struct {
				Method  string `json:"method"`
				Prompt  string `json:"prompt"`
				URI     string `json:"uri"`
				Profile string `json:"profile"`
				Allowed bool   `json:"allowed"`
			} `json:"payload"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Kind != "call.verdict" {
			continue
		}
		p := e.Payload
		key := p.Method + " " + p.Prompt + p.URI + " " + p.Profile
		if p.Allowed {
			key += " allowed"
		} else {
			key += " refused"
		}
		verdicts[key]++
	}
	for _, want := range []string{
		"prompts/get example__greet observer refused",
		"prompts/get example__greet writer allowed",
		"prompts/get nobody__nothing observer refused",
		"resources/read file:///etc/passwd observer refused",
		"resources/read demo://resource/dynamic/text/1 observer refused",
		"resources/read demo://resource/dynamic/text/1 writer allowed",
		"resources/read example://missing observer allowed",
	} {
		if verdicts[want] == 0 {
			t.Errorf("no call.verdict %q in %v", want, verdicts)
		}
	}
	if verdicts["prompts/get example__greet observer refused"] != 2 {
		t.Errorf("refused prompts/get of example__greet recorded %d times, want 2", verdicts["prompts/get example__greet observer refused"])
	}
}

// TestGatewayAtStateCapRefusesWithAuditError: a gateway whose state
// directory reaches --max-state-size refuses what it can no longer record
// with the -32042 error AUDIT_ERROR, not an error of code 0, and the call
// does not run.
func TestGatewayAtStateCapRefusesWithAuditError(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	c := newCLI(t)
	calls := filepath.Join(c.dir, "example-calls.log")
	config := filepath.Join(c.dir, "aegis.yaml")
	os.WriteFile(config, []byte(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
    args: [-calls, `+calls+`]
profiles:
  observer: {allow: [example.echo]}
activation: {default_profile: observer}
`), 0o600)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--max-state-size", "1MiB")
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aegis gateway: %v", err)
	}
	defer cs.Close()
	big := strings.Repeat("x", 200<<10)
	for i := range 20 {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "example__echo", Arguments: map[string]any{"message": big}})
		if err == nil {
			continue
		}
		we, aegis := rpcError(t, "call at the cap", err)
		if we.Code != -32042 || !strings.HasPrefix(we.Message, "aegis gateway refused this tools/call (AUDIT_ERROR): it could not be recorded: ") {
			t.Errorf("call %d at the cap: %d %q", i, we.Code, we.Message)
		}
		wantAegis(t, "call at the cap", aegis, map[string]string{"layer": "gateway", "code": "AUDIT_ERROR"})
		if !strings.Contains(aegis["reason"], "cap") {
			t.Errorf("the reason does not name the cap: %q", aegis["reason"])
		}
		got, _ := os.ReadFile(calls)
		if n := strings.Count(string(got), "echo\n"); n != i {
			t.Errorf("the server ran %d calls, want the %d recorded before the cap", n, i)
		}
		return
	}
	t.Fatal("20 calls of 200 KiB fit under a 1 MiB cap")
}
