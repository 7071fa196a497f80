package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// oauthConfig: everyone may echo; only group eng may add; eng starts in
// a profile bound to it, which also runs slow.
func oauthConfig(bin string) string {
	return `version: 1
servers:
  example:
    command: ` + filepath.Join(bin, "aegis-example-server") + `
profiles:
  developer:
    allow: [example.echo, example.add]
  eng:
    extends: developer
    allow: [example.slow]
    for_groups: [eng]
activation:
  default_profile: developer
rules:
  - id: add-is-for-eng
    action: deny
    tool: example__add
    when: '!(has(principal.claims.groups) && "eng" in principal.claims.groups)'
    reason: only eng adds
  - id: bob-asks-first
    action: pending_approval
    tool: example__echo
    when: principal.sub == "id2" && args.message == "ask"
`
}

// oauthRequest sends an initialize to the gateway with token (none when
// ""), and returns the status, the WWW-Authenticate header, the session
// id and the body.
func oauthRequest(t *testing.T, h *httpGW, token, session string) (int, string, string, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	if session != "" {
		body = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	}
	req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b []byte
	for {
		var buf [4096]byte
		n, err := resp.Body.Read(buf[:])
		b = append(b, buf[:n]...)
		if err != nil || strings.Contains(string(b), `"result"`) {
			break
		}
	}
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), resp.Header.Get("Mcp-Session-Id"), string(b)
}

