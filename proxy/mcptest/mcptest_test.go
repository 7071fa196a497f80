package mcptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testTimeout bounds each test's conversation with a server.
const testTimeout = 30 * time.Second

// TestExampleServer builds the example server once and runs every check that
// needs it as a subtest.
func TestExampleServer(t *testing.T) {
	argv := ExampleServer(t)

	t.Run("Script", func(t *testing.T) { testScript(t, argv) })
	t.Run("ScriptDeterministic", func(t *testing.T) { testScriptDeterministic(t, argv) })
	t.Run("ScriptProtocolIndependent", func(t *testing.T) { testScriptProtocolIndependent(t, argv) })
	t.Run("RawJSONLines", func(t *testing.T) { testRawJSONLines(t, argv) })
	t.Run("SlowCancelled", func(t *testing.T) { testSlowCancelled(t, argv) })
	t.Run("SlowCapped", func(t *testing.T) { testSlowCapped(t, argv) })
	t.Run("DemoClient", func(t *testing.T) { testDemoClient(t, argv) })
}

// connect starts argv with the SDK's newest protocol version and closes the
// session when the test ends, failing the test if the server did not exit
// cleanly.
func connect(t *testing.T, ctx context.Context, argv []string) *mcp.ClientSession {
	t.Helper()
	return connectProtocol(t, ctx, argv, "", false)
}

