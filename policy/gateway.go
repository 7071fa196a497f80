package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/schemas"
)

// Gateway is a parsed, validated gateway file: the downstream servers, the
// profiles with their extends already resolved, the transition graph, the
// default profile, the error disclosure, and the wrap-style rules applied on
// top. It is immutable, so one Gateway may be shared by any number of
// goroutines. Build one with [ParseGateway].
//
// Every question is default deny: an unknown profile, server, tool or URI,
// or one that no pattern names, is refused.
type Gateway struct {
	servers        []Server // file order
	serverIndex    map[string]int
	profiles       map[string]*profile
	names          []string // profile names, sorted
	bound          []string // profiles with for_groups or for_scopes, file order
	defaultProfile string
	disclosure     Disclosure
	rules          *Set
	dottedMeta     bool
}

// Server is one downstream MCP server of a gateway file: a local one,
// started as a stdio subprocess (Command), or a remote one, reached over
// HTTP (URL). Exactly one of Command and URL is set.
type Server struct {
	// Name namespaces the server's tools (see [Namespace]); it passes
	// [ValidServerName].
	Name string
	// Command is the program to run (looked up in PATH when it has no
	// slash) and Args its arguments.
	Command string
	Args    []string
	// Env holds the "NAME=value" entries of env given as values, in file
	// order; EnvFiles the entries whose value is read from a file when the
	// server starts (NAME: {file: PATH}); EnvPassthrough the names of
	// variables copied from aegis's own environment (env_passthrough).
	// No name is in two of them. What else the server's environment holds
	// is the caller's choice (aegis gives a minimal base, see
	// proxy.ServerEnv).
	Env            []string
	EnvFiles       []EnvFile
	EnvPassthrough []string
	// Confine, when not nil, runs the server confined as 'aegis wrap
	// --confine' does.
	Confine *Confine
	// Unprefixed (prefix: false) shows the server's tools and prompts
	// under their own names rather than as <server>__<name>: for a host or
	// test suite that expects a single server's names unchanged. Profiles
	// and rules still name them <server>.<name> and <server>__<name>, and
	// the record gives the capability <server>.<name> beside the name the
	// host called; a name that another server's tool or prompt already has
	// is refused as any wire-name collision is.
	Unprefixed bool
	// Alias (alias:) gives some of the server's tools another name toward
	// the host: the server's tool name → the name shown, which the wire
	// name is built from in its place (<server>__<alias>, or <alias> with
	// prefix: false). It is how a tool whose wire name no host would accept
	// ([HostSafeName]) is shown at all. Profiles, rules and the record
	// name the tool by its alias (<server>.<alias>); only the server is
	// told its own name. An alias renames; it never grants.
	Alias map[string]string
	// URL, when not "", makes the server remote (url:): aegis connects to
	// it over HTTP and runs no process, so Command, Args, Env, EnvFiles,
	// EnvPassthrough and Confine are empty. It is https://, or http:// to
	// a loopback host, without userinfo or fragment, as written.
	URL string
	// Transport is how aegis talks to the server: [TransportStdio] for a
	// command, [TransportStreamable] (the default) or [TransportSSE] for a
	// url. It is never empty.
	Transport Transport
	// Headers are sent with every HTTP request to a remote server, in
	// file order, no name twice (case-insensitively). Their values are
	// secrets.
	Headers []Header
	// CAFile, when not "", is an absolute, clean path to a PEM bundle:
	// a remote https server's certificate must chain to one of its CAs,
	// and the system's roots are then not used. Read when the server
	// starts.
	CAFile string
	// OAuth, when not nil, makes aegis an OAuth client of the server
	// (oauth:, gateway_oauth.go): its token comes from aegis auth login.
	OAuth *OAuth
}

// EnvFile is an environment variable whose value is a file's contents.
// Path is absolute and clean; the file is read when the server starts.
type EnvFile struct {
	Name string
	Path string
}

