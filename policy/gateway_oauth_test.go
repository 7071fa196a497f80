package policy

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseGatewayRefusesOAuth: each way an oauth: setting could put a
// secret in the file, send a browser elsewhere than this machine, or
// fight a static token is refused at its line, and no secret is quoted.
func TestParseGatewayRefusesOAuth(t *testing.T) {
	const u = "url: https://mcp.example.com/mcp"
	for _, tc := range []struct{ name, src, want string }{
		{"OAuthOnCommand", remote("command: a", "oauth: {}"),
			"aegis.yaml:4: servers.r.oauth: oauth is for a url server; a command server is spoken to over stdio"},
		{"SecretWrittenInTheFile", remote(u, "oauth: {client_id: aegis, client_secret: s3cr3t-9f2a}"),
			"aegis.yaml:4: servers.r.oauth.client_secret: a client secret is read from {file: PATH} or {env: VAR}, never written in the file"},
		{"SecretWithoutClient", remote(u, "oauth: {client_secret: {env: WIKI_SECRET}}"),
			"aegis.yaml:4: servers.r.oauth.client_secret: client_secret needs client_id"},
		{"StaticTokenBesideOAuth", remote(u, "headers: {authorization: {env: TOKEN}}", "oauth: {}"),
			"aegis.yaml:5: servers.r.oauth: oauth: puts the server's token in the Authorization header; remove that header from headers:"},
		{"RedirectToAnotherMachine", remote(u, "oauth: {redirect_uri: \"http://10.0.0.7:8765/callback\"}"),
			"aegis.yaml:4: servers.r.oauth.redirect_uri: want http:// to a loopback host (http://127.0.0.1:PORT/callback): the browser comes back to aegis on this machine"},
		{"RedirectToALookalike", remote(u, "oauth: {redirect_uri: \"http://localhost.example.com/callback\"}"),
			"aegis.yaml:4: servers.r.oauth.redirect_uri: want http:// to a loopback host (http://127.0.0.1:PORT/callback): the browser comes back to aegis on this machine"},
		{"MetadataDocumentInClear", remote(u, "oauth: {client_metadata_url: \"http://aegis.example.com/client.json\"}"),
			"aegis.yaml:4: servers.r.oauth.client_metadata_url: want an https:// url with a path (a client ID metadata document)"},
		{"MetadataDocumentAtRoot", remote(u, "oauth: {client_metadata_url: \"https://aegis.example.com/\"}"),
			"aegis.yaml:4: servers.r.oauth.client_metadata_url: want an https:// url with a path (a client ID metadata document)"},
		{"ScopeWithSpace", remote(u, "oauth: {scopes: [\"a b\"]}"),
			"aegis.yaml:4: servers.r.oauth.scopes[0]: a scope is one word without quotes or backslashes"},
		{"UnknownKey", remote(u, "oauth: {grant: password}"),
			"aegis.yaml:4: servers.r.oauth.grant: unknown key; want one of client_id, client_secret, client_metadata_url, scopes, redirect_uri, token_exchange"},
		{"LoginBesideExchange", remote(u, "oauth: {redirect_uri: \"http://127.0.0.1/cb\", token_exchange: {token_endpoint: \"https://a.example.com/token\", client_id: gw, client_secret: {env: S}}}"),
			"aegis.yaml:4: servers.r.oauth.redirect_uri: token_exchange: reaches the server with each caller's exchanged token, never with a login: remove redirect_uri, or token_exchange"},
		{"ExchangeSecretWrittenInTheFile", remote(u, "oauth: {token_exchange: {token_endpoint: \"https://a.example.com/token\", client_id: gw, client_secret: s3cr3t-9f2a}}"),
			"aegis.yaml:4: servers.r.oauth.token_exchange.client_secret: a client secret is read from {file: PATH} or {env: VAR}, never written in the file"},
		{"ExchangeAsNoClient", remote(u, "oauth: {token_exchange: {token_endpoint: \"https://a.example.com/token\", client_id: gw}}"),
			"aegis.yaml:4: servers.r.oauth.token_exchange: token_exchange needs client_secret: the gateway exchanges each caller's token as its own client"},
		{"CallerTokenSentInClear", remote(u, "oauth: {token_exchange: {token_endpoint: \"http://auth.example.com/token\", client_id: gw, client_secret: {env: S}}}"),
			"aegis.yaml:4: servers.r.oauth.token_exchange.token_endpoint: want the authorization server's token endpoint: an https:// url, or http:// to a loopback host"},
		{"ExchangeWithoutEndpoint", remote(u, "oauth: {token_exchange: {client_id: gw, client_secret: {env: S}}}"),
			"aegis.yaml:4: servers.r.oauth.token_exchange: token_exchange needs token_endpoint: the gateway exchanges each caller's token as its own client"},
		{"AudienceWithSpace", remote(u, "oauth: {token_exchange: {token_endpoint: \"https://a.example.com/token\", client_id: gw, client_secret: {env: S}, audience: \"a b\"}}"),
			"aegis.yaml:4: servers.r.oauth.token_exchange.audience: want the server's name at the authorization server: one printable word"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGateway("aegis.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("ParseGateway accepted:\n%s", tc.src)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("ParseGateway error\n got: %s\nwant: %s", got, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error quotes a secret: %s", err)
			}
		})
	}
}

