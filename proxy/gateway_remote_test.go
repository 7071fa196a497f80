package proxy_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"io/fs"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy/gateway"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

// remoteMCP is a go-sdk MCP server served over HTTP on loopback: a remote
// server of the gateway. It notes every tool it runs and every request,
// and can require a bearer token.
type remoteMCP struct {
	srv *mcp.Server
	ts  *httptest.Server

	bearer string // required Authorization value; "" for none

	mu         sync.Mutex
	ran        []string // tools run, in order
	authorized atomic.Int64
	refused    atomic.Int64
	// reject, while positive, answers that many POSTs with 503 first.
	reject atomic.Int64
	// inner serves MCP; a restart replaces it (a new handler knows no
	// session), and restarted is the server that serves after one.
	inner     atomic.Pointer[http.Handler]
	gate      http.Handler
	restarted *http.Server
	quit      chan struct{} // closed when the test ends
}

// newRemoteMCP serves tools echo and wipe, over streamable HTTP (sse:
// false) or only the legacy SSE transport (sse: true), with TLS or not.
func newRemoteMCP(t *testing.T, sse, tls bool, bearer string) *remoteMCP {
	t.Helper()
	r := &remoteMCP{bearer: bearer, srv: mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)}
	type echoIn struct {
		Message string `json:"message"`
	}
	mcp.AddTool(r.srv, &mcp.Tool{Name: "echo", Description: "says it back"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		r.note("echo")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Message}}}, nil, nil
	})
	mcp.AddTool(r.srv, &mcp.Tool{Name: "wipe", Description: "wipes everything"}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		r.note("wipe")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "wiped"}}}, nil, nil
	})
	mcp.AddTool(r.srv, &mcp.Tool{Name: "slow", Description: "works until cancelled"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		r.note("slow")
		select {
		case <-ctx.Done():
		case <-r.quit: // the test ends: a call whose connection dropped runs on otherwise
		}
		r.note("slow cancelled")
		return nil, nil, ctx.Err()
	})
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.srv }, nil)
	if sse {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return r.srv }, nil)
	}
	r.inner.Store(&h)
	gate := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.bearer != "" && req.Header.Get("Authorization") != r.bearer {
			r.refused.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		r.authorized.Add(1)
		if req.Method == http.MethodPost && r.reject.Add(-1) >= 0 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		(*r.inner.Load()).ServeHTTP(w, req)
	})
	r.gate = gate
	r.ts = httptest.NewUnstartedServer(gate)
	r.ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	if tls {
		r.ts.StartTLS()
	} else {
		r.ts.Start()
	}
	t.Cleanup(r.ts.Close)
	r.quit = make(chan struct{})
	t.Cleanup(func() { close(r.quit) }) // before ts.Close, which waits for the handlers
	return r
}

// restart kills the server (its listener and every connection close at
// once, as when its process dies) and starts it again on the same
// address, with no session: a request with an old session id gets 404.
func (r *remoteMCP) restart(t *testing.T) {
	t.Helper()
	addr := r.ts.Listener.Addr().String()
	r.ts.Config.Close()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.srv }, nil)
	r.inner.Store(&h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	r.restarted = &http.Server{Handler: r.gate, ErrorLog: log.New(io.Discard, "", 0)}
	go r.restarted.Serve(ln)
	t.Cleanup(func() { r.restarted.Close() })
}

func (r *remoteMCP) note(tool string) {
	r.mu.Lock()
	r.ran = append(r.ran, tool)
	r.mu.Unlock()
}

func (r *remoteMCP) tools() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// caFile writes the server's certificate as a PEM bundle.
func (r *remoteMCP) caFile(t *testing.T) string {
	t.Helper()
	return writePEM(t, r.ts.Certificate().Raw)
}

func writePEM(t *testing.T, der []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// otherCA is a CA certificate that signed nothing the test servers use.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not the server's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, der)
}