func connectAs(t *testing.T, h *httpGW, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(token)}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, h.stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestOAuthGatewayRecordsWhoCalls: two users of a real OpenID provider
// (zitadel's, in this process), in different groups, call through
// gateway --listen with their own access tokens: a principal rule lets
// the one in eng add and refuses the other, and the record names each
// by subject in its open and intent lines. A token that expired, one
// for another audience, one without the required scope, none at all,
// and another user's token in a session are refused with the
// WWW-Authenticate the MCP authorization spec asks for. No token nor
// authorization code is in the record, the stream, stderr or the
// console.
func TestOAuthGatewayRecordsWhoCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen and an OpenID provider")
	}
	o := sharedOP(t)
	l := newLive(t, "")
	h := l.httpGateway(oauthConfig(l.bin), "--oauth-issuer", o.issuer, "--oauth-audience", opClient,
		"--oauth-scope", "mcp:tools", "--oauth-claim", "groups")
	if h.token != "" {
		t.Fatalf("a static token was printed beside OAuth:\n%s", h.stderr.String())
	}
	meta := strings.Replace(h.url, "/mcp", "/.well-known/oauth-protected-resource/mcp", 1)

	alice, aliceCode := o.login(t, opClient, "test-user@127.0.0.1", "openid mcp:tools")
	bob, bobCode := o.login(t, opClient, "test-user2", "openid mcp:tools")
	bobID := o.lastID
	secrets := map[string]string{"alice's token": alice, "alice's code": aliceCode, "bob's token": bob, "bob's code": bobCode,
		"the web client's secret": opWebSecret, "bob's ID token": bobID}

	t.Run("protected resource metadata", func(t *testing.T) {
		resp, err := http.Get(meta)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			Resource string   `json:"resource"`
			Servers  []string `json:"authorization_servers"`
			Scopes   []string `json:"scopes_supported"`
		}
		json.NewDecoder(resp.Body).Decode(&m)
		if resp.StatusCode != 200 || m.Resource != h.url || len(m.Servers) != 1 || m.Servers[0] != o.issuer || strings.Join(m.Scopes, " ") != "mcp:tools" {
			t.Fatalf("%s: %+v", resp.Status, m)
		}
	})

	a, b := connectAs(t, h, alice), connectAs(t, h, bob)
	if text, isErr := callText(t, a, "example__add", map[string]any{"a": 2, "b": 3}); isErr || !strings.Contains(text, "5") {
		t.Fatalf("alice (eng) add: %v %s", isErr, text)
	}
	if text, isErr := callText(t, b, "example__add", map[string]any{"a": 2, "b": 3}); !isErr || !strings.Contains(text, "only eng adds") {
		t.Fatalf("bob (sales) add was not refused by the principal rule: %v %s", isErr, text)
	}
	if text, isErr := callText(t, b, "example__echo", map[string]any{"message": "from bob"}); isErr || !strings.Contains(text, "from bob") {
		t.Fatalf("bob echo: %v %s", isErr, text)
	}
	// An approval names whose call it lets through: to the approver, in
	// aegis approvals, and in the signed decision line.
	text, _ := callText(t, b, "example__echo", map[string]any{"message": "ask"})
	var refusal struct {
		ApprovalID string `json:"approval_id"`
	}
	if json.Unmarshal([]byte(text), &refusal); refusal.ApprovalID == "" {
		t.Fatalf("bob's echo was not held for approval: %s", text)
	}
	if out, _ := l.aegis("approvals", "--state-dir", l.state); !strings.Contains(out, "example__echo by "+opUser2) {
		t.Errorf("aegis approvals does not name bob:\n%s", out)
	}
	if out, code := l.aegis("approve", "--state-dir", l.state, refusal.ApprovalID); code != 0 || !strings.Contains(out, "by "+opUser2) {
		t.Errorf("aegis approve: %d %s", code, out)
	}
	if text, isErr := callText(t, b, "example__echo", map[string]any{"message": "ask"}); isErr || !strings.Contains(text, "ask") {
		t.Fatalf("bob's approved echo: %v %s", isErr, text)
	}
	// alice starts in the profile bound to her group; bob may not switch
	// to it.
	if text, isErr := callText(t, a, "example__slow", map[string]any{"ms": 1}); isErr {
		t.Fatalf("alice's slow in eng: %s", text)
	}
	if text, _ := callText(t, b, "aegis__set_profile", map[string]any{"name": "eng"}); !strings.HasPrefix(text, "code=AEGIS_PROFILE_NOT_YOURS active=developer") {
		t.Fatalf("bob's switch to eng: %s", text)
	}
	if text, isErr := callText(t, b, "example__slow", map[string]any{"ms": 1}); !isErr || !strings.Contains(text, "AEGIS_CAP_DENIED") {
		t.Fatalf("bob ran slow: %v %s", isErr, text)
	}

	o.st.expireNext.Store(true)
	expired, expiredCode := o.login(t, opClient, "test-user@127.0.0.1", "openid mcp:tools")
	other, otherCode := o.login(t, opOtherClient, "test-user@127.0.0.1", "openid mcp:tools")
	noScope, noScopeCode := o.login(t, opClient, "test-user@127.0.0.1", "openid")
	for k, v := range map[string]string{"expired token": expired, "expired code": expiredCode, "other token": other, "other code": otherCode,
		"scope-less token": noScope, "scope-less code": noScopeCode} {
		secrets[k] = v
	}
	wantMeta := `resource_metadata="` + meta + `"`
	for _, tc := range []struct {
		attack, token string
		status        int
		challenge     []string
		says          string
	}{
		{"no token", "", 401, []string{wantMeta}, "no bearer token"},
		{"an expired token", expired, 401, []string{wantMeta, `error="invalid_token"`}, "expired"},
		{"a token for another audience", other, 401, []string{wantMeta, `error="invalid_token"`}, `"other-app"`},
		{"a token without the required scope", noScope, 403, []string{wantMeta, `error="insufficient_scope"`, `scope="mcp:tools"`}, "mcp:tools"},
		{"an ID token of the gateway's audience", bobID, 401, []string{wantMeta, `error="invalid_token"`}, "ID token"},
		{"a forged token", strings.Repeat("x", 20) + "." + strings.Repeat("y", 20) + "." + strings.Repeat("z", 20), 401, []string{`error="invalid_token"`}, ""},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			status, chal, sid, body := oauthRequest(t, h, tc.token, "")
			if status != tc.status || sid != "" || !strings.Contains(body, tc.says) {
				t.Fatalf("status %d, session %q, body %q; want %d saying %q", status, sid, body, tc.status, tc.says)
			}
			for _, c := range tc.challenge {
				if !strings.HasPrefix(chal, "Bearer ") || !strings.Contains(chal, c) {
					t.Errorf("WWW-Authenticate %q lacks %s", chal, c)
				}
			}
		})
	}
	t.Run("another user's token in a session", func(t *testing.T) {
		status, _, sid, _ := oauthRequest(t, h, alice, "")
		if status != 200 || sid == "" {
			t.Fatalf("alice's initialize: %d", status)
		}
		if status, _, _, body := oauthRequest(t, h, bob, sid); status != http.StatusForbidden {
			t.Fatalf("bob acted in alice's session: %d %s", status, body)
		}
		if status, _, _, body := oauthRequest(t, h, alice, sid); status != 200 {
			t.Fatalf("alice in her own session: %d %s", status, body)
		}
	})
	a.Close()
	b.Close()
	h.stop()

	// The record: each session's open line and each intent name the
	// caller; the add that bob was refused is his.
	subjects := map[string]int{}
	var records []string
	files, _ := filepath.Glob(strings.TrimSuffix(l.audit, ".aarl") + "*.aarl")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, string(data))
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var ln struct {
				Type      string `json:"line_type"`
				Tool      string `json:"tool_id"`
				Principal *struct {
					Iss, Sub string
					Claims   map[string]any
				} `json:"principal"`
			}
			json.Unmarshal([]byte(line), &ln)
			if ln.Type == "decision" && ln.Principal != nil {
				subjects["decision "+ln.Principal.Sub]++
			}
			if ln.Type != "open" && ln.Type != "intent" {
				continue
			}
			if ln.Principal == nil || ln.Principal.Iss != o.issuer {
				t.Errorf("a %s line names no principal of the issuer: %s", ln.Type, line)
				continue
			}
			subjects[ln.Type+" "+ln.Tool+" "+ln.Principal.Sub]++
		}
		if out, code := l.aegis("verify", "--key", l.publicKey(), f); code != 0 {
			t.Errorf("aegis verify %s: %d\n%s", f, code, out)
		}
	}
	for _, want := range []string{"open  " + opUser1, "open  " + opUser2, "intent example__add " + opUser1, "intent example__add " + opUser2,
		"intent example__echo " + opUser2, "intent example__slow " + opUser1, "intent example__slow " + opUser2, "decision " + opUser2} {
		if subjects[want] == 0 {
			t.Errorf("no %q in the record: %v", want, subjects)
		}
	}

	// aegis sessions and replay name the caller.
	out, _ := l.aegis("sessions", "--state-dir", l.state)
	if !strings.Contains(out, opUser1) || !strings.Contains(out, opUser2) {
		t.Errorf("aegis sessions names no principal:\n%s", out)
	}
	var bobSession string
	for _, s := range l.sessionsJSON() {
		rout, _ := l.aegis("replay", s.ID, "--state-dir", l.state)
		if strings.Contains(rout, "principal "+opUser2) {
			bobSession = s.ID
			if !strings.Contains(rout, "only eng adds") {
				t.Errorf("replay of bob's session lacks the refusal:\n%s", rout)
			}
		}
	}
	if bobSession == "" {
		t.Error("no replay names bob as the principal")
	}

	// The console shows the principal, and nothing anywhere holds a token,
	// a code or a secret.
	con := l.console()
	jar := loginClient(t, con)
	req, _ := http.NewRequest("GET", jar.base+"/api/state", nil)
	_, state := jar.do(t, req)
	if !strings.Contains(state, opUser2) {
		t.Errorf("the console's state names no principal: %s", state)
	}
	req, _ = http.NewRequest("GET", jar.base+"/api/transcript?session="+bobSession, nil)
	_, transcript := jar.do(t, req)
	_, stream, _ := cmd(t, nil, "events", "list", "--state-dir", l.state, "--json")
	places := map[string]string{"the record": strings.Join(records, ""), "the stream": stream, "the gateway's stderr": h.stderr.String(),
		"the console's state": state, "the console's transcript": transcript}
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

