package policy

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	gatewayKeys    = []string{"version", "servers", "profiles", "activation", "error_disclosure", "rules", "on_tool_change", "meta_tool_names", "witnesses"}
	serverKeys     = []string{"command", "args", "env", "env_passthrough", "transport", "confine", "prefix", "alias", "url", "headers", "ca_file", "oauth"}
	envFileKeys    = []string{"file"}
	confineKeys    = []string{"allow_read", "allow_write", "allow_net", "allow_exec_support", "allow_udp", "allow_mptcp", "best_effort"}
	profileKeys    = []string{"extends", "allow", "prompts", "resources", "allowed_transitions", "for_groups", "for_scopes"}
	activationKeys = []string{"default_profile", "explicit", "signals"}
)

// maxProfileNameLen bounds a profile name.
const maxProfileNameLen = 64

// ParseGateway reads one gateway file (aegis.yaml): the downstream
// servers, the profiles, the default profile, the error disclosure and
// optional wrap-style rules. name is used only in error messages; data is
// the file's contents. Any problem is a *[ParseError] naming the line and
// key, and the Gateway is nil.
//
// # File format
//
//	version: 1                        # optional; any other value is refused
//	servers:                          # required, at least one
//	  fs:                             # a server name, see ValidServerName
//	    command: npx                  # required, non-empty
//	    args: [-y, "@modelcontextprotocol/server-filesystem", /srv/repo]
//	    env:                          # NAME: value, or NAME: {file: PATH}
//	      NODE_OPTIONS: "--max-old-space-size=256"
//	      GITHUB_TOKEN: {file: /etc/aegis/github.token}  # read at start
//	    env_passthrough: [HTTPS_PROXY]  # copied from aegis's environment
//	    transport: stdio              # optional; the only transport of a command
//	    prefix: false                 # optional; tools and prompts keep their own names
//	    alias:                        # optional; a tool shown to hosts under another name
//	      read_text_file_with_a_name_too_long_for_hosts: read_text
//	    confine:                      # optional: run confined, as wrap --confine
//	      allow_read: [/usr/lib/node_modules]   # absolute, clean paths
//	      allow_write: [/srv/repo]
//	      allow_net: ["127.0.0.1:8080"]          # HOST:PORT, [v6]:PORT
//	      allow_exec_support: true    # also allow_udp, allow_mptcp, best_effort
//	  docs:                           # a remote server: url instead of command
//	    url: https://mcp.example.com/mcp  # https, or http to a loopback host
//	    transport: streamable         # optional; streamable (falls back to sse) | sse
//	    headers:                      # sent with every request; values are secrets
//	      Authorization: {file: /etc/aegis/docs.token}  # or {env: VAR}, or a literal
//	    ca_file: /etc/aegis/docs-ca.pem  # optional; only these CAs are trusted
//	  wiki:                           # a remote server that aegis logs in to (OAuth)
//	    url: https://wiki.example.com/mcp
//	    oauth:                        # aegis auth login wiki, once; no Authorization header then
//	      client_id: aegis            # optional; else client_metadata_url, else registration
//	      client_secret: {file: /etc/aegis/wiki.secret}  # optional, {file:} or {env:}
//	      client_metadata_url: https://aegis.example.com/client.json  # optional
//	      scopes: [wiki.read]         # optional; else those the server names
//	      redirect_uri: http://127.0.0.1:8765/callback  # optional loopback; else a free port
//	  notes:                          # a remote server reached as each --listen caller
//	    url: https://notes.example.com/mcp
//	    oauth:
//	      token_exchange:             # RFC 8693; alone in oauth:, no login
//	        token_endpoint: https://id.example.com/oauth/token
//	        client_id: aegis-gateway  # the gateway's own client
//	        client_secret: {env: AEGIS_EXCHANGE_SECRET}  # required, {file:} or {env:}
//	        audience: notes           # optional; resource: defaults to the url
//	        scopes: [notes.read]      # optional
//	profiles:                         # required, at least one
//	  observer:                       # a profile name: [a-z0-9][a-z0-9_-]*
//	    allow: [fs.read_text_file, "fs.list_*"]  # "<server>.<tool glob>"
//	    prompts: ["docs.review_*"]               # "<server>.<prompt glob>"
//	    resources: ["file:///srv/repo/**"]       # URI patterns, also for templates, or "<server>.*"
//	    allowed_transitions: [developer]         # switches without a human
//	  developer:
//	    extends: observer             # inherit allow, prompts and resources (not transitions)
//	    allow: [fs.write_file]
//	    for_groups: [eng]             # only for callers of these groups (OAuth, --listen)
//	    for_scopes: [mcp:write]       # … holding every one of these scopes
//	activation:
//	  default_profile: observer       # required
//	  explicit: true                  # optional; switching is always explicit
//	error_disclosure: verbose         # verbose (default) | minimal
//	meta_tool_names: host_safe        # host_safe (default): aegis__set_profile | dotted: aegis.set_profile
//	rules:                            # optional, the rules of a policy file
//	  - {id: gate-writes, action: pending_approval, tool: fs__write_file}
//
// # Strictness
//
// Beyond the rules of [Parse] (unknown and duplicate keys, wrong types, no
// null values, no anchors, aliases or merge keys, one document), refused:
//
//   - a missing servers, profiles or activation.default_profile, an empty
//     servers or profiles mapping;
//   - a server name that [ValidServerName] refuses; an empty command; a
//     NUL in a command, argument, environment entry or path; an environment
//     name outside [A-Za-z_][A-Za-z0-9_]*, in env or env_passthrough; a
//     name both in env and in env_passthrough; an env file that is not an
//     absolute, clean path; a transport other than stdio;
//   - for a url server (see proxy/gateway/remote.go): command and url together,
//     or neither; args, env, env_passthrough or confine with url, headers
//     or ca_file with command; a url that is not https:// (or http:// to
//     a loopback host), with userinfo or a fragment; a transport other
//     than streamable or sse; a header name that is not an HTTP token or
//     that the transport owns (Host, Content-Type, Accept, Mcp-*, …), the
//     same name twice in any case, an empty value or one with a control
//     character; insecure_skip_verify and tls_insecure (TLS is always
//     verified: give ca_file);
//   - in confine: a relative or unclean path ("/a/../b"), a malformed
//     HOST:PORT, a port of 0 or above 65535;
//   - a profile name outside [a-z0-9][a-z0-9_-]* or over 64 bytes;
//   - an allow or prompts entry that is not "<server>.<name>" with a
//     declared server: a glob in the server part, a '.' or "**" in the
//     name part, a character outside [A-Za-z0-9_-*];
//   - a resource pattern that the URI matcher refuses (see
//     [CanonicalURI]) or with a '*' other than a final "/*" or "/**"; a
//     resources entry without a scheme that is not "<server>.*" with a
//     declared server;
//   - extends or allowed_transitions naming an unknown profile, extends
//     cycles, a profile listing itself as a transition, the same entry
//     twice in a list;
//   - a default_profile that is not a profile; explicit: false; signals
//     (reserved upstream, not implemented); error_disclosure other than
//     verbose or minimal;
//   - a rule whose tool is not a wire name "<server>__<tool>", whose
//     capability is not "<server>.<tool>", with a declared server, or
//     whose role is not a profile (see [Gateway.RuleRequest]): a rule that
//     can never match is most likely a typo that would disable a deny.
//
// The rules parse exactly as in a policy file, with the file's line
// numbers, into a [Set] whose default is allow (a gateway file has no
// default key: what no rule decides, the profiles decide).
//
// # Differences from upstream aegis-mcp
//
// A file written for upstream (upstream-spec §4.1) parses unchanged when
// every server its allow entries name is declared and it uses no key
// upstream ignores. Otherwise, on purpose:
//
//   - unknown keys are errors (upstream ignores them); explicit: true is
//     accepted, signals and allow-entry where: are refused, not ignored;
//   - server names are restricted (upstream takes any key, so "a" and
//     "a__b" could share wire names); env, env_passthrough and confine
//     are new; transport is checked (upstream parses and ignores it);
//   - an allow entry names a declared server; '*' stays inside one tool
//     name and never spans "__"; '?' and [...] are refused (upstream uses
//     path.Match, whose '*' also matches '.', and a malformed pattern
//     silently never matches);
//   - resource patterns are checked when the file is read (upstream skips
//     one it cannot canonicalize); '*' elsewhere than a final "/*" or
//     "/**" is an error, not a literal star;
//   - a profile listing itself or the same entry twice is an error;
//   - rules are new: wrap's rules applied on top of the profiles;
//   - prompts are new: upstream does not aggregate prompts at all, nor
//     resource templates. Here a prompt is shown and served only when an
//     entry of the profile's prompts list allows it (none by default), and
//     a resource template only when the profile's resources patterns can
//     allow a URI it expands to (see [Gateway.TemplateAllowed]).
//
// See [Gateway.ResourceAllowed], [Gateway.RequiredProfile] and
// [ProfileState] for the differences in matching, disclosure and approvals.
func ParseGateway(name string, data []byte) (*Gateway, error) {
	p := parser{file: name}
	g, err := p.gateway(data)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// lineStr is a string of the file and where it was.
type lineStr struct {
	s    string
	line int
	path string
}

// rawProfile is a profile as written, before extends is resolved.
type rawProfile struct {
	name        string
	line        int
	path        string
	extends     *lineStr
	allow       []lineStr
	prompts     []lineStr
	resources   []uriPattern
	resServers  []lineStr // "<server>.*" entries of resources
	transitions []lineStr
	forGroups   []lineStr
	forScopes   []lineStr
	binding     *lineStr // the first for_ key, for messages
}

func (p *parser) gateway(data []byte) (*Gateway, error) {
	root, err := p.document(data, "gateway")
	if err != nil {
		return nil, err
	}
	fields, err := p.mapping(root, "", gatewayKeys)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		serverIndex: make(map[string]int),
		profiles:    make(map[string]*profile),
		rules:       &Set{rules: []rule{}},
	}
	var (
		raws       []*rawProfile
		def        *lineStr
		rulesNode  *yaml.Node
		haveServer bool
	)
	for _, f := range fields {
		switch f.name {
		case "version":
			v, err := p.integer(f.val, f.path, math.MinInt64, math.MaxInt64)
			if err != nil {
				return nil, err
			}
			if v != 1 {
				return nil, p.errorf(f.val.Line, f.path, "unsupported version %d; this aegis reads version 1", v)
			}
		case "servers":
			haveServer = true
			if err := p.servers(g, f.val, f.path); err != nil {
				return nil, err
			}
		case "profiles":
			if raws, err = p.rawProfiles(f.val, f.path); err != nil {
				return nil, err
			}
		case "activation":
			if def, err = p.activation(f.val, f.path); err != nil {
				return nil, err
			}
		case "error_disclosure":
			v, err := p.str(f.val, f.path)
			if err != nil {
				return nil, err
			}
			switch v {
			case "verbose":
				g.disclosure = DisclosureVerbose
			case "minimal":
				g.disclosure = DisclosureMinimal
			default:
				return nil, p.errorf(f.val.Line, f.path, "unknown error_disclosure %q; want verbose or minimal", v)
			}
		case "rules":
			if err := p.rules(g.rules, f.val, f.path); err != nil {
				return nil, err
			}
			rulesNode = f.val
		case "on_tool_change":
			if g.rules.onToolChange, err = p.toolChange(f.val, f.path); err != nil {
				return nil, err
			}
		case "witnesses":
			if g.rules.witnesses, err = p.witnesses(f.val, f.path); err != nil {
				return nil, err
			}
		case "meta_tool_names":
			v, err := p.str(f.val, f.path)
			if err != nil {
				return nil, err
			}
			switch v {
			case "host_safe":
			case "dotted":
				g.dottedMeta = true
			default:
				return nil, p.errorf(f.val.Line, f.path, "unknown meta_tool_names %q; want host_safe (aegis__set_profile, the default) or dotted (aegis.set_profile)", v)
			}
		}
	}
	switch {
	case !haveServer:
		return nil, p.errorf(root.Line, "", `missing required key "servers"`)
	case raws == nil:
		return nil, p.errorf(root.Line, "", `missing required key "profiles"`)
	case def == nil:
		return nil, p.errorf(root.Line, "", `missing required key "activation"`)
	}
	if err := p.resolveProfiles(g, raws); err != nil {
		return nil, err
	}
	if _, ok := g.profiles[def.s]; !ok {
		return nil, p.errorf(def.line, def.path, "unknown profile %q", def.s)
	}
	for _, r := range raws {
		if r.binding != nil && r.name == def.s {
			return nil, p.errorf(r.binding.line, r.binding.path, "the default profile %q is every caller's; bind another profile to groups or scopes, and a caller who has them starts in it", def.s)
		}
	}
	g.defaultProfile = def.s
	if rulesNode != nil {
		if err := p.checkGatewayRules(g, rulesNode, "rules"); err != nil {
			return nil, err
		}
	}
	h, err := g.rules.Projection().Hash()
	if err != nil {
		return nil, p.errorf(0, "", "cannot hash the rules: %v", err)
	}
	g.rules.hash = h
	return g, nil
}

