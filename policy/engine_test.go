package policy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// t0 is an arbitrary start time; the engine only ever reads differences.
var t0 = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

type step struct {
	at      time.Duration // after t0
	req     Request
	preview bool
	want    Decision
}

func mustParse(t testing.TB, src string) *Set {
	t.Helper()
	s, err := Parse("policy.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func tool(name string) Request { return Request{Tool: name} }

func TestEvaluate(t *testing.T) {
	allowEcho := Decision{Verdict: Allow, MatchedRule: "allow-echo"}
	tests := []struct {
		name   string
		policy string
		steps  []step
	}{
		{
			name:   "DenyBeatsMoreSpecificAllow",
			policy: y("rules:", "  - {id: allow-echo, action: allow, tool: echo, priority: 100}", "  - {id: deny-all, action: deny}"),
			steps: []step{
				{req: tool("echo"), want: Decision{Verdict: Deny, Reason: "denied by rule `deny-all`", MatchedRule: "deny-all"}},
			},
		},
		{
			name:   "DenyBeatsHigherPriorityAllowOnSameTool",
			policy: y("rules:", "  - {id: allow-exec, action: allow, tool: exec, priority: 100}", "  - {id: deny-exec, action: deny, tool: exec, priority: -100, reason: exec is off}"),
			steps: []step{
				{req: tool("exec"), want: Decision{Verdict: Deny, Reason: "exec is off", MatchedRule: "deny-exec"}},
				{req: tool("ls"), want: Decision{Verdict: Allow}},
			},
		},
		{
			name:   "DenyBeatsPendingAndRateLimit",
			policy: y("rules:", "  - {id: gate, action: pending_approval, tool: t}", "  - {id: rl, action: rate_limit, tool: t, rate: {max: 9, per_seconds: 9}}", "  - {id: no, action: deny}"),
			steps: []step{
				{req: tool("t"), want: Decision{Verdict: Deny, Reason: "denied by rule `no`", MatchedRule: "no"}},
			},
		},
		{
			name:   "MostSpecificDenyGivesTheReason",
			policy: y("rules:", "  - {id: deny-all, action: deny, priority: 50, reason: everything is off}", "  - {id: deny-exec, action: deny, tool: exec, reason: exec is off}"),
			steps: []step{
				{req: tool("exec"), want: Decision{Verdict: Deny, Reason: "exec is off", MatchedRule: "deny-exec"}},
				{req: tool("ls"), want: Decision{Verdict: Deny, Reason: "everything is off", MatchedRule: "deny-all"}},
			},
		},
		{
			name:   "WildcardNeverOutranksSpecific",
			policy: y("rules:", "  - {id: allow-any, action: allow, priority: 2147483647}", `  - {id: gate-deploy, action: pending_approval, tool: deploy, priority: -2147483648}`),
			steps: []step{
				{req: tool("deploy"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate-deploy", ApprovalID: "apr-gate-deploy-deploy-1"}},
				{req: tool("read"), want: Decision{Verdict: Allow, MatchedRule: "allow-any"}},
			},
		},
		{
			name:   "ExplicitStarIsAWildcard",
			policy: y("rules:", `  - {id: allow-any, action: allow, tool: "*", priority: 10}`, `  - {id: gate, action: pending_approval, tool: x}`),
			steps: []step{
				{req: tool("x"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate", ApprovalID: "apr-gate-x-1"}},
			},
		},
		{
			name:   "MoreAxesOutrankFewer",
			policy: y("rules:", "  - {id: allow-fetch, action: allow, tool: fetch, priority: 9}", "  - {id: gate-net, action: pending_approval, tool: fetch, capability: net.any}"),
			steps: []step{
				{req: Request{Tool: "fetch", Capability: "net.any"}, want: Decision{Verdict: PendingApproval, MatchedRule: "gate-net", ApprovalID: "apr-gate-net-fetch-1"}},
				{req: Request{Tool: "fetch", Capability: "net.local"}, want: Decision{Verdict: Allow, MatchedRule: "allow-fetch"}},
			},
		},
		{
			name:   "PriorityBreaksSpecificityTie",
			policy: y("rules:", "  - {id: allow-echo, action: allow, tool: echo, priority: 1}", "  - {id: gate-echo, action: pending_approval, tool: echo, priority: 5}"),
			steps: []step{
				{req: tool("echo"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate-echo", ApprovalID: "apr-gate-echo-echo-1"}},
			},
		},
		{
			name:   "NegativePriorityLosesToDefaultPriority",
			policy: y("rules:", "  - {id: gate-echo, action: pending_approval, tool: echo, priority: -1}", "  - {id: allow-echo, action: allow, tool: echo}"),
			steps: []step{
				{req: tool("echo"), want: allowEcho},
			},
		},
		{
			name:   "FileOrderBreaksFullTie",
			policy: y("rules:", "  - {id: allow-echo, action: allow, tool: echo}", "  - {id: gate-echo, action: pending_approval, tool: echo}"),
			steps: []step{
				{req: tool("echo"), want: allowEcho},
			},
		},
		{
			name:   "FileOrderBreaksFullTieReversed",
			policy: y("rules:", "  - {id: gate-echo, action: pending_approval, tool: echo}", "  - {id: allow-echo, action: allow, tool: echo}"),
			steps: []step{
				{req: tool("echo"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate-echo", ApprovalID: "apr-gate-echo-echo-1"}},
			},
		},
		{
			name:   "FileOrderBreaksDenyTie",
			policy: y("rules:", "  - {id: first, action: deny, tool: x, reason: one}", "  - {id: second, action: deny, tool: x, reason: two}"),
			steps: []step{
				{req: tool("x"), want: Decision{Verdict: Deny, Reason: "one", MatchedRule: "first"}},
			},
		},
		{
			name:   "UnsuppliedRoleNeverMatches",
			policy: y("default: allow", "rules:", "  - {id: deny-exec-admin, action: deny, tool: exec, role: admin}"),
			steps: []step{
				{req: tool("exec"), want: Decision{Verdict: Allow}},
				{req: Request{Tool: "exec", Role: "guest"}, want: Decision{Verdict: Allow}},
				{req: Request{Tool: "exec", Role: "admin"}, want: Decision{Verdict: Deny, Reason: "denied by rule `deny-exec-admin`", MatchedRule: "deny-exec-admin"}},
			},
		},
		{
			name:   "UnsuppliedCapabilityNeverMatches",
			policy: y("default: deny", "rules:", "  - {id: allow-read, action: allow, capability: fs.read}"),
			steps: []step{
				{req: tool("cat"), want: Decision{Verdict: Deny, Reason: ReasonDefaultDeny}},
				{req: Request{Tool: "cat", Capability: "fs.read"}, want: Decision{Verdict: Allow, MatchedRule: "allow-read"}},
			},
		},
		{
			name:   "StarAxisMatchesUnsuppliedAxis",
			policy: y("default: deny", "rules:", `  - {id: allow-echo, action: allow, tool: echo, capability: "*", role: "*"}`),
			steps: []step{
				{req: tool("echo"), want: allowEcho},
				{req: Request{Tool: "echo", Capability: "c", Role: "r"}, want: allowEcho},
			},
		},
		{
			name:   "EmptyToolMatchesNoNamedRule",
			policy: y("default: deny", "rules:", "  - {id: allow-echo, action: allow, tool: echo}"),
			steps: []step{
				{req: tool(""), want: Decision{Verdict: Deny, Reason: ReasonDefaultDeny}},
			},
		},
		{
			name:   "ToolMatchIsExact",
			policy: y("default: deny", "rules:", "  - {id: allow-echo, action: allow, tool: echo}"),
			steps: []step{
				{req: tool("Echo"), want: Decision{Verdict: Deny, Reason: ReasonDefaultDeny}},
				{req: tool("echo "), want: Decision{Verdict: Deny, Reason: ReasonDefaultDeny}},
				{req: tool("ech*"), want: Decision{Verdict: Deny, Reason: ReasonDefaultDeny}},
				{req: tool("*"), want: Decision{Verdict: Deny, Reason: ReasonDefaultDeny}},
			},
		},
		{
			name:   "DefaultDeny",
			policy: y("default: deny", "rules:", "  - {id: allow-echo, action: allow, tool: echo}"),
			steps: []step{
				{req: tool("rm"), want: Decision{Verdict: Deny, Reason: "no matching rule (default deny)"}},
				{req: tool("echo"), want: allowEcho},
			},
		},
		{
			name:   "DefaultAllowWhenOmitted",
			policy: y("rules: []"),
			steps: []step{
				{req: tool("anything"), want: Decision{Verdict: Allow}},
			},
		},
		{
			name:   "AllowCarriesLimits",
			policy: y("rules:", "  - {id: w, action: allow, tool: writer, limits: {max_memory_bytes: 33554432, max_wall_ms: 5000, max_output_bytes: 1048576}}"),
			steps: []step{
				{req: tool("writer"), want: Decision{Verdict: Allow, MatchedRule: "w", Limits: Limits{MaxMemoryBytes: 33554432, MaxWallMS: 5000, MaxOutputBytes: 1048576}}},
			},
		},
		{
			name:   "PendingApprovalCountsPerEngine",
			policy: y("rules:", "  - {id: gate, action: pending_approval, tool: dream}", "  - {id: gate2, action: pending_approval, tool: wake, reason: ask the owner, park: true, timeout_seconds: 90}"),
			steps: []step{
				{req: tool("dream"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate", ApprovalID: "apr-gate-dream-1"}},
				{req: tool("dream"), preview: true, want: Decision{Verdict: PendingApproval, MatchedRule: "gate"}},
				{req: tool("dream"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate", ApprovalID: "apr-gate-dream-2"}},
				{req: tool("wake"), want: Decision{Verdict: PendingApproval, MatchedRule: "gate2", ApprovalID: "apr-gate2-wake-3", Reason: "ask the owner", Park: true, Timeout: 90 * time.Second}},
			},
		},
		{
			name:   "RateWindowBoundaryAtExactlyPerSeconds",
			policy: y("rules:", "  - {id: rl, action: rate_limit, tool: search, rate: {max: 2, per_seconds: 10}, limits: {max_wall_ms: 100}}"),
			steps: []step{
				{at: 0, req: tool("search"), want: Decision{Verdict: Allow, MatchedRule: "rl", Limits: Limits{MaxWallMS: 100}}},
				{at: 3 * time.Second, req: tool("search"), want: Decision{Verdict: Allow, MatchedRule: "rl", Limits: Limits{MaxWallMS: 100}}},
				{at: 3 * time.Second, req: tool("search"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (2 per 10s)"}},
				{at: 10*time.Second - 1, req: tool("search"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (2 per 10s)"}},
				{at: 10 * time.Second, req: tool("search"), want: Decision{Verdict: Allow, MatchedRule: "rl", Limits: Limits{MaxWallMS: 100}}},
				{at: 13 * time.Second, req: tool("search"), want: Decision{Verdict: Allow, MatchedRule: "rl", Limits: Limits{MaxWallMS: 100}}},
				{at: 19 * time.Second, req: tool("search"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (2 per 10s)"}},
				{at: 20 * time.Second, req: tool("search"), want: Decision{Verdict: Allow, MatchedRule: "rl", Limits: Limits{MaxWallMS: 100}}},
			},
		},
		{
			name:   "RateWindowOpensAtFirstCallNotAtAGridLine",
			policy: y("rules:", "  - {id: rl, action: rate_limit, tool: s, rate: {max: 1, per_seconds: 60}, reason: one a minute}"),
			steps: []step{
				{at: 59 * time.Second, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{at: 61 * time.Second, req: tool("s"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "one a minute"}},
				{at: 119 * time.Second, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
			},
		},
		{
			name:   "RateLimitedCallsDoNotExtendTheWindow",
			policy: y("rules:", "  - {id: rl, action: rate_limit, tool: s, rate: {max: 1, per_seconds: 10}}"),
			steps: []step{
				{at: 0, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{at: 5 * time.Second, req: tool("s"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (1 per 10s)"}},
				{at: 9 * time.Second, req: tool("s"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (1 per 10s)"}},
				{at: 10 * time.Second, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
			},
		},
		{
			name:   "PreviewDoesNotSpendTheBudget",
			policy: y("rules:", "  - {id: rl, action: rate_limit, tool: s, rate: {max: 1, per_seconds: 10}}"),
			steps: []step{
				{preview: true, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{preview: true, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{preview: true, req: tool("s"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (1 per 10s)"}},
				{at: 10 * time.Second, preview: true, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
			},
		},
		{
			name:   "RateWindowsAreSeparatePerSessionAndTool",
			policy: y("rules:", "  - {id: rl, action: rate_limit, rate: {max: 1, per_seconds: 60}}"),
			steps: []step{
				{req: Request{Tool: "a", Session: "s1"}, want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{req: Request{Tool: "a", Session: "s2"}, want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{req: Request{Tool: "b", Session: "s1"}, want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{req: Request{Tool: "a"}, want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{req: Request{Tool: "a", Session: "s1"}, want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (1 per 60s)"}},
				{req: Request{Tool: "a"}, want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (1 per 60s)"}},
			},
		},
		{
			name: "RuleIDsWithSeparatorsDoNotShareWindows",
			policy: y("rules:",
				`  - {id: "a::b", action: rate_limit, tool: c, rate: {max: 1, per_seconds: 60}}`,
				`  - {id: a, action: rate_limit, tool: "b::c", rate: {max: 1, per_seconds: 60}}`),
			steps: []step{
				{req: Request{Tool: "c", Session: "x"}, want: Decision{Verdict: Allow, MatchedRule: "a::b"}},
				{req: Request{Tool: "b::c", Session: "x"}, want: Decision{Verdict: Allow, MatchedRule: "a"}},
			},
		},
		{
			name:   "ClockSteppingBackKeepsTheWindow",
			policy: y("rules:", "  - {id: rl, action: rate_limit, tool: s, rate: {max: 1, per_seconds: 10}}"),
			steps: []step{
				{at: time.Hour, req: tool("s"), want: Decision{Verdict: Allow, MatchedRule: "rl"}},
				{at: 0, req: tool("s"), want: Decision{Verdict: RateLimited, MatchedRule: "rl", Reason: "rate limit exceeded for `rl` (1 per 10s)"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(mustParse(t, tc.policy))
			for i, st := range tc.steps {
				var got Decision
				call := "Evaluate"
				if st.preview {
					call = "Preview"
					got = e.Preview(st.req, t0.Add(st.at))
				} else {
					got = e.Evaluate(st.req, t0.Add(st.at))
				}
				if got != st.want {
					t.Errorf("step %d: %s(%+v, t0+%v) =\n %+v\nwant\n %+v", i, call, st.req, st.at, got, st.want)
				}
			}
		})
	}
}

func TestRefusalCode(t *testing.T) {
	tests := []struct {
		verdict Verdict
		want    string
	}{
		{Deny, "POLICY_DENIED"},
		{RateLimited, "RATE_LIMITED"},
		{PendingApproval, "PENDING_APPROVAL"},
		{Allow, "HOST_DENIED"},
	}
	for _, tc := range tests {
		if got := RefusalCode(Decision{Verdict: tc.verdict}); got != tc.want {
			t.Errorf("RefusalCode(%v) = %s, want %s", tc.verdict, got, tc.want)
		}
	}
}

// TestZeroDecisionDenies stops a Decision that was never filled in from
// letting a call through.
func TestZeroDecisionDenies(t *testing.T) {
	var d Decision
	if d.Verdict != Deny {
		t.Errorf("zero Decision has verdict %v, want deny", d.Verdict)
	}
	if got := RefusalCode(d); got != CodePolicyDenied {
		t.Errorf("RefusalCode(Decision{}) = %s, want %s", got, CodePolicyDenied)
	}
}

func TestDecisionRecord(t *testing.T) {
	tests := []struct {
		d    Decision
		want schemas.Policy
	}{
		{Decision{Verdict: Allow, MatchedRule: "a"}, schemas.PolicyAllowed()},
		{Decision{Verdict: Deny, Reason: "no"}, schemas.PolicyDenied("no")},
		{Decision{Verdict: RateLimited, Reason: "slow"}, schemas.PolicyRateLimited("slow")},
		{Decision{Verdict: PendingApproval, ApprovalID: "apr-g-t-1", Reason: "ask"}, schemas.PolicyPendingApproval("apr-g-t-1")},
	}
	for _, tc := range tests {
		if got := tc.d.Record(); got != tc.want {
			t.Errorf("%+v.Record() = %+v, want %+v", tc.d, got, tc.want)
		}
	}
}

// TestConcurrentRateLimit stops a race that admits more than max calls in
// one window, or hands out one approval id twice.
func TestConcurrentRateLimit(t *testing.T) {
	const max, workers, each = 50, 16, 40
	e := NewEngine(mustParse(t, y("rules:",
		fmt.Sprintf("  - {id: rl, action: rate_limit, tool: s, rate: {max: %d, per_seconds: 60}}", max),
		"  - {id: gate, action: pending_approval, tool: g}")))
	var (
		mu       sync.Mutex
		admitted int
		ids      = map[string]bool{}
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d := e.Evaluate(tool("s"), t0.Add(time.Duration(w+i)*time.Millisecond))
				g := e.Evaluate(tool("g"), t0)
				_ = e.Preview(tool("s"), t0)
				mu.Lock()
				if d.Verdict == Allow {
					admitted++
				}
				if ids[g.ApprovalID] {
					t.Errorf("approval id %s handed out twice", g.ApprovalID)
				}
				ids[g.ApprovalID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != max {
		t.Errorf("admitted %d calls in one window, want %d", admitted, max)
	}
	if len(ids) != workers*each {
		t.Errorf("%d distinct approval ids, want %d", len(ids), workers*each)
	}
}

// TestRateWindowsDoNotGrowWithoutBound stops a memory exhaustion: a client
// that calls a wildcard rate_limit rule with ever new tool names must not
// keep every window alive after it expired.
func TestRateWindowsDoNotGrowWithoutBound(t *testing.T) {
	e := NewEngine(mustParse(t, y("rules:", "  - {id: rl, action: rate_limit, rate: {max: 1, per_seconds: 1}}")))
	for i := range 100 * minSweep {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond) // 100 new tools a second
		if d := e.Evaluate(tool(fmt.Sprint("t", i)), at); d.Verdict != Allow {
			t.Fatalf("call %d: %v, want allow", i, d.Verdict)
		}
	}
	e.mu.Lock()
	n := len(e.windows)
	e.mu.Unlock()
	if n > 2*minSweep {
		t.Errorf("%d rate windows held, want at most %d", n, 2*minSweep)
	}
}

func TestNewEngineNilSetPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewEngine(nil) did not panic")
		}
	}()
	NewEngine(nil)
}

// benchPolicy is a multi-rule set in the spirit of upstream's
// policy_eval/multi_rule bench: several tools, every action, and the
// request under test matching neither the first nor the last rule.
const benchPolicy = `
default: deny
rules:
  - {id: deny-exec, action: deny, tool: exec-runner, reason: exec disabled}
  - {id: deny-shell, action: deny, tool: shell}
  - {id: rate-search, action: rate_limit, tool: search, rate: {max: 1000000000, per_seconds: 60}}
  - {id: gate-deploy, action: pending_approval, tool: deploy}
  - {id: allow-read, action: allow, tool: read_file, limits: {max_wall_ms: 5000}}
  - {id: allow-list, action: allow, tool: list_dir}
  - {id: admin-only, action: deny, tool: drop_table, role: guest}
  - {id: allow-echo, action: allow, tool: echo, priority: 5}
  - {id: allow-any-read, action: allow, capability: fs.read}
  - {id: gate-net, action: pending_approval, capability: net.any}
`

func BenchmarkEvaluate(b *testing.B) {
	run := func(b *testing.B, src string, req Request) {
		e := NewEngine(mustParse(b, src))
		b.ReportAllocs()
		for b.Loop() {
			e.Evaluate(req, t0)
		}
	}
	b.Run("allow_all", func(b *testing.B) { run(b, "rules: []\n", tool("echo")) })
	b.Run("multi_rule", func(b *testing.B) { run(b, benchPolicy, tool("read_file")) })
	b.Run("multi_rule_deny", func(b *testing.B) { run(b, benchPolicy, tool("shell")) })
	b.Run("rate_limit", func(b *testing.B) { run(b, benchPolicy, tool("search")) })
	b.Run("multi_rule_parallel", func(b *testing.B) {
		e := NewEngine(mustParse(b, benchPolicy))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				e.Evaluate(tool("read_file"), t0)
			}
		})
	})
}

func BenchmarkParse(b *testing.B) {
	src := []byte(benchPolicy)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}