// TestOAuthGatewayIntrospects: with an introspection client, opaque
// tokens are checked at the issuer (RFC 7662) and their holder recorded.
func TestOAuthGatewayIntrospects(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen and an OpenID provider")
	}
	o := sharedOP(t)
	l := newLive(t, "")
	secretFile := filepath.Join(l.dir, "introspect.secret")
	if err := os.WriteFile(secretFile, []byte(opWebSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := l.httpGateway(oauthConfig(l.bin), "--oauth-issuer", o.issuer, "--oauth-audience", opWebClient, "--oauth-claim", "groups",
		"--oauth-introspect-client", opWebClient, "--oauth-introspect-secret-file", secretFile)
	bob, _ := o.login(t, opWebClient, "test-user2", "openid mcp:tools")
	if strings.Count(bob, ".") == 2 {
		t.Fatalf("the web client's token is a JWT, not an opaque one")
	}
	cs := connectAs(t, h, bob)
	if text, isErr := callText(t, cs, "example__add", map[string]any{"a": 1, "b": 1}); !isErr || !strings.Contains(text, "only eng adds") {
		t.Fatalf("bob's add by introspection: %v %s", isErr, text)
	}
	if status, chal, _, _ := oauthRequest(t, h, bob+"x", ""); status != 401 || !strings.Contains(chal, `error="invalid_token"`) {
		t.Fatalf("a token the issuer does not know: %d %q", status, chal)
	}
	cs.Close()
	h.stop()
	data, _ := os.ReadFile(l.audit)
	if !strings.Contains(string(data), `"sub":"`+opUser2+`"`) || strings.Contains(string(data), bob) {
		t.Fatalf("the record does not name bob, or holds his token:\n%s", data)
	}
}

// TestOAuthGatewayFailsClosedAtStart: a configuration that cannot work
// stops aegis before it serves, saying what to change.
func TestOAuthGatewayFailsClosedAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	o := sharedOP(t)
	l := newLive(t, "")
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(oauthConfig(l.bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(l.dir, "token")
	os.WriteFile(tokenFile, []byte(strings.Repeat("t", 32)), 0o600)
	for _, tc := range []struct {
		attack string
		flags  []string
		says   string
	}{
		{"an issuer over plain HTTP on another host", []string{"--oauth-issuer", "http://id.example.com"}, "not an https URL"},
		{"OAuth flags without an issuer", []string{"--oauth-scope", "mcp:tools"}, "go with --oauth-issuer"},
		{"OAuth beside a static token", []string{"--oauth-issuer", o.issuer, "--token-file", tokenFile}, "contradicts --token-file"},
		{"an issuer that does not answer", []string{"--oauth-issuer", "http://127.0.0.1:1"}, "check --oauth-issuer"},
		{"an issuer URL that serves no metadata", []string{"--oauth-issuer", o.issuer + "/other"}, "check --oauth-issuer"},
		{"introspection without its secret", []string{"--oauth-issuer", o.issuer, "--oauth-introspect-client", opWebClient}, "go together"},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			args := append([]string{"gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
				"--listen", "127.0.0.1:0"}, tc.flags...)
			out, code := l.aegis(args...)
			if code == 0 || !strings.Contains(out, "aegis: error:") || !strings.Contains(out, tc.says) || strings.Contains(out, "serving streamable HTTP") {
				t.Fatalf("exit %d:\n%s\nwant an error saying %q", code, out, tc.says)
			}
		})
	}
}