// entries returns the keys of a mapping whose keys are names the file
// chooses (servers, profiles, env), in document order, refusing non-string
// and duplicate keys.
func (p *parser) entries(n *yaml.Node, path, what string) ([]field, error) {
	if n.Kind != yaml.MappingNode || n.ShortTag() != "!!map" {
		return nil, p.errorf(n.Line, path, "expected a mapping of %s, got %s", what, describe(n))
	}
	fields := make([]field, 0, len(n.Content)/2)
	first := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, p.errorf(k.Line, path, "keys must be strings, got %s", describe(k))
		}
		f := field{name: k.Value, path: keyPath(path, k.Value), key: k, val: v}
		if line, dup := first[f.name]; dup {
			return nil, p.errorf(k.Line, f.path, "duplicate key (first at line %d)", line)
		}
		first[f.name] = k.Line
		fields = append(fields, f)
	}
	return fields, nil
}

func (p *parser) servers(g *Gateway, n *yaml.Node, path string) error {
	fields, err := p.entries(n, path, "servers")
	if err != nil {
		return err
	}
	if len(fields) == 0 {
		return p.errorf(n.Line, path, "must name at least one server")
	}
	for _, f := range fields {
		if prob := serverNameProblem(f.name); prob != "" {
			return p.errorf(f.key.Line, f.path, "invalid server name: %s", prob)
		}
		s, err := p.server(f.val, f.path)
		if err != nil {
			return err
		}
		s.Name = f.name
		g.serverIndex[f.name] = len(g.servers)
		g.servers = append(g.servers, s)
	}
	return nil
}