// connectProtocol starts argv offering protocol version and closes the
// session when the test ends. If allowSIGTERM is set, an exit caused by the
// SIGTERM that Close sends to a server still running 2s after its stdin was
// closed is logged rather than failing the test.
func connectProtocol(t *testing.T, ctx context.Context, argv []string, version string, allowSIGTERM bool) *mcp.ClientSession {
	t.Helper()
	var stderr syncBuffer
	cs, err := ConnectProtocol(ctx, argv, &stderr, version)
	if err != nil {
		t.Fatalf("ConnectProtocol(%q, %q) = %v\nserver stderr:\n%s", argv, version, err, stderr.String())
	}
	t.Cleanup(func() {
		err := cs.Close()
		if ee := (*exec.ExitError)(nil); allowSIGTERM && errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				t.Logf("server ignored stdin EOF and was stopped by SIGTERM")
				return
			}
		}
		if err != nil {
			t.Errorf("Close() = %v\nserver stderr:\n%s", err, stderr.String())
		}
	})
	return cs
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of os/exec and
// reads of the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testScript(t *testing.T, argv []string) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cs := connect(t, ctx, argv)

	tr, err := Script(ctx, cs)
	if err != nil {
		t.Fatalf("Script() = %v", err)
	}
	for _, s := range tr {
		t.Log(s)
	}

	wantNames := []string{
		"tools/list",
		"tools/call echo",
		"tools/call add",
		"tools/call fail",
		"tools/call slow",
		"resources/list",
		"resources/read example://readme",
		"prompts/list",
		"prompts/get greet",
	}
	var gotNames []string
	for _, s := range tr {
		gotNames = append(gotNames, s.Name)
	}
	if !slices.Equal(gotNames, wantNames) {
		t.Fatalf("Script() step names = %q, want %q", gotNames, wantNames)
	}

	step := func(name string) Step {
		t.Helper()
		s, ok := tr.Lookup(name)
		if !ok {
			t.Fatalf("Lookup(%q) found nothing", name)
		}
		return s
	}

	type named struct {
		Name string `json:"name"`
		URI  string `json:"uri"`
	}
	var tools []named
	decode(t, step("tools/list"), &tools)
	if got, want := names(tools, func(n named) string { return n.Name }), []string{"add", "echo", "fail", "slow"}; !slices.Equal(got, want) {
		t.Errorf("tools/list names = %q, want %q", got, want)
	}

	toolCases := []struct {
		step       string
		wantText   string
		wantError  bool
		wantStruct map[string]any
	}{
		{step: "tools/call echo", wantText: "hello"},
		{step: "tools/call add", wantText: "5", wantStruct: map[string]any{"sum": json.Number("5")}},
		{step: "tools/call fail", wantText: "boom", wantError: true},
		{step: "tools/call slow", wantText: "slept 50 ms"},
	}
	for _, tc := range toolCases {
		t.Run(tc.step, func(t *testing.T) {
			var got struct {
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				StructuredContent map[string]any `json:"structuredContent"`
				IsError           bool           `json:"isError"`
			}
			decode(t, step(tc.step), &got)
			if len(got.Content) != 1 || got.Content[0].Type != "text" || got.Content[0].Text != tc.wantText {
				t.Errorf("%s content = %+v, want one text %q", tc.step, got.Content, tc.wantText)
			}
			if got.IsError != tc.wantError {
				t.Errorf("%s isError = %v, want %v", tc.step, got.IsError, tc.wantError)
			}
			if !reflect.DeepEqual(got.StructuredContent, tc.wantStruct) {
				t.Errorf("%s structuredContent = %v, want %v", tc.step, got.StructuredContent, tc.wantStruct)
			}
		})
	}

	var resources []named
	decode(t, step("resources/list"), &resources)
	if got, want := names(resources, func(n named) string { return n.URI }), []string{"example://readme"}; !slices.Equal(got, want) {
		t.Errorf("resources/list URIs = %q, want %q", got, want)
	}

	var contents []struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
		Text     string `json:"text"`
	}
	decode(t, step("resources/read example://readme"), &contents)
	if len(contents) != 1 || contents[0].URI != "example://readme" || contents[0].MIMEType != "text/plain" ||
		!strings.HasPrefix(contents[0].Text, "aegis-example is a fixture MCP server") {
		t.Errorf("resources/read example://readme = %+v, want one text/plain readme", contents)
	}

	var prompts []named
	decode(t, step("prompts/list"), &prompts)
	if got, want := names(prompts, func(n named) string { return n.Name }), []string{"greet"}; !slices.Equal(got, want) {
		t.Errorf("prompts/list names = %q, want %q", got, want)
	}

	var prompt struct {
		Messages []struct {
			Role    string `json:"role"`
			Content struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	decode(t, step("prompts/get greet"), &prompt)
	if len(prompt.Messages) != 1 || prompt.Messages[0].Role != "user" || prompt.Messages[0].Content.Text != "Hello, aegis!" {
		t.Errorf("prompts/get greet messages = %+v, want one user message %q", prompt.Messages, "Hello, aegis!")
	}

	summaries := map[string]string{
		"tools/list":        "[add echo fail slow]",
		"tools/call echo":   `"hello"`,
		"tools/call add":    `"5" structured={"sum":5}`,
		"tools/call fail":   `error "boom"`,
		"tools/call slow":   `"slept 50 ms"`,
		"resources/list":    "[example://readme]",
		"prompts/list":      "[greet]",
		"prompts/get greet": `user: "Hello, aegis!"`,
	}
	for name, want := range summaries {
		if got := step(name).Summary; got != want {
			t.Errorf("step %q summary = %s, want %s", name, got, want)
		}
	}
}

// testScriptDeterministic checks that two separate sessions yield equal
// transcripts, which is what a direct-versus-proxy comparison relies on.
func testScriptDeterministic(t *testing.T, argv []string) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var runs [2]Transcript
	for i := range runs {
		tr, err := Script(ctx, connect(t, ctx, argv))
		if err != nil {
			t.Fatalf("run %d: Script() = %v", i, err)
		}
		runs[i] = tr
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Errorf("Script() transcripts differ between sessions:\n%v\n%v", runs[0], runs[1])
	}
}

// testScriptProtocolIndependent checks that the transcript does not depend
// on the negotiated protocol version: the stateless 2026-07-28 exchange adds
// _meta, resultType and cache hints to every result, the initialize handshake
// of 2025-11-25 and 2025-06-18 does not.
func testScriptProtocolIndependent(t *testing.T, argv []string) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	want, err := Script(ctx, connect(t, ctx, argv))
	if err != nil {
		t.Fatalf("Script() = %v", err)
	}
	for _, version := range []string{"2025-11-25", "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			cs := connectProtocol(t, ctx, argv, version, false)
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated protocol %q, want %q", got, version)
			}
			got, err := Script(ctx, cs)
			if err != nil {
				t.Fatalf("Script() = %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Script() with protocol %s =\n%v\nwant (newest protocol)\n%v", version, dump(got), dump(want))
			}
		})
	}
}

func dump(tr Transcript) string {
	var b strings.Builder
	for _, s := range tr {
		fmt.Fprintf(&b, "%s %s\n", s.Name, s.Result)
	}
	return b.String()
}

