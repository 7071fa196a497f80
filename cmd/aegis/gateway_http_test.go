package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// httpGW is an aegis gateway --listen process.
type httpGW struct {
	t      *testing.T
	url    string
	token  string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

var servingRE = regexp.MustCompile(`serving streamable HTTP at (http://\S+)`)
var tokenRE = regexp.MustCompile(`bearer token, shown once: (\S+)`)

// httpGateway starts aegis gateway --listen on a free loopback port with
// config and flags, and returns once it serves.
func (l *live) httpGateway(config string, flags ...string) *httpGW {
	l.t.Helper()
	return l.httpGatewayUnder(nil, config, flags...)
}

// httpGatewayUnder is httpGateway with the aegis command run by the
// command prefix (such as sh -c 'ulimit -n 300; exec "$0" "$@"').
func (l *live) httpGatewayUnder(prefix []string, config string, flags ...string) *httpGW {
	l.t.Helper()
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		l.t.Fatal(err)
	}
	args := append([]string{"gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--listen", "127.0.0.1:0"}, flags...)
	argv := append(append(prefix[:len(prefix):len(prefix)], filepath.Join(l.bin, "aegis")), args...)
	h := &httpGW{t: l.t, cmd: exec.Command(argv[0], argv[1:]...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	h.cmd.Env, h.cmd.Stderr = l.env, h.stderr
	if err := h.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	go func() { h.done <- h.cmd.Wait() }()
	l.t.Cleanup(func() { h.stop() })
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := servingRE.FindStringSubmatch(h.stderr.String()); m != nil {
			h.url = m[1]
			if m := tokenRE.FindStringSubmatch(h.stderr.String()); m != nil {
				h.token = m[1]
			}
			return h
		}
		select {
		case err := <-h.done:
			l.t.Fatalf("aegis gateway --listen ended: %v\n%s", err, h.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	l.t.Fatalf("aegis gateway --listen did not serve within a minute:\n%s", h.stderr.String())
	return nil
}

// stop ends the gateway with SIGTERM and waits for it.
func (h *httpGW) stop() {
	if h.cmd.ProcessState != nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(time.Minute):
		h.cmd.Process.Kill()
		<-h.done
		h.t.Errorf("aegis gateway --listen did not end within a minute of SIGTERM:\n%s", h.stderr.String())
	}
}

// sessionHost is what a host of the session protocol asks for: 2025-11-25,
// as the TypeScript SDK and Claude Desktop do. The go-sdk's client asks
// for 2026-07-28 by default, which the gateway offers by default, and a
// stateless client has no HTTP session of its own (every one of a
// principal shares one, docs/http.md): the tests of what an HTTP session
// is (its own record, profile, approvals, end) connect with this.
var sessionHost = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// connect opens an MCP session to the gateway with the go-sdk's client,
// as a host of the session protocol (sessionHost).
func (h *httpGW) connect(ctx context.Context) *mcp.ClientSession {
	h.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(h.token)}
	cs, err := c.Connect(ctx, tr, sessionHost)
	if err != nil {
		h.t.Fatalf("connect to %s: %v\n%s", h.url, err, h.stderr.String())
	}
	h.t.Cleanup(func() { cs.Close() })
	return cs
}

// rawPost sends body, one JSON-RPC message, in HTTP session id as a
// client of protocol 2025-11-25 does, and returns the response's body.
func (h *httpGW) rawPost(t *testing.T, id, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

// TestHTTPGatewayRefusesStrangers: every request without the bearer
// token, with a wrong one, from a foreign Origin or for a foreign Host (DNS
// rebinding) is refused before anything of it is served, and no session
// is made for it.
func TestHTTPGatewayRefusesStrangers(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	l := newLive(t, "")
	h := l.httpGateway(gatewayConfig(l.bin))
	if h.token == "" || len(h.token) < 16 {
		t.Fatalf("no token printed:\n%s", h.stderr.String())
	}
	port := h.url[len("http://127.0.0.1:"):strings.LastIndex(h.url, "/")]
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		host   string
		status int
		says   string
	}{
		{"no token", nil, "", http.StatusUnauthorized, "no bearer token"},
		{"wrong token", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(h.token))}, "", http.StatusUnauthorized, "wrong bearer token"},
		{"token of another scheme", map[string]string{"Authorization": "Basic " + h.token}, "", http.StatusUnauthorized, "no bearer token"},
		{"foreign origin", map[string]string{"Authorization": "Bearer " + h.token, "Origin": "http://evil.example.com"}, "", http.StatusForbidden, "Origin"},
		{"origin of another local port", map[string]string{"Authorization": "Bearer " + h.token, "Origin": "http://127.0.0.1:1"}, "", http.StatusForbidden, "Origin"},
		{"dns rebinding", map[string]string{"Authorization": "Bearer " + h.token}, "evil.example.com:" + port, http.StatusForbidden, "DNS rebinding"},
		{"the right token", map[string]string{"Authorization": "Bearer " + h.token, "Origin": "http://127.0.0.1:" + port}, "", http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(initBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// A refusal is a short body; a session's stream ends with the
			// initialize's answer, which comes once the session is recorded.
			var body []byte
			for {
				var b [4096]byte
				n, err := resp.Body.Read(b[:])
				body = append(body, b[:n]...)
				if err != nil || (tc.status == http.StatusOK && strings.Contains(string(body), `"result"`)) {
					break
				}
			}
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.says) {
				t.Fatalf("status %d, body %q; want %d saying %q", resp.StatusCode, body, tc.status, tc.says)
			}
			if tc.status == http.StatusOK && resp.Header.Get("Mcp-Session-Id") == "" {
				t.Fatal("an initialize with the token got no session")
			}
			if tc.status != http.StatusOK && resp.Header.Get("Mcp-Session-Id") != "" {
				t.Fatal("a refused request got a session")
			}
		})
	}
	// One session was made, by the one request let in.
	h.stop()
	if n := strings.Count(l.sessionsText(), "gateway "); n != 1 {
		t.Errorf("%d sessions recorded, want 1:\n%s", n, l.sessionsText())
	}
}

