package mcptest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// terminateAfter is how long closing a session waits for the server to exit
// after its stdin is closed, before it is sent SIGTERM.
const terminateAfter = 2 * time.Second

// summaryMax bounds the length of a quoted text in a [Step.Summary].
const summaryMax = 60

// Step is the outcome of one request made by [Script].
type Step struct {
	// Name is the MCP method followed by the tool, resource or prompt it
	// targets, e.g. "tools/call echo" or "resources/read example://readme".
	Name string
	// Summary is a one-line human-readable rendering of the result, e.g.
	// `"hello"` or `error "boom"`.
	Summary string
	// Result is the canonical JSON of the normalized result: for tools/call
	// {content, structuredContent, isError}; for lists the items sorted by
	// name or URI; for resources/read the contents; for prompts/get
	// {description, messages}.
	Result json.RawMessage
}

// String formats s as "Name -> Summary".
func (s Step) String() string { return s.Name + " -> " + s.Summary }

// Transcript is the ordered list of steps run by [Script]. Two transcripts are
// equal under reflect.DeepEqual exactly when the servers returned the same
// results.
type Transcript []Step

// Lookup returns the step called name and whether it exists.
func (tr Transcript) Lookup(name string) (Step, bool) {
	for _, s := range tr {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}

// Connect starts argv as an MCP server speaking stdio, performs the MCP
// handshake with a go-sdk client and returns the session. The server's stderr
// goes to stderr, or is discarded if stderr is nil.
//
// The client offers the SDK's newest protocol version; against a go-sdk
// v1.8.0 server that is 2026-07-28, which replaces initialize with
// server/discover and carries client info in every request's _meta. Use
// [ConnectProtocol] to force the initialize handshake of an older version.
//
// ctx bounds the handshake only; the process lives until the session is
// closed. Closing the session closes the server's stdin, waits up to 2s for it
// to exit, then sends SIGTERM and finally SIGKILL; Close returns the exit
// error, if any. If the handshake fails the process is stopped the same way
// before Connect returns.
func Connect(ctx context.Context, argv []string, stderr io.Writer) (*mcp.ClientSession, error) {
	return ConnectProtocol(ctx, argv, stderr, "")
}

// ConnectProtocol is like [Connect] but offers the protocol version version,
// such as "2025-11-25"; the empty string means the SDK's newest. Versions
// before 2026-07-28 use the initialize handshake.
func ConnectProtocol(ctx context.Context, argv []string, stderr io.Writer, version string) (*mcp.ClientSession, error) {
	if len(argv) == 0 {
		return nil, errors.New("mcptest: connect: empty command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "aegis-mcptest", Version: "0.1.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateAfter},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, fmt.Errorf("mcptest: connect %q: %w", argv[0], err)
	}
	return cs, nil
}

// Script runs the fixed request sequence against the example server
// (cmd/aegis-example-server) over cs:
//
//	tools/list
//	tools/call echo {message: "hello"}
//	tools/call add {a: 2, b: 3}
//	tools/call fail {reason: "boom"}
//	tools/call slow {ms: 50}
//	resources/list
//	resources/read example://readme
//	prompts/list
//	prompts/get greet {name: "aegis"}
//
// A tool result with isError set is a normal step, not an error. Script stops
// at the first request that fails at the protocol or transport level and
// returns the steps completed so far together with an error naming the step.
func Script(ctx context.Context, cs *mcp.ClientSession) (Transcript, error) {
	steps := []struct {
		name string
		run  func(context.Context, *mcp.ClientSession) (summary string, result any, err error)
	}{
		{"tools/list", listTools},
		{"tools/call echo", callTool("echo", map[string]any{"message": "hello"})},
		{"tools/call add", callTool("add", map[string]any{"a": 2, "b": 3})},
		{"tools/call fail", callTool("fail", map[string]any{"reason": "boom"})},
		{"tools/call slow", callTool("slow", map[string]any{"ms": 50})},
		{"resources/list", listResources},
		{"resources/read example://readme", readResource("example://readme")},
		{"prompts/list", listPrompts},
		{"prompts/get greet", getPrompt("greet", map[string]string{"name": "aegis"})},
	}
	tr := make(Transcript, 0, len(steps))
	for _, st := range steps {
		summary, result, err := st.run(ctx, cs)
		if err != nil {
			return tr, fmt.Errorf("mcptest: %s: %w", st.name, err)
		}
		raw, err := canonicalJSON(result)
		if err != nil {
			return tr, fmt.Errorf("mcptest: %s: normalize result: %w", st.name, err)
		}
		tr = append(tr, Step{Name: st.name, Summary: summary, Result: raw})
	}
	return tr, nil
}

func listTools(ctx context.Context, cs *mcp.ClientSession) (string, any, error) {
	var tools []*mcp.Tool
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return "", nil, err
		}
		tools = append(tools, tool)
	}
	slices.SortFunc(tools, func(a, b *mcp.Tool) int { return cmp.Compare(a.Name, b.Name) })
	return nameList(tools, func(t *mcp.Tool) string { return t.Name }), orEmpty(tools), nil
}