// Confine is a server's confinement, with the meaning of the flags of
// 'aegis wrap --confine': deny by default, each field a grant. A Confine
// with every field zero confines the server to nothing but what the sandbox
// always grants.
type Confine struct {
	// AllowRead lists absolute, clean paths the server may read beneath
	// (--allow-read); AllowWrite paths it may also write beneath
	// (--allow-write).
	AllowRead  []string
	AllowWrite []string
	// AllowNet lists TCP connect grants (--allow-net HOST:PORT). Empty
	// means every network system call is denied. The kernel enforces the
	// port only.
	AllowNet []HostPort
	// AllowExecSupport grants read on the system directories a
	// dynamically linked program needs (--allow-exec-support).
	AllowExecSupport bool
	// AllowUDP and AllowMPTCP are --allow-udp and --allow-mptcp.
	AllowUDP   bool
	AllowMPTCP bool
	// BestEffort runs with what the kernel can enforce, recording each
	// degradation, instead of refusing (--best-effort).
	BestEffort bool
}

// HostPort is one allow_net grant. Host has no brackets; an IPv6 host
// contains ':'. Which hosts the sandbox accepts (a numeric IP or
// "localhost") is checked when the profile is applied.
type HostPort struct {
	Host string
	Port uint16
}

// String returns HOST:PORT, with brackets around an IPv6 host.
func (h HostPort) String() string {
	p := strconv.Itoa(int(h.Port))
	for i := 0; i < len(h.Host); i++ {
		if h.Host[i] == ':' {
			return "[" + h.Host + "]:" + p
		}
	}
	return h.Host + ":" + p
}

// Disclosure is how much a refusal tells the agent.
type Disclosure uint8

const (
	// DisclosureVerbose names a profile that would grant a refused
	// capability (required_profile). It is the default, as upstream.
	DisclosureVerbose Disclosure = iota
	// DisclosureMinimal never names one, so that a compromised agent is
	// not handed an escalation target.
	DisclosureMinimal
)

// String returns verbose or minimal.
func (d Disclosure) String() string {
	if d == DisclosureMinimal {
		return "minimal"
	}
	return "verbose"
}

// profile is one profile with extends resolved.
type profile struct {
	name    string
	extends string
	// allow, prompts and resources are effective: the base's
	// (recursively) first, then the profile's own, without repeats.
	allow       []toolPattern
	prompts     []toolPattern
	resources   []uriPattern
	resServers  []string // "<server>.*" entries of resources, as written
	transitions []string // own only: transitions are not inherited
	// forGroups and forScopes bind the profile to callers (own only): a
	// principal whose groups claim holds one of forGroups and who holds
	// every scope of forScopes.
	forGroups []string
	forScopes []string
}

// toolPattern is one allow entry "<server>.<tool glob>", or one prompts
// entry "<server>.<prompt glob>".
type toolPattern struct {
	text   string
	server string
	tool   string // may hold '*'
	stars  int
}

// DefaultProfile returns the profile a session starts in.
func (g *Gateway) DefaultProfile() string { return g.defaultProfile }

// Disclosure returns the error_disclosure setting.
func (g *Gateway) Disclosure() Disclosure { return g.disclosure }

// MetaToolNames returns the wire names of the gateway's two meta-tools:
// aegis__set_profile and aegis__approval_status, names every host accepts
// ([HostSafeName]), or, with meta_tool_names: dotted, the seed's
// aegis.set_profile and aegis.approval_status, for hosts and agents
// written against those.
func (g *Gateway) MetaToolNames() (setProfile, approvalStatus string) {
	return MetaToolNames(g.dottedMeta)
}

// DottedMetaTools reports whether the file says meta_tool_names: dotted.
func (g *Gateway) DottedMetaTools() bool { return g.dottedMeta }

