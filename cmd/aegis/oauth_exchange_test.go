package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// exchangeServers starts, in this process, two go-sdk streamable HTTP
// servers that take only JWT access tokens of issuer for their own url
// (aud), notes and vault; their whoami tool says the subject and client
// of the token it was called with. seen gets every token they were sent.
func exchangeServers(t *testing.T, issuer string) (notes, vault string, seen func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	provider, err := oidc.NewProvider(context.Background(), issuer)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tokens []string
	mux := http.NewServeMux()
	for _, name := range []string{"notes", "vault"} {
		u := base + "/" + name + "/mcp"
		srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "says whom the token is for"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			who := "nobody"
			if ti := req.Extra.TokenInfo; ti != nil {
				who = fmt.Sprintf("%s via %v", ti.UserID, ti.Extra["client_id"])
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: who}}}, nil, nil
		})
		verifier := provider.Verifier(&oidc.Config{ClientID: u})
		verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
			mu.Lock()
			tokens = append(tokens, token)
			mu.Unlock()
			idt, err := verifier.Verify(ctx, token)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
			}
			var c struct {
				ClientID string `json:"client_id"`
			}
			idt.Claims(&c)
			return &auth.TokenInfo{UserID: idt.Subject, Expiration: idt.Expiry, Extra: map[string]any{"client_id": c.ClientID}}, nil
		}
		mux.Handle("/"+name+"/mcp", auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return base + "/notes/mcp", base + "/vault/mcp", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), tokens...)
	}
}

// TestOAuthGatewayOnBehalfOfEachCaller: two users of a real OpenID
// provider call through gateway --listen to url servers with oauth:
// token_exchange:. Each user's calls reach notes as that user (the
// provider exchanged the caller's token for one for notes, RFC 8693, the
// gateway authenticating as its own client), one exchange per session
// however many calls; the provider refuses to exchange for vault, which
// refuses only vault's calls, saying why, and is recorded; a session
// without a caller token (the static token) is refused both servers,
// never reaching them with another token. No token nor the gateway's
// secret is in the record, the stream or stderr.
func TestOAuthGatewayOnBehalfOfEachCaller(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen, an OpenID provider and two MCP servers")
	}
	o := sharedOP(t)
	l := newLive(t, "")
	notes, vault, seen := exchangeServers(t, o.issuer)
	secretFile := filepath.Join(l.dir, "gateway.secret")
	if err := os.WriteFile(secretFile, []byte(opGatewaySecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exchange := func(u string) string {
		return `
    url: ` + u + `
    oauth:
      token_exchange:
        token_endpoint: ` + o.issuer + `/oauth/token
        client_id: ` + opGatewayClient + `
        client_secret: {file: ` + secretFile + `}
        audience: ` + u + `
        scopes: [openid]`
	}
	config := `version: 1
servers:
  notes:` + exchange(notes) + `
  vault:` + exchange(vault) + `
  example:
    command: ` + filepath.Join(l.bin, "aegis-example-server") + `
profiles:
  p: {allow: [notes.whoami, vault.whoami, example.echo]}
activation:
  default_profile: p
`
	h := l.httpGateway(config, "--oauth-issuer", o.issuer, "--oauth-audience", opClient, "--oauth-scope", "mcp:tools")
	alice, aliceCode := o.login(t, opClient, "test-user@127.0.0.1", "openid mcp:tools")
	bob, bobCode := o.login(t, opClient, "test-user2", "openid mcp:tools")
	before := o.st.exchanges.Load()

	// The first token exchanged for notes has already expired: notes
	// answers 401, and the gateway exchanges alice's token again.
	o.st.expireNext.Store(true)
	a := connectAs(t, h, alice)
	b := connectAs(t, h, bob)
	for _, c := range []struct {
		cs   *mcp.ClientSession
		user string
	}{{a, opUser1}, {b, opUser2}, {a, opUser1}, {b, opUser2}} {
		text, isErr := callText(t, c.cs, "notes__whoami", nil)
		if want := c.user + " via " + opGatewayClient; isErr || text != want {
			t.Fatalf("notes__whoami as %s: %v %q, want %q\n%s", c.user, isErr, text, want, h.stderr.String())
		}
	}
	// One exchange for notes and one refused for vault, per session, and
	// one again for the token notes refused.
	if n := o.st.exchanges.Load() - before; n != 5 {
		t.Errorf("%d token exchanges for two sessions of two servers, want 5 (one per session and server, one for the expired token)", n)
	}
	for _, cs := range []*mcp.ClientSession{a, b} {
		text, isErr := callText(t, cs, "vault__whoami", nil)
		if !isErr || !strings.Contains(text, "server vault is not available in this session (server vault: the authorization server refused to exchange the caller's token for one for the server (invalid_target") || !strings.Contains(text, "invalid_target") || !strings.Contains(text, "no tokens are exchanged for the vault") {
			t.Errorf("vault__whoami was not refused saying why: %v %q", isErr, text)
		}
		if text, isErr := callText(t, cs, "example__echo", map[string]any{"message": "still here"}); isErr || !strings.Contains(text, "still here") {
			t.Errorf("example__echo beside the refused vault: %v %q", isErr, text)
		}
	}
	a.Close()
	b.Close()
	h.stop()

	// A session without a caller token: neither server is reached.
	sent := len(seen())
	hs := l.httpGateway(config)
	s := connectAs(t, hs, hs.token)
	text, isErr := callText(t, s, "notes__whoami", nil)
	if !isErr || !strings.Contains(text, "server notes is reached only on behalf of a caller") {
		t.Errorf("notes__whoami without a caller token: %v %q", isErr, text)
	}
	if n := len(seen()); n != sent {
		t.Errorf("notes or vault got %d requests from a session without a caller token", n-sent)
	}
	s.Close()
	hs.stop()

	// The record says whom notes was reached for, and that vault's
	// exchange was refused; nothing holds a token or the secret.
	_, stream, _ := cmd(t, nil, "events", "list", "--state-dir", l.state, "--json")
	for _, want := range []string{`"token_exchange":"exchanged"`, `"on_behalf_of":"` + opUser2 + `@` + o.issuer, `"token_exchange":"refused"`} {
		if !strings.Contains(strings.ReplaceAll(stream, `\"`, `"`), want) {
			t.Errorf("the stream lacks %s", want)
		}
	}
	var records []string
	files, _ := filepath.Glob(strings.TrimSuffix(l.audit, ".aarl") + "*.aarl")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, string(data))
	}
	secrets := map[string]string{"alice's token": alice, "alice's code": aliceCode, "bob's token": bob, "bob's code": bobCode,
		"the gateway's client secret": opGatewaySecret}
	for i, tok := range seen() {
		secrets[fmt.Sprintf("exchanged token %d", i)] = tok
	}
	if len(seen()) == 0 {
		t.Fatal("the servers saw no token")
	}
	for _, tok := range seen() {
		if tok == alice || tok == bob {
			t.Error("a server got the caller's own token, not an exchanged one")
		}
	}
	places := map[string]string{"the record": strings.Join(records, ""), "the stream": stream,
		"the gateway's stderr": h.stderr.String() + hs.stderr.String()}
	for where, text := range places {
		if text == "" {
			t.Errorf("%s is empty", where)
		}
		for what, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}
}