// testRawJSONLines drives the server with hand-written JSON lines, as a host
// or a relaying proxy would, and checks that responses echo request ids.
func testRawJSONLines(t *testing.T, argv []string) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	srv := startRaw(t, argv)

	srv.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	var init struct {
		ProtocolVersion string             `json:"protocolVersion"`
		ServerInfo      mcp.Implementation `json:"serverInfo"`
	}
	srv.result(t, ctx, `1`, &init)
	if init.ProtocolVersion != "2025-06-18" || init.ServerInfo.Name != "aegis-example" {
		t.Errorf("initialize result = %+v, want protocol 2025-06-18 from aegis-example", init)
	}
	srv.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	ids := []struct{ name, id string }{
		{"integer", `42`},
		{"string", `"req-7"`},
		{"zero", `0`},
		{"negative", `-3`},
	}
	for _, tc := range ids {
		t.Run(tc.name, func(t *testing.T) {
			msg := fmt.Sprintf("echo with id %s", tc.id)
			srv.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"echo","arguments":{"message":%q}}}`, tc.id, msg))
			var res struct {
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				IsError bool `json:"isError"`
			}
			srv.result(t, ctx, tc.id, &res)
			if res.IsError || len(res.Content) != 1 || res.Content[0].Text != msg {
				t.Errorf("tools/call echo id %s = %+v, want text %q", tc.id, res, msg)
			}
		})
	}

	// An unknown tool is reported on the same id, as a tool error or a
	// JSON-RPC error, and leaves the session usable.
	srv.send(t, `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	if resp := srv.response(t, ctx, `99`); resp.Error == nil && !bytes.Contains(resp.Result, []byte(`"isError":true`)) {
		t.Errorf("tools/call nope = %s, want an error", resp.Result)
	}
	srv.send(t, `{"jsonrpc":"2.0","id":100,"method":"ping"}`)
	srv.result(t, ctx, `100`, new(struct{}))

	if err := srv.closeAndWait(5 * time.Second); err != nil {
		t.Errorf("server exit after stdin closed: %v\nstderr:\n%s", err, srv.stderr.String())
	}
}

// testSlowCancelled checks that a cancelled slow call returns promptly and
// leaves the server able to answer.
func testSlowCancelled(t *testing.T, argv []string) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cs := connect(t, ctx, argv)

	callCtx, callCancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer callCancel()
	start := time.Now()
	_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 10000}})
	if err == nil {
		t.Fatalf("CallTool(slow 10000ms) with 100ms deadline succeeded, want an error")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("CallTool(slow 10000ms) with 100ms deadline took %v", elapsed)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "still here"}})
	if err != nil {
		t.Fatalf("CallTool(echo) after cancel = %v", err)
	}
	if got := contentSummary(res.Content); got != `"still here"` {
		t.Errorf("CallTool(echo) after cancel = %s, want %q", got, "still here")
	}
}

// testSlowCapped checks the input bounds of slow: negative is zero.
func testSlowCapped(t *testing.T, argv []string) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cs := connect(t, ctx, argv)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": -5}})
	if err != nil {
		t.Fatalf("CallTool(slow -5) = %v", err)
	}
	if got, want := contentSummary(res.Content), `"slept 0 ms"`; got != want || res.IsError {
		t.Errorf("CallTool(slow -5) = %s (isError %v), want %s", got, res.IsError, want)
	}
}

// testDemoClient builds cmd/aegis-demo-client and runs it against the
// example server and against a command that is not an MCP server.
func testDemoClient(t *testing.T, argv []string) {
	bin := Prebuilt(t, "aegis-demo-client")
	if bin == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(t.TempDir(), "aegis-demo-client")
		build := exec.Command("go", "build", "-o", bin, "github.com/aegis-dev/aegis/cmd/aegis-demo-client")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build aegis-demo-client: %v\n%s", err, out)
		}
	}

	cases := []struct {
		name      string
		args      []string
		wantCode  int
		wantLines []string
	}{
		{
			name:     "example server",
			args:     append([]string{"--"}, argv...),
			wantCode: 0,
			wantLines: []string{
				"tools/list -> [add echo fail slow]",
				`tools/call echo -> "hello"`,
				`tools/call add -> "5" structured={"sum":5}`,
				`tools/call fail -> error "boom"`,
				`tools/call slow -> "slept 50 ms"`,
				"resources/list -> [example://readme]",
				`resources/read example://readme -> "aegis-example is a fixture MCP server: tools echo, add, fail"…`,
				"prompts/list -> [greet]",
				`prompts/get greet -> user: "Hello, aegis!"`,
			},
		},
		{name: "not an MCP server", args: []string{"--", "true"}, wantCode: 1},
		{name: "missing command", args: []string{"--", filepath.Join(t.TempDir(), "nonexistent")}, wantCode: 1},
		{name: "no command", args: nil, wantCode: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("run aegis-demo-client: %v", err)
			}
			if code != tc.wantCode {
				t.Errorf("aegis-demo-client %q exit code = %d, want %d\nstderr:\n%s", tc.args, code, tc.wantCode, stderr.String())
			}
			if tc.wantLines != nil {
				got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
				if !slices.Equal(got, tc.wantLines) {
					t.Errorf("aegis-demo-client stdout =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.wantLines, "\n"))
				}
			}
			if tc.wantCode != 0 && !strings.Contains(stderr.String(), "aegis-demo-client: error:") {
				t.Errorf("aegis-demo-client %q stderr = %q, want an error line", tc.args, stderr.String())
			}
		})
	}
}