// MetaToolNames is [Gateway.MetaToolNames] for dotted or not.
func MetaToolNames(dotted bool) (setProfile, approvalStatus string) {
	if dotted {
		return "aegis.set_profile", "aegis.approval_status"
	}
	return "aegis__set_profile", "aegis__approval_status"
}

// Rules returns the wrap-style rules of the file as a [Set] whose default
// is allow: an empty Set when the file has none. They apply on top of the
// profiles and can only narrow them: the caller asks [Gateway.ToolAllowed]
// first and evaluates the rules (with [Gateway.RuleRequest]) only for a
// call that a profile allows.
func (g *Gateway) Rules() *Set { return g.rules }

// Servers returns the servers in file order. The result is a copy.
func (g *Gateway) Servers() []Server {
	out := make([]Server, len(g.servers))
	for i := range g.servers {
		out[i] = g.servers[i].clone()
	}
	return out
}

// Server returns the server called name, a copy.
func (g *Gateway) Server(name string) (Server, bool) {
	i, ok := g.serverIndex[name]
	if !ok {
		return Server{}, false
	}
	return g.servers[i].clone(), true
}

func (s *Server) clone() Server {
	c := *s
	c.Args = slices.Clone(s.Args)
	c.Env = slices.Clone(s.Env)
	c.EnvFiles = slices.Clone(s.EnvFiles)
	c.EnvPassthrough = slices.Clone(s.EnvPassthrough)
	c.Headers = slices.Clone(s.Headers)
	if s.OAuth != nil {
		o := *s.OAuth
		o.Scopes = slices.Clone(o.Scopes)
		if o.Exchange != nil {
			x := *o.Exchange
			x.Scopes = slices.Clone(x.Scopes)
			o.Exchange = &x
		}
		c.OAuth = &o
	}
	c.Alias = maps.Clone(s.Alias)
	if s.Confine != nil {
		cc := *s.Confine
		cc.AllowRead = slices.Clone(cc.AllowRead)
		cc.AllowWrite = slices.Clone(cc.AllowWrite)
		cc.AllowNet = slices.Clone(cc.AllowNet)
		c.Confine = &cc
	}
	return c
}

// Profiles returns the profile names, sorted.
func (g *Gateway) Profiles() []string { return slices.Clone(g.names) }

// HasProfile reports whether name is a profile.
func (g *Gateway) HasProfile(name string) bool {
	_, ok := g.profiles[name]
	return ok
}

// Allow returns the effective allow patterns of profile, inherited ones
// first, as written; nil for an unknown profile.
func (g *Gateway) Allow(profile string) []string {
	p, ok := g.profiles[profile]
	if !ok {
		return nil
	}
	out := make([]string, len(p.allow))
	for i, a := range p.allow {
		out[i] = a.text
	}
	return out
}

// Prompts returns the effective prompts patterns of profile, inherited ones
// first, as written; nil for an unknown profile.
func (g *Gateway) Prompts(profile string) []string {
	p, ok := g.profiles[profile]
	if !ok {
		return nil
	}
	out := make([]string, len(p.prompts))
	for i, a := range p.prompts {
		out[i] = a.text
	}
	return out
}

// Resources returns the effective resource patterns of profile, inherited
// ones first, as written; nil for an unknown profile.
func (g *Gateway) Resources(profile string) []string {
	p, ok := g.profiles[profile]
	if !ok {
		return nil
	}
	out := make([]string, len(p.resources))
	for i, r := range p.resources {
		out[i] = r.text
	}
	return out
}

// Transitions returns the profiles that profile may switch to without a
// human, in file order: its own allowed_transitions, never those of the
// profile it extends. nil for an unknown profile.
func (g *Gateway) Transitions(profile string) []string {
	p, ok := g.profiles[profile]
	if !ok {
		return nil
	}
	return slices.Clone(p.transitions)
}