func (p *parser) server(n *yaml.Node, path string) (Server, error) {
	var s Server
	if err := p.refuseSkipVerify(n, path); err != nil {
		return s, err
	}
	fields, err := p.mapping(n, path, serverKeys)
	if err != nil {
		return s, err
	}
	envLines := map[string]int{} // env name -> line, to refuse it in env_passthrough
	var passLines []lineStr
	for _, f := range fields {
		switch f.name {
		case "command":
			if s.Command, err = p.text(f.val, f.path); err != nil {
				return s, err
			}
			if s.Command == "" {
				return s, p.errorf(f.val.Line, f.path, "must not be empty")
			}
		case "args":
			list, err := p.strList(f.val, f.path, false)
			if err != nil {
				return s, err
			}
			s.Args = make([]string, len(list))
			for i, a := range list {
				s.Args[i] = a.s
			}
		case "env":
			env, err := p.entries(f.val, f.path, "environment variables")
			if err != nil {
				return s, err
			}
			s.Env = make([]string, 0, len(env))
			for _, e := range env {
				if !envName(e.name) {
					return s, p.errorf(e.key.Line, e.path, "invalid environment variable name; want [A-Za-z_][A-Za-z0-9_]*")
				}
				envLines[e.name] = e.key.Line
				if e.val.Kind == yaml.MappingNode {
					path, err := p.envFile(e.val, e.path)
					if err != nil {
						return s, err
					}
					s.EnvFiles = append(s.EnvFiles, EnvFile{Name: e.name, Path: path})
					continue
				}
				// The value is not quoted in errors: it may be a secret.
				v, err := p.text(e.val, e.path)
				if err != nil {
					return s, err
				}
				s.Env = append(s.Env, e.name+"="+v)
			}
		case "env_passthrough":
			list, err := p.strList(f.val, f.path, true)
			if err != nil {
				return s, err
			}
			s.EnvPassthrough = make([]string, len(list))
			for i, e := range list {
				if !envName(e.s) {
					return s, p.errorf(e.line, e.path, "%q is not an environment variable name; want [A-Za-z_][A-Za-z0-9_]*", e.s)
				}
				s.EnvPassthrough[i] = e.s
			}
			passLines = list
		case "transport":
			v, err := p.str(f.val, f.path)
			if err != nil {
				return s, err
			}
			s.Transport = Transport(v) // checked by serverKind
		case "url", "headers", "ca_file":
			if err := p.remoteKey(&s, f); err != nil {
				return s, err
			}
		case "oauth":
			if err := p.oauthKey(&s, f); err != nil {
				return s, err
			}
		case "confine":
			if s.Confine, err = p.confine(f.val, f.path); err != nil {
				return s, err
			}
		case "prefix":
			prefix, err := p.boolean(f.val, f.path)
			if err != nil {
				return s, err
			}
			s.Unprefixed = !prefix
		case "alias":
			if s.Alias, err = p.aliases(f.val, f.path); err != nil {
				return s, err
			}
		}
	}
	if err := p.serverKind(&s, n, path, fields); err != nil {
		return s, err
	}
	for _, e := range passLines {
		if line, set := envLines[e.s]; set {
			return s, p.errorf(e.line, e.path, "%s is also set in env (line %d); a variable comes from one place", e.s, line)
		}
	}
	return s, nil
}