func (l *live) sessionsText() string {
	out, _ := l.aegis("sessions", "--state-dir", l.state)
	return out
}

// A go-sdk client asks for MCP 2026-07-28, under which it has no session
// of its own: the gateway says so at start, and with --protocol
// 2025-11-25 it withholds that version, so that the same client falls
// back to initialize and gets its own session, and nothing is said.
func TestHTTPGatewaySessionOfItsOwnForA2026ClientWithProtocol20251125(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	t.Parallel() // it mostly waits on processes: beside the others
	const note = "aegis: note: clients of MCP 2026-07-28 have no session: they share one gateway session per principal (all of them, as they send the one token)"
	l := newLive(t, "")
	if h := l.httpGateway(gatewayConfig(l.bin)); !strings.Contains(h.stderr.String(), note) {
		t.Errorf("the default gateway does not say that 2026-07-28 clients share a session:\n%s", h.stderr.String())
	} else {
		h.stop()
	}
	h := l.httpGateway(gatewayConfig(l.bin), "--protocol", "2025-11-25")
	if strings.Contains(h.stderr.String(), "aegis: note: clients of MCP 2026-07-28") {
		t.Errorf("--protocol 2025-11-25 offers no 2026-07-28, yet the gateway says its clients share a session:\n%s", h.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for range 2 {
		c := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-default", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(h.token)}, nil) // the SDK's default: 2026-07-28
		if err != nil {
			t.Fatalf("a go-sdk client with its defaults: %v\n%s", err, h.stderr.String())
		}
		defer cs.Close()
		if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
			t.Fatalf("the client was served %q; --protocol 2025-11-25 offers only the session protocol", v)
		}
		if cs.ID() == "" {
			t.Fatal("the client has no HTTP session id")
		}
		ids = append(ids, cs.ID())
		if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__echo", Arguments: map[string]any{"message": "own"}}); err != nil || r.IsError {
			t.Fatalf("echo: %v %+v", err, r)
		}
	}
	if ids[0] == ids[1] {
		t.Errorf("two clients share the HTTP session %s", ids[0])
	}
}