// ToolAllowed reports whether profile may see and call tool of server, and
// the allow pattern that grants it, as written. It is false, with "", for
// an unknown profile or server, for a tool name that [ValidToolName]
// refuses, and for a tool that no pattern of the profile (its own or
// inherited) matches.
//
// A pattern is "<server>.<tool>" where the tool part may hold '*'. The
// server part is always a literal declared server; '*' matches any run of
// tool-name characters except an '_' that is part of "__", so that no glob
// crosses the server/tool boundary or a "__" inside a tool name: a tool
// called "x__y" is allowed only by a pattern that spells the "__" out.
// The first matching pattern, inherited ones first, is reported.
func (g *Gateway) ToolAllowed(profile, server, tool string) (bool, string) {
	p, ok := g.profiles[profile]
	if !ok || !ValidToolName(tool) {
		return false, ""
	}
	for i := range p.allow {
		if a := &p.allow[i]; a.server == server && globTool(a.tool, a.stars, tool) {
			return true, a.text
		}
	}
	return false, ""
}

// PromptAllowed reports whether profile may see and get prompt of server,
// and the prompts pattern that grants it, as written. Prompts are matched
// exactly as tools are by [Gateway.ToolAllowed], against the profile's
// prompts list (its own and inherited), never its allow list: a profile
// with no prompts entry shows no prompt. A prompt name that
// [ValidToolName] refuses is never allowed.
func (g *Gateway) PromptAllowed(profile, server, prompt string) (bool, string) {
	p, ok := g.profiles[profile]
	if !ok || !ValidToolName(prompt) {
		return false, ""
	}
	for i := range p.prompts {
		if a := &p.prompts[i]; a.server == server && globTool(a.tool, a.stars, prompt) {
			return true, a.text
		}
	}
	return false, ""
}

// RequiredPromptProfile is [Gateway.RequiredProfile] for a prompt: a
// profile other than active that allows prompt of server, chosen the same
// way, or "".
func (g *Gateway) RequiredPromptProfile(active, server, prompt string) string {
	return g.requiredProfile(active, func(name string) bool {
		ok, _ := g.PromptAllowed(name, server, prompt)
		return ok
	})
}

// TemplateAllowed reports whether profile may see the resource template
// uriTemplate (an RFC 6570 template, such as "file:///{path}"), and the
// resource pattern that makes it visible, as written. Listing a template
// is a hint, not a grant: every read through it is a resources/read of a
// concrete URI, which [Gateway.ResourceAllowed] decides.
//
// A template without an expression is a URI and is visible when
// ResourceAllowed allows it. Otherwise its literal prefix (the text before
// the first '{') is compared with each pattern's canonical form, the
// scheme and host case-insensitively and the rest as written: the
// template is visible when the prefix can begin a URI that the pattern
// matches (it is a prefix of the pattern's base, or the base and its '/'
// are a prefix of it; for a "/*" pattern, with no further '/'). So
// "file:///{path}" is visible under "file:///srv/**" (some expansions are
// allowed) and "test://other/{id}" is not. A prefix that the URI matcher
// would refuse outright (a control character, a backslash, a '"' '<' '>'
// '^' '`' '|' or '}', invalid UTF-8, over 8 KiB) makes the template
// invisible.
func (g *Gateway) TemplateAllowed(profile, uriTemplate string) (bool, string) {
	p, ok := g.profiles[profile]
	if !ok || len(p.resources) == 0 {
		return false, ""
	}
	brace := strings.IndexByte(uriTemplate, '{')
	if brace < 0 {
		return g.ResourceAllowed(profile, uriTemplate)
	}
	prefix := uriTemplate[:brace]
	if len(prefix) > maxURILen || !utf8.ValidString(prefix) {
		return false, ""
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c < 0x21 || c == 0x7f || strings.IndexByte("\\\"<>^`|}", c) >= 0 {
			return false, ""
		}
	}
	prefix = foldAuthority(prefix)
	for i := range p.resources {
		if r := &p.resources[i]; r.mayBegin(prefix) {
			return true, r.text
		}
	}
	return false, ""
}

