package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// parityHost is the host of a parity run: a go-sdk client whose handlers
// answer the server's requests the same way in every run and note what
// reached them.
type parityHost struct {
	mu       sync.Mutex
	sampling []any
	elicits  []any
	progress []any
	logs     []*mcp.LoggingMessageParams
	updated  []string
}

func (h *parityHost) note(p *[]any, v any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*p = append(*p, canon(v))
}

func (h *parityHost) client(roots ...*mcp.Root) *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: "parity-host", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{
			RootsV2:     &mcp.RootCapabilities{ListChanged: true},
			Sampling:    &mcp.SamplingCapabilities{Tools: &mcp.SamplingToolsCapabilities{}},
			Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}},
		},
		CreateMessageWithToolsHandler: func(_ context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
			h.note(&h.sampling, req.Params)
			return &mcp.CreateMessageWithToolsResult{Model: "parity-model", Role: "assistant", StopReason: "endTurn",
				Content: []mcp.Content{&mcp.TextContent{Text: "a sampled answer"}}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			h.note(&h.elicits, req.Params)
			if req.Params.Mode == "url" {
				return &mcp.ElicitResult{Action: "accept"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: fill(req.Params.RequestedSchema)}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			h.note(&h.progress, req.Params)
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			h.mu.Lock()
			defer h.mu.Unlock()
			p := *req.Params
			h.logs = append(h.logs, &p)
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.updated = append(h.updated, req.Params.URI)
		},
	})
	c.AddRoots(roots...)
	return c
}

