package projector

import (
	"time"

	"github.com/aegis-dev/aegis/policy"
)

// PolicyEvaluator evaluates under set with one policy engine per session,
// as each wrap or gateway process had its own: rate windows and limits do
// not carry over from one session to another. It asks what the proxy
// asked: the tool alone for a wrap session, the tool, capability, role and
// session for a gateway session.
func PolicyEvaluator(set *policy.Set) Evaluator {
	engines := map[string]*policy.Engine{}
	return func(c CallRequest, at time.Time) Verdict {
		e := engines[c.Session]
		if e == nil {
			e = policy.NewEngine(set)
			engines[c.Session] = e
		}
		req := policy.Request{Tool: c.Tool}
		if c.Role != "" || c.Capability != "" {
			req.Capability, req.Role, req.Session = c.Capability, c.Role, c.Session
		}
		d := e.Evaluate(req, at)
		return Verdict{Status: d.Record().Status, Reason: d.Reason, Rule: d.MatchedRule}
	}
}