// foldAuthority lowercases the scheme and the authority of a URI or of the
// start of one: everything before the first '/' after "scheme://", or the
// scheme alone when no "//" follows it.
func foldAuthority(s string) string {
	colon := strings.IndexByte(s, ':')
	if colon < 0 {
		return strings.ToLower(s)
	}
	end := colon + 1
	if rest, ok := strings.CutPrefix(s[end:], "//"); ok {
		end += 2
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			end += i
		} else {
			end = len(s)
		}
	}
	return strings.ToLower(s[:end]) + s[end:]
}

// mayBegin reports whether a URI that begins with prefix (scheme and
// authority folded to lowercase) may be matched by p.
func (p *uriPattern) mayBegin(prefix string) bool {
	base := p.u.String()
	if p.glob == globNone {
		return strings.HasPrefix(base, prefix)
	}
	dir := base
	if !strings.HasSuffix(dir, "/") {
		dir += "/"
	}
	if strings.HasPrefix(dir, prefix) {
		return true
	}
	rest, ok := strings.CutPrefix(prefix, dir)
	if !ok {
		return false
	}
	return p.glob == globAny || strings.IndexByte(rest, '/') < 0
}

// ResourceAllowed reports whether profile may list and read the resource
// uri, and the resource pattern that grants it, as written. It is false,
// with "", for an unknown profile, for a URI that the matcher refuses (see
// [CanonicalURI]: traversal, host spoofing, ambiguous encodings), and for
// a URI that no pattern matches.
//
// Matching is structural: the scheme, the presence of an authority, the
// host (case-insensitively) and the port must equal the pattern's. A
// pattern ending in "/**" then matches its prefix path itself and anything
// below it; one ending in "/*" matches exactly one more non-empty segment;
// any other pattern matches only the same path, query and fragment. A URI
// with a query or fragment is matched by exact patterns only. The first
// matching pattern, inherited ones first, is reported.
//
// Upstream cleans the path (path.Clean) and then matches, so that
// "file:///logs/x/../today.log" is allowed under "file:///logs/**"; here
// any dot segment is refused. Upstream also drops the query and fragment
// before matching but forwards them; here they must match exactly. And
// "file:/x" (no authority) is not "file:///x" (empty authority).
func (g *Gateway) ResourceAllowed(profile, uri string) (bool, string) {
	p, ok := g.profiles[profile]
	if !ok || len(p.resources) == 0 {
		return false, ""
	}
	u, reason := parseURI(uri)
	if reason != "" {
		return false, ""
	}
	for i := range p.resources {
		if r := &p.resources[i]; r.match(&u) {
			return true, r.text
		}
	}
	return false, ""
}

// ServerResourcesAllowed reports whether profile shows every resource and
// resource template of server, and may read and subscribe to them: its
// resources list (or one it extends) has the entry "<server>.*", which is
// returned. It is how a profile trusts one server's resources whatever
// their URIs; which server a URI belongs to is the gateway's to decide
// (only the server that alone lists it or has a template matching it).
func (g *Gateway) ServerResourcesAllowed(profile, server string) (bool, string) {
	p, ok := g.profiles[profile]
	if !ok {
		return false, ""
	}
	entry := server + ".*"
	if slices.Contains(p.resServers, entry) {
		return true, entry
	}
	return false, ""
}

// Transition reports whether an agent in profile from may switch to
// profile to without a human: to is in from's own allowed_transitions.
// Edges are neither inherited through extends nor transitive: from a
// profile with an edge to B, a profile that B can reach is still a human's
// decision.
func (g *Gateway) Transition(from, to string) bool {
	p, ok := g.profiles[from]
	return ok && slices.Contains(p.transitions, to)
}

