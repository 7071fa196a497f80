package policy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// FuzzParse checks the parser on arbitrary bytes:
//
//   - it never panics, and an error is always a *ParseError naming the file,
//     with a nil Set;
//   - a Set it accepts hashes deterministically and as its projection does;
//   - the projection written back as YAML parses to the same hash, so the
//     projection holds everything Parse kept;
//   - evaluating requests built from the set's own tools, capabilities and
//     roles never panics and gives well-formed decisions.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*", "policy.yaml"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])                                   // truncated mid-file
		f.Add(bytes.Replace(b, []byte(": "), []byte(":"), 1)) // a broken mapping
	}
	for _, s := range []string{
		"",
		"~",
		"version: 1",
		"version: 2",
		"{}",
		"[]",
		"rules: []",
		"rules: [{id: a, action: deny}]",
		"rules: [{id: a, action: rate_limit, rate: {max: 1, per_seconds: 1}}]",
		"rules: [{id: a, action: rate_limit, rate: {max: 4294967295, per_seconds: 4294967295}}]", // upper bounds
		"rules: [{id: a, action: rate_limit, rate: {max: 4294967296, per_seconds: 1}}]",          // one past
		"rules: [{id: a, action: allow, limits: {max_wall_ms: 9007199254740991}}]",               // 2^53-1
		"rules: [{id: a, action: allow, limits: {max_wall_ms: 9007199254740992}}]",               // 2^53
		"rules: [{id: a, action: allow, priority: -2147483648}, {id: b, action: allow, priority: 2147483647}]",
		"rules: [{id: a, action: pending_approval, park: true, timeout_seconds: 1}]",
		"rules: [{id: a, action: allow}, {id: a, action: allow}]",
		"rules: [{id: \"\\u0000\", action: allow}]",
		"rules: [{id: a, action: allow, tool: \"\\u2028\\ufffd\"}]",
		"x: &a [*a]",
		"a: b\n---\nc: d",
		"\ufeffversion: 1",
		"rules:\n- id: a\n  action: deny\n  tool: x\n  tool: y\n",
		"rules: [{? [a] : b}]",
		"!!binary aGVsbG8=",
		`rules: [{id: a, action: allow, when: 'within(args.path, "/repo")'}]`,
		`rules: [{id: a, action: deny, tool: run, when: 'args.command.matches("^rm")'}, {id: b, action: allow, when: 'size(args) > 0'}]`,
		`rules: [{id: a, action: allow, when: 'args.n > 1 && url_host(args.u) == "x"'}]`,
		`rules: [{id: a, action: allow, when: 'args.path'}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("fuzz.yaml", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v, want *ParseError", err, err)
			}
			if set != nil {
				t.Fatal("a Set returned with an error")
			}
			if pe.File != "fuzz.yaml" || pe.Line < 0 || pe.Msg == "" {
				t.Fatalf("malformed ParseError %#v", pe)
			}
			return
		}
		checkSet(t, set, data)
	})
}

func checkSet(t *testing.T, set *Set, data []byte) {
	t.Helper()
	h := set.Hash()
	if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("Hash() = %q, want 64 lowercase hex", h)
	}
	proj := set.Projection()
	if ph, err := proj.Hash(); err != nil || ph != h {
		t.Fatalf("Projection().Hash() = %s, %v; Hash() = %s", ph, err, h)
	}
	again, err := Parse("fuzz.yaml", data)
	if err != nil || again.Hash() != h {
		t.Fatalf("second Parse gave %v, %v; first hash %s", again, err, h)
	}
	round := renderYAML(proj)
	back, err := Parse("rendered.yaml", round)
	if err != nil {
		t.Fatalf("the projection rendered as YAML does not parse: %v\n%s", err, round)
	}
	if back.Hash() != h {
		t.Fatalf("the projection rendered as YAML hashes to %s, want %s\n%s", back.Hash(), h, round)
	}

	ids := map[string]bool{}
	values := []string{"", "*"}
	for _, r := range proj.Rules {
		ids[r.ID] = true
		values = append(values, r.Tool, r.Capability, r.Role)
	}
	e := NewEngine(set)
	for i, v := range values {
		for _, req := range []Request{
			{Tool: v},
			{Tool: v, Capability: values[(i+1)%len(values)], Role: values[(i+2)%len(values)]},
			{Tool: v, Session: "s"},
			{Tool: v, Args: []byte(`{"path":"/repo/../x","n":2,"command":"rm -rf","u":"https://x/"}`)},
			{Tool: v, Args: []byte(`[1,`)},
		} {
			for step := range 3 {
				at := t0.Add(time.Duration(step) * time.Second)
				checkDecision(t, req, e.Preview(req, at), ids, false)
				checkDecision(t, req, e.Evaluate(req, at), ids, true)
			}
		}
	}
}

func checkDecision(t *testing.T, req Request, d Decision, ids map[string]bool, committed bool) {
	t.Helper()
	if d.MatchedRule != "" && !ids[d.MatchedRule] {
		t.Fatalf("%+v: matched rule %q is not in the set", req, d.MatchedRule)
	}
	switch d.Verdict {
	case Allow:
	case Deny, RateLimited:
		if d.Reason == "" {
			t.Fatalf("%+v: %v without a reason", req, d.Verdict)
		}
	case PendingApproval:
		if committed != (d.ApprovalID != "") {
			t.Fatalf("%+v: committed=%v with approval id %q", req, committed, d.ApprovalID)
		}
	default:
		t.Fatalf("%+v: verdict %v", req, d.Verdict)
	}
	if _, err := schemas.MarshalCanonical(d.Record()); err != nil {
		t.Fatalf("%+v: Record() is not a valid audit member: %v", req, err)
	}
}

// renderYAML writes a projection back as a policy file, every string double
// quoted with only ASCII escapes (YAML's double-quoted escapes include Go's).
func renderYAML(p schemas.PolicySet) []byte {
	var b strings.Builder
	q := strconv.QuoteToASCII
	b.WriteString("version: " + p.Version + "\ndefault: " + p.Default + "\nrules:\n")
	for _, r := range p.Rules {
		b.WriteString("  - id: " + q(r.ID) + "\n")
		b.WriteString("    action: " + r.Action + "\n")
		b.WriteString("    tool: " + q(r.Tool) + "\n")
		b.WriteString("    capability: " + q(r.Capability) + "\n")
		b.WriteString("    role: " + q(r.Role) + "\n")
		if r.When != "" {
			b.WriteString("    when: " + q(r.When) + "\n")
		}
		b.WriteString("    priority: " + r.Priority + "\n")
		if r.Reason != "" {
			b.WriteString("    reason: " + q(r.Reason) + "\n")
		}
		if r.Rate != nil {
			b.WriteString("    rate: {max: " + r.Rate.Max + ", per_seconds: " + r.Rate.PerSeconds + "}\n")
		}
		if l := r.Limits; l != nil {
			b.WriteString("    limits:\n")
			for _, kv := range [][2]string{{"max_memory_bytes", l.MaxMemoryBytes}, {"max_wall_ms", l.MaxWallMS}, {"max_output_bytes", l.MaxOutputBytes}} {
				if kv[1] != "" {
					b.WriteString("      " + kv[0] + ": " + kv[1] + "\n")
				}
			}
		}
		if r.Park {
			b.WriteString("    park: true\n    timeout_seconds: " + r.TimeoutSeconds + "\n")
		}
	}
	if len(p.Rules) == 0 {
		b.WriteString("  []\n")
	}
	return []byte(b.String())
}

// FuzzParseCases checks the cases parser on arbitrary bytes: no panic,
// an error is a *ParseError naming the file, and accepted cases run
// under a policy with conditions without panicking.
func FuzzParseCases(f *testing.F) {
	for _, s := range []string{
		"cases: [{name: a, tool: t}]",
		"cases: [{name: a, tool: t, args: {path: /x, n: 1}, want: allow}]",
		"cases: [{name: a, tool: t, at: 2026-12-03T10:00:00Z, session: s, want: rate_limited}]",
		"cases: [{name: a, tool: t}, {name: a, tool: u}]",
		"cases: [{name: a, tool: t, args: {? [a] : b}}]",
		"cases: []",
		"cases: [{name: a, tool: t, want: maybe}]",
		"",
	} {
		f.Add([]byte(s))
	}
	set, err := Parse("p.yaml", []byte("rules: [{id: a, action: deny, when: 'has(args.path) && !within(args.path, \"/r\")'}, {id: b, action: rate_limit, rate: {max: 1, per_seconds: 60}}]"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cases, err := ParseCases("cases.yaml", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "cases.yaml" || cases != nil {
				t.Fatalf("error %T %v with %d cases", err, err, len(cases))
			}
			return
		}
		for _, r := range RunCases(set, cases) {
			if r.Decision.Verdict != Allow && r.Decision.Reason == "" {
				t.Fatalf("%+v: refused without a reason", r)
			}
		}
	})
}
