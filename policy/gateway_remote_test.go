package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// remote is a gateway file whose one server "r" has the given lines
// (indented under it, from line 3).
func remote(lines ...string) string {
	all := []string{"servers:", "  r:"}
	for _, l := range lines {
		all = append(all, "    "+l)
	}
	return y(append(all, "profiles: {p: {allow: [r.x]}}", defaultP)...)
}

// TestParseGatewayRefusesRemote: each way a url server could leak a
// secret, talk in clear, skip TLS or confuse the transport is refused at
// its line, and no header value is quoted.
func TestParseGatewayRefusesRemote(t *testing.T) {
	const secret = "Bearer s3cr3t-9f2a"
	tests := []struct {
		name string
		src  string
		want string
	}{
		// One kind of server.
		{"CommandAndURL", remote("command: a", "url: https://mcp.example.com/mcp"),
			"aegis.yaml:4: servers.r.url: a server has command (a local process) or url (a remote server), not both (command at line 3)"},
		{"NeitherCommandNorURL", remote("headers: {X-A: b}"),
			`aegis.yaml:3: servers.r: missing required key "command" (a local server) or "url" (a remote server)`},
		{"ArgsOnURL", remote("url: https://mcp.example.com/mcp", "args: [x]"),
			"aegis.yaml:4: servers.r.args: args is for a command server; a url server runs no process"},
		{"EnvOnURL", remote("url: https://mcp.example.com/mcp", "env: {A: b}"),
			"aegis.yaml:4: servers.r.env: env is for a command server; a url server runs no process"},
		{"EnvPassthroughOnURL", remote("url: https://mcp.example.com/mcp", "env_passthrough: [HOME]"),
			"aegis.yaml:4: servers.r.env_passthrough: env_passthrough is for a command server; a url server runs no process"},
		{"ConfineOnURL", remote("url: https://mcp.example.com/mcp", "confine: {}"),
			"aegis.yaml:4: servers.r.confine: confine is for a command server; a url server runs no process"},
		{"HeadersOnCommand", remote("command: a", "headers: {X-A: b}"),
			"aegis.yaml:4: servers.r.headers: headers is for a url server; a command server is spoken to over stdio"},
		{"CAFileOnCommand", remote("command: a", "ca_file: /etc/ca.pem"),
			"aegis.yaml:4: servers.r.ca_file: ca_file is for a url server; a command server is spoken to over stdio"},

		// Transports.
		{"StdioOnURL", remote("url: https://mcp.example.com/mcp", "transport: stdio"),
			"aegis.yaml:4: servers.r.transport: stdio is for a command server; a url server speaks streamable (the default) or sse"},
		{"HTTPTransportOnURL", remote("url: https://mcp.example.com/mcp", "transport: http"),
			`aegis.yaml:4: servers.r.transport: unsupported transport "http"; a url server speaks streamable (the default) or sse`},
		{"StreamableOnCommand", remote("command: a", "transport: streamable"),
			"aegis.yaml:4: servers.r.transport: streamable is for a url server; a command server speaks stdio"},
		{"HTTPTransportOnCommand", remote("command: a", "transport: http"),
			`aegis.yaml:4: servers.r.transport: unsupported transport "http"; a command server speaks stdio (give url: for a remote server)`},

		// URLs: nothing in clear over a network, no credentials in the url.
		{"CleartextToNetworkHost", remote("url: http://mcp.example.com/mcp"),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"CleartextToPrivateAddress", remote("url: http://10.0.0.1:8080/mcp"),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"CleartextToLocalhostLookalike", remote("url: http://localhost.example.com/mcp"),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"CleartextToOctalLoopbackLookalike", remote("url: http://0177.0.0.1/mcp"),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"CleartextToLeadingZeroLoopback", remote("url: http://127.0.0.01/mcp"),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"CleartextToIPv4MappedLoopback", remote(`url: "http://[::ffff:127.0.0.1]/mcp"`),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"CleartextToIPv6Network", remote(`url: "http://[2001:db8::1]/mcp"`),
			"aegis.yaml:3: servers.r.url: http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"},
		{"UserinfoCredentials", remote("url: https://user:" + "pw@mcp.example.com/mcp"),
			"aegis.yaml:3: servers.r.url: credentials in the url are not supported; send them in headers, with the value from a file or the environment"},
		{"UserinfoHostSpoof", remote("url: https://mcp.example.com@evil.example/mcp"),
			"aegis.yaml:3: servers.r.url: credentials in the url are not supported; send them in headers, with the value from a file or the environment"},
		{"OtherScheme", remote("url: ftp://mcp.example.com/mcp"),
			"aegis.yaml:3: servers.r.url: want an https:// url (http:// only to a loopback host)"},
		{"WebSocketScheme", remote("url: wss://mcp.example.com/mcp"),
			"aegis.yaml:3: servers.r.url: want an https:// url (http:// only to a loopback host)"},
		{"NoHost", remote("url: https:///mcp"),
			"aegis.yaml:3: servers.r.url: bad url: no host"},
		{"NoAuthority", remote("url: https:mcp"),
			"aegis.yaml:3: servers.r.url: bad url: no host"},
		{"Fragment", remote("url: https://mcp.example.com/mcp#x"),
			"aegis.yaml:3: servers.r.url: bad url: a fragment is never sent to the server; remove it"},
		{"Traversal", remote("url: https://mcp.example.com/a/../mcp"),
			"aegis.yaml:3: servers.r.url: bad url: a '.' or '..' segment in the path"},
		{"Space", remote(`url: "https://mcp.example.com/m cp"`),
			"aegis.yaml:3: servers.r.url: bad url: a control character or space"},
		{"BadPort", remote("url: https://mcp.example.com:99999/mcp"),
			"aegis.yaml:3: servers.r.url: bad url: an invalid port"},
		{"URLNotString", remote("url: [https://a]"),
			"aegis.yaml:3: servers.r.url: expected a string, got a sequence"},

		// TLS is always verified.
		{"InsecureSkipVerify", remote("url: https://mcp.example.com/mcp", "insecure_skip_verify: true"),
			"aegis.yaml:4: servers.r.insecure_skip_verify: skipping TLS verification is not supported; give the server's CA bundle with ca_file: /abs/path.pem"},
		{"TLSInsecure", remote("url: https://mcp.example.com/mcp", "tls_insecure: true"),
			"aegis.yaml:4: servers.r.tls_insecure: skipping TLS verification is not supported; give the server's CA bundle with ca_file: /abs/path.pem"},
		{"TLSSkipVerifyUnknown", remote("url: https://mcp.example.com/mcp", "tls_skip_verify: true"),
			"aegis.yaml:4: servers.r.tls_skip_verify: unknown key; want one of command, args, env, env_passthrough, transport, confine, prefix, alias, url, headers, ca_file, oauth"},
		{"InsecureUnknown", remote("url: https://mcp.example.com/mcp", "insecure: true"),
			"aegis.yaml:4: servers.r.insecure: unknown key; want one of command, args, env, env_passthrough, transport, confine, prefix, alias, url, headers, ca_file, oauth"},
		{"CAFileRelative", remote("url: https://mcp.example.com/mcp", "ca_file: ca.pem"),
			`aegis.yaml:4: servers.r.ca_file: "ca.pem" is not an absolute path`},
		{"CAFileUnclean", remote("url: https://mcp.example.com/mcp", "ca_file: /etc/aegis/../ca.pem"),
			`aegis.yaml:4: servers.r.ca_file: "/etc/aegis/../ca.pem" is not a clean path; write "/etc/ca.pem"`},
		{"CAFileOnCleartext", remote("url: http://127.0.0.1:8080/mcp", "ca_file: /etc/ca.pem"),
			"aegis.yaml:4: servers.r.ca_file: ca_file is for an https:// url; this url is http://"},

		// Headers: the transport's own are not the file's to set.
		{"HostHeaderSmuggled", remote("url: https://mcp.example.com/mcp", "headers: {Host: evil.example}"),
			"aegis.yaml:4: servers.r.headers.Host: the HTTP transport sets Host itself; a file may not"},
		{"SessionIDPinned", remote("url: https://mcp.example.com/mcp", "headers: {Mcp-Session-Id: abc}"),
			"aegis.yaml:4: servers.r.headers.Mcp-Session-Id: the HTTP transport sets Mcp-Session-Id itself; a file may not"},
		{"ProtocolVersionForged", remote("url: https://mcp.example.com/mcp", "headers: {mcp-protocol-version: 2024-11-05}"),
			"aegis.yaml:4: servers.r.headers.mcp-protocol-version: the HTTP transport sets mcp-protocol-version itself; a file may not"},
		{"ContentTypeForged", remote("url: https://mcp.example.com/mcp", "headers: {Content-Type: text/plain}"),
			"aegis.yaml:4: servers.r.headers.Content-Type: the HTTP transport sets Content-Type itself; a file may not"},
		{"AcceptForged", remote("url: https://mcp.example.com/mcp", "headers: {Accept: text/html}"),
			"aegis.yaml:4: servers.r.headers.Accept: the HTTP transport sets Accept itself; a file may not"},
		{"ContentLengthSmuggled", remote("url: https://mcp.example.com/mcp", "headers: {Content-Length: \"0\"}"),
			"aegis.yaml:4: servers.r.headers.Content-Length: the HTTP transport sets Content-Length itself; a file may not"},
		{"TransferEncodingSmuggled", remote("url: https://mcp.example.com/mcp", "headers: {Transfer-Encoding: chunked}"),
			"aegis.yaml:4: servers.r.headers.Transfer-Encoding: the HTTP transport sets Transfer-Encoding itself; a file may not"},
		{"HeaderNameNotToken", remote("url: https://mcp.example.com/mcp", `headers: {"X A": b}`),
			`aegis.yaml:4: servers.r.headers["X A"]: invalid header name; want an HTTP token (letters, digits and !#$%&'*+-.^_` + "`" + `|~)`},
		{"HeaderNameSplitsLine", remote("url: https://mcp.example.com/mcp", `headers: {"X-A: b\r\nX-B": c}`),
			`aegis.yaml:4: servers.r.headers["X-A: b\r\nX-B"]: invalid header name; want an HTTP token (letters, digits and !#$%&'*+-.^_` + "`" + `|~)`},
		{"HeaderTwiceByCase", remote("url: https://mcp.example.com/mcp", "headers:", "  Authorization: a", "  authorization: b"),
			"aegis.yaml:6: servers.r.headers.authorization: duplicate header (first at line 5; header names are case-insensitive)"},
		{"HeaderValueSplitsRequest", remote("url: https://mcp.example.com/mcp", `headers: {Authorization: "`+secret+`\r\nX-Evil: 1"}`),
			"aegis.yaml:4: servers.r.headers.Authorization: the header value holds a control character (a newline, a NUL or the like), which HTTP does not allow"},
		{"HeaderValueNUL", remote("url: https://mcp.example.com/mcp", `headers: {Authorization: "`+secret+`\0"}`),
			"aegis.yaml:4: servers.r.headers.Authorization: the header value holds a control character (a newline, a NUL or the like), which HTTP does not allow"},
		{"HeaderValueEmpty", remote("url: https://mcp.example.com/mcp", `headers: {Authorization: ""}`),
			"aegis.yaml:4: servers.r.headers.Authorization: an empty header value; a secret that should be there is most likely missing"},
		{"HeaderValueInteger", remote("url: https://mcp.example.com/mcp", "headers: {X-Tenant: 42}"),
			"aegis.yaml:4: servers.r.headers.X-Tenant: expected a string, got an integer"},
		{"HeaderFileRelative", remote("url: https://mcp.example.com/mcp", "headers: {Authorization: {file: token}}"),
			`aegis.yaml:4: servers.r.headers.Authorization.file: "token" is not an absolute path`},
		{"HeaderFileUnclean", remote("url: https://mcp.example.com/mcp", "headers: {Authorization: {file: /run/../etc/shadow}}"),
			`aegis.yaml:4: servers.r.headers.Authorization.file: "/run/../etc/shadow" is not a clean path; write "/etc/shadow"`},
		{"HeaderEnvBadName", remote("url: https://mcp.example.com/mcp", `headers: {Authorization: {env: "A=B"}}`),
			`aegis.yaml:4: servers.r.headers.Authorization.env: "A=B" is not an environment variable name; want [A-Za-z_][A-Za-z0-9_]*`},
		{"HeaderFileAndEnv", remote("url: https://mcp.example.com/mcp", "headers:", "  Authorization:", "    file: /run/t", "    env: TOKEN"),
			"aegis.yaml:7: servers.r.headers.Authorization.env: a header takes its value from file or env, not both"},
		{"HeaderSourceEmpty", remote("url: https://mcp.example.com/mcp", "headers: {Authorization: {}}"),
			`aegis.yaml:4: servers.r.headers.Authorization: missing required key "file" or "env"`},
		{"HeaderSourceUnknown", remote("url: https://mcp.example.com/mcp", "headers: {Authorization: {value: x}}"),
			"aegis.yaml:4: servers.r.headers.Authorization.value: unknown key; want one of file, env"},
		{"HeadersList", remote("url: https://mcp.example.com/mcp", "headers: [Authorization]"),
			"aegis.yaml:4: servers.r.headers: expected a mapping of headers, got a sequence"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ParseGateway("aegis.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("ParseGateway accepted:\n%s", tc.src)
			}
			if g != nil {
				t.Error("a Gateway with an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("ParseGateway error\n got: %s\nwant: %s", got, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error quotes a header value: %s", err)
			}
		})
	}
}

