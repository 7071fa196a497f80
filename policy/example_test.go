package policy_test

import (
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/policy"
)

func ExampleParse() {
	_, err := policy.Parse("policy.yaml", []byte(`
rules:
  - id: search
    action: allow
    rate: {max: 100, per_seconds: 60}
`))
	fmt.Println(err)
	// Output:
	// policy.yaml:5: rules[0].rate: only valid on a rate_limit action
}

func ExampleEngine_Evaluate() {
	set, err := policy.Parse("policy.yaml", []byte(`
default: deny
rules:
  - {id: allow-echo, action: allow, tool: echo}
  - {id: deny-rm, action: deny, tool: rm, reason: no deleting}
  - {id: rate-search, action: rate_limit, tool: search, rate: {max: 1, per_seconds: 60}}
  - {id: gate, action: pending_approval, tool: deploy}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	e := policy.NewEngine(set)
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC) // time is a parameter
	for _, tool := range []string{"echo", "rm", "search", "search", "deploy", "ls"} {
		d := e.Evaluate(policy.Request{Tool: tool}, now)
		fmt.Printf("%-6s %-16s rule=%q reason=%q approval=%q code=%s\n",
			tool, d.Verdict, d.MatchedRule, d.Reason, d.ApprovalID, policy.RefusalCode(d))
	}
	// Output:
	// echo   allow            rule="allow-echo" reason="" approval="" code=HOST_DENIED
	// rm     deny             rule="deny-rm" reason="no deleting" approval="" code=POLICY_DENIED
	// search allow            rule="rate-search" reason="" approval="" code=HOST_DENIED
	// search rate_limited     rule="rate-search" reason="rate limit exceeded for `rate-search` (1 per 60s)" approval="" code=RATE_LIMITED
	// deploy pending_approval rule="gate" reason="" approval="apr-gate-deploy-1" code=PENDING_APPROVAL
	// ls     deny             rule="" reason="no matching rule (default deny)" approval="" code=POLICY_DENIED
}

func ExampleSet_Hash() {
	a, _ := policy.Parse("a.yaml", []byte("rules: [{id: d, action: deny, tool: exec}]\n"))
	b, _ := policy.Parse("b.yaml", []byte(`
# same rules, other layout, defaults spelled out
version: 1
default: allow
rules:
  - id: d
    tool: exec
    action: deny
    priority: 0
`))
	fmt.Println(a.Hash() == b.Hash())
	p, _ := a.Projection().Canonical()
	fmt.Println(string(p))
	// Output:
	// true
	// {"default":"allow","format":"aegis-policy-set/1","rules":[{"action":"deny","capability":"*","id":"d","priority":"0","role":"*","tool":"exec"}],"version":"1"}
}
