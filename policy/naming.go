package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Tool names in gateway mode.
//
// A downstream tool is known inside aegis by its capability id
// "<server>.<tool>" (what profile allow lists name) and to the host by its
// wire name "<server>__<tool>" (what tools/list shows and tools/call sends),
// so that every tool carries its origin and no server can register a name
// that shadows another server's tool (upstream ADR 005).
//
// The split is unambiguous because a server name (see [ValidServerName])
// never contains "__" and never ends in "_": the first "__" of a wire name
// is always the separator. Tool names follow the MCP rule that every host's
// model API accepts, [A-Za-z0-9_-], 1 to 128 characters; the dot that MCP
// 2025-11-25 also allows is refused, because a wire name carrying it is
// rejected by hosts whose model API does not (and the dot separates server
// and tool in a capability id).

// NameSeparator joins a server name and a tool name into a wire name.
const NameSeparator = "__"

// Name length limits: a server name is at most MaxServerNameLen bytes and a
// tool name, and the wire name built from them, at most MaxToolNameLen.
const (
	MaxServerNameLen = 64
	MaxToolNameLen   = 128
)

// MaxHostToolNameLen bounds the wire name of a tool shown to a host:
// Claude Desktop and several other hosts refuse a server whose tool names
// do not match ^[a-zA-Z0-9_-]{1,64}$ ([HostSafeName]).
const MaxHostToolNameLen = 64

// HostSafeName reports whether wire is a tool name every host accepts:
// 1 to [MaxHostToolNameLen] bytes of [A-Za-z0-9_-].
func HostSafeName(wire string) bool {
	return len(wire) <= MaxHostToolNameLen && toolNameProblem(wire) == ""
}

// reservedServer is the namespace of aegis's own meta-tools: no downstream
// server may take it, so that "aegis.<x>" and "aegis__<x>" only ever name
// aegis itself.
const reservedServer = "aegis"

// Namespace returns the wire name of tool on server: server + "__" + tool.
// It does not validate; [CheckCollisions] and [ValidServerName] do.
func Namespace(server, tool string) string { return server + NameSeparator + tool }

// Capability returns the capability id of tool on server, server + "." +
// tool: the name profile allow lists match and denials report.
func Capability(server, tool string) string { return server + "." + tool }

// SplitName splits a wire name at its first "__" into the server and tool
// names. ok is false unless the server part is a valid server name and the
// tool part a valid tool name, so that SplitName(Namespace(s, t)) returns
// s, t, true exactly when both are valid. It does not say whether the
// server or the tool exists.
func SplitName(wire string) (server, tool string, ok bool) {
	i := strings.Index(wire, NameSeparator)
	if i < 0 {
		return "", "", false
	}
	server, tool = wire[:i], wire[i+len(NameSeparator):]
	if !ValidServerName(server) || !ValidToolName(tool) || len(wire) > MaxToolNameLen {
		return "", "", false
	}
	return server, tool, true
}

// ValidServerName reports whether s can name a downstream server: 1 to
// [MaxServerNameLen] bytes of [a-z0-9_-], starting with a letter or digit,
// not ending in "_", without "__", and not "aegis" (reserved for aegis's
// own meta-tools). These rules make the first "__" of a wire name its
// separator: a server "a_" would give "a___b" for tool "b", the wire name
// of tool "_b" on server "a".
func ValidServerName(s string) bool {
	return serverNameProblem(s) == ""
}

// serverNameProblem says what is wrong with s as a server name, or "".
func serverNameProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxServerNameLen:
		return "longer than " + strconv.Itoa(MaxServerNameLen) + " bytes"
	case s == reservedServer:
		return `"aegis" is reserved for aegis's own tools`
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "may hold only a-z, 0-9, _ and - (it prefixes every wire name)"
		}
	}
	switch {
	case s[0] == '_' || s[0] == '-':
		return "must start with a letter or digit"
	case strings.Contains(s, NameSeparator):
		return `must not contain "__", the wire-name separator`
	case s[len(s)-1] == '_':
		return `must not end in "_" (server "a_" and tool "b" would share the wire name of server "a" and tool "_b")`
	}
	return ""
}