// RequiredProfile returns a profile other than active that allows tool of
// server, or "" when none does: the required_profile of a verbose
// [GatewayError]. Among the profiles that allow it, it prefers one that
// active can switch to without a human, then the one with the fewest
// effective allow patterns (least privilege), then the first by name.
// Upstream returns the first by name only.
func (g *Gateway) RequiredProfile(active, server, tool string) string {
	return g.requiredProfile(active, func(name string) bool {
		ok, _ := g.ToolAllowed(name, server, tool)
		return ok
	})
}

// requiredProfile is RequiredProfile for what allows says a profile grants.
func (g *Gateway) requiredProfile(active string, allows func(profile string) bool) string {
	var best *profile
	bestEdge := false
	for _, name := range g.names {
		if name == active || !allows(name) {
			continue
		}
		p := g.profiles[name]
		edge := g.Transition(active, name)
		switch {
		case best == nil,
			edge && !bestEdge,
			edge == bestEdge && len(p.allow) < len(best.allow):
			best, bestEdge = p, edge
		}
	}
	if best == nil {
		return ""
	}
	return best.name
}

// SwitchSource is who asks for a profile switch. The zero value is
// [SourceAgent], so that a source nobody set never counts as a human.
type SwitchSource uint8

const (
	// SourceAgent is the host's agent, through the set_profile meta-tool.
	SourceAgent SwitchSource = iota
	// SourceHuman is a person, out of band (aegis approve, the CLI).
	SourceHuman
)

// String returns agent or human, the audit record's source.
func (s SwitchSource) String() string {
	if s == SourceHuman {
		return "human"
	}
	return "agent"
}

// MarshalText encodes s as agent or human.
func (s SwitchSource) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes agent or human.
func (s *SwitchSource) UnmarshalText(b []byte) error {
	switch string(b) {
	case "agent":
		*s = SourceAgent
	case "human":
		*s = SourceHuman
	default:
		return fmt.Errorf("unknown switch source %q; want agent or human", b)
	}
	return nil
}

// SwitchOutcome is what [Gateway.DecideSwitch] decides.
type SwitchOutcome uint8

const (
	// SwitchNeedsApproval: the target exists but no edge leads there from
	// the active profile; the profile stays until a human approves
	// (AEGIS_PENDING_APPROVAL). It is the zero value.
	SwitchNeedsApproval SwitchOutcome = iota
	// SwitchNow: switch at once (an edge, or a human asked).
	SwitchNow
	// SwitchUnknownProfile: no such profile (AEGIS_PROFILE_UNKNOWN).
	SwitchUnknownProfile
	// SwitchAlreadyActive: the target is the active profile; nothing to do.
	SwitchAlreadyActive
)

// String returns the outcome's name.
func (o SwitchOutcome) String() string {
	switch o {
	case SwitchNow:
		return "switch"
	case SwitchUnknownProfile:
		return "unknown_profile"
	case SwitchAlreadyActive:
		return "already_active"
	}
	return "needs_approval"
}

// DecideSwitch decides a request from src to switch from the active
// profile to target (upstream ADR 002): an unknown target is refused; the
// active profile itself needs nothing; a human may switch anywhere; an
// agent switches at once only along an edge of active (see
// [Gateway.Transition]) and otherwise needs a human's approval.
func (g *Gateway) DecideSwitch(active, target string, src SwitchSource) SwitchOutcome {
	switch {
	case !g.HasProfile(target):
		return SwitchUnknownProfile
	case target == active:
		return SwitchAlreadyActive
	case src == SourceHuman, g.Transition(active, target):
		return SwitchNow
	}
	return SwitchNeedsApproval
}

// RuleRequest returns the [Request] that the gateway's rules (see
// [Gateway.Rules]) decide for a call of tool on server in profile: Tool is
// the wire name "<server>__<tool>" (the name the host calls, as wrap's
// tool_id is), Capability the capability id "<server>.<tool>", and Role
// the active profile. ParseGateway checks that every rule names these
// forms with declared servers and profiles.
func (g *Gateway) RuleRequest(profile, server, tool, session string) Request {
	return Request{Tool: Namespace(server, tool), Capability: Capability(server, tool), Role: profile, Session: session, Server: server}
}

