package policy

import (
	"path"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Remote servers: a gateway server given by url: rather than command:.
// Invariants of what ParseGateway accepts:
//
//   - A server has exactly one of command (a local process, spoken to
//     over stdio) and url (a remote server, spoken to over HTTP). The
//     keys that shape a process (args, env, env_passthrough, confine) are
//     refused on a url server, and the keys of a connection (headers,
//     ca_file) on a command server, each at its own line.
//   - A url is https://, or http:// to a loopback host (127.0.0.0/8 as
//     dotted decimal, [::1], localhost), so that nothing is sent in clear
//     over a network. It has no userinfo (credentials go in headers, read
//     from a file or the environment) and no fragment. It is checked by the
//     strict URI reader of resource patterns (uri.go).
//   - TLS is always verified. There is no key to skip verification:
//     insecure_skip_verify and tls_insecure are refused with a message that
//     points to ca_file, any other such key is an unknown key.
//   - A header name is an HTTP token and not one the transport owns
//     (ownedHeader); names are case-insensitive, so two spellings of one
//     name are a duplicate. A value is literal, {file: PATH} or {env: VAR};
//     a literal value is never quoted in an error, since headers carry
//     secrets.
//   - transport is stdio for a command server (the default and the only
//     one), streamable (the default) or sse for a url server.
//
// Parsing does no I/O: header files, variables and ca_file are read by the
// caller when the gateway starts (proxy.RemoteHeaders, proxy.RemoteTLS).

// Transport is how the gateway talks to one server.
type Transport string

const (
	// TransportStdio is a command server's: newline-delimited JSON-RPC on
	// the process's stdin and stdout.
	TransportStdio Transport = "stdio"
	// TransportStreamable is a url server's default: MCP streamable HTTP,
	// falling back to the legacy HTTP+SSE transport when the server
	// answers the initialize POST with 400, 404 or 405 (the MCP
	// specification's backwards-compatibility rule).
	TransportStreamable Transport = "streamable"
	// TransportSSE is the legacy HTTP+SSE transport only.
	TransportSSE Transport = "sse"
)

// Header is one HTTP header that the gateway sends with every request to
// a remote server. Exactly one of Value, File and Env gives its value:
// Value as written in the file; File an absolute, clean path whose
// contents are read when the server starts; Env the name of a variable of
// aegis's own environment, read then too. The value is a secret: it is
// never recorded, logged or quoted in an error.
type Header struct {
	Name  string // as written; an HTTP token
	Value string
	File  string
	Env   string
}

var (
	headerSourceKeys = []string{"file", "env"}
	// processKeys shape a process and make no sense for a url server;
	// connectionKeys shape a connection and make no sense for a command.
	processKeys    = []string{"args", "env", "env_passthrough", "confine"}
	connectionKeys = []string{"headers", "ca_file", "oauth"}
)

// skipVerifyKeys are keys that a user may reach for to turn TLS
// verification off; they get a message of their own.
var skipVerifyKeys = []string{"insecure_skip_verify", "tls_insecure"}

// refuseSkipVerify refuses a server mapping that asks to skip TLS
// verification, before its keys are checked as unknown.
func (p *parser) refuseSkipVerify(n *yaml.Node, spath string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.ScalarNode && contains(skipVerifyKeys, k.Value) {
			return p.errorf(k.Line, keyPath(spath, k.Value),
				"skipping TLS verification is not supported; give the server's CA bundle with ca_file: /abs/path.pem")
		}
	}
	return nil
}