// ValidToolName reports whether s is a tool name aegis can expose: 1 to
// [MaxToolNameLen] bytes of [A-Za-z0-9_-].
func ValidToolName(s string) bool {
	return toolNameProblem(s) == ""
}

func toolNameProblem(s string) string {
	switch {
	case s == "":
		return "empty tool name"
	case len(s) > MaxToolNameLen:
		return "tool name longer than " + strconv.Itoa(MaxToolNameLen) + " bytes"
	}
	for i := 0; i < len(s); i++ {
		if !isToolNameByte(s[i]) {
			return "tool name has a character outside [A-Za-z0-9_-]"
		}
	}
	return ""
}

func isToolNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// NameProblem is one tool that [CheckCollisions] refuses. Server and Tool
// are the pair as the downstream server gave them; Wire is its wire name;
// for a collision, OtherServer and OtherTool are the pair that keeps the
// name (the first in sorted server order, then list order).
type NameProblem struct {
	Server, Tool           string
	Wire                   string
	OtherServer, OtherTool string
	Msg                    string
}

func (p NameProblem) String() string {
	return fmt.Sprintf("tool %q of server %q: %s", p.Tool, p.Server, p.Msg)
}

// NameError lists every tool that [CheckCollisions] refuses, in sorted
// server order, then in the order the server listed its tools.
type NameError struct {
	Problems []NameProblem
}

func (e *NameError) Error() string {
	var b strings.Builder
	b.WriteString("tool names: ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// CheckCollisions checks the tools of every server (server name → tool
// names, as listed) before they are exposed, and returns a *[NameError]
// listing every problem, or nil:
//
//   - a server name that [ValidServerName] refuses;
//   - a tool name that [ValidToolName] refuses, or whose wire name is
//     longer than [MaxToolNameLen];
//   - the same tool listed twice by one server ("duplicate tool");
//   - two different (server, tool) pairs with the same wire name ("wire-name
//     collision"), such as ("a", "b__c") and ("a__b", "c"); the pair met
//     first keeps the name.
//
// Nothing is silently merged or overwritten: a caller that chooses to run
// on without the refused tools drops exactly the listed pairs.
func CheckCollisions(tools map[string][]string) error {
	servers := make([]string, 0, len(tools))
	for s := range tools {
		servers = append(servers, s)
	}
	slices.Sort(servers)

	type pair struct{ server, tool string }
	owner := make(map[string]pair)
	var probs []NameProblem
	for _, server := range servers {
		sp := serverNameProblem(server)
		seen := make(map[string]bool, len(tools[server]))
		for _, tool := range tools[server] {
			wire := Namespace(server, tool)
			bad := func(msg string) {
				probs = append(probs, NameProblem{Server: server, Tool: tool, Wire: wire, Msg: msg})
			}
			switch {
			case sp != "":
				bad("server name " + sp)
				continue
			case seen[tool]:
				bad("duplicate tool")
				continue
			}
			seen[tool] = true
			if tp := toolNameProblem(tool); tp != "" {
				bad(tp)
				continue
			}
			if len(wire) > MaxToolNameLen {
				bad("wire name " + strconv.Quote(wire) + " longer than " + strconv.Itoa(MaxToolNameLen) + " bytes")
				continue
			}
			if o, taken := owner[wire]; taken {
				probs = append(probs, NameProblem{
					Server: server, Tool: tool, Wire: wire, OtherServer: o.server, OtherTool: o.tool,
					Msg: fmt.Sprintf("wire-name collision: %q is already tool %q of server %q", wire, o.tool, o.server),
				})
				continue
			}
			owner[wire] = pair{server, tool}
		}
	}
	if len(probs) > 0 {
		return &NameError{Problems: probs}
	}
	return nil
}