// aliases reads a server's alias: mapping, the server's tool name → the
// name shown to hosts. Each alias is a tool name of [A-Za-z0-9_-] that
// no other tool of the server is aliased to; whether the wire name built
// from it fits [HostSafeName] depends on the server's name and prefix,
// checked by the gateway when it lists the tools.
func (p *parser) aliases(n *yaml.Node, path string) (map[string]string, error) {
	fields, err := p.entries(n, path, "tool aliases")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(fields))
	first := map[string]string{}
	for _, f := range fields {
		if f.name == "" || len(f.name) > MaxToolNameLen*4 || strings.IndexByte(f.name, 0) >= 0 {
			return nil, p.errorf(f.key.Line, f.path, "a tool name to alias must be 1 to %d bytes without NUL", MaxToolNameLen*4)
		}
		v, err := p.str(f.val, f.path)
		if err != nil {
			return nil, err
		}
		if prob := toolNameProblem(v); prob != "" || len(v) > MaxHostToolNameLen {
			if prob == "" {
				prob = fmt.Sprintf("longer than %d bytes", MaxHostToolNameLen)
			}
			return nil, p.errorf(f.val.Line, f.path, "alias %q: %s; an alias is what hosts are shown, 1 to %d bytes of [A-Za-z0-9_-]", v, prob, MaxHostToolNameLen)
		}
		if other, dup := first[v]; dup {
			return nil, p.errorf(f.val.Line, f.path, "alias %q is already tool %q's; each tool needs a name of its own", v, other)
		}
		first[v] = f.name
		out[f.name] = v
	}
	return out, nil
}