// globTool matches a tool name against the tool part of an allow pattern
// holding stars '*'. A star matches any run of characters of name except
// an '_' that has an '_' neighbour, so that it never spans a "__".
func globTool(pat string, stars int, name string) bool {
	switch stars {
	case 0:
		return pat == name
	case 1:
		i := 0
		for pat[i] != '*' {
			i++
		}
		pre, suf := pat[:i], pat[i+1:]
		if len(name) < len(pre)+len(suf) || name[:len(pre)] != pre || name[len(name)-len(suf):] != suf {
			return false
		}
		for j := len(pre); j < len(name)-len(suf); j++ {
			if !starMay(name, j) {
				return false
			}
		}
		return true
	}
	// General case: dynamic programming over name positions. cur[j] is
	// whether pat[:j] matches name[:i].
	cur := make([]bool, len(pat)+1)
	next := make([]bool, len(pat)+1)
	cur[0] = true
	for j := 1; j <= len(pat) && pat[j-1] == '*'; j++ {
		cur[j] = true
	}
	for i := 0; i < len(name); i++ {
		clear(next)
		for j := 1; j <= len(pat); j++ {
			if pat[j-1] == '*' {
				// The star matches nothing more (next[j-1]) or takes name[i].
				next[j] = next[j-1] || cur[j] && starMay(name, i)
			} else {
				next[j] = cur[j-1] && pat[j-1] == name[i]
			}
		}
		cur, next = next, cur
	}
	return cur[len(pat)]
}

// starMay reports whether a star may take name[i].
func starMay(name string, i int) bool {
	c := name[i]
	if c == '.' {
		return false
	}
	if c == '_' && (i > 0 && name[i-1] == '_' || i+1 < len(name) && name[i+1] == '_') {
		return false
	}
	return true
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}

// Profiles bound to callers. A profile with for_groups or for_scopes is
// only for a session whose principal (a validated OAuth token of gateway
// --listen) holds one of the groups (its "groups" claim, which the
// gateway must keep: --oauth-claim groups) and every one of the scopes.
// Such a session starts in the first bound profile, in file order, that
// admits it, else in the default profile (which is never bound); an
// agent's switch to a bound profile that does not admit the session's
// principal is refused.

// Admits reports whether profile may be active for a session of p: an
// unbound profile for anyone, a bound one only for a principal it names.
func (g *Gateway) Admits(profile string, p *schemas.Principal) bool {
	pr, ok := g.profiles[profile]
	if !ok {
		return false
	}
	if len(pr.forGroups) == 0 && len(pr.forScopes) == 0 {
		return true
	}
	if p == nil {
		return false
	}
	if len(pr.forGroups) > 0 && !slices.ContainsFunc(p.ClaimStrings("groups"), func(g string) bool { return slices.Contains(pr.forGroups, g) }) {
		return false
	}
	for _, s := range pr.forScopes {
		if !p.HasScope(s) {
			return false
		}
	}
	return true
}

// StartProfile is the profile a session of p starts in: the first bound
// profile (file order) that admits p, else the default profile.
func (g *Gateway) StartProfile(p *schemas.Principal) string {
	if p != nil {
		for _, name := range g.bound {
			if g.Admits(name, p) {
				return name
			}
		}
	}
	return g.defaultProfile
}

// BoundTo returns the groups and scopes profile is bound to (none for an
// unbound one).
func (g *Gateway) BoundTo(profile string) (groups, scopes []string) {
	if pr, ok := g.profiles[profile]; ok {
		return slices.Clone(pr.forGroups), slices.Clone(pr.forScopes)
	}
	return nil, nil
}
