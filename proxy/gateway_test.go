package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// A go-sdk client as the host, aegis gateway in front of the example
// server and the two Node reference servers: namespaced lists filtered by
// profile, hidden tools refused and never forwarded, an edge switch, an
// escalation approved from a second process, resource scoping, prompts, and
// a record that verifies and tells the story.
func TestGatewayEndToEnd(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	c := newCLI(t)
	root := filepath.Join(c.dir, "root")
	os.Mkdir(root, 0o755)
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello from the root"), 0o644)
	calls := filepath.Join(c.dir, "example-calls.log")
	every := mcptest.EverythingServer(t)
	fsArgv := mcptest.FilesystemServer(t, root)
	quote := func(ss []string) string {
		var q []string
		for _, s := range ss {
			b, _ := json.Marshal(s)
			q = append(q, string(b))
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	config := filepath.Join(c.dir, "aegis.yaml")
	os.WriteFile(config, []byte(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
    args: [-calls, `+calls+`]
  everything:
    command: `+every[0]+`
    args: `+quote(every[1:])+`
  fs:
    command: `+fsArgv[0]+`
    args: `+quote(fsArgv[1:])+`
profiles:
  observer:
    allow: [example.echo, everything.echo, "fs.read_*", fs.list_directory]
    prompts: [example.greet]
    resources: [example://readme, "file://`+root+`/**"]
    allowed_transitions: [developer]
  developer:
    extends: observer
    allow: [example.add]
    allowed_transitions: [observer]
  deploy:
    extends: developer
    allow: ["example.*"]
    allowed_transitions: [observer]
activation:
  default_profile: observer
error_disclosure: verbose
`), 0o600)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)

	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = env
	stderr, _ := cmd.StderrPipe()
	prompts := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			prompts <- sc.Text()
		}
		close(prompts)
	}()
	ctx := t.Context()
	listChanged := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { listChanged <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aegis gateway: %v", err)
	}
	names := func() []string {
		t.Helper()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, tl := range res.Tools {
			n = append(n, tl.Name)
		}
		slices.Sort(n)
		return n
	}
	call := func(name string, args map[string]any) (string, bool) {
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

	visible := names()
	for _, want := range []string{"aegis__approval_status", "aegis__set_profile", "example__echo", "everything__echo", "fs__read_text_file", "fs__list_directory"} {
		if !slices.Contains(visible, want) {
			t.Errorf("observer does not see %s: %v", want, visible)
		}
	}
	for _, hidden := range []string{"example__add", "example__slow", "fs__write_file", "everything__get-sum"} {
		if slices.Contains(visible, hidden) {
			t.Errorf("observer sees %s", hidden)
		}
	}
	if text, isErr := call("example__echo", map[string]any{"message": "hi"}); isErr || text != "hi" {
		t.Errorf("example__echo = %q %v", text, isErr)
	}
	if text, isErr := call("fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")}); isErr || !strings.Contains(text, "hello from the root") {
		t.Errorf("fs__read_text_file = %q %v", text, isErr)
	}
	// A hidden tool: refused with the payload, never forwarded.
	text, isErr := call("example__add", map[string]any{"a": 1, "b": 2})
	var denied map[string]string
	if !isErr || json.Unmarshal([]byte(text), &denied) != nil || denied["code"] != "AEGIS_CAP_DENIED" || denied["required_profile"] != "developer" {
		t.Errorf("hidden tool: %q %v", text, isErr)
	}
	// Along an edge: at once.
	if text, _ := call("aegis__set_profile", map[string]any{"name": "developer"}); text != "code=OK active=developer approval=" {
		t.Errorf("edge switch: %q", text)
	}
	select {
	case <-listChanged:
	case <-time.After(10 * time.Second):
		t.Error("the host was not told that the tool list changed")
	}
	if !slices.Contains(names(), "example__add") {
		t.Error("developer does not see example__add")
	}
	if text, isErr := call("example__add", map[string]any{"a": 1, "b": 2}); isErr || text != "3" {
		t.Errorf("example__add as developer = %q %v", text, isErr)
	}
	// An escalation: pending until a human approves from another process.
	text, _ = call("aegis__set_profile", map[string]any{"name": "deploy"})
	if !strings.HasPrefix(text, "code=AEGIS_PENDING_APPROVAL active=developer approval=") {
		t.Fatalf("escalation: %q", text)
	}
	id := strings.TrimPrefix(text, "code=AEGIS_PENDING_APPROVAL active=developer approval=")
	if slices.Contains(names(), "example__slow") {
		t.Error("deploy tools visible before approval")
	}
	if st, _ := call("aegis__approval_status", map[string]any{"id": id}); st != "pending" {
		t.Errorf("status before approval: %q", st)
	}
	approve := exec.Command(bin(t, "aegis"), "approve", id)
	approve.Env = env
	if out, err := approve.CombinedOutput(); err != nil {
		t.Fatalf("aegis approve %s: %v %s", id, err, out)
	}
	if st, _ := call("aegis__approval_status", map[string]any{"id": id}); st != "approved" {
		t.Fatalf("status after approval: %q", st)
	}
	if !slices.Contains(names(), "example__slow") {
		t.Error("deploy tool not visible after the approved switch")
	}
	if text, isErr := call("example__slow", map[string]any{"ms": 1}); isErr || !strings.Contains(text, "slept") {
		t.Errorf("deploy tool = %q %v", text, isErr)
	}
	// The approval was single-use.
	if st, _ := call("aegis__approval_status", map[string]any{"id": id}); strings.HasPrefix(st, "approved") {
		t.Errorf("approval replayed: %q", st)
	}
	// Resources: inside and outside the scope.
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "example://readme"}); err != nil {
		t.Errorf("read inside scope: %v", err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file://" + root + "/../../etc/passwd"}); err == nil || !strings.Contains(err.Error(), "AEGIS_RESOURCE_DENIED") {
		t.Errorf("traversal read: %v", err)
	}
	// Resource templates follow the profile: none of deploy's patterns
	// reaches the demo:// templates, and a read through one is refused.
	tl, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Errorf("resource templates: %v", err)
	} else {
		for _, rt := range tl.ResourceTemplates {
			if strings.HasPrefix(rt.URITemplate, "demo://") {
				t.Errorf("deploy sees resource template %s", rt.URITemplate)
			}
		}
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/1"}); err == nil || !strings.Contains(err.Error(), "AEGIS_RESOURCE_DENIED") {
		t.Errorf("templated read outside the profile: %v", err)
	}
	// Prompts are aggregated, namespaced.
	pl, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pn []string
	for _, p := range pl.Prompts {
		pn = append(pn, p.Name)
	}
	if !slices.Contains(pn, "example__greet") {
		t.Errorf("prompts %v", pn)
	}
	cs.Close()

	got, _ := os.ReadFile(calls)
	if want := "echo\nadd\nslow\n"; string(got) != want {
		t.Errorf("the example server received %q, want %q (the refused add never forwarded)", got, want)
	}
	out, _, code := c.aegis("verify", "--key", c.pub, c.audit)
	if code != 0 {
		t.Fatalf("verify: %s", out)
	}
	h := &harness{t: t, audit: c.audit}
	ls := h.lines()
	if n := len(ofType(ls, "decision")); n != 1 {
		t.Errorf("%d decision lines, want 1", n)
	}
	roles := map[string]bool{}
	for _, o := range ofType(ls, "outcome") {
		roles[str(o, "tool_id")+"@"+obj(o, "decision_axes")["role"].(string)] = true
	}
	for _, want := range []string{"example__add@observer", "example__add@developer", "example__slow@deploy", "aegis__set_profile@developer"} {
		if !roles[want] {
			t.Errorf("no outcome %s in %v", want, roles)
		}
	}
}
