package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

const conditionPolicy = `version: 1
default: deny
rules:
  - id: write-in-repo
    action: allow
    tool: write_file
    when: within(args.path, "/repo")
  - id: naive-read-in-repo
    action: allow
    tool: read_file
    when: args.path.startsWith("/repo/")
  - id: guarded-read
    action: deny
    tool: read_file
    when: '!within(args.path, "/repo")'
    reason: reads stay in /repo
  - id: run-allowed-commands
    action: allow
    tool: run
    when: args.command.matches("^(ls|cat|git status)( [A-Za-z0-9_./-]+)*$")
  - id: no-rm
    action: deny
    tool: run
    when: args.command.contains("rm -rf")
  - id: fetch-known-hosts
    action: allow
    tool: fetch
    when: url_host(args.url) in ["example.com", "docs.example.com"]
  - id: small-notes
    action: allow
    tool: note
    when: size(args.text) <= 1024
  - id: scan
    action: allow
    tool: scan
    when: args.items.exists(x, x == "needle")
  - id: count
    action: allow
    tool: count
    when: args.n > 3
`

// Conditions stop the attacks that the tool's name alone cannot: each
// case is a call an agent could make, and what the policy must answer.
func TestConditionsStopArgumentAttacks(t *testing.T) {
	set, err := Parse("policy.yaml", []byte(conditionPolicy))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	huge := `{"items":[` + strings.Repeat(`"x",`, 200_000) + `"needle"]}`
	for _, tc := range []struct {
		attack string
		tool   string
		args   string
		want   Verdict
		rule   string
		reason string
	}{
		{"a write inside the allowed directory", "write_file", `{"path":"/repo/src/main.go"}`, Allow, "write-in-repo", ""},
		{"path traversal out of the directory", "write_file", `{"path":"/repo/../etc/passwd"}`, Deny, "", ReasonDefaultDeny},
		{"a sibling directory that shares the prefix", "write_file", `{"path":"/repository/x"}`, Deny, "", ReasonDefaultDeny},
		{"a relative path", "write_file", `{"path":"repo/x"}`, Deny, "", ReasonDefaultDeny},
		{"a NUL in the path", "write_file", "{\"path\":\"/repo/x\\u0000/../../etc\"}", Deny, "", ReasonDefaultDeny},
		{"traversal past a naive prefix test, stopped by the deny", "read_file", `{"path":"/repo/../etc/shadow"}`, Deny, "guarded-read", "reads stay in /repo"},
		{"a plain allowed command", "run", `{"command":"git status"}`, Allow, "run-allowed-commands", ""},
		{"rm -rf caught by the deny-list", "run", `{"command":"rm -rf /"}`, Deny, "no-rm", "denied by rule `no-rm`"},
		{"Unicode lookalike of rm past the deny-list, refused by the allow-list", "run", `{"command":"гm -rf /"}`, Deny, "", ReasonDefaultDeny},
		{"a fullwidth space in an allowed command", "run", `{"command":"ls　/"}`, Deny, "", ReasonDefaultDeny},
		{"a URL on an allowed host", "fetch", `{"url":"https://docs.example.com/a"}`, Allow, "fetch-known-hosts", ""},
		{"a URL whose user part names the allowed host", "fetch", `{"url":"https://example.com@evil.test/"}`, Deny, "", ReasonDefaultDeny},
		{"an allowed host as a subdomain of another", "fetch", `{"url":"https://example.com.evil.test/"}`, Deny, "", ReasonDefaultDeny},
		{"a note over the size limit", "note", `{"text":"` + strings.Repeat("x", 2000) + `"}`, Deny, "", ReasonDefaultDeny},
		{"an integer compared with a literal", "count", `{"n":4}`, Allow, "count", ""},
		{"a float compared with an integer literal", "count", `{"n":3.5}`, Allow, "count", ""},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			d := NewEngine(set).Evaluate(Request{Tool: tc.tool, Args: []byte(tc.args)}, now)
			if d.Verdict != tc.want || d.MatchedRule != tc.rule || (tc.reason != "" && d.Reason != tc.reason) {
				t.Errorf("got %s by %q (%s); want %s by %q (%s)", d.Verdict, d.MatchedRule, d.Reason, tc.want, tc.rule, tc.reason)
			}
		})
	}
	// What a condition cannot decide denies, whatever the rule's action,
	// and the reason says so.
	for _, tc := range []struct {
		attack string
		tool   string
		args   string
		says   string
	}{
		{"a missing argument", "write_file", `{}`, "no such key"},
		{"an argument of another type", "write_file", `{"path":7}`, "no such overload"},
		{"arguments that are not JSON", "write_file", `{"path":`, "not JSON"},
		{"a second path that a Go server would read instead", "write_file", `{"path":"/repo/a","Path":"/etc/passwd"}`, "name one member twice"},
		{"a second path under the Kelvin sign's fold", "write_file", `{"kind":"/repo/a","\u212aind":"x","path":"/repo/b"}`, "name one member twice"},
		{"a duplicate member deep inside", "write_file", `{"path":"/repo/a","opts":[{"mode":1,"mode":2}]}`, "name one member twice"},
		{"a huge argument that exhausts the cost limit", "scan", huge, "cost limit"},
		{"a count beyond the double range, Infinity to JavaScript and Python", "count", `{"n":1e400}`, "beyond"},
		{"an integer past 2^53 that JavaScript rounds", "count", `{"n":9007199254740993}`, "2^53"},
		{"NaN, which Python reads and the others refuse", "count", `{"n":NaN}`, "NaN"},
		{"a path with a lone surrogate that readers decode differently", "write_file", `{"path":"/repo/\ud800"}`, "surrogate"},
		{"a second path behind an escaped name", "write_file", `{"path":"/repo/a","p\u0061th":"/etc/passwd"}`, "name one member twice"},
		{"arguments nested past every reader's limit", "write_file", `{"path":"/repo/a","x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, "nesting"},
		{"two values where one is read", "write_file", `{"path":"/repo/a"} {"path":"/etc/passwd"}`, "one JSON value"},
		{"a byte order mark that some readers skip", "write_file", "\xef\xbb\xbf" + `{"path":"/repo/a"}`, "byte order mark"},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			d := NewEngine(set).Evaluate(Request{Tool: tc.tool, Args: []byte(tc.args)}, now)
			if d.Verdict != Deny || !strings.Contains(d.Reason, "could not be decided") || !strings.Contains(d.Reason, tc.says) {
				t.Errorf("got %s by %q: %s; want deny saying %q", d.Verdict, d.MatchedRule, d.Reason, tc.says)
			}
		})
	}
}

// A rule with a condition is more specific than the same rule without
// one; deny still wins over any allow.
func TestConditionsRankAboveTheSameRuleWithout(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`default: deny
rules:
  - id: gate-deploy
    action: pending_approval
    tool: deploy
  - id: deploy-staging
    action: allow
    tool: deploy
    when: args.env == "staging"
  - id: never-prod-friday
    action: deny
    when: tool == "deploy" && args.env == "prod" && has(args.force)
`))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(set)
	now := time.Unix(0, 0)
	for _, tc := range []struct {
		args string
		want Verdict
		rule string
	}{
		{`{"env":"staging"}`, Allow, "deploy-staging"},
		{`{"env":"prod"}`, PendingApproval, "gate-deploy"},
		{`{"env":"prod","force":true}`, Deny, "never-prod-friday"},
	} {
		d := e.Preview(Request{Tool: "deploy", Args: []byte(tc.args)}, now)
		if d.Verdict != tc.want || d.MatchedRule != tc.rule {
			t.Errorf("%s: got %s by %s; want %s by %s", tc.args, d.Verdict, d.MatchedRule, tc.want, tc.rule)
		}
	}
	// The gateway's inputs.
	gw, err := Parse("p.yaml", []byte(`default: deny
rules:
  - id: dev-fs
    action: allow
    when: server == "fs" && profile == "dev" && session != ""
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := NewEngine(gw).Preview(Request{Tool: "fs__read", Role: "dev", Server: "fs", Session: "s1"}, now); d.Verdict != Allow {
		t.Errorf("gateway inputs: %s %s", d.Verdict, d.Reason)
	}
	if d := NewEngine(gw).Preview(Request{Tool: "fs__read", Role: "ops", Server: "fs", Session: "s1"}, now); d.Verdict != Deny {
		t.Errorf("another profile: %s", d.Verdict)
	}
}

// A condition is compiled and type-checked when the file is parsed, and a
// bad one is refused with its line.
func TestConditionsRefusedAtLoad(t *testing.T) {
	for _, tc := range []struct {
		name, when string
		says       string
	}{
		{"a syntax error", `args.path ==`, "does not compile"},
		{"an unknown variable", `argz.path == "x"`, "undeclared reference to 'argz'"},
		{"not a bool", `size(args)`, "a condition must be true or false"},
		{"an argument used as a bool", `args.force`, "compare it, as in args.force == true"},
		{"an unknown function", `exec(args.cmd)`, "undeclared reference to 'exec'"},
		{"an empty condition", `"  "`, "must not be empty"},
		{"an oversized condition", `"` + strings.Repeat("true && ", 600) + `true"`, "at most 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "rules:\n  - id: r\n    action: allow\n    when: " + tc.when + "\n"
			_, err := Parse("p.yaml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), "p.yaml:4") || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v; want an error at p.yaml:4 saying %q", err, tc.says)
			}
		})
	}
}