// remoteKey reads one of the keys of a url server (url, headers, ca_file)
// into s; serverKind checks that they fit together.
func (p *parser) remoteKey(s *Server, f field) error {
	switch f.name {
	case "url":
		v, err := p.text(f.val, f.path)
		if err != nil {
			return err
		}
		if prob := serverURLProblem(v); prob != "" {
			return p.errorf(f.val.Line, f.path, "%s", prob)
		}
		s.URL = v
	case "headers":
		hs, err := p.entries(f.val, f.path, "headers")
		if err != nil {
			return err
		}
		first := map[string]int{} // lowercase name -> line
		for _, e := range hs {
			if !httpToken(e.name) {
				return p.errorf(e.key.Line, e.path, "invalid header name; want an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)")
			}
			low := strings.ToLower(e.name)
			if ownedHeader(low) {
				return p.errorf(e.key.Line, e.path, "the HTTP transport sets %s itself; a file may not", e.name)
			}
			if line, dup := first[low]; dup {
				return p.errorf(e.key.Line, e.path, "duplicate header (first at line %d; header names are case-insensitive)", line)
			}
			first[low] = e.key.Line
			h := Header{Name: e.name}
			if e.val.Kind == yaml.MappingNode {
				if h.File, h.Env, err = p.headerSource(e.val, e.path); err != nil {
					return err
				}
			} else {
				// The value is not quoted in errors: it is most likely a secret.
				if h.Value, err = p.str(e.val, e.path); err != nil {
					return err
				}
				if prob := HeaderValueProblem(h.Value); prob != "" {
					return p.errorf(e.val.Line, e.path, "%s", prob)
				}
			}
			s.Headers = append(s.Headers, h)
		}
	case "ca_file":
		v, err := p.text(f.val, f.path)
		if err != nil {
			return err
		}
		if prob := absCleanProblem(v); prob != "" {
			return p.errorf(f.val.Line, f.path, "%s", prob)
		}
		s.CAFile = v
	}
	return nil
}

// headerSource reads a header value given as {file: PATH} or {env: VAR}.
func (p *parser) headerSource(n *yaml.Node, hpath string) (file, env string, err error) {
	fields, err := p.mapping(n, hpath, headerSourceKeys)
	if err != nil {
		return "", "", err
	}
	switch len(fields) {
	case 0:
		return "", "", p.errorf(n.Line, hpath, `missing required key "file" or "env"`)
	case 2:
		return "", "", p.errorf(fields[1].key.Line, fields[1].path, "a header takes its value from file or env, not both")
	}
	f := fields[0]
	v, err := p.text(f.val, f.path)
	if err != nil {
		return "", "", err
	}
	if f.name == "env" {
		if !envName(v) {
			return "", "", p.errorf(f.val.Line, f.path, "%q is not an environment variable name; want [A-Za-z_][A-Za-z0-9_]*", v)
		}
		return "", v, nil
	}
	if prob := absCleanProblem(v); prob != "" {
		return "", "", p.errorf(f.val.Line, f.path, "%s", prob)
	}
	return v, "", nil
}

// serverKind checks that the keys of server s (already read, fields as
// written) make one kind of server, a command or a url, and settles its
// transport.
func (p *parser) serverKind(s *Server, n *yaml.Node, spath string, fields []field) error {
	byName := make(map[string]field, len(fields))
	for _, f := range fields {
		byName[f.name] = f
	}
	cmd, hasCmd := byName["command"]
	u, hasURL := byName["url"]
	tr := byName["transport"]
	switch {
	case hasCmd && hasURL:
		return p.errorf(u.key.Line, u.path, "a server has command (a local process) or url (a remote server), not both (command at line %d)", cmd.key.Line)
	case !hasCmd && !hasURL:
		return p.errorf(n.Line, spath, `missing required key "command" (a local server) or "url" (a remote server)`)
	}
	if hasURL {
		for _, k := range processKeys {
			if f, ok := byName[k]; ok {
				return p.errorf(f.key.Line, f.path, "%s is for a command server; a url server runs no process", k)
			}
		}
		switch s.Transport {
		case "":
			s.Transport = TransportStreamable
		case TransportStreamable, TransportSSE:
		case TransportStdio:
			return p.errorf(tr.val.Line, tr.path, "stdio is for a command server; a url server speaks streamable (the default) or sse")
		default:
			return p.errorf(tr.val.Line, tr.path, "unsupported transport %q; a url server speaks streamable (the default) or sse", string(s.Transport))
		}
		if f, ok := byName["ca_file"]; ok && !strings.HasPrefix(strings.ToLower(s.URL), "https:") {
			return p.errorf(f.key.Line, f.path, "ca_file is for an https:// url; this url is http://")
		}
		return p.oauthWithHeaders(s, byName)
	}
	for _, k := range connectionKeys {
		if f, ok := byName[k]; ok {
			return p.errorf(f.key.Line, f.path, "%s is for a url server; a command server is spoken to over stdio", k)
		}
	}
	switch s.Transport {
	case "":
		s.Transport = TransportStdio
	case TransportStdio:
	case TransportStreamable, TransportSSE:
		return p.errorf(tr.val.Line, tr.path, "%s is for a url server; a command server speaks stdio", string(s.Transport))
	default:
		return p.errorf(tr.val.Line, tr.path, "unsupported transport %q; a command server speaks stdio (give url: for a remote server)", string(s.Transport))
	}
	return nil
}