// TestParseGatewayAcceptsOAuth: an empty oauth: (dynamic registration),
// and one with every key; Servers returns a copy.
func TestParseGatewayAcceptsOAuth(t *testing.T) {
	g := mustGateway(t, y(
		"servers:",
		"  wiki:",
		"    url: https://wiki.example.com/mcp",
		"    oauth:",
		"      client_id: aegis",
		"      client_secret: {file: /etc/aegis/wiki.secret}",
		"      client_metadata_url: https://aegis.example.com/client.json",
		"      scopes: [wiki.read, offline_access]",
		"      redirect_uri: http://127.0.0.1:8765/callback",
		"  open: {url: \"http://127.0.0.1:9000/mcp\", oauth: {}}",
		"  notes:",
		"    url: https://notes.example.com/mcp",
		"    oauth:",
		"      token_exchange:",
		"        token_endpoint: https://auth.example.com/oauth/token",
		"        client_id: aegis-gateway",
		"        client_secret: {env: AEGIS_EXCHANGE_SECRET}",
		"        audience: notes",
		"        scopes: [notes.read]",
		"profiles: {p: {allow: [wiki.search]}}",
		defaultP,
	))
	want := &OAuth{ClientID: "aegis", ClientSecret: Header{File: "/etc/aegis/wiki.secret"}, ClientMetadataURL: "https://aegis.example.com/client.json",
		Scopes: []string{"wiki.read", "offline_access"}, RedirectURI: "http://127.0.0.1:8765/callback"}
	s := g.Servers()
	if !reflect.DeepEqual(s[0].OAuth, want) {
		t.Errorf("wiki's oauth = %#v, want %#v", s[0].OAuth, want)
	}
	if s[1].OAuth == nil || !reflect.DeepEqual(*s[1].OAuth, OAuth{}) {
		t.Errorf("open's oauth = %#v, want an empty one", s[1].OAuth)
	}
	wantX := &TokenExchange{TokenEndpoint: "https://auth.example.com/oauth/token", ClientID: "aegis-gateway",
		ClientSecret: Header{Env: "AEGIS_EXCHANGE_SECRET"}, Audience: "notes", Scopes: []string{"notes.read"}}
	if s[2].OAuth == nil || !reflect.DeepEqual(s[2].OAuth.Exchange, wantX) {
		t.Errorf("notes's oauth = %#v, want token_exchange %#v", s[2].OAuth, wantX)
	}
	s[2].OAuth.Exchange.Scopes[0] = "changed"
	s[0].OAuth.Scopes[0] = "changed"
	if again, _ := g.Server("notes"); again.OAuth.Exchange.Scopes[0] != "notes.read" {
		t.Error("changing the result of Servers changed the Gateway's token_exchange")
	}
	if again, _ := g.Server("wiki"); again.OAuth.Scopes[0] != "wiki.read" {
		t.Error("changing the result of Servers changed the Gateway")
	}
}