// envFile reads an env value given as {file: PATH}: an absolute, clean
// path, read when the server starts (not here: parsing does no I/O).
func (p *parser) envFile(n *yaml.Node, epath string) (string, error) {
	fields, err := p.mapping(n, epath, envFileKeys)
	if err != nil {
		return "", err
	}
	if len(fields) == 0 {
		return "", p.errorf(n.Line, epath, `missing required key "file"`)
	}
	f := fields[0]
	v, err := p.text(f.val, f.path)
	if err != nil {
		return "", err
	}
	switch {
	case !strings.HasPrefix(v, "/"):
		return "", p.errorf(f.val.Line, f.path, "%q is not an absolute path", v)
	case path.Clean(v) != v:
		return "", p.errorf(f.val.Line, f.path, "%q is not a clean path; write %q", v, path.Clean(v))
	}
	return v, nil
}

// text is str without NUL, for what becomes an argv or environment entry.
func (p *parser) text(n *yaml.Node, path string) (string, error) {
	v, err := p.str(n, path)
	if err != nil {
		return "", err
	}
	if strings.IndexByte(v, 0) >= 0 {
		return "", p.errorf(n.Line, path, "contains a NUL byte")
	}
	return v, nil
}

func envName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// strList reads a sequence of strings, refusing repeats when unique.
func (p *parser) strList(n *yaml.Node, path string, unique bool) ([]lineStr, error) {
	if n.Kind != yaml.SequenceNode || n.ShortTag() != "!!seq" {
		return nil, p.errorf(n.Line, path, "expected a sequence of strings, got %s", describe(n))
	}
	out := make([]lineStr, 0, len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		v, err := p.text(item, ipath)
		if err != nil {
			return nil, err
		}
		if unique {
			for _, prev := range out {
				if prev.s == v {
					return nil, p.errorf(item.Line, ipath, "duplicate entry %q (first at line %d)", v, prev.line)
				}
			}
		}
		out = append(out, lineStr{s: v, line: item.Line, path: ipath})
	}
	return out, nil
}

func (p *parser) confine(n *yaml.Node, cpath string) (*Confine, error) {
	fields, err := p.mapping(n, cpath, confineKeys)
	if err != nil {
		return nil, err
	}
	c := &Confine{}
	for _, f := range fields {
		switch f.name {
		case "allow_read", "allow_write":
			list, err := p.strList(f.val, f.path, true)
			if err != nil {
				return nil, err
			}
			paths := make([]string, len(list))
			for i, e := range list {
				switch {
				case !strings.HasPrefix(e.s, "/"):
					return nil, p.errorf(e.line, e.path, "%q is not an absolute path", e.s)
				case path.Clean(e.s) != e.s:
					return nil, p.errorf(e.line, e.path, "%q is not a clean path; write %q", e.s, path.Clean(e.s))
				}
				paths[i] = e.s
			}
			if f.name == "allow_read" {
				c.AllowRead = paths
			} else {
				c.AllowWrite = paths
			}
		case "allow_net":
			list, err := p.strList(f.val, f.path, true)
			if err != nil {
				return nil, err
			}
			c.AllowNet = make([]HostPort, len(list))
			for i, e := range list {
				hp, prob := parseHostPort(e.s)
				if prob != "" {
					return nil, p.errorf(e.line, e.path, "bad grant %q: %s", e.s, prob)
				}
				c.AllowNet[i] = hp
			}
		default:
			v, err := p.boolean(f.val, f.path)
			if err != nil {
				return nil, err
			}
			switch f.name {
			case "allow_exec_support":
				c.AllowExecSupport = v
			case "allow_udp":
				c.AllowUDP = v
			case "allow_mptcp":
				c.AllowMPTCP = v
			case "best_effort":
				c.BestEffort = v
			}
		}
	}
	return c, nil
}