// absCleanProblem says why path is not an absolute, clean path, or "".
func absCleanProblem(v string) string {
	switch {
	case !strings.HasPrefix(v, "/"):
		return strconv.Quote(v) + " is not an absolute path"
	case path.Clean(v) != v:
		return strconv.Quote(v) + " is not a clean path; write " + strconv.Quote(path.Clean(v))
	}
	return ""
}

// serverURLProblem says why raw cannot be a remote server's url, or "".
// The url itself is not quoted: its query may hold a secret.
func serverURLProblem(raw string) string {
	u, reason := parseURI(raw)
	switch {
	case strings.HasPrefix(reason, "userinfo"):
		return "credentials in the url are not supported; send them in headers, with the value from a file or the environment"
	case reason != "":
		return "bad url: " + reason
	case u.scheme != "https" && u.scheme != "http":
		return "want an https:// url (http:// only to a loopback host)"
	case !u.authority || u.host == "":
		return "bad url: no host"
	case u.hasFragment:
		return "bad url: a fragment is never sent to the server; remove it"
	case u.scheme == "http" && !loopbackHost(u.host):
		return "http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"
	}
	return ""
}

// loopbackHost reports whether host (lowercase, as parseURI gives it) is
// certainly a loopback host: localhost, a dotted-decimal IPv4 address in
// 127.0.0.0/8 written as a dialer reads it (four decimal octets, no
// leading zeros), or [::1] in any of its spellings. Anything else, an
// IPv4-mapped address included, is not.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	if inner, ok := strings.CutPrefix(host, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		return ok && ipv6Loopback(inner)
	}
	octets := strings.Split(host, ".")
	if len(octets) != 4 {
		return false
	}
	for i, o := range octets {
		n, err := strconv.Atoi(o)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != o || i == 0 && n != 127 {
			return false
		}
	}
	return true
}

// ipv6Loopback reports whether s (an IPv6 address without brackets) is
// ::1: seven zero groups and a last group of 1, with at most one "::".
func ipv6Loopback(s string) bool {
	if strings.ContainsAny(s, ".%") {
		return false
	}
	var groups []string
	if head, tail, ok := strings.Cut(s, "::"); ok {
		if strings.Contains(tail, "::") {
			return false
		}
		var h, t []string
		if head != "" {
			h = strings.Split(head, ":")
		}
		if tail != "" {
			t = strings.Split(tail, ":")
		}
		if len(h)+len(t) > 7 {
			return false
		}
		groups = append(h, make([]string, 8-len(h)-len(t))...)
		for i := len(h); i < 8-len(t); i++ {
			groups[i] = "0"
		}
		groups = append(groups, t...)
	} else {
		groups = strings.Split(s, ":")
	}
	if len(groups) != 8 {
		return false
	}
	for i, g := range groups {
		if g == "" || len(g) > 4 {
			return false
		}
		n, err := strconv.ParseUint(g, 16, 16)
		if err != nil || i < 7 && n != 0 || i == 7 && n != 1 {
			return false
		}
	}
	return true
}

// httpToken reports whether s is an RFC 9110 token, the form of a header
// name.
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ownedHeaders are the headers (lowercase) that the HTTP client or the MCP
// transport sets: the connection's framing and hop-by-hop headers, and
// every Mcp-* header (Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method,
// …). A file that set one would break the protocol or smuggle a request.
var ownedHeaders = []string{
	"host", "content-type", "content-length", "content-encoding", "transfer-encoding",
	"accept", "accept-encoding", "connection", "keep-alive", "proxy-connection",
	"proxy-authorization", "te", "trailer", "upgrade", "expect", "last-event-id",
}

// ownedHeader reports whether the header low (lowercase) is the
// transport's.
func ownedHeader(low string) bool {
	return contains(ownedHeaders, low) || strings.HasPrefix(low, "mcp-")
}

// HeaderValueProblem says why v cannot be an HTTP header value, or "": it
// must not be empty, and may hold no control character but tab (a CR or LF
// would end the header and start another). The value is not quoted.
func HeaderValueProblem(v string) string {
	if v == "" {
		return "an empty header value; a secret that should be there is most likely missing"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "the header value holds a control character (a newline, a NUL or the like), which HTTP does not allow"
		}
	}
	return ""
}
