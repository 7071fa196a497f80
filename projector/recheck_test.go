package projector_test

import (
	"testing"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// policyEvaluator parses yaml and evaluates under it (see
// projector.PolicyEvaluator).
func policyEvaluator(t *testing.T, yaml string) projector.Evaluator {
	t.Helper()
	set, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return projector.PolicyEvaluator(set)
}

func recheck(t *testing.T, s *script, yaml string, sessions ...string) (map[string]projector.CallCheck, []projector.CallCheck, projector.RecheckSummary) {
	t.Helper()
	rc := projector.NewRecheck(policyEvaluator(t, yaml), sessions...)
	got := map[string]projector.CallCheck{}
	for _, r := range s.recs {
		if c, ok := rc.Fold(r); ok {
			got[c.Session[22:]+"/"+c.CallID] = c
		}
	}
	fl, sum := rc.Finish()
	return got, fl, sum
}

// The scripted session was recorded under: deny fail, pending_approval on
// add (approved once), everything else allowed.
const recordedPolicy = `version: 1
rules:
  - id: no-fail
    action: deny
    tool: fail
    reason: fail is disabled here
  - id: gate
    action: pending_approval
    tool: add
`

func TestRecheckSamePolicyChangesNothing(t *testing.T) {
	s, _ := scripted(t)
	_, fl, sum := recheck(t, s, recordedPolicy)
	if sum.Changed() != 0 || sum.Calls != 5 || sum.Unchanged != 4 || sum.InFlight != 1 || len(fl) != 1 || fl[0].CallID != "call-5" {
		t.Errorf("summary %+v, in flight %+v", sum, fl)
	}
}

func TestRecheckStricterAndLooser(t *testing.T) {
	s, sess := scripted(t)
	k := func(call string) string { return sess[22:] + "/" + call }
	got, _, sum := recheck(t, s, `version: 1
default: deny
rules:
  - id: echo-ok
    action: allow
    tool: echo
  - id: no-echo-after-all
    action: deny
    tool: echo
    reason: echo is retired
  - id: gate
    action: pending_approval
    tool: add
`)
	if c := got[k("call-1")]; c.Change != projector.NewlyBlocked || c.Now.Status != schemas.StatusDenied || c.Now.Reason != "echo is retired" || c.Recorded.Status != schemas.StatusAllowed {
		t.Errorf("echo under the stricter policy: %+v", c)
	}
	if c := got[k("call-2")]; c.Change != projector.Unchanged || c.Now.Reason != policy.ReasonDefaultDeny {
		t.Errorf("fail under the stricter policy: %+v", c)
	}
	if c := got[k("call-3")]; c.Change != projector.Unchanged {
		t.Errorf("pending add: %+v", c)
	}
	if c := got[k("call-4")]; c.Change != projector.Unchanged || c.Recorded.ApprovalRef != "apr-gate-add-1" {
		t.Errorf("approved add stays a pending_approval call: %+v", c)
	}
	if sum.NewlyBlocked != 1 || sum.Changed() != 1 {
		t.Errorf("stricter summary: %+v", sum)
	}

	got, _, sum = recheck(t, s, "version: 1\ndefault: allow\n")
	for call, want := range map[string]string{"call-1": projector.Unchanged, "call-2": projector.NewlyAllowed, "call-3": projector.NewlyAllowed, "call-4": projector.NewlyAllowed} {
		if c := got[k(call)]; c.Change != want {
			t.Errorf("%s under allow-all: %q, want %q (%+v)", call, c.Change, want, c)
		}
	}
	if sum.NewlyAllowed != 3 || sum.Unchanged != 1 {
		t.Errorf("looser summary: %+v", sum)
	}

	got, _, sum = recheck(t, s, "version: 1\nrules:\n  - id: ask\n    action: pending_approval\n    tool: echo\n  - id: rl\n    action: rate_limit\n    tool: fail\n    rate: {max: 1, per_seconds: 60}\n")
	if got[k("call-1")].Change != projector.NewlyPending || got[k("call-2")].Change != projector.NewlyAllowed {
		t.Errorf("pending/rate policy: %+v", got)
	}
	if sum.NewlyPending != 1 {
		t.Errorf("pending summary: %+v", sum)
	}
}

// Rate windows replay with the recorded times as the clock, per session.
func TestRecheckReplaysRateWindows(t *testing.T) {
	s := newScript(t)
	a := s.open("a")
	b := s.open("b")
	for i := uint64(1); i <= 4; i++ {
		for _, sess := range []string{a, b} {
			c := wrapCall(i, "search")
			s.intent(sess, c)
			s.outcome(sess, c.Answered(schemas.HashHex(nil), 1))
		}
		if i == 2 {
			s.tick(61 * time.Second) // a new window opens for calls 3 and 4
		} else {
			s.tick(time.Second)
		}
	}
	// Malformed calls were never evaluated.
	m := schemas.MalformedCall("call-5", schemas.HashHex(nil))
	s.intent(a, m)
	s.outcome(a, m.Malformed())
	got, _, sum := recheck(t, s, "version: 1\nrules:\n  - id: budget\n    action: rate_limit\n    tool: search\n    rate: {max: 1, per_seconds: 60}\n", a)
	want := map[string]string{"call-1": projector.Unchanged, "call-2": projector.NewlyBlocked, "call-3": projector.Unchanged, "call-4": projector.NewlyBlocked}
	for call, w := range want {
		c := got[a[22:]+"/"+call]
		if c.Change != w {
			t.Errorf("%s: %q, want %q (%+v)", call, c.Change, w, c)
		}
		if w == projector.NewlyBlocked && c.Now.Status != schemas.StatusRateLimited {
			t.Errorf("%s: now %+v", call, c.Now)
		}
	}
	if sum.Sessions != 1 || sum.Calls != 5 || sum.NotEvaluated != 1 || sum.NewlyBlocked != 2 || len(got) != 4 {
		t.Errorf("summary %+v, checks %d", sum, len(got))
	}
	// Both sessions: each has its own window.
	_, _, sum = recheck(t, s, "version: 1\nrules:\n  - id: budget\n    action: rate_limit\n    tool: search\n    rate: {max: 1, per_seconds: 60}\n")
	if sum.NewlyBlocked != 4 || sum.Sessions != 2 {
		t.Errorf("two sessions: %+v", sum)
	}
}