// toolResult is the normalized form of a tools/call result.
type toolResult struct {
	Content           []mcp.Content `json:"content"`
	StructuredContent any           `json:"structuredContent,omitempty"`
	IsError           bool          `json:"isError"`
}

func callTool(name string, args map[string]any) func(context.Context, *mcp.ClientSession) (string, any, error) {
	return func(ctx context.Context, cs *mcp.ClientSession) (string, any, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "", nil, err
		}
		norm := toolResult{Content: orEmpty(res.Content), StructuredContent: res.StructuredContent, IsError: res.IsError}
		var b strings.Builder
		if res.IsError {
			b.WriteString("error ")
		}
		b.WriteString(contentSummary(res.Content))
		if res.StructuredContent != nil {
			sc, err := canonicalJSON(res.StructuredContent)
			if err != nil {
				return "", nil, fmt.Errorf("normalize structured content: %w", err)
			}
			fmt.Fprintf(&b, " structured=%s", sc)
		}
		return b.String(), norm, nil
	}
}

func listResources(ctx context.Context, cs *mcp.ClientSession) (string, any, error) {
	var resources []*mcp.Resource
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			return "", nil, err
		}
		resources = append(resources, r)
	}
	slices.SortFunc(resources, func(a, b *mcp.Resource) int { return cmp.Compare(a.URI, b.URI) })
	return nameList(resources, func(r *mcp.Resource) string { return r.URI }), orEmpty(resources), nil
}

func readResource(uri string) func(context.Context, *mcp.ClientSession) (string, any, error) {
	return func(ctx context.Context, cs *mcp.ClientSession) (string, any, error) {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			return "", nil, err
		}
		parts := make([]string, 0, len(res.Contents))
		for _, c := range res.Contents {
			if c.Blob != nil {
				parts = append(parts, fmt.Sprintf("<blob %d bytes>", len(c.Blob)))
				continue
			}
			parts = append(parts, quote(c.Text))
		}
		return strings.Join(parts, ", "), orEmpty(res.Contents), nil
	}
}

func listPrompts(ctx context.Context, cs *mcp.ClientSession) (string, any, error) {
	var prompts []*mcp.Prompt
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			return "", nil, err
		}
		prompts = append(prompts, p)
	}
	slices.SortFunc(prompts, func(a, b *mcp.Prompt) int { return cmp.Compare(a.Name, b.Name) })
	return nameList(prompts, func(p *mcp.Prompt) string { return p.Name }), orEmpty(prompts), nil
}

// promptResult is the normalized form of a prompts/get result.
type promptResult struct {
	Description string               `json:"description,omitempty"`
	Messages    []*mcp.PromptMessage `json:"messages"`
}

func getPrompt(name string, args map[string]string) func(context.Context, *mcp.ClientSession) (string, any, error) {
	return func(ctx context.Context, cs *mcp.ClientSession) (string, any, error) {
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
		if err != nil {
			return "", nil, err
		}
		parts := make([]string, 0, len(res.Messages))
		for _, m := range res.Messages {
			parts = append(parts, string(m.Role)+": "+contentSummary([]mcp.Content{m.Content}))
		}
		return strings.Join(parts, ", "), promptResult{Description: res.Description, Messages: orEmpty(res.Messages)}, nil
	}
}

// contentSummary renders text content as quoted strings and other content
// as <type>.
func contentSummary(cs []mcp.Content) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, quote(c.Text))
		case nil:
			parts = append(parts, "<nil>")
		default:
			parts = append(parts, fmt.Sprintf("<%T>", c))
		}
	}
	if len(parts) == 0 {
		return "<no content>"
	}
	return strings.Join(parts, ", ")
}

// quote quotes s with %q, shortened to summaryMax runes.
func quote(s string) string {
	if r := []rune(s); len(r) > summaryMax {
		return fmt.Sprintf("%q…", string(r[:summaryMax]))
	}
	return fmt.Sprintf("%q", s)
}

func nameList[T any](items []T, name func(T) string) string {
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = name(it)
	}
	return "[" + strings.Join(names, " ") + "]"
}

// orEmpty returns s, or an empty non-nil slice if s is nil, so that a missing
// list and an empty one normalize alike.
func orEmpty[S ~[]E, E any](s S) S {
	if s == nil {
		return S{}
	}
	return s
}

// canonicalJSON marshals v and re-encodes it with sorted object keys and
// numbers kept as written.
func canonicalJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic)
}