// parseHostPort reads HOST:PORT or [IPv6]:PORT, as wrap's --allow-net.
func parseHostPort(s string) (HostPort, string) {
	var host, port string
	if rest, ok := strings.CutPrefix(s, "["); ok {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return HostPort{}, "want [IPv6]:PORT"
		}
		host, port = rest[:end], rest[end+2:]
		if !strings.Contains(host, ":") {
			return HostPort{}, "brackets are for an IPv6 host"
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.') {
				return HostPort{}, "not an IPv6 address"
			}
		}
	} else {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return HostPort{}, "want HOST:PORT, such as 127.0.0.1:8080"
		}
		host, port = s[:i], s[i+1:]
		if strings.IndexByte(host, ':') >= 0 {
			return HostPort{}, "write an IPv6 host in brackets: [::1]:8080"
		}
		if host == "" {
			return HostPort{}, "empty host"
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-') {
				return HostPort{}, "not a host name or IP address"
			}
		}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || port[0] == '0' || port[0] == '+' {
		return HostPort{}, "the port must be 1 to 65535"
	}
	return HostPort{Host: host, Port: uint16(n)}, ""
}

func (p *parser) activation(n *yaml.Node, apath string) (*lineStr, error) {
	fields, err := p.mapping(n, apath, activationKeys)
	if err != nil {
		return nil, err
	}
	var def *lineStr
	for _, f := range fields {
		switch f.name {
		case "default_profile":
			v, err := p.str(f.val, f.path)
			if err != nil {
				return nil, err
			}
			def = &lineStr{s: v, line: f.val.Line, path: f.path}
		case "explicit":
			v, err := p.boolean(f.val, f.path)
			if err != nil {
				return nil, err
			}
			if !v {
				return nil, p.errorf(f.val.Line, f.path, "profiles are only ever switched explicitly; remove the key or set it to true")
			}
		case "signals":
			return nil, p.errorf(f.key.Line, f.path, "reserved and not supported: profiles are only ever switched explicitly")
		}
	}
	if def == nil {
		return nil, p.errorf(n.Line, apath, `missing required key "default_profile"`)
	}
	return def, nil
}

func profileNameProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > maxProfileNameLen:
		return "longer than " + strconv.Itoa(maxProfileNameLen) + " bytes"
	case s[0] == '_' || s[0] == '-':
		return "must start with a letter or digit"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "may hold only a-z, 0-9, _ and -"
		}
	}
	return ""
}

func (p *parser) rawProfiles(n *yaml.Node, ppath string) ([]*rawProfile, error) {
	fields, err := p.entries(n, ppath, "profiles")
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return nil, p.errorf(n.Line, ppath, "must name at least one profile")
	}
	raws := make([]*rawProfile, 0, len(fields))
	for _, f := range fields {
		if prob := profileNameProblem(f.name); prob != "" {
			return nil, p.errorf(f.key.Line, f.path, "invalid profile name: %s", prob)
		}
		r := &rawProfile{name: f.name, line: f.key.Line, path: f.path}
		body, err := p.mapping(f.val, f.path, profileKeys)
		if err != nil {
			return nil, err
		}
		for _, b := range body {
			switch b.name {
			case "extends":
				v, err := p.str(b.val, b.path)
				if err != nil {
					return nil, err
				}
				r.extends = &lineStr{s: v, line: b.val.Line, path: b.path}
			case "allow":
				if r.allow, err = p.strList(b.val, b.path, true); err != nil {
					return nil, err
				}
			case "prompts":
				if r.prompts, err = p.strList(b.val, b.path, true); err != nil {
					return nil, err
				}
			case "resources":
				list, err := p.strList(b.val, b.path, true)
				if err != nil {
					return nil, err
				}
				for _, e := range list {
					if !strings.ContainsRune(e.s, ':') {
						// No scheme: not a URI, but "<server>.*", every
						// resource of a server (checked with the servers).
						r.resServers = append(r.resServers, e)
						continue
					}
					pat, prob := parseURIPattern(e.s)
					if prob != "" {
						if strings.ContainsAny(e.s, "{}") {
							prob += " (a URI template is not a pattern: end the path in /* or /**)"
						}
						return nil, p.errorf(e.line, e.path, "bad resource pattern %q: %s", e.s, prob)
					}
					r.resources = append(r.resources, pat)
				}
			case "for_groups", "for_scopes":
				list, err := p.strList(b.val, b.path, true)
				if err != nil {
					return nil, err
				}
				if len(list) == 0 {
					return nil, p.errorf(b.val.Line, b.path, "must name at least one %s; omit it for a profile of every caller", strings.TrimPrefix(strings.TrimSuffix(b.name, "s"), "for_"))
				}
				if b.name == "for_groups" {
					r.forGroups = list
				} else {
					r.forScopes = list
				}
				if r.binding == nil {
					r.binding = &lineStr{s: b.name, line: b.key.Line, path: b.path}
				}
			case "allowed_transitions":
				if r.transitions, err = p.strList(b.val, b.path, true); err != nil {
					return nil, err
				}
				for _, t := range r.transitions {
					if t.s == f.name {
						return nil, p.errorf(t.line, t.path, "a profile does not list itself as a transition")
					}
				}
			}
		}
		raws = append(raws, r)
	}
	return raws, nil
}