// TestParseGatewayAcceptsRemote: url servers with every kind of header
// value, both transports and a CA bundle, loopback http in each of its
// spellings, and the defaults.
func TestParseGatewayAcceptsRemote(t *testing.T) {
	g := mustGateway(t, y(
		"servers:",
		"  docs:",
		"    url: https://mcp.example.com/v1/mcp?tenant=a",
		"    headers:",
		"      Authorization: {file: /etc/aegis/docs.token}",
		"      X-Api-Key: {env: DOCS_KEY}",
		"      X-Tenant: acme",
		"    ca_file: /etc/aegis/docs-ca.pem",
		"    prefix: false",
		"  legacy: {url: \"https://legacy.example.com:8443/sse\", transport: sse}",
		"  local: {url: \"http://127.0.0.1:8080/mcp\", transport: streamable}",
		"  local6: {url: \"http://[::1]:8080/mcp\"}",
		"  local6long: {url: \"http://[0:0:0:0:0:0:0:1]/mcp\"}",
		"  localname: {url: \"http://LOCALHOST:3000\"}",
		"  loop: {url: \"http://127.255.0.9/mcp\"}",
		"  fs: {command: mcp-fs, transport: stdio}",
		"profiles: {p: {allow: [docs.search, legacy.x, fs.read]}}",
		defaultP,
	))
	want := []Server{
		{Name: "docs", URL: "https://mcp.example.com/v1/mcp?tenant=a", Transport: TransportStreamable, Unprefixed: true,
			Headers: []Header{{Name: "Authorization", File: "/etc/aegis/docs.token"}, {Name: "X-Api-Key", Env: "DOCS_KEY"}, {Name: "X-Tenant", Value: "acme"}},
			CAFile:  "/etc/aegis/docs-ca.pem"},
		{Name: "legacy", URL: "https://legacy.example.com:8443/sse", Transport: TransportSSE},
		{Name: "local", URL: "http://127.0.0.1:8080/mcp", Transport: TransportStreamable},
		{Name: "local6", URL: "http://[::1]:8080/mcp", Transport: TransportStreamable},
		{Name: "local6long", URL: "http://[0:0:0:0:0:0:0:1]/mcp", Transport: TransportStreamable},
		{Name: "localname", URL: "http://LOCALHOST:3000", Transport: TransportStreamable},
		{Name: "loop", URL: "http://127.255.0.9/mcp", Transport: TransportStreamable},
		{Name: "fs", Command: "mcp-fs", Transport: TransportStdio},
	}
	if got := g.Servers(); !reflect.DeepEqual(got, want) {
		t.Errorf("Servers() =\n%#v\nwant\n%#v", got, want)
	}
	s := g.Servers()
	s[0].Headers[0].File = "/changed"
	if again, _ := g.Server("docs"); again.Headers[0].File != "/etc/aegis/docs.token" {
		t.Error("changing the result of Servers changed the Gateway")
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.1.2.3": true, "[::1]": true, "[0::1]": true, "[0:0:0:0:0:0:0:1]": true, "[::0:1]": true,
		"127.0.0.01": false, "127.1": false, "0177.0.0.1": false, "2130706433": false, "[::ffff:127.0.0.1]": false, "[::]": false,
		"[::2]": false, "[1::1]": false, "[::1::]": false, "[00000::1]": false, "10.0.0.1": false, "localhost.example": false, "128.0.0.1": false,
		"[::1": false, "[0:0:0:0:0:0:0:0:1]": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