// TestHTTPGatewaySessionsAreSeparate: two HTTP clients of one gateway are
// two recorded sessions, each with its own active profile and approvals.
// A tool the profile hides is refused over HTTP and never reaches the
// server; an escalation that a human approves with aegis approve applies
// to the session that asked, and only to it; each session's record file
// verifies.
func TestHTTPGatewaySessionsAreSeparate(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	l := newLive(t, "")
	h := l.httpGateway(gatewayConfig(l.bin))
	ctx := context.Background()
	a, b := h.connect(ctx), h.connect(ctx)

	if got := strings.Join(toolNames(t, a), " "); strings.Contains(got, "example__slow") || !strings.Contains(got, "example__echo") {
		t.Fatalf("developer's tools: %s", got)
	}
	if text, isErr := callText(t, a, "example__slow", map[string]any{"ms": 1}); !isErr || !strings.Contains(text, "AEGIS_CAP_DENIED") {
		t.Fatalf("hidden tool over HTTP: %v %s", isErr, text)
	}
	if text, _ := callText(t, a, "example__echo", map[string]any{"message": "over http"}); !strings.Contains(text, "over http") {
		t.Fatalf("echo: %s", text)
	}
	if _, err := a.ReadResource(ctx, &mcp.ReadResourceParams{URI: "example://readme"}); err == nil {
		t.Fatal("a resource outside the profile's patterns was read over HTTP")
	}
	text, _ := callText(t, a, "aegis__set_profile", map[string]any{"name": "deploy"})
	_, esc, _ := strings.Cut(text, "approval=")
	if !strings.HasPrefix(esc, "esc-") {
		t.Fatalf("escalation: %s", text)
	}
	if out, code := l.aegis("approve", esc); code != 0 {
		t.Fatalf("aegis approve %s: %d %s", esc, code, out)
	}
	if text, _ := callText(t, a, "aegis__approval_status", map[string]any{"id": esc}); !strings.Contains(text, "approved") {
		t.Fatalf("approval status: %s", text)
	}
	if text, isErr := callText(t, a, "example__slow", map[string]any{"ms": 1}); isErr || !strings.Contains(text, "slept") {
		t.Fatalf("slow as deploy: %v %s", isErr, text)
	}
	// A call the client cancels (its context: the go-sdk sends
	// notifications/cancelled) is cancelled at once at the server, and
	// recorded as cancelled by the host; the session goes on.
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	start := time.Now()
	if _, err := a.CallTool(cctx, &mcp.CallToolParams{Name: "example__slow", Arguments: map[string]any{"ms": 20000}}); err == nil {
		t.Fatal("a cancelled call was answered")
	}
	cancel()
	if text, _ := callText(t, a, "example__echo", map[string]any{"message": "after the cancel"}); !strings.Contains(text, "after the cancel") {
		t.Fatalf("echo after the cancellation: %s", text)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the cancelled call held the session for %v", took)
	}
	// The other client is still developer, and has nothing approved.
	if text, isErr := callText(t, b, "example__slow", map[string]any{"ms": 1}); !isErr || !strings.Contains(text, "AEGIS_CAP_DENIED") {
		t.Fatalf("the other session ran a tool of the approved profile: %v %s", isErr, text)
	}
	if text, _ := callText(t, b, "aegis__approval_status", map[string]any{"id": esc}); !strings.HasPrefix(text, "unknown") {
		t.Fatalf("the other session sees the approval: %s", text)
	}
	// The method under which the gateway hands the SDK a plain call is not
	// the host's: sent by the host, with a call in it or none, it is
	// refused as a method nobody serves (the transport answers 400, as the
	// SDK's own handler does), and nothing runs or is recorded (the count
	// below).
	for _, params := range []string{`{"name":"example__echo","arguments":{"message":"forged"}}`, ``} {
		body := `{"jsonrpc":"2.0","id":99,"method":"aegis/plain-tools-call"` + map[bool]string{true: `,"params":` + params}[params != ""] + `}`
		if got := h.rawPost(t, a.ID(), body); !strings.Contains(got, "unsupported") || strings.Contains(got, "forged") {
			t.Fatalf("the host's own aegis/plain-tools-call %s was answered %q", body, got)
		}
	}
	a.Close()
	b.Close()
	h.stop()

	var ss []struct {
		ID        string `json:"id"`
		State     string `json:"state"`
		AuditPath string `json:"audit_path"`
		Calls     int    `json:"calls"`
		Profile   string `json:"profile"`
	}
	out, _, code := l.aegisStdout("sessions", "--json", "--state-dir", l.state)
	if code != 0 || json.Unmarshal([]byte(out), &ss) != nil || len(ss) != 2 {
		t.Fatalf("sessions --json: exit %d\n%s", code, out)
	}
	paths := map[string]bool{}
	for _, s := range ss {
		if s.State != "closed" {
			t.Errorf("session %s is %s after SIGTERM, want closed", s.ID, s.State)
		}
		paths[s.AuditPath] = true
	}
	if ss[0].Calls+ss[1].Calls != 9 {
		t.Errorf("calls recorded: %d and %d, want 9 in all", ss[0].Calls, ss[1].Calls)
	}
	// The one cancellation is the host's (no "by": not aegis's at its
	// stop), and the server was told.
	events, _ := l.aegis("events", "list", "--state-dir", l.state, "--json")
	var cancels []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(events), "\n") {
		var e struct {
			Kind    string         `json:"kind"`
			Payload map[string]any `json:"payload"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Kind == "call.cancelled" {
			cancels = append(cancels, e.Payload)
		}
	}
	if len(cancels) != 1 || cancels[0]["by"] != nil || cancels[0]["notified"] != true {
		t.Errorf("call.cancelled events %v, want one of the host's, the server notified", cancels)
	}
	if len(paths) != 2 {
		t.Errorf("two sessions at once wrote %d record files, want 2: %v", len(paths), paths)
	}
	for p := range paths {
		if out, code := l.aegis("verify", p); code != 0 {
			t.Errorf("aegis verify %s: exit %d\n%s", p, code, out)
		}
	}
}

// TestConformanceSuiteThroughTheHTTPGateway runs the official MCP
// conformance suite's server scenarios twice: against the go-sdk's
// conformance server over streamable HTTP, and against aegis gateway
// --listen fronting the same server over stdio (names unprefixed, every
// tool, prompt and resource allowed). aegis must pass exactly as many
// checks, and fail as many, as the server itself.
func TestConformanceSuiteThroughTheHTTPGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite")
	}
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	suite := mcptest.ConformanceSuite(t)
	server := mcptest.GoConformanceServer(t)
	l := newLive(t, "")

	// The server itself, over HTTP.
	port := freePort(t)
	bare := exec.Command(server, "-http=127.0.0.1:"+port, "-stateless=false")
	if err := bare.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bare.Process.Kill(); bare.Wait() })
	waitHTTP(t, "http://127.0.0.1:"+port+"/mcp")
	direct := runConformance(t, suite, "http://127.0.0.1:"+port+"/mcp")

	// The same server behind aegis.
	h := l.httpGateway(conformanceConfig(server), "--listen-without-token")
	if !strings.Contains(h.stderr.String(), "warning: --listen-without-token") {
		t.Errorf("no warning about serving without a token:\n%s", h.stderr.String())
	}
	through := runConformance(t, suite, h.url)
	t.Logf("conformance: server over HTTP %d passed, %d failed; through aegis %d passed, %d failed", direct.passed, direct.failed, through.passed, through.failed)
	if direct.passed < 30 {
		t.Fatalf("the server itself passed only %d checks; is the suite working?\n%s", direct.passed, direct.out)
	}
	if through != (suiteResult{passed: direct.passed, failed: direct.failed, out: through.out}) {
		t.Errorf("through aegis %d passed, %d failed; the server itself %d passed, %d failed\n%s", through.passed, through.failed, direct.passed, direct.failed, through.out)
	}
	h.stop()
	// Every session of the run is recorded and closed.
	if out := l.sessionsText(); strings.Contains(out, "running") || strings.Contains(out, "killed") {
		t.Errorf("sessions after the gateway ended:\n%s", out)
	}
}

type suiteResult struct {
	passed, failed int
	out            string
}

var totalRE = regexp.MustCompile(`Total: (\d+) passed, (\d+) failed`)

func runConformance(t *testing.T, suite []string, url string) suiteResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, suite[0], append(suite[1:], "server", "--url", url)...)
	c.Dir = t.TempDir()          // it writes results/ there
	out, _ := c.CombinedOutput() // exits 1 when a check fails
	m := totalRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("conformance suite against %s printed no total:\n%s", url, out)
	}
	var r suiteResult
	json.Unmarshal(m[1], &r.passed)
	json.Unmarshal(m[2], &r.failed)
	r.out = string(out)
	return r
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer within 30 s", url)
}

// TestHTTPGatewayWithStdioToo: with --stdio, the host on stdin and stdout
// and an HTTP client are served at once, as two sessions; when the stdio
// host leaves, aegis ends, and both sessions are closed.
func TestHTTPGatewayWithStdioToo(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway --listen --stdio")
	}
	l := newLive(t, "")
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(gatewayConfig(l.bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key,
		"--state-dir", l.state, "--listen", "127.0.0.1:0", "--stdio"))
	h := &httpGW{t: t}
	for h.url == "" || h.token == "" {
		select {
		case line, ok := <-w.prompts:
			if !ok {
				t.Fatal("aegis ended before it served")
			}
			if m := servingRE.FindStringSubmatch(line); m != nil {
				h.url = m[1]
			}
			if m := tokenRE.FindStringSubmatch(line); m != nil {
				h.token = m[1]
			}
		case <-time.After(time.Minute):
			t.Fatal("aegis gateway --listen --stdio did not serve within a minute")
		}
	}
	cs := h.connect(context.Background())
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"example__echo","arguments":{"message":"over stdio"}}`); !strings.Contains(a, "over stdio") {
		t.Fatalf("echo over stdio: %s", a)
	}
	if text, _ := callText(t, cs, "example__echo", map[string]any{"message": "over http"}); !strings.Contains(text, "over http") {
		t.Fatalf("echo over HTTP: %s", text)
	}
	w.finish()
	out, _, code := l.aegisStdout("sessions", "--json", "--state-dir", l.state)
	if code != 0 || strings.Count(out, `"state": "closed"`) != 2 {
		t.Fatalf("sessions after the stdio host left: exit %d\n%s", code, out)
	}
}