// parseToolPattern checks an allow entry's form; the caller checks that its
// server exists.
func parseToolPattern(text string) (toolPattern, string) {
	return parseNamePattern(text, "tool", "fs.read_file")
}

// parsePromptPattern checks a prompts entry's form: the form of an allow
// entry, a prompt name held to the rules of a tool name.
func parsePromptPattern(text string) (toolPattern, string) {
	return parseNamePattern(text, "prompt", "docs.review")
}

// parseNamePattern checks "<server>.<name glob>"; what names the kind of
// name (tool or prompt) in the messages, example is an entry of that kind.
func parseNamePattern(text, what, example string) (toolPattern, string) {
	t := toolPattern{text: text}
	dot := strings.IndexByte(text, '.')
	if dot < 0 {
		return t, `want "<server>.<` + what + `>", such as ` + example + ` or ` + example[:strings.IndexByte(example, '.')] + `.*`
	}
	t.server, t.tool = text[:dot], text[dot+1:]
	switch {
	case strings.IndexByte(t.server, '*') >= 0:
		return t, "the server part cannot be a glob: name one declared server"
	case t.server == "":
		return t, "empty server part"
	case t.tool == "":
		return t, "empty " + what + ` part; write "` + t.server + `.*" for all of its ` + what + "s"
	case strings.IndexByte(t.tool, '.') >= 0:
		return t, "a " + what + " name has no '.': one entry is <server>.<" + what + ">"
	case strings.Contains(t.tool, "**"):
		return t, `"**" is not a ` + what + ` glob: '*' already matches any run of one ` + what + " name"
	case len(t.tool) > MaxToolNameLen:
		return t, what + " part longer than " + strconv.Itoa(MaxToolNameLen) + " bytes"
	}
	for i := 0; i < len(t.tool); i++ {
		c := t.tool[i]
		if c == '*' {
			t.stars++
		} else if !isToolNameByte(c) {
			return t, "a character outside [A-Za-z0-9_-] and '*' in the " + what + " part"
		}
	}
	return t, ""
}

// profilePatterns parses one kind of "<server>.<glob>" entries (key) of
// every profile, each naming a declared server.
func (p *parser) profilePatterns(g *Gateway, raws []*rawProfile, key string, entries func(*rawProfile) []lineStr,
	parse func(string) (toolPattern, string)) (map[string][]toolPattern, error) {
	out := make(map[string][]toolPattern, len(raws))
	for _, r := range raws {
		for _, a := range entries(r) {
			t, prob := parse(a.s)
			if prob != "" {
				return nil, p.errorf(a.line, a.path, "bad %s entry %q: %s", key, a.s, prob)
			}
			if _, ok := g.serverIndex[t.server]; !ok {
				return nil, p.errorf(a.line, a.path, "unknown server %q in %s entry %q", t.server, key, a.s)
			}
			out[r.name] = append(out[r.name], t)
		}
	}
	return out, nil
}