// hostSession is a go-sdk client as the host of aegis gateway, its stderr
// kept.
type hostSession struct {
	t      *testing.T
	cs     *mcp.ClientSession
	stderr *syncBuffer
}

// runGateway writes config and connects a go-sdk host to aegis gateway
// on it, with extra variables in its environment.
func (c *cli) runGateway(config string, extra ...string) *hostSession {
	c.t.Helper()
	path := filepath.Join(c.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(bin(c.t, "aegis"), "gateway", "--config", path, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = gatewayEnv(c.t, extra...)
	h := &hostSession{t: c.t, stderr: &syncBuffer{}}
	cmd.Stderr = h.stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(c.t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		c.t.Fatalf("connect to aegis gateway: %v; stderr:\n%s", err, h.stderr)
	}
	h.cs = cs
	return h
}

// call calls a tool and returns its text, whether it is an error result,
// and the error.
func (h *hostSession) call(name string, args map[string]any) (string, bool, error) {
	h.t.Helper()
	r, err := h.cs.CallTool(h.t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", false, err
	}
	var text string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return text, r.IsError, nil
}

// storedEvents returns every event of the state directory, once aegis has
// exited.
func storedEvents(t *testing.T, state string) []schemas.Event {
	t.Helper()
	s, err := events.Open(context.Background(), events.Config{Dir: state})
	if err != nil {
		t.Fatalf("open the state directory: %v", err)
	}
	defer s.Close(context.Background())
	var out []schemas.Event
	if err := s.Replay(context.Background(), events.Position{}, func(r events.Record) error {
		out = append(out, r.Event)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// connections returns the server.connection payloads of evs.
func connections(t *testing.T, evs []schemas.Event) []schemas.ServerConnection {
	t.Helper()
	var out []schemas.ServerConnection
	for _, e := range evs {
		if e.Kind != schemas.KindServerConnection {
			continue
		}
		c, err := schemas.DecodeServerConnection(e.Payload)
		if err != nil {
			t.Errorf("server.connection %s: %v", e.Payload, err)
		}
		out = append(out, c)
	}
	return out
}

func states(cs []schemas.ServerConnection) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.State+"/"+c.Transport)
	}
	return out
}

// TestGatewayRemoteServerOverTLSKeepsItsTokenSecret: a remote server over
// streamable HTTP with TLS verified against ca_file, which requires a
// bearer token that the gateway reads from a 0600 file. A call the
// profile allows reaches it with the token and is recorded (intent,
// outcome); a tool the profile hides is refused and never reaches it; the
// token appears nowhere aegis writes (the record, any stored event, frames
// decoded, the state directory, stderr), nor does the url's query.
func TestGatewayRemoteServerOverTLSKeepsItsTokenSecret(t *testing.T) {
	b := make([]byte, 12)
	rand.Read(b)
	token := "s3cr3t-" + hex.EncodeToString(b)
	query := "tenant=q-" + hex.EncodeToString(b[:4])
	remote := newRemoteMCP(t, false, true, "Bearer "+token)
	tokenFile := filepath.Join(t.TempDir(), "remote.token")
	if err := os.WriteFile(tokenFile, []byte("Bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	h := c.runGateway(`version: 1
servers:
  r:
    url: "` + remote.ts.URL + `/mcp?` + query + `"
    headers:
      Authorization: {file: ` + tokenFile + `}
    ca_file: ` + remote.caFile(t) + `
profiles:
  reader:
    allow: [r.echo]
activation:
  default_profile: reader
`)
	res, err := h.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "r__echo") || slices.Contains(names, "r__wipe") {
		t.Errorf("the host sees %v; want r__echo and not r__wipe", names)
	}
	if text, isErr, err := h.call("r__echo", map[string]any{"message": "over tls"}); err != nil || isErr || text != "over tls" {
		t.Errorf("r__echo = %q %v %v; stderr:\n%s", text, isErr, err, h.stderr)
	}
	// Hidden by the profile: refused at the gateway, never sent.
	text, isErr, err := h.call("r__wipe", nil)
	var denied map[string]string
	if err != nil || !isErr || json.Unmarshal([]byte(text), &denied) != nil || denied["code"] != "AEGIS_CAP_DENIED" {
		t.Errorf("r__wipe = %q %v %v; want AEGIS_CAP_DENIED", text, isErr, err)
	}
	h.cs.Close()

	if got := remote.tools(); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("the remote server ran %v; want [echo] (the hidden wipe never sent)", got)
	}
	if remote.authorized.Load() == 0 || remote.refused.Load() != 0 {
		t.Errorf("requests with the token: %d, without: %d", remote.authorized.Load(), remote.refused.Load())
	}
	out, _, code := c.aegis("verify", "--key", c.pub, c.audit)
	if code != 0 {
		t.Fatalf("verify: %s", out)
	}
	hr := &harness{t: t, audit: c.audit}
	ls := hr.lines()
	intents := map[string]bool{}
	for _, l := range ofType(ls, "intent") {
		intents[str(l, "tool_id")] = true
	}
	outcomes := map[string]bool{}
	for _, l := range ofType(ls, "outcome") {
		outcomes[str(l, "tool_id")] = true
	}
	for _, tool := range []string{"r__echo", "r__wipe"} {
		if !intents[tool] || !outcomes[tool] {
			t.Errorf("%s: intent %v, outcome %v", tool, intents[tool], outcomes[tool])
		}
	}

	evs := storedEvents(t, c.state)
	conns := connections(t, evs)
	if got := states(conns); !slices.Equal(got, []string{"connected/streamable", "closed/streamable"}) {
		t.Errorf("server.connection states %v; want connected and closed, streamable", got)
	}
	for _, cn := range conns {
		if cn.URL != remote.ts.URL+"/mcp" || cn.Server != "r" {
			t.Errorf("server.connection %+v; want the url without its query", cn)
		}
	}
	secrets := map[string]string{"the token": token, "the url's query": query}
	for _, e := range evs {
		raw, _ := json.Marshal(e)
		if e.Kind == schemas.KindFrameC2S || e.Kind == schemas.KindFrameS2C || e.Kind == schemas.KindFrameRefusal {
			var fp schemas.FramePayload
			json.Unmarshal(e.Payload, &fp)
			raw = append(raw, fp.Bytes...)
		}
		for what, s := range secrets {
			if bytes.Contains(raw, []byte(s)) {
				t.Errorf("a %s event holds %s", e.Kind, what)
			}
		}
	}
	audit, _ := os.ReadFile(c.audit)
	for what, s := range secrets {
		if bytes.Contains(audit, []byte(s)) {
			t.Errorf("the record holds %s", what)
		}
		if strings.Contains(h.stderr.String(), s) {
			t.Errorf("stderr holds %s", what)
		}
	}
	filepath.WalkDir(c.state, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(token)) {
				t.Errorf("%s holds the token", path)
			}
		}
		return nil
	})
}

// TestGatewayRemoteUntrustedCertificateIsSkipped: a server whose
// certificate does not chain to ca_file is not connected (no token is
// sent to an impostor, and no retry can help, so there is none): it is
// recorded as failed with the TLS reason and skipped, and the gateway
// serves its other servers.
func TestGatewayRemoteUntrustedCertificateIsSkipped(t *testing.T) {
	remote := newRemoteMCP(t, false, true, "")
	c := newCLI(t)
	h := c.runGateway(`version: 1
servers:
  r:
    url: ` + remote.ts.URL + `/mcp
    headers: {Authorization: Bearer not-for-an-impostor}
    ca_file: ` + otherCA(t) + `
  example:
    command: ` + bin(t, "aegis-example-server") + `
profiles:
  p:
    allow: [r.echo, example.echo]
activation:
  default_profile: p
`)
	if text, _, err := h.call("example__echo", map[string]any{"message": "still here"}); err != nil || text != "still here" {
		t.Errorf("example__echo = %q %v", text, err)
	}
	if text, isErr, err := h.call("r__echo", map[string]any{"message": "x"}); err == nil && !isErr {
		t.Errorf("a tool of the skipped server answered %q", text)
	}
	h.cs.Close()
	if remote.authorized.Load() != 0 {
		t.Errorf("the server with an untrusted certificate got %d requests", remote.authorized.Load())
	}
	if s := h.stderr.String(); !strings.Contains(s, "server r skipped: connect:") || !strings.Contains(s, "certificate signed by unknown authority") {
		t.Errorf("stderr does not say why r was skipped:\n%s", s)
	}
	evs := storedEvents(t, c.state)
	conns := connections(t, evs)
	if len(conns) != 1 || conns[0].State != schemas.ConnFailed || conns[0].Attempt != 1 || !strings.Contains(conns[0].Error, "x509: certificate signed by unknown authority") {
		t.Errorf("server.connection events %+v; want one failed at attempt 1 with the TLS reason", conns)
	}
	skipped := false
	for _, e := range evs {
		if e.Kind == schemas.KindNote && bytes.Contains(e.Payload, []byte(`"skipped":"connect"`)) && bytes.Contains(e.Payload, []byte(`"server":"r"`)) {
			skipped = true
		}
	}
	if !skipped {
		t.Error("no note records that r was skipped")
	}
}

// TestGatewayRemoteRefusedCredentialsAreNotRetried: a server that refuses
// the token (401) is not asked again (a retry cannot help, and would only
// send the token again); the failure says to check the headers, and the
// token, read from aegis's environment, appears in no event and not on
// stderr.
func TestGatewayRemoteRefusedCredentialsAreNotRetried(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	const wrong = "Bearer wrong-4d77c0"
	remote := newRemoteMCP(t, false, false, "Bearer right")
	c := newCLI(t)
	h := c.runGateway(`version: 1
servers:
  r:
    url: `+remote.ts.URL+`/mcp
    headers: {Authorization: {env: AEGIS_TEST_REMOTE_TOKEN}}
  example:
    command: `+bin(t, "aegis-example-server")+`
profiles:
  p: {allow: [r.echo, example.echo]}
activation:
  default_profile: p
`, "AEGIS_TEST_REMOTE_TOKEN="+wrong)
	if text, _, err := h.call("example__echo", map[string]any{"message": "up"}); err != nil || text != "up" {
		t.Errorf("example__echo = %q %v", text, err)
	}
	h.cs.Close()
	if n := remote.refused.Load(); n != 1 {
		t.Errorf("the server refused %d requests; want 1 (no retry)", n)
	}
	evs := storedEvents(t, c.state)
	conns := connections(t, evs)
	if len(conns) != 1 || conns[0].State != schemas.ConnFailed || !strings.Contains(conns[0].Error, "401 Unauthorized: check the server's headers") {
		t.Errorf("server.connection %+v; want one failed, saying to check the headers", conns)
	}
	for _, e := range evs {
		if raw, _ := json.Marshal(e); bytes.Contains(raw, []byte("wrong-4d77c0")) {
			t.Errorf("a %s event holds the token", e.Kind)
		}
	}
	if strings.Contains(h.stderr.String(), "wrong-4d77c0") {
		t.Errorf("stderr holds the token:\n%s", h.stderr)
	}
}

// TestGatewayRemoteLegacySSE: a server that speaks only the legacy
// HTTP+SSE transport is reached with the default transport (the
// initialize POST gets 400, so the gateway falls back, as the MCP
// specification says) and with transport: sse; its calls are decided and
// recorded as any.
func TestGatewayRemoteLegacySSE(t *testing.T) {
	for _, tc := range []struct{ name, transport string }{{"FallbackFromStreamable", ""}, {"SSEOnly", "\n    transport: sse"}} {
		t.Run(tc.name, func(t *testing.T) {
			remote := newRemoteMCP(t, true, false, "")
			c := newCLI(t)
			h := c.runGateway(`version: 1
servers:
  legacy:
    url: ` + remote.ts.URL + `/sse` + tc.transport + `
profiles:
  p:
    allow: [legacy.echo]
activation:
  default_profile: p
`)
			if text, isErr, err := h.call("legacy__echo", map[string]any{"message": "over sse"}); err != nil || isErr || text != "over sse" {
				t.Errorf("legacy__echo = %q %v %v; stderr:\n%s", text, isErr, err, h.stderr)
			}
			if _, isErr, _ := h.call("legacy__wipe", nil); !isErr {
				t.Error("legacy__wipe was not refused")
			}
			h.cs.Close()
			if got := remote.tools(); !slices.Equal(got, []string{"echo"}) {
				t.Errorf("the server ran %v", got)
			}
			conns := connections(t, storedEvents(t, c.state))
			if got := states(conns); !slices.Equal(got, []string{"connected/sse", "closed/sse"}) || conns[0].Attempt != 1 {
				t.Errorf("server.connection %+v; want connected over sse at attempt 1, then closed", conns)
			}
		})
	}
}

// remoteEchoConfig is a gateway file with one remote server r at url, and
// a profile that allows its echo.
func remoteEchoConfig(url string) string {
	return `version: 1
servers:
  r: {url: "` + url + `"}
profiles:
  p: {allow: [r.echo]}
activation:
  default_profile: p
`
}

// TestGatewayRemoteRetriesAServerThatIsNotReady: a server that answers its
// first initialize with 503 is tried again after a backoff, and each
// state is recorded: retrying (attempt 1, why), connected (attempt 2).
func TestGatewayRemoteRetriesAServerThatIsNotReady(t *testing.T) {
	remote := newRemoteMCP(t, false, false, "")
	remote.reject.Store(1)
	c := newCLI(t)
	h := c.runGateway(remoteEchoConfig(remote.ts.URL + "/mcp"))
	if text, _, err := h.call("r__echo", map[string]any{"message": "ready"}); err != nil || text != "ready" {
		t.Errorf("r__echo = %q %v", text, err)
	}
	h.cs.Close()
	conns := connections(t, storedEvents(t, c.state))
	if got := states(conns); !slices.Equal(got, []string{"retrying/streamable", "connected/streamable", "closed/streamable"}) {
		t.Fatalf("server.connection states %v", got)
	}
	if conns[0].Attempt != 1 || !strings.Contains(conns[0].Error, "Service Unavailable") || conns[1].Attempt != 2 {
		t.Errorf("server.connection %+v; want retrying at attempt 1 saying why, connected at 2", conns)
	}
	if !strings.Contains(h.stderr.String(), "server r: connection attempt 1 of 3 failed") {
		t.Errorf("stderr:\n%s", h.stderr)
	}
}

// TestGatewayRemoteSessionEndedByTheServerIsReconnected: when a connected
// server ends its session, the gateway records it (failed, why), says so,
// connects the server again and records that (connected, attempt 1);
// later calls reach the new session, and no call was sent twice.
func TestGatewayRemoteSessionEndedByTheServerIsReconnected(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	remote := newRemoteMCP(t, false, false, "")
	c := newCLI(t)
	h := c.runGateway(remoteEchoConfig(remote.ts.URL + "/mcp"))
	if text, _, err := h.call("r__echo", map[string]any{"message": "one"}); err != nil || text != "one" {
		t.Fatalf("r__echo = %q %v", text, err)
	}
	for ss := range remote.srv.Sessions() {
		ss.Close() // the server ends the session
	}
	waitFor(t, 20*time.Second, "the gateway to reconnect", func() bool { return strings.Contains(h.stderr.String(), "server r: reconnected") })
	if text, _, err := h.call("r__echo", map[string]any{"message": "two"}); err != nil || text != "two" {
		t.Fatalf("r__echo after the reconnection = %q %v; stderr:\n%s", text, err, h.stderr)
	}
	h.cs.Close()
	if got := remote.tools(); !slices.Equal(got, []string{"echo", "echo"}) {
		t.Errorf("the server ran %v; want each call once", got)
	}
	if s := h.stderr.String(); !strings.Contains(s, "server r: the session ended") {
		t.Errorf("stderr does not say the session ended:\n%s", s)
	}
	conns := connections(t, storedEvents(t, c.state))
	if got := states(conns); !slices.Equal(got, []string{"connected/streamable", "failed/streamable", "connected/streamable", "closed/streamable"}) ||
		conns[1].Attempt != 0 || conns[2].Attempt != 1 {
		t.Errorf("server.connection %+v; want connected, failed (no attempt: the session was lost), connected at attempt 1, closed", conns)
	}
}

// TestGatewayRemoteServerRestartedMidSession: a remote server killed while
// a call is in flight, and started again on its address (it knows no
// session: 404): the call in flight fails with an error that says the
// connection failed during it; the gateway reconnects, records the loss
// and the new session, lists the server again, and later calls succeed
// without restarting aegis.
func TestGatewayRemoteServerRestartedMidSession(t *testing.T) {
	remote := newRemoteMCP(t, false, false, "")
	c := newCLI(t)
	h := c.runGateway(`version: 1
servers:
  r: {url: "` + remote.ts.URL + `/mcp"}
profiles:
  p: {allow: [r.echo, r.slow]}
activation:
  default_profile: p
`)
	if text, _, err := h.call("r__echo", map[string]any{"message": "before"}); err != nil || text != "before" {
		t.Fatalf("r__echo = %q %v", text, err)
	}
	inflight := make(chan string, 1)
	go func() {
		text, isErr, err := h.call("r__slow", nil)
		switch {
		case err != nil:
			inflight <- err.Error()
		case isErr:
			inflight <- text
		default:
			inflight <- "succeeded: " + text
		}
	}()
	waitFor(t, 10*time.Second, "the slow call to reach the server", func() bool { return slices.Contains(remote.tools(), "slow") })
	remote.restart(t)
	select {
	case got := <-inflight:
		if !strings.Contains(got, "server r") || strings.HasPrefix(got, "succeeded") {
			t.Errorf("the call in flight at the loss: %q; want an error that names the server", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call in flight at the loss never ended")
	}
	waitFor(t, 30*time.Second, "a call after the restart to succeed", func() bool {
		text, _, err := h.call("r__echo", map[string]any{"message": "after"})
		return err == nil && text == "after"
	})
	h.cs.Close()
	conns := connections(t, storedEvents(t, c.state))
	got := states(conns)
	if len(got) < 4 || got[0] != "connected/streamable" || got[1] != "failed/streamable" ||
		got[len(got)-2] != "connected/streamable" || got[len(got)-1] != "closed/streamable" || conns[len(conns)-2].Attempt == 0 {
		t.Errorf("server.connection %+v; want connected, failed, (retrying…), connected at an attempt, closed", conns)
	}
	if s := h.stderr.String(); !strings.Contains(s, "server r: reconnected") {
		t.Errorf("stderr does not say the server was reconnected:\n%s", s)
	}
}

// TestGatewayRemoteConnectionDroppedMidCall: the connections to a remote
// server drop while a call is in flight (the server stays up, with its
// session): the call fails with an error that names the server and says
// it may or may not have reached it; later calls work.
func TestGatewayRemoteConnectionDroppedMidCall(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	remote := newRemoteMCP(t, false, false, "")
	c := newCLI(t)
	h := c.runGateway(`version: 1
servers:
  r: {url: "` + remote.ts.URL + `/mcp"}
profiles:
  p: {allow: [r.echo, r.slow]}
activation:
  default_profile: p
`)
	inflight := make(chan error, 1)
	go func() {
		_, _, err := h.call("r__slow", nil)
		inflight <- err
	}()
	waitFor(t, 10*time.Second, "the slow call to reach the server", func() bool { return slices.Contains(remote.tools(), "slow") })
	remote.ts.CloseClientConnections()
	select {
	case err := <-inflight:
		if err == nil || !strings.Contains(err.Error(), "server r: the connection failed during the call") {
			t.Errorf("the call in flight when the connection dropped: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call in flight when the connection dropped never ended")
	}
	waitFor(t, 20*time.Second, "a call after the drop to succeed", func() bool {
		text, _, err := h.call("r__echo", map[string]any{"message": "after"})
		return err == nil && text == "after"
	})
	h.cs.Close()
}

// TestGatewayRemoteCancelReachesServerInProcess runs the gateway in this
// process (so that the race detector sees it), on a real store in a
// temporary directory: a call the host cancels is cancelled at the remote
// server, whose acceptance of notifications/cancelled is recorded as
// notified; when the host leaves, the session is closed and recorded so.
func TestGatewayRemoteCancelReachesServerInProcess(t *testing.T) {
	serialOnly(t)
	remote := newRemoteMCP(t, false, true, "Bearer in-process-token")
	hr := newHarness(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("Bearer in-process-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := policy.ParseGateway("aegis.yaml", []byte(`servers:
  r:
    url: "`+remote.ts.URL+`/mcp"
    headers: {Authorization: {file: `+tokenFile+`}}
    ca_file: `+remote.caFile(t)+`
profiles:
  p: {allow: [r.slow, r.echo]}
activation: {default_profile: p}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := gw.Server("r")
	rs, err := gateway.RemoteServerOf(s, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	hostR, gwW := io.Pipe()
	gwR, hostW := io.Pipe()
	ctx := context.Background()
	var stderr syncBuffer
	done := make(chan error, 1)
	var sess *projector.Session
	go func() {
		var err error
		sess, err = gateway.Run(ctx, gateway.Config{
			Servers: []gateway.Server{{Name: "r", Remote: rs}}, Policy: gw, DefaultProfile: gw.DefaultProfile(), Verbose: true,
			Rules: gw.Rules(), OnToolChange: gw.OnToolChange(), Stdin: gwR, Stdout: gwW, Stderr: &stderr, Grace: 500 * time.Millisecond,
			Open: func(map[string]sandbox.Fact) (*projector.Session, error) {
				return projector.OpenSession(ctx, projector.SessionConfig{Store: hr.store, Key: hr.key, AuditPath: hr.audit, Argv: []string{"gateway", "test"}, Version: "test"})
			},
		})
		done <- err
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: hostR, Writer: hostW}, nil)
	if err != nil {
		t.Fatalf("connect: %v; stderr:\n%s", err, &stderr)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel() // when the server runs slow, or after 10 s
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !slices.Contains(remote.tools(), "slow"); {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if _, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "r__slow"}); err == nil {
		t.Error("the cancelled call answered")
	}
	waitFor(t, 10*time.Second, "the remote server to see the cancellation", func() bool { return slices.Contains(remote.tools(), "slow cancelled") })
	if text, _, err := (&hostSession{t: t, cs: cs}).call("r__echo", map[string]any{"message": "after"}); err != nil || text != "after" {
		t.Errorf("r__echo after a cancellation = %q %v", text, err)
	}
	cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Gateway: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not end after the host left")
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var cancelled []map[string]any
	var conns []schemas.Event
	for _, r := range hr.events() {
		switch r.Event.Kind {
		case schemas.KindCallCancelled:
			var m map[string]any
			json.Unmarshal(r.Event.Payload, &m)
			cancelled = append(cancelled, m)
		case schemas.KindServerConnection:
			conns = append(conns, r.Event)
		}
	}
	if len(cancelled) != 1 || cancelled[0]["notified"] != true || cancelled[0]["tool_id"] != "r__slow" {
		t.Errorf("call.cancelled %v; want one for r__slow, notified", cancelled)
	}
	if got := states(connections(t, conns)); !slices.Equal(got, []string{"connected/streamable", "closed/streamable"}) {
		t.Errorf("server.connection states %v", got)
	}
	if v := hr.verify(); v.Verdict != verifier.Verified {
		t.Errorf("verify: %+v", v)
	}
}
