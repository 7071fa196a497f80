package policy

import (
	"encoding/json"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// A cases file is a table of calls to try a policy on (aegis policy
// test), one YAML document, parsed as strictly as a policy file:
//
//	cases:
//	  - name: a write inside the repo      # required, unique
//	    tool: write_file                   # required: the tool as the host calls it
//	    args: {path: /repo/a.go}           # optional: params.arguments
//	    want: allow                        # optional: allow | deny | rate_limited | pending_approval
//	  - name: a gateway call
//	    server: fs                         # a gateway file's server; tool is then its own name
//	    tool: write_file
//	    profile: dev                       # optional: the active profile (default: the file's)
//	    session: s1                        # optional: the session (default: "policy-test")
//	    at: 2026-12-03T10:00:00Z           # optional: the time of the call (default: a fixed time)
//
// The calls are decided in order by one engine, so rate limits count
// across them.

// Case is one call of a cases file.
type Case struct {
	Name    string
	Line    int    // of the case in the file
	Tool    string // as the host calls it (a gateway server's own name with Server)
	Server  string
	Profile string
	Session string
	Args    []byte // JSON; nil when absent
	At      time.Time
	Want    string // "" or a Verdict's name
}

var (
	casesTopKeys = []string{"cases"}
	caseKeys     = []string{"name", "tool", "args", "server", "profile", "session", "at", "want"}
)

// defaultCaseTime is the time of a case that names none.
var defaultCaseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ParseCases parses a cases file; every problem is a *[ParseError] with
// its line.
func ParseCases(name string, data []byte) ([]Case, error) {
	p := &parser{file: name}
	root, err := p.document(data, "cases")
	if err != nil {
		return nil, err
	}
	fields, err := p.mapping(root, "", casesTopKeys)
	if err != nil {
		return nil, err
	}
	var list *yaml.Node
	for _, f := range fields {
		list = f.val
	}
	if list == nil || list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
		return nil, p.errorf(root.Line, "cases", "expected a non-empty sequence of cases")
	}
	out := make([]Case, 0, len(list.Content))
	first := map[string]int{}
	for i, n := range list.Content {
		path := fmt.Sprintf("cases[%d]", i)
		c, err := p.oneCase(n, path)
		if err != nil {
			return nil, err
		}
		if line, dup := first[c.Name]; dup {
			return nil, p.errorf(c.Line, path+".name", "duplicate case name %q (first at line %d)", c.Name, line)
		}
		first[c.Name] = c.Line
		out = append(out, c)
	}
	return out, nil
}

func (p *parser) oneCase(n *yaml.Node, path string) (Case, error) {
	c := Case{Line: n.Line, Session: "policy-test", At: defaultCaseTime}
	fields, err := p.mapping(n, path, caseKeys)
	if err != nil {
		return c, err
	}
	seen := map[string]bool{}
	for _, f := range fields {
		seen[f.name] = true
		switch f.name {
		case "name":
			c.Name, err = p.str(f.val, f.path)
		case "tool":
			c.Tool, err = p.str(f.val, f.path)
		case "server":
			c.Server, err = p.str(f.val, f.path)
		case "profile":
			c.Profile, err = p.str(f.val, f.path)
		case "session":
			c.Session, err = p.str(f.val, f.path)
		case "at":
			// YAML reads an unquoted time as a timestamp; its text is
			// what counts.
			if f.val.Kind != yaml.ScalarNode || (f.val.ShortTag() != "!!str" && f.val.ShortTag() != "!!timestamp") {
				err = p.errorf(f.val.Line, f.path, "expected a time, got %s", describe(f.val))
			} else if c.At, err = time.Parse(time.RFC3339, f.val.Value); err != nil {
				err = p.errorf(f.val.Line, f.path, "not an RFC 3339 time such as 2026-12-03T10:00:00Z")
			}
		case "want":
			if c.Want, err = p.str(f.val, f.path); err == nil {
				switch c.Want {
				case "allow", "deny", "rate_limited", "pending_approval":
				default:
					err = p.errorf(f.val.Line, f.path, "unknown verdict %q; want allow, deny, rate_limited or pending_approval", c.Want)
				}
			}
		case "args":
			c.Args, err = p.jsonOf(f.val, f.path)
		}
		if err != nil {
			return c, err
		}
	}
	for _, k := range []string{"name", "tool"} {
		if !seen[k] {
			return c, p.errorf(n.Line, path, "missing required key %q", k)
		}
	}
	if c.Name == "" || c.Tool == "" {
		return c, p.errorf(n.Line, path, "name and tool must not be empty")
	}
	return c, nil
}

// jsonOf turns a YAML value into the JSON a host would send.
func (p *parser) jsonOf(n *yaml.Node, path string) ([]byte, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, p.errorf(n.Line, path, "%v", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, p.errorf(n.Line, path, "cannot be sent as JSON: %v", err)
	}
	return b, nil
}

// CaseResult is what a policy decided for a case.
type CaseResult struct {
	Case     Case
	Decision Decision
	// Pattern is the gateway profile's allow pattern that admitted the
	// tool ("" in wrap, or when the profile refused it).
	Pattern string
	// OK is false when the case wants another verdict.
	OK bool
}

// RunCases decides each case under set (a policy file), in order, with
// one engine.
func RunCases(set *Set, cases []Case) []CaseResult {
	e := NewEngine(set)
	out := make([]CaseResult, 0, len(cases))
	for _, c := range cases {
		d := e.Evaluate(Request{Tool: c.Tool, Session: c.Session, Args: c.Args}, c.At)
		out = append(out, result(c, d, ""))
	}
	return out
}

// RunGatewayCases decides each case as the gateway g does: the active
// profile's allow list first (a tool it does not allow is denied), then
// the gateway's rules, with one engine.
func RunGatewayCases(g *Gateway, cases []Case) []CaseResult {
	var e *Engine
	if g.Rules() != nil {
		e = NewEngine(g.Rules())
	}
	out := make([]CaseResult, 0, len(cases))
	for _, c := range cases {
		profile := c.Profile
		if profile == "" {
			profile = g.DefaultProfile()
		}
		ok, pattern := g.ToolAllowed(profile, c.Server, c.Tool)
		if !ok {
			out = append(out, result(c, Decision{Verdict: Deny, Reason: "not in active profile allow-list"}, ""))
			continue
		}
		d := Decision{Verdict: Allow}
		if e != nil {
			req := g.RuleRequest(profile, c.Server, c.Tool, c.Session)
			req.Args = c.Args
			d = e.Evaluate(req, c.At)
		}
		out = append(out, result(c, d, pattern))
	}
	return out
}

func result(c Case, d Decision, pattern string) CaseResult {
	return CaseResult{Case: c, Decision: d, Pattern: pattern, OK: c.Want == "" || c.Want == d.Verdict.String()}
}
