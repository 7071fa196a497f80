package policy

import (
	"go.yaml.in/yaml/v3"
)

// ToolChange is what a session does with a tool whose definition changed
// since it was pinned (on_tool_change, a top-level key of the wrap policy
// file and of the gateway file; docs/pins.md). A tool a server adds after
// its first listing, and a pinned tool it listed again with another
// definition after leaving it out, are changes too.
type ToolChange uint8

const (
	// ToolChangePendingApproval, the default, refuses calls to the changed
	// tool with a pending approval whose approve re-pins the tool to its
	// new definition: nothing runs against a definition no human has seen,
	// and the human who reviews it has one command to accept it.
	ToolChangePendingApproval ToolChange = iota
	// ToolChangeDeny refuses calls to the changed tool until its pins are
	// reset (aegis pins reset) and a new session pins it again.
	ToolChangeDeny
	// ToolChangeAllow records the change and pins the new definition.
	ToolChangeAllow
)

var toolChangeNames = [...]string{
	ToolChangePendingApproval: "pending_approval",
	ToolChangeDeny:            "deny",
	ToolChangeAllow:           "allow",
}

func (t ToolChange) String() string {
	if int(t) < len(toolChangeNames) {
		return toolChangeNames[t]
	}
	return "pending_approval"
}

// OnToolChange returns the file's on_tool_change (pending_approval when
// the file does not set it).
func (s *Set) OnToolChange() ToolChange { return s.onToolChange }

// OnToolChange returns the gateway file's on_tool_change.
func (g *Gateway) OnToolChange() ToolChange { return g.rules.onToolChange }

// toolChange reads an on_tool_change value.
func (p *parser) toolChange(n *yaml.Node, path string) (ToolChange, error) {
	v, err := p.str(n, path)
	if err != nil {
		return 0, err
	}
	for i, name := range toolChangeNames {
		if v == name {
			return ToolChange(i), nil
		}
	}
	return 0, p.errorf(n.Line, path, "unknown on_tool_change %q; want deny, pending_approval or allow", v)
}
