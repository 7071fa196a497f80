package gateway

import (
	"fmt"
	"strings"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/schemas"
)

// The instructions the host gets in the gateway's initialize result.
// Invariants:
//   - Each server's own instructions (from its initialize result) are
//     forwarded, servers in name order, each under a line that names its
//     server, every line of it indented by two spaces: a server cannot
//     write a line that reads as another server's heading or as aegis's own.
//   - They are pinned as wrap pins them (kind instructions, pins.go): a
//     server's instructions that changed since they were pinned are
//     withheld, and the host is told that they were and why; the re-pin
//     approval is asked at start and pins them for the next session.
//   - Prefixes are explained only for the servers whose names are
//     prefixed; with prefix: false on every server nothing is said of
//     them. The meta-tools are named as listed ([policy.MetaToolNames]).

// instructions is the text the host gets: aegis's own lines, then each
// server's instructions, marked with its server.
func (g *gateway) instructions() string {
	setProfile, approvalStatus := policy.MetaToolNames(g.cfg.DottedMetaTools)
	names := sortedDowns(g.downs)
	var prefixed []string
	unprefixed := map[string]bool{}
	for _, s := range g.cfg.Servers {
		unprefixed[s.Name] = s.Unprefixed
	}
	for _, n := range names {
		if !unprefixed[n] {
			prefixed = append(prefixed, n)
		}
	}
	var b strings.Builder
	b.WriteString("You are operating behind aegis, which serves the tools of several MCP servers under capability profiles.")
	if len(prefixed) > 0 {
		ex := prefixed[0] + "__TOOL"
		for wire, e := range g.tools {
			if !unprefixed[e.server] && (ex == prefixed[0]+"__TOOL" || wire < ex) {
				ex = wire
			}
		}
		fmt.Fprintf(&b, " The tools and prompts of %s are prefixed with their server's name and a double underscore (e.g. %s); use the names exactly as listed.",
			serverList(prefixed), ex)
	}
	fmt.Fprintf(&b, " Some profile switches require human approval: call %s, then %s.", setProfile, approvalStatus)
	var own strings.Builder
	for _, n := range names {
		cs := g.downs[n].session()
		if cs == nil {
			continue
		}
		r := cs.InitializeResult()
		if r == nil || r.Instructions == "" {
			continue
		}
		if g.pins.hiddenKind(schemas.PinKindInstructions, n, schemas.PinKindInstructions) {
			fmt.Fprintf(&own, "\n\nServer %q gave instructions that changed since they were pinned; aegis withholds them until a human approves them.", n)
			continue
		}
		fmt.Fprintf(&own, "\n\nInstructions of server %q:\n", n)
		for i, line := range strings.Split(strings.TrimRight(r.Instructions, "\n"), "\n") {
			if i > 0 {
				own.WriteByte('\n')
			}
			own.WriteString("  " + line)
		}
	}
	if own.Len() > 0 {
		b.WriteString("\n\nThe servers' own instructions follow, each under its server's name.")
		b.WriteString(own.String())
	}
	return b.String()
}

// serverList names servers for a sentence: server a, servers a and b,
// servers a, b and c.
func serverList(names []string) string {
	if len(names) == 1 {
		return "server " + names[0]
	}
	return "servers " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