// fill answers a form elicitation: a value of the right type for every
// property of schema.
func fill(schema any) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type    string `json:"type"`
			Enum    []any  `json:"enum"`
			Default any    `json:"default"`
			Format  string `json:"format"`
			Items   struct {
				Enum []any `json:"enum"`
			} `json:"items"`
			OneOf []struct {
				Const any `json:"const"`
			} `json:"oneOf"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(schema)
	json.Unmarshal(b, &s)
	out := map[string]any{}
	for name, p := range s.Properties {
		switch {
		case p.Default != nil:
			out[name] = p.Default
		case len(p.Enum) > 0:
			out[name] = p.Enum[0]
		case len(p.OneOf) > 0:
			out[name] = p.OneOf[0].Const
		case p.Type == "array":
			out[name] = []any{}
			if len(p.Items.Enum) > 0 {
				out[name] = []any{p.Items.Enum[0]}
			}
		case p.Type == "boolean":
			out[name] = true
		case p.Type == "number" || p.Type == "integer":
			out[name] = 7
		case p.Format == "email":
			out[name] = "parity@example.com"
		case p.Format == "date":
			out[name] = "2026-01-02"
		case p.Format == "date-time":
			out[name] = "2026-01-02T03:04:05Z"
		case p.Format == "uri":
			out[name] = "https://example.com/parity"
		default:
			out[name] = "parity"
		}
	}
	return out
}

// canon is v as canonical JSON text (object keys sorted).
func canon(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "marshal error: " + err.Error()
	}
	var x any
	json.Unmarshal(b, &x)
	b, _ = json.Marshal(x)
	return string(b)
}

// paritySession is what a host saw of one scripted session: step name ->
// canonical observation.
type paritySession map[string]string

// parityStep is one step of the script. It returns what the host saw.
type parityStep struct {
	name string
	run  func(ctx context.Context, s *parityRun) (any, error)
}

type parityRun struct {
	cs   *mcp.ClientSession
	host *parityHost
	ns   string // the tool and prompt name prefix: "" direct, "everything__" through the gateway
	root string
}

func (r *parityRun) call(ctx context.Context, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	return r.cs.CallTool(ctx, &mcp.CallToolParams{Name: r.ns + tool, Arguments: args})
}

// waitHost polls the host's notes until cond holds, for at most d.
func (r *parityRun) waitHost(d time.Duration, cond func(h *parityHost) bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.host.mu.Lock()
		ok := cond(r.host)
		r.host.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

// parityScript is the scripted session. Each step's observation is
// compared between the runs after the gateway's names are mapped back.
var parityScript = []parityStep{
	{"capabilities", func(_ context.Context, r *parityRun) (any, error) {
		c := r.cs.InitializeResult().Capabilities
		return map[string]any{
			"completions":          c.Completions != nil,
			"logging":              c.Logging != nil,
			"resources.subscribe":  c.Resources != nil && c.Resources.Subscribe,
			"tools.listChanged":    c.Tools != nil && c.Tools.ListChanged,
			"prompts.listChanged":  c.Prompts != nil && c.Prompts.ListChanged,
			"resources.listChange": c.Resources != nil && c.Resources.ListChanged,
		}, nil
	}},
	{"tools/list", func(ctx context.Context, r *parityRun) (any, error) {
		var tools []string
		for tl, err := range r.cs.Tools(ctx, &mcp.ListToolsParams{}) {
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(tl.Name, "aegis__") {
				continue // the gateway's own
			}
			tools = append(tools, canon(tl))
		}
		sort.Strings(tools)
		return tools, nil
	}},
	{"prompts/list", func(ctx context.Context, r *parityRun) (any, error) {
		res, err := r.cs.ListPrompts(ctx, nil)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(res.Prompts, func(a, b *mcp.Prompt) int { return strings.Compare(a.Name, b.Name) })
		return res.Prompts, nil
	}},
	{"resources/list", func(ctx context.Context, r *parityRun) (any, error) {
		res, err := r.cs.ListResources(ctx, nil)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(res.Resources, func(a, b *mcp.Resource) int { return strings.Compare(a.URI, b.URI) })
		return res.Resources, nil
	}},
	{"resources/templates/list", func(ctx context.Context, r *parityRun) (any, error) {
		res, err := r.cs.ListResourceTemplates(ctx, nil)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(res.ResourceTemplates, func(a, b *mcp.ResourceTemplate) int { return strings.Compare(a.URITemplate, b.URITemplate) })
		return res.ResourceTemplates, nil
	}},
	{"tools/call echo", func(ctx context.Context, r *parityRun) (any, error) {
		return r.call(ctx, "echo", map[string]any{"message": "parity"})
	}},
	{"tools/call get-sum", func(ctx context.Context, r *parityRun) (any, error) {
		return r.call(ctx, "get-sum", map[string]any{"a": 2, "b": 40})
	}},
	{"tools/call get-structured-content (structured content, output schema)", func(ctx context.Context, r *parityRun) (any, error) {
		return r.call(ctx, "get-structured-content", map[string]any{"location": "Chicago"})
	}},
	{"tools/call get-annotated-message (annotations)", func(ctx context.Context, r *parityRun) (any, error) {
		return r.call(ctx, "get-annotated-message", map[string]any{"messageType": "success", "includeImage": true})
	}},
	{"tools/call get-resource-links", func(ctx context.Context, r *parityRun) (any, error) {
		return r.call(ctx, "get-resource-links", map[string]any{"count": 2})
	}},
	{"sampling (server -> host)", func(ctx context.Context, r *parityRun) (any, error) {
		res, err := r.call(ctx, "trigger-sampling-request", map[string]any{"prompt": "say parity", "maxTokens": 50})
		r.host.mu.Lock()
		defer r.host.mu.Unlock()
		return map[string]any{"result": res, "host saw": r.host.sampling}, err
	}},
	{"elicitation, form (server -> host)", func(ctx context.Context, r *parityRun) (any, error) {
		res, err := r.call(ctx, "trigger-elicitation-request", map[string]any{})
		r.host.mu.Lock()
		defer r.host.mu.Unlock()
		// The go-sdk's ServerSession.Elicit names the mode of a request
		// that has none ("form"), which MCP reads the same.
		var seen []any
		for _, e := range r.host.elicits {
			seen = append(seen, strings.Replace(e.(string), `"mode":""`, `"mode":"form"`, 1))
		}
		r.host.elicits = nil
		return map[string]any{"result": res, "host saw": seen}, err
	}},
	{"elicitation, url (server -> host)", func(ctx context.Context, r *parityRun) (any, error) {
		res, err := r.call(ctx, "trigger-url-elicitation", map[string]any{"url": "https://example.com/parity", "elicitationId": "parity-url-1"})
		r.host.mu.Lock()
		defer r.host.mu.Unlock()
		return map[string]any{"result": res, "host saw": r.host.elicits}, err
	}},
	{"elicitation, url, by error -32042", func(ctx context.Context, r *parityRun) (any, error) {
		_, err := r.call(ctx, "trigger-url-elicitation", map[string]any{"url": "https://example.com/parity", "elicitationId": "parity-url-2", "errorPath": true})
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			return nil, fmt.Errorf("not a JSON-RPC error: %v", err)
		}
		var data any
		json.Unmarshal(we.Data, &data)
		return map[string]any{"code": we.Code, "data": clearIDs(data)}, nil
	}},
	{"roots (server -> host)", func(ctx context.Context, r *parityRun) (any, error) {
		// The gateway tells its server of the host's roots when the host
		// arrives; give the server a moment to ask for them.
		var res *mcp.CallToolResult
		var err error
		for range 50 {
			if res, err = r.call(ctx, "get-roots-list", map[string]any{}); err != nil || strings.Contains(canon(res), r.root) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return res, err
	}},
	{"progress (token both ways)", func(ctx context.Context, r *parityRun) (any, error) {
		p := &mcp.CallToolParams{Name: r.ns + "trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 3}}
		p.SetProgressToken("parity-progress")
		res, err := r.cs.CallTool(ctx, p)
		r.waitHost(2*time.Second, func(h *parityHost) bool { return len(h.progress) >= 3 })
		r.host.mu.Lock()
		defer r.host.mu.Unlock()
		return map[string]any{"result": res, "host saw": r.host.progress}, err
	}},
	{"cancellation of a call in flight", func(ctx context.Context, r *parityRun) (any, error) {
		r.host.mu.Lock()
		r.host.progress = nil
		r.host.mu.Unlock()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p := &mcp.CallToolParams{Name: r.ns + "trigger-long-running-operation", Arguments: map[string]any{"duration": 20, "steps": 20}}
		p.SetProgressToken("parity-cancel")
		done := make(chan error, 1)
		go func() { _, err := r.cs.CallTool(cctx, p); done <- err }()
		if !r.waitHost(10*time.Second, func(h *parityHost) bool { return len(h.progress) > 0 }) {
			return nil, errors.New("no progress before cancelling")
		}
		cancel()
		err := <-done
		return map[string]any{"cancelled": errors.Is(err, context.Canceled)}, nil
	}},
	{"logging/setLevel and notifications/message", func(ctx context.Context, r *parityRun) (any, error) {
		if err := r.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			return nil, err
		}
		// Messages from before the level was set are not compared: until a
		// host sets one, a go-sdk server (the gateway) sends none, while a
		// TypeScript server sends all.
		r.host.mu.Lock()
		r.host.logs = nil
		r.host.mu.Unlock()
		if _, err := r.call(ctx, "toggle-simulated-logging", map[string]any{}); err != nil {
			return nil, err
		}
		got := r.waitHost(20*time.Second, func(h *parityHost) bool { return len(h.logs) > 0 })
		r.call(ctx, "toggle-simulated-logging", map[string]any{})
		r.host.mu.Lock()
		defer r.host.mu.Unlock()
		// Through the gateway the logger names the server: "everything"
		// or "everything/<the server's logger>".
		server := strings.TrimSuffix(r.ns, "__")
		var loggers []string
		for _, l := range r.host.logs {
			name := l.Logger
			if server != "" {
				if name != server && !strings.HasPrefix(name, server+"/") {
					name = "NOT NAMED AFTER THE SERVER: " + name
				}
				name = strings.TrimPrefix(strings.TrimPrefix(name, server), "/")
			}
			loggers = append(loggers, name)
		}
		slices.Sort(loggers)
		return map[string]any{"a message arrived": got, "loggers": slices.Compact(loggers)}, nil
	}},
	{"resources/subscribe and notifications/resources/updated", func(ctx context.Context, r *parityRun) (any, error) {
		uri := "demo://resource/static/document/architecture.md"
		if err := r.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			return nil, err
		}
		if _, err := r.call(ctx, "toggle-subscriber-updates", map[string]any{}); err != nil {
			return nil, err
		}
		got := r.waitHost(20*time.Second, func(h *parityHost) bool { return slices.Contains(h.updated, uri) })
		r.call(ctx, "toggle-subscriber-updates", map[string]any{})
		err := r.cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
		return map[string]any{"updated": got}, err
	}},
	{"completion/complete, prompt argument", func(ctx context.Context, r *parityRun) (any, error) {
		return r.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: r.ns + "completable-prompt"},
			Argument: mcp.CompleteParamsArgument{Name: "department", Value: "E"}})
	}},
	{"completion/complete, resource template", func(ctx context.Context, r *parityRun) (any, error) {
		return r.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "demo://resource/dynamic/text/{resourceId}"},
			Argument: mcp.CompleteParamsArgument{Name: "resourceId", Value: "1"}})
	}},
	{"prompts/get", func(ctx context.Context, r *parityRun) (any, error) {
		return r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: r.ns + "args-prompt", Arguments: map[string]string{"city": "Paris", "state": "TX"}})
	}},
	{"resources/read", func(ctx context.Context, r *parityRun) (any, error) {
		return r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/1"})
	}},
}

// parityGaps are the features the gateway does not carry yet, with why;
// the test says so instead of skipping them silently.
var parityGaps = []string{
	"tasks and execution.taskSupport: a go-sdk host has no tasks, so this script cannot drive them; TestGatewayParityTasks does, over JSON-RPC, directly and through the gateway",
	"task-augmented sampling and elicitation (a server asking the host to run its request as a task): a go-sdk host cannot run them; TestGatewayParityHostRunsSamplingAsATask compares them over JSON-RPC",
	"protocol 2026-07-28: the same script is compared for a host of the session protocol (2025-11-25) and for one of 2026-07-28 (the gateway's default; with --protocol 2025-11-25 the host negotiates down to the session protocol); over HTTP its progress and subscriptions/listen are carried as SSE answers of the stateless POSTs, its log messages are not (TestHTTPGatewayServesAStatelessHost)",
	"log messages a server sends before the host's logging/setLevel: the go-sdk server sends a session none until it sets a level (the script compares those sent after)",
	"results gain ttlMs and cacheScope (2026-07-28 cache hints the go-sdk server adds whatever the protocol), and an elicitation without mode gains mode \"form\" (ServerSession.Elicit fills it in); the script takes both out before comparing",
	"notifications/elicitation/complete and the host's progress on a server's request: server-everything does neither; TestGatewayParityElicitationCompleteAndHostProgress compares them with a JSON-RPC test server",
}

// runParity runs the script once over t, as a host with the given roots
// that asks for protocol version (""; the go-sdk client's default: 2026-07-28,
// falling back to the session protocol's initialize).
func runParity(t *testing.T, script []parityStep, tr mcp.Transport, ns, root, version string) (paritySession, string) {
	t.Helper()
	h := &parityHost{}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cs, err := h.client(&mcp.Root{URI: "file://" + root, Name: "parity-root"}).Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect (%q): %v", ns, err)
	}
	defer cs.Close()
	r := &parityRun{cs: cs, host: h, ns: ns, root: root}
	out := paritySession{}
	for _, st := range script {
		v, err := st.run(ctx, r)
		obs := map[string]any{"seen": v}
		if err != nil {
			obs["error"] = err.Error()
		}
		out[st.name] = stable(canon(obs))
	}
	return out, cs.InitializeResult().ProtocolVersion
}

// clearIDs blanks the elicitation ids that a server makes up.
func clearIDs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "elicitationId" {
				x[k] = "ID"
			} else {
				x[k] = clearIDs(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = clearIDs(e)
		}
	}
	return v
}

var clock = regexp.MustCompile(`\d{1,2}:\d{2}:\d{2}( [AP]M)?`)

// stable takes out of an observation what differs from run to run (times
// of day) and the cache hints of protocol 2026-07-28 (ttlMs, cacheScope),
// which a go-sdk server adds to every result that has them, whatever the
// protocol, and which a host of an earlier protocol ignores.
func stable(s string) string {
	s = clock.ReplaceAllString(s, "TIME")
	s = strings.ReplaceAll(s, `"cacheScope":"public",`, "")
	s = strings.ReplaceAll(s, `"cacheScope":"",`, "")
	return strings.ReplaceAll(s, `,"ttlMs":0`, "")
}

// unNamespace maps what a host saw through the gateway back to what it
// sees directly: prefixed names lose the prefix, descriptions their origin
// tag.
func unNamespace(s, server string) string {
	s = strings.ReplaceAll(s, server+"__", "")
	return strings.ReplaceAll(s, ` [origin: `+server+`]`, "")
}

// One scripted session, run by a go-sdk host directly against
// server-everything and then through aegis gateway: every step must show
// the host the same thing, modulo the namespace.
func TestGatewayParity(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	root := t.TempDir()
	direct, dv := runParity(t, parityScript, &mcp.CommandTransport{Command: exec.Command(every[0], every[1:]...), TerminateDuration: 5 * time.Second}, "", root, "")

	// A host of the session protocol (it asks for 2025-11-25 in its
	// initialize, as the TypeScript SDK and Claude Desktop do) is served
	// at it by the default gateway, which offers 2026-07-28 as well.
	c := newCLI(t)
	cmd := gatewayCmd(t, c, map[string][]string{"everything": every}, []string{"everything.*"}, []string{"demo://resource/**"})
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	via, gv := runParity(t, parityScript, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, "everything__", root, "2025-11-25")
	t.Logf("protocol: direct %s, through the gateway %s", dv, gv)
	compareParity(t, parityScript, direct, via, "everything", stderr)
	if gv != "2025-11-25" {
		t.Errorf("a host that asks for 2025-11-25 is served at %s", gv)
	}
	// The same host at the go-sdk's default, served at 2026-07-28
	// (gateway_mrtr_test.go).
	parityNewProtocol(t, every, root, direct)
	for _, gap := range parityGaps {
		t.Log("known gap: " + gap)
	}
}

// The filesystem reference server takes its allowed directories from the
// host's roots: through the gateway it must end up with the same ones, and
// read and refuse the same files.
func TestGatewayParityFilesystem(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	base, root := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("inside the root"), 0o644)
	os.WriteFile(filepath.Join(base, "other.txt"), []byte("outside the root"), 0o644)
	fsArgv := mcptest.FilesystemServer(t, base)
	script := []parityStep{
		{"tools/list", parityScript[1].run},
		{"allowed directories follow the host's roots", func(ctx context.Context, r *parityRun) (any, error) {
			var res *mcp.CallToolResult
			var err error
			for range 50 {
				if res, err = r.call(ctx, "list_allowed_directories", map[string]any{}); err != nil || strings.Contains(canon(res), r.root) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			return res, err
		}},
		{"read inside the root", func(ctx context.Context, r *parityRun) (any, error) {
			return r.call(ctx, "read_text_file", map[string]any{"path": filepath.Join(r.root, "notes.txt")})
		}},
		{"read outside the root is refused", func(ctx context.Context, r *parityRun) (any, error) {
			return r.call(ctx, "read_text_file", map[string]any{"path": filepath.Join(base, "other.txt")})
		}},
	}
	direct, _ := runParity(t, script, &mcp.CommandTransport{Command: exec.Command(fsArgv[0], fsArgv[1:]...), TerminateDuration: 5 * time.Second}, "", root, "")
	// Through the default gateway, a host of the session protocol and one
	// of 2026-07-28 (whose roots the server asks for between calls: they
	// wait for the host's next call).
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			c := newCLI(t)
			cmd := gatewayCmd(t, c, map[string][]string{"fs": fsArgv}, []string{"fs.*"}, nil)
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			via, gv := runParity(t, script, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, "fs__", root, version)
			if gv != version {
				t.Fatalf("a host that asks for %s is served at %s", version, gv)
			}
			if version >= "2026-07-28" {
				via = withoutNewProtocol(via)
			}
			compareParity(t, script, direct, via, "fs", stderr)
		})
	}
}

// compareParity fails on every step whose observations differ, modulo the
// namespace of server, or that failed both ways.
func compareParity(t *testing.T, script []parityStep, direct, via paritySession, server string, stderr *syncBuffer) {
	t.Helper()
	for _, st := range script {
		d, g := direct[st.name], unNamespace(via[st.name], server)
		t.Logf("%s: %.240s", st.name, d)
		if d != g {
			t.Errorf("%s differs:\n  direct:  %s\n  gateway: %s", st.name, d, g)
		} else if strings.Contains(d, `"error"`) {
			t.Errorf("%s fails both ways: %s", st.name, d)
		}
	}
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Error("the race detector found a race in the gateway (built with -race)")
	}
	if t.Failed() {
		t.Logf("gateway stderr:\n%s", stderr)
	}
}
