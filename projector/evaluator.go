package projector

import (
	"time"

	"github.com/aegis-dev/aegis/policy"
)

// PolicyEvaluator evaluates under set with one policy engine per session,
// as each wrap process had its own: rate windows and limits do not carry
// over from one session to another.
func PolicyEvaluator(set *policy.Set) Evaluator {
	engines := map[string]*policy.Engine{}
	return func(session, tool string, at time.Time) Verdict {
		e := engines[session]
		if e == nil {
			e = policy.NewEngine(set)
			engines[session] = e
		}
		d := e.Evaluate(policy.Request{Tool: tool}, at)
		return Verdict{Status: d.Record().Status, Reason: d.Reason, Rule: d.MatchedRule}
	}
}
