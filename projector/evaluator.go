package projector

import (
	"strings"
	"time"

	"github.com/aegis-dev/aegis/policy"
)

// PolicyEvaluator evaluates under set with one policy engine per session,
// as each wrap or gateway process had its own: rate windows and limits do
// not carry over from one session to another. It asks what the proxy
// asked: the tool and the session for a wrap session, with the
// capability, role and server too for a gateway session, and the call's
// arguments for the conditions.
func PolicyEvaluator(set *policy.Set) Evaluator {
	engines := map[string]*policy.Engine{}
	return func(c CallRequest, at time.Time) Verdict {
		e := engines[c.Session]
		if e == nil {
			e = policy.NewEngine(set)
			engines[c.Session] = e
		}
		// As the proxy asks: wrap with the tool and the session, the
		// gateway with the capability, the profile and the server too;
		// both with the arguments, for the conditions.
		req := policy.Request{Tool: c.Tool, Session: c.Session, Args: c.Args}
		if c.Role != "" || c.Capability != "" {
			req.Capability, req.Role = c.Capability, c.Role
			req.Server, _, _ = strings.Cut(c.Capability, ".")
		}
		d := e.Evaluate(req, at)
		return Verdict{Status: d.Record().Status, Reason: d.Reason, Rule: d.MatchedRule}
	}
}