func (p *parser) resolveProfiles(g *Gateway, raws []*rawProfile) error {
	byName := make(map[string]*rawProfile, len(raws))
	for _, r := range raws {
		byName[r.name] = r
	}
	for _, r := range raws {
		if r.extends != nil {
			if _, ok := byName[r.extends.s]; !ok {
				return p.errorf(r.extends.line, r.extends.path, "unknown profile %q", r.extends.s)
			}
		}
		for _, t := range r.transitions {
			if _, ok := byName[t.s]; !ok {
				return p.errorf(t.line, t.path, "unknown profile %q", t.s)
			}
		}
	}
	// Cycles: report each at the extends of its first member in the file.
	for _, r := range raws {
		chain := []string{r.name}
		for cur := r; cur.extends != nil; {
			next := byName[cur.extends.s]
			if next == r {
				return p.errorf(r.extends.line, r.extends.path, "cyclic extends: %s -> %s", strings.Join(chain, " -> "), r.name)
			}
			if contains(chain, next.name) {
				break // a cycle r leads into; reported at one of its members
			}
			chain = append(chain, next.name)
			cur = next
		}
	}
	// Allow and prompts entries: form and server.
	allows, err := p.profilePatterns(g, raws, "allow", func(r *rawProfile) []lineStr { return r.allow }, parseToolPattern)
	if err != nil {
		return err
	}
	prompts, err := p.profilePatterns(g, raws, "prompts", func(r *rawProfile) []lineStr { return r.prompts }, parsePromptPattern)
	if err != nil {
		return err
	}
	// Resources entries "<server>.*": a declared server, all of it.
	for _, r := range raws {
		for _, e := range r.resServers {
			server, ok := strings.CutSuffix(e.s, ".*")
			if !ok || strings.ContainsAny(server, ".*") {
				return p.errorf(e.line, e.path, `bad resource pattern %q: no scheme (a URI pattern such as "file:///srv/**", or "<server>.*" for every resource of one server)`, e.s)
			}
			if _, ok := g.serverIndex[server]; !ok {
				return p.errorf(e.line, e.path, "unknown server %q in resources entry %q", server, e.s)
			}
		}
	}
	var build func(r *rawProfile) *profile
	build = func(r *rawProfile) *profile {
		if done, ok := g.profiles[r.name]; ok {
			return done
		}
		pr := &profile{name: r.name}
		if r.extends != nil {
			base := build(byName[r.extends.s])
			pr.extends = base.name
			pr.allow = append(pr.allow, base.allow...)
			pr.prompts = append(pr.prompts, base.prompts...)
			pr.resources = append(pr.resources, base.resources...)
			pr.resServers = append(pr.resServers, base.resServers...)
		}
		for _, e := range r.resServers {
			if !contains(pr.resServers, e.s) {
				pr.resServers = append(pr.resServers, e.s)
			}
		}
		for _, a := range allows[r.name] {
			if !containsFunc(pr.allow, func(b toolPattern) bool { return b.text == a.text }) {
				pr.allow = append(pr.allow, a)
			}
		}
		for _, a := range prompts[r.name] {
			if !containsFunc(pr.prompts, func(b toolPattern) bool { return b.text == a.text }) {
				pr.prompts = append(pr.prompts, a)
			}
		}
		for _, u := range r.resources {
			if !containsFunc(pr.resources, func(b uriPattern) bool { return b.text == u.text }) {
				pr.resources = append(pr.resources, u)
			}
		}
		for _, t := range r.transitions {
			pr.transitions = append(pr.transitions, t.s)
		}
		for _, e := range r.forGroups {
			pr.forGroups = append(pr.forGroups, e.s)
		}
		for _, e := range r.forScopes {
			pr.forScopes = append(pr.forScopes, e.s)
		}
		if r.binding != nil {
			g.bound = append(g.bound, r.name)
		}
		g.profiles[r.name] = pr
		return pr
	}
	for _, r := range raws {
		build(r)
	}
	g.names = sortedKeys(g.profiles)
	return nil
}

func containsFunc[T any](list []T, f func(T) bool) bool {
	for _, v := range list {
		if f(v) {
			return true
		}
	}
	return false
}

// checkGatewayRules checks that every concrete tool, capability and role of
// the rules names something of this gateway in the form that
// [Gateway.RuleRequest] asks with.
func (p *parser) checkGatewayRules(g *Gateway, n *yaml.Node, rpath string) error {
	for i, rn := range n.Content {
		for j := 0; j+1 < len(rn.Content); j += 2 {
			k, v := rn.Content[j], rn.Content[j+1]
			if v.Value == "*" {
				continue
			}
			kpath := fmt.Sprintf("%s[%d].%s", rpath, i, k.Value)
			switch k.Value {
			case "tool":
				server, _, ok := SplitName(v.Value)
				if !ok {
					hint := ""
					if s, t, dot := strings.Cut(v.Value, "."); dot {
						hint = fmt.Sprintf(" (write %q)", Namespace(s, t))
					}
					return p.errorf(v.Line, kpath, "%q is not a wire name <server>__<tool>%s", v.Value, hint)
				}
				if _, known := g.serverIndex[server]; !known {
					return p.errorf(v.Line, kpath, "unknown server %q in tool %q", server, v.Value)
				}
			case "capability":
				server, tool, ok := strings.Cut(v.Value, ".")
				if !ok || !ValidToolName(tool) {
					return p.errorf(v.Line, kpath, "%q is not a capability <server>.<tool>", v.Value)
				}
				if _, known := g.serverIndex[server]; !known {
					return p.errorf(v.Line, kpath, "unknown server %q in capability %q", server, v.Value)
				}
			case "role":
				if !g.HasProfile(v.Value) {
					return p.errorf(v.Line, kpath, "unknown profile %q (a rule's role is the active profile)", v.Value)
				}
			}
		}
	}
	return nil
}