// The condition is part of what the policy set hash covers; a file
// without conditions hashes as before.
func TestConditionsInTheHash(t *testing.T) {
	a, err := Parse("p.yaml", []byte("rules:\n  - id: r\n    action: allow\n    when: args.x == 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("p.yaml", []byte("rules:\n  - id: r\n    action: allow\n    when: args.x == 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("p.yaml", []byte("rules:\n  - id: r\n    action: allow\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() == b.Hash() || a.Hash() == c.Hash() {
		t.Error("a condition's text does not change the hash")
	}
	if got := a.Projection().Rules[0].When; got != "args.x == 1" {
		t.Errorf("projection's when = %q", got)
	}
}

// A condition on the principal lets through only the callers it names:
// a caller outside the group, one with no token, and one whose token
// keeps no groups claim are all refused.
func TestConditionsOnThePrincipal(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`default: deny
rules:
  - id: eng-may-write
    action: allow
    tool: write_file
    when: has(principal.claims.groups) && "eng" in principal.claims.groups
  - id: admins-by-scope
    action: allow
    tool: deploy
    when: '"mcp:admin" in principal.scopes && principal.iss == "https://id.example"'
  - id: not-this-client
    action: deny
    tool: read_file
    when: principal.client_id == "untrusted-app"
  - id: reads
    action: allow
    tool: read_file
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	eng := schemas.NewPrincipal("https://id.example", "id1", "cli", []string{"mcp:tools"}, map[string]any{"groups": []any{"eng"}}, []string{"groups"})
	sales := schemas.NewPrincipal("https://id.example", "id2", "cli", []string{"mcp:tools"}, map[string]any{"groups": []any{"sales"}}, []string{"groups"})
	admin := schemas.NewPrincipal("https://id.example", "id3", "cli", []string{"mcp:admin"}, nil, nil)
	forged := schemas.NewPrincipal("https://evil.example", "id3", "cli", []string{"mcp:admin"}, nil, nil)
	untrusted := schemas.NewPrincipal("https://id.example", "id1", "untrusted-app", nil, nil, nil)
	for _, tc := range []struct {
		attack string
		tool   string
		p      *schemas.Principal
		want   Verdict
	}{
		{"a caller in the group writes", "write_file", eng, Allow},
		{"a caller of another group writes", "write_file", sales, Deny},
		{"a session without a token writes", "write_file", nil, Deny},
		{"a token that keeps no groups claim writes", "write_file", admin, Deny},
		{"a caller with the scope deploys", "deploy", admin, Allow},
		{"the same subject and scope from another issuer deploys", "deploy", forged, Deny},
		{"a caller without the scope deploys", "deploy", eng, Deny},
		{"a refused client reads", "read_file", untrusted, Deny},
		{"another client reads", "read_file", eng, Allow},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			d := NewEngine(set).Evaluate(Request{Tool: tc.tool, Principal: tc.p}, now)
			if d.Verdict != tc.want {
				t.Errorf("got %s by %q (%s); want %s", d.Verdict, d.MatchedRule, d.Reason, tc.want)
			}
		})
	}
}