// TestHTTPGatewaySaysWhyASessionCannotStart: when no server of the file
// starts, the HTTP client's initialize is answered with an error that
// says so, and aegis goes on serving (the next client gets the same).
func TestHTTPGatewaySaysWhyASessionCannotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	l := newLive(t, "")
	h := l.httpGateway(`version: 1
servers:
  gone:
    command: /nonexistent/mcp-server
profiles:
  p:
    allow: ["gone.*"]
activation:
  default_profile: p
`)
	for range 2 {
		c := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, nil)
		_, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url,
			HTTPClient: mcptest.BearerClient(h.token)}, nil)
		if err == nil || !strings.Contains(err.Error(), "no server could be started") || !strings.Contains(err.Error(), "gone") {
			t.Fatalf("connect = %v, want why no server started", err)
		}
	}
}

// TestGatewayUnprefixedNamesThatCollideRefuseTheStart: two servers that
// keep their own names and share a tool name would make one name mean two
// tools; the gateway refuses to start and says which.
func TestGatewayUnprefixedNamesThatCollideRefuseTheStart(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := newLive(t, "")
	server := filepath.Join(l.bin, "aegis-example-server")
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
servers:
  a: {command: `+server+`, prefix: false}
  b: {command: `+server+`, prefix: false}
profiles:
  p: {allow: ["a.*", "b.*"]}
activation: {default_profile: p}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := l.aegis("gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state)
	if code == 0 || !strings.Contains(out, `tool name collision: b.add and a.add both become "add"`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestTokenFileRefusals: a token file that others could read, that is no
// file, or that holds no single token long enough is refused, naming the
// path and never the contents; a good one gives its token.
func TestTokenFileRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "0123456789abcdefXYZ\n", 0o600)
	if tok, err := readTokenFile(good); err != nil || tok != "0123456789abcdefXYZ" {
		t.Fatalf("readTokenFile(good) = %q, %v", tok, err)
	}
	for _, tc := range []struct{ name, path, says string }{
		{"a file the group can read", write("shared", "0123456789abcdefXYZ", 0o640), "chmod 600"},
		{"a directory", dir, "not a regular file"},
		{"a missing file", filepath.Join(dir, "none"), "does not exist"},
		{"an empty file", write("empty", "\n", 0o600), "is empty"},
		{"two tokens", write("two", "0123456789abcdef 0123456789abcdef", 0o600), "more than one token"},
		{"a short token", write("short", "s3cr3t", 0o600), "at least 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTokenFile(tc.path)
			if !errors.Is(err, errTokenFile) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "0123456789abcdef") || strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("readTokenFile = %v, want a refusal saying %q without the contents", err, tc.says)
			}
		})
	}
}

// conformanceConfig is the gateway file of the conformance suite's
// everything server (command server), every feature it has allowed, under
// its own names.
func conformanceConfig(server string) string {
	return `version: 1
servers:
  everything:
    command: ` + server + `
    prefix: false
profiles:
  all:
    allow: ["everything.*"]
    prompts: ["everything.*"]
    resources: ["test://static-text", "test://static-binary", "test://watched-resource", "test://template/**"]
activation:
  default_profile: all
`
}