func decode(t *testing.T, s Step, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(s.Result))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s result %s: %v", s.Name, s.Result, err)
	}
}

func names[T any](items []T, name func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = name(it)
	}
	return out
}

// rawServer is a server process driven by writing JSON lines to its stdin.
type rawServer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte // stdout lines; closed at EOF
	exited chan error  // receives the exit status once stdout is drained
	stderr *bytes.Buffer
}

func startRaw(t *testing.T, argv []string) *rawServer {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv := &rawServer{
		cmd:    cmd,
		stdin:  stdin,
		lines:  make(chan []byte, 64),
		exited: make(chan error, 1),
		stderr: new(bytes.Buffer),
	}
	cmd.Stderr = srv.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			srv.lines <- bytes.Clone(sc.Bytes())
		}
		close(srv.lines)
		// Wait closes the pipe, so it must follow the last read.
		srv.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = srv.stdin.Close()
		_ = srv.cmd.Process.Kill()
		for range srv.lines {
		}
		<-srv.exited
	})
	return srv
}

func (s *rawServer) send(t *testing.T, line string) {
	t.Helper()
	if !json.Valid([]byte(line)) {
		t.Fatalf("test bug: invalid JSON %s", line)
	}
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatalf("write %s: %v", line, err)
	}
}

type rawResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// response reads stdout lines until the response whose id is exactly wantID,
// skipping server notifications and failing on any other response.
func (s *rawServer) response(t *testing.T, ctx context.Context, wantID string) rawResponse {
	t.Helper()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for response id %s: %v\nstderr:\n%s", wantID, ctx.Err(), s.stderr.String())
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("server stdout closed while waiting for response id %s\nstderr:\n%s", wantID, s.stderr.String())
			}
			var resp rawResponse
			if err := json.Unmarshal(line, &resp); err != nil {
				t.Fatalf("server wrote a non-JSON line %q: %v", line, err)
			}
			if resp.JSONRPC != "2.0" {
				t.Fatalf("server wrote %s, want jsonrpc 2.0", line)
			}
			if resp.Method != "" && resp.ID == nil {
				continue // a notification
			}
			if string(resp.ID) != wantID {
				t.Fatalf("server wrote %s, want the response with id %s", line, wantID)
			}
			return resp
		}
	}
}

// result reads the response with id wantID and decodes its result into v.
func (s *rawServer) result(t *testing.T, ctx context.Context, wantID string, v any) {
	t.Helper()
	resp := s.response(t, ctx, wantID)
	if resp.Error != nil {
		t.Fatalf("response id %s: error %d %q", wantID, resp.Error.Code, resp.Error.Message)
	}
	if err := json.Unmarshal(resp.Result, v); err != nil {
		t.Fatalf("response id %s: decode result %s: %v", wantID, resp.Result, err)
	}
}

// closeAndWait closes stdin and waits up to d for the server to exit with
// status 0 without writing anything more.
func (s *rawServer) closeAndWait(d time.Duration) error {
	if err := s.stdin.Close(); err != nil {
		return fmt.Errorf("close stdin: %w", err)
	}
	timeout := time.After(d)
	lines := s.lines
	for {
		select {
		case line, ok := <-lines:
			if ok {
				return fmt.Errorf("unexpected output after stdin closed: %q", line)
			}
			lines = nil // drained; wait for the exit status
		case err := <-s.exited:
			s.exited <- err // leave it for the cleanup
			return err
		case <-timeout:
			return fmt.Errorf("no exit %v after stdin closed", d)
		}
	}
}
