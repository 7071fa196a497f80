package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/aegis-dev/aegis/proxy/gateway"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// oidcWorld is a real OpenID provider (the one github.com/zitadel/oidc/v3
// ships as its example, in this process, on loopback) and a go-sdk MCP
// server over streamable HTTP that accepts only the provider's access
// tokens (it asks the provider's userinfo endpoint about each) and names
// its authorization server in its protected resource metadata (RFC 9728).
type oidcWorld struct {
	issuer string
	store  *storage.Storage
	mcpURL string

	mu     sync.Mutex
	grants []string // grant_type and resource of each token request, in order
	codes  []string // every authorization code the provider issued
}

func newOIDCWorld(t *testing.T) *oidcWorld {
	t.Helper()
	w := &oidcWorld{}
	opLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.issuer = "http://" + opLn.Addr().String()
	w.store = storage.NewStorageWithClients(storage.NewUserStore(w.issuer), map[string]*storage.Client{
		// A native client: PKCE, no secret, any port of a loopback redirect.
		"aegis": storage.NativeClient("aegis", "http://127.0.0.1/callback"),
	})
	op := exampleop.SetupServer(w.issuer, w.store, nil, false)
	opSrv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/token") {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			q, _ := url.ParseQuery(string(b))
			w.mu.Lock()
			w.grants = append(w.grants, q.Get("grant_type")+" resource="+q.Get("resource"))
			w.mu.Unlock()
		}
		if loc := r.URL.Query().Get("code"); loc != "" {
			w.note(loc)
		}
		op.ServeHTTP(rw, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go opSrv.Serve(opLn)
	t.Cleanup(func() { opSrv.Close() })

	mcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + mcpLn.Addr().String()
	w.mcpURL = base + "/mcp"
	srv := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "says who the token is for"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		who := "nobody"
		if ti := req.Extra.TokenInfo; ti != nil {
			who = ti.UserID
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: who}}}, nil, nil
	})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.issuer+"/userinfo", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var info struct {
			Sub string `json:"sub"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&info) != nil || info.Sub == "" {
			return nil, fmt.Errorf("%w: the provider does not know it", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: info.Sub}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: w.mcpURL, AuthorizationServers: []string{w.issuer}, ScopesSupported: []string{"openid"},
	}))
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp", AllowMissingExpiration: true,
	})(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	mcpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go mcpSrv.Serve(mcpLn)
	t.Cleanup(func() { mcpSrv.Close() })
	return w
}

func (w *oidcWorld) note(code string) {
	w.mu.Lock()
	w.codes = append(w.codes, code)
	w.mu.Unlock()
}

func (w *oidcWorld) tokenRequests() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.grants...)
}

// login runs aegis auth login SERVER and plays the user at the
// provider without a browser: an HTTP client opens the address aegis
// prints, posts the provider's login form as test-user2, and follows the
// redirect back to aegis's loopback address, or, when paste, stops there
// and pastes that address on aegis's stdin as a user of a headless
// machine would. It returns aegis's stdout and stderr.
func (w *oidcWorld) login(t *testing.T, c *cli, config, server string, paste bool) (string, string) {
	t.Helper()
	cmd := exec.Command(bin(t, "aegis"), "auth", "login", server, "--config", config, "--state-dir", c.state, "--timeout", "60s")
	cmd.Env = gatewayEnv(t)
	stdin, _ := cmd.StdinPipe()
	stderrR, _ := cmd.StderrPipe()
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderrR)
		for sc.Scan() {
			line := sc.Text()
			stderr.Write([]byte(line + "\n"))
			if s := strings.TrimSpace(line); strings.HasPrefix(s, "http") {
				select {
				case addr <- s:
				default:
				}
			}
		}
	}()
	var authURL string
	select {
	case authURL = <-addr:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("aegis auth login printed no address:\n%s", stderr.String())
	}
	jar, _ := cookiejar.New(nil)
	var back string // the address the provider sends the browser back to
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if code := r.URL.Query().Get("code"); code != "" {
			w.note(code)
			back = r.URL.String()
			if paste {
				return http.ErrUseLastResponse
			}
		}
		return nil
	}}
	resp, err := browser.Get(authURL)
	if err != nil {
		t.Fatalf("open the authorization address: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("the provider did not show its login form (ended at %s)", resp.Request.URL.Path)
	}
	resp, err = browser.PostForm(w.issuer+"/login/username", url.Values{"username": {"test-user2"}, "password": {"verysecure"}, "id": {id}})
	if err != nil {
		t.Fatalf("post the login form: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if back == "" {
		t.Fatalf("the provider did not send the browser back with a code (status %d at %s)", resp.StatusCode, resp.Request.URL)
	}
	if paste {
		io.WriteString(stdin, back+"\n")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("aegis auth login: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("aegis auth login did not end:\n%s", stderr.String())
	}
	stdin.Close()
	return stdout.String(), stderr.String()
}

// TestGatewayOAuthLoginRefreshAndRelogin, against a real OpenID provider
// and an MCP server that takes only its tokens:
//
//   - aegis auth login discovers the provider from the server's 401
//     (RFC 9728, then OpenID discovery), logs in with the authorization
//     code and PKCE, the server's url as resource (RFC 8707), and stores
//     the token encrypted; the gateway's calls then reach the server as
//     the user who logged in;
//   - a token that has expired is refreshed before the call, with the
//     resource, and the call succeeds;
//   - when the provider ends the user's session mid-run (its tokens
//     revoked), the server answers 401, the refresh is refused: only that server's calls are refused, each
//     with an error that says to run aegis auth login SERVER, while the
//     gateway's other server still answers; a login again (the pasted
//     address of a headless machine) makes its calls work again, without
//     restarting the gateway;
//   - no access token, refresh token or authorization code appears in
//     the record, the stream, stderr or the state directory's files.
func TestGatewayOAuthLoginRefreshAndRelogin(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	w := newOIDCWorld(t)
	plain := newRemoteMCP(t, false, false, "")
	c := newCLI(t)
	config := `version: 1
servers:
  wiki:
    url: "` + w.mcpURL + `"
    oauth: {client_id: aegis}
  open: {url: "` + plain.ts.URL + `/mcp"}
profiles:
  p: {allow: [wiki.whoami, open.echo]}
activation:
  default_profile: p
`
	path := filepath.Join(c.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, loginErr := w.login(t, c, path, "wiki", false)
	if !strings.Contains(out, "logged in to server wiki") {
		t.Fatalf("aegis auth login stdout %q; stderr:\n%s", out, loginErr)
	}
	store := gateway.NewTokenStore(c.state)
	tok, err := store.Load("wiki")
	if err != nil {
		t.Fatal(err)
	}
	if tok.Resource != w.mcpURL || tok.RefreshToken == "" || tok.Issuer != w.issuer {
		t.Fatalf("stored token: resource %q issuer %q, refresh token %v; want the server's url, the provider, a refresh token", tok.Resource, tok.Issuer, tok.RefreshToken != "")
	}
	secrets := []string{tok.AccessToken, tok.RefreshToken}
	var stderrs []string

	t.Run("CallsReachTheServerAsTheUser", func(t *testing.T) {
		h := c.runGateway(config)
		defer func() { h.cs.Close(); stderrs = append(stderrs, h.stderr.String()) }()
		if text, isErr, err := h.call("wiki__whoami", nil); err != nil || isErr || text != "id2" {
			t.Fatalf("wiki__whoami = %q %v %v; stderr:\n%s", text, isErr, err, h.stderr)
		}
	})

	t.Run("AnExpiredTokenIsRefreshedWithItsResource", func(t *testing.T) {
		tok, _ := store.Load("wiki")
		tok.Expiry = time.Now().Add(-time.Minute)
		if err := store.Save(tok); err != nil {
			t.Fatal(err)
		}
		before := len(w.tokenRequests())
		h := c.runGateway(config)
		defer func() { h.cs.Close(); stderrs = append(stderrs, h.stderr.String()) }()
		if text, _, err := h.call("wiki__whoami", nil); err != nil || text != "id2" {
			t.Fatalf("wiki__whoami after expiry = %q %v; stderr:\n%s", text, err, h.stderr)
		}
		got := w.tokenRequests()[before:]
		if len(got) != 1 || got[0] != "refresh_token resource="+w.mcpURL {
			t.Errorf("token requests %q; want one refresh with resource=%s", got, w.mcpURL)
		}
		now, _ := store.Load("wiki")
		if now.AccessToken == tok.AccessToken || !now.Expiry.After(time.Now()) {
			t.Error("the refreshed token was not stored")
		}
		secrets = append(secrets, now.AccessToken, now.RefreshToken)
	})

	t.Run("ARefusedRefreshRefusesOnlyThatServerUntilALogin", func(t *testing.T) {
		h := c.runGateway(config)
		defer func() { h.cs.Close(); stderrs = append(stderrs, h.stderr.String()) }()
		if text, _, err := h.call("wiki__whoami", nil); err != nil || text != "id2" {
			t.Fatalf("wiki__whoami = %q %v", text, err)
		}
		// The provider ends the user's session mid-run: its access and
		// refresh tokens are revoked.
		if err := w.store.TerminateSession(context.Background(), "id2", "aegis"); err != nil {
			t.Fatal(err)
		}
		_, _, err := h.call("wiki__whoami", nil)
		if err == nil || !strings.Contains(err.Error(), "aegis auth login wiki") {
			t.Fatalf("wiki__whoami with a revoked session: %v; want a refusal that says to run aegis auth login wiki\nstderr:\n%s", err, h.stderr)
		}
		if text, _, err := h.call("open__echo", map[string]any{"message": "still here"}); err != nil || text != "still here" {
			t.Errorf("the other server: open__echo = %q %v", text, err)
		}
		if _, _, err := h.call("wiki__whoami", nil); err == nil || !strings.Contains(err.Error(), "aegis auth login wiki") {
			t.Errorf("a later call: %v; want the same refusal", err)
		}

		// A login again, by the pasted address of a headless machine,
		// while the gateway runs: its next call takes the new token.
		out, e := w.login(t, c, path, "wiki", true)
		stderrs = append(stderrs, e)
		if !strings.Contains(out, "logged in to server wiki") {
			t.Fatalf("aegis auth login stdout %q; stderr:\n%s", out, e)
		}
		tok, _ := store.Load("wiki")
		secrets = append(secrets, tok.AccessToken, tok.RefreshToken)
		if text, _, err := h.call("wiki__whoami", nil); err != nil || text != "id2" {
			t.Fatalf("wiki__whoami after a new login = %q %v; stderr:\n%s", text, err, h.stderr)
		}
	})

	t.Run("NoTokenOrCodeIsWrittenAnywhere", func(t *testing.T) {
		w.mu.Lock()
		secrets = append(secrets, w.codes...)
		w.mu.Unlock()
		if len(w.codes) < 2 {
			t.Fatalf("saw %d authorization codes; want one per login", len(w.codes))
		}
		var where []string
		check := func(name string, b []byte) {
			for _, s := range secrets {
				if len(s) >= 8 && bytes.Contains(b, []byte(s)) {
					where = append(where, name)
					return
				}
			}
		}
		check("stderr", []byte(loginErr+strings.Join(stderrs, "")))
		audit, err := os.ReadFile(c.audit)
		if err != nil {
			t.Fatal(err)
		}
		check("the record", audit)
		for _, e := range storedEvents(t, c.state) {
			b, _ := json.Marshal(e)
			check("event "+string(e.Kind), b)
			check("event payload "+string(e.Kind), e.Payload)
		}
		filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			check(p, b)
			return nil
		})
		if len(where) > 0 {
			t.Errorf("a token or code appears in: %s", strings.Join(where, ", "))
		}
	})
}

var scenarioRE = regexp.MustCompile(`(?m)^([✓✗]) (auth/[a-z0-9-]+): (\d+) passed, (\d+) failed`)

// authSuite runs the conformance suite's client authorization scenarios
// (suite auth) with client, and returns each scenario's passed and failed
// checks, and the output.
func authSuite(t *testing.T, suite []string, client string) (map[string][2]int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, suite[0], append(suite[1:], "client", "--command", client, "--suite", "auth")...)
	c.Dir = t.TempDir() // it writes results/ there
	out, _ := c.CombinedOutput()
	res := map[string][2]int{}
	for _, m := range scenarioRE.FindAllStringSubmatch(string(out), -1) {
		var p, f int
		fmt.Sscan(m[3], &p)
		fmt.Sscan(m[4], &f)
		res[m[2]] = [2]int{p, f}
	}
	if len(res) == 0 {
		t.Fatalf("the conformance suite printed no scenario:\n%s", out)
	}
	return res, string(out)
}

// TestConformanceAuthScenariosThroughTheGateway runs the official MCP
// conformance suite's client authorization scenarios twice: with the
// go-sdk's conformance client, and through aegis (aegis auth login, then
// aegis gateway, driven as a host: proxy/testdata/authclient). Every
// scenario that the go-sdk's client passes passes through aegis,
// step-up authorization (403 insufficient_scope mid-run) included: the
// gateway runs the flow and the host, which takes URL elicitations,
// opens its authorization request and calls again. The host checks that
// no token or code is in the record or in aegis's stderr.
func TestConformanceAuthScenariosThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite")
	}
	t.Parallel() // it mostly waits on node and on the processes it starts
	suite := mcptest.ConformanceSuite(t)
	// A host without URL elicitation, meanwhile: the step-up refusal it
	// gets names the scopes and says to log in, as always.
	tmp := t.TempDir()
	report := filepath.Join(tmp, "said")
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(pcancel)
	plain := exec.CommandContext(pctx, suite[0], append(suite[1:], "client", "--command", bin(t, "authclient"), "--scenario", "auth/scope-step-up")...)
	plain.Dir, plain.Env = tmp, append(os.Environ(), "AUTHCLIENT_PLAIN_REPORT="+report)
	var pout bytes.Buffer
	plain.Stdout, plain.Stderr = &pout, &pout
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	direct, dout := authSuite(t, suite, mcptest.GoConformanceClient(t))
	plain.Wait() // the scenario fails: the host does not step up
	through, tout := authSuite(t, suite, bin(t, "authclient"))
	var dp, df, tp, tf, dPass, tPass int
	for _, r := range direct {
		dp, df = dp+r[0], df+r[1]
		if r[1] == 0 {
			dPass++
		}
	}
	for _, r := range through {
		tp, tf = tp+r[0], tf+r[1]
		if r[1] == 0 {
			tPass++
		}
	}
	t.Logf("conformance auth scenarios: go-sdk client %d/%d scenarios (%d checks passed, %d failed); through aegis %d/%d scenarios (%d passed, %d failed)",
		dPass, len(direct), dp, df, tPass, len(through), tp, tf)
	if dPass < 10 {
		t.Fatalf("the go-sdk's client passed only %d scenarios; is the suite working?\n%s", dPass, dout)
	}
	for s, r := range direct {
		if r[1] != 0 {
			continue
		}
		if got, ok := through[s]; !ok || got[1] != 0 {
			t.Errorf("%s: the go-sdk's client passes it; through aegis %v", s, got)
		}
	}
	if r, ok := through["auth/scope-step-up"]; !ok || r[0] == 0 || r[1] != 0 {
		t.Errorf("auth/scope-step-up through aegis: %v; want it passed", r)
	}
	said, _ := os.ReadFile(report)
	if want := `aegis: server s: the server refused the call for want of scopes "mcp:basic mcp:write" (403 insufficient_scope), which its token lacks: add them to oauth: scopes: in the gateway file and run aegis auth login s`; string(said) != want {
		t.Errorf("a host without URL elicitation was told %q; want %q\n%s", said, want, pout.String())
	}
	if t.Failed() {
		t.Logf("through aegis:\n%s", tout)
	}
}
