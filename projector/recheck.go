package projector

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// Verdict is one policy verdict on a call: Status is allowed, denied,
// rate_limited or pending_approval (the outcome line's policy.status).
type Verdict struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// ApprovalRef is the approval that let a pending_approval call
	// through (recorded verdicts only).
	ApprovalRef string `json:"approval_ref,omitempty"`
}

// CallRequest is what the proxy asked its policy about one recorded call.
// Tool is the tool's name as the call gave it. In a gateway session
// Capability is "<server>.<tool>" and Role the profile active at the
// call's intent, as the gateway asked its rules; in a wrap session both are
// empty (wrap asks with the tool only).
type CallRequest struct {
	Session    string
	Tool       string
	Capability string
	Role       string
	// Args are the call's params.arguments as the host sent them (nil
	// when the recorded frame that held them was not found): the
	// policy's conditions read them.
	Args []byte
}

// Evaluator decides one recorded tools/call under the policy being
// checked: what the proxy asked about it, and the time its intent was
// recorded, which is the clock (so rate windows replay as they ran).
// [Recheck] calls it once per call, in stream order, so a stateful
// evaluator sees the calls in the order the proxy did. The recheck fold
// stays pure; the caller brings the policy engine ([PolicyEvaluator]).
type Evaluator func(req CallRequest, at time.Time) Verdict

// Changes a recheck reports.
const (
	Unchanged    = ""
	NewlyBlocked = "newly_blocked" // allowed or pending before, denied or rate_limited now
	NewlyAllowed = "newly_allowed" // refused before (or let through only by an approval), allowed now
	NewlyPending = "newly_pending" // would now wait for an approval
	Reclassified = "reclassified"  // blocked before and now, for another verdict
)

// CallCheck is one recorded call and its verdict under the policy being
// checked.
type CallCheck struct {
	Session string          `json:"session"`
	CallID  string          `json:"call_id"`
	Tool    string          `json:"tool"`
	Time    time.Time       `json:"time"`
	Pos     events.Position `json:"pos"`
	// Recorded is the verdict in the call's outcome line; its Status is
	// empty for a call still in flight (no outcome).
	Recorded Verdict `json:"recorded"`
	Now      Verdict `json:"now"`
	Change   string  `json:"change,omitempty"`
}

// RecheckSummary counts what a recheck found.
type RecheckSummary struct {
	Sessions     int `json:"sessions"`
	Calls        int `json:"calls"`
	Unchanged    int `json:"unchanged"`
	NewlyBlocked int `json:"newly_blocked"`
	NewlyAllowed int `json:"newly_allowed"`
	NewlyPending int `json:"newly_pending"`
	Reclassified int `json:"reclassified"`
	// InFlight calls have no recorded verdict to compare with;
	// NotEvaluated calls had no tool name (malformed), so no policy was
	// ever asked about them.
	InFlight     int `json:"in_flight"`
	NotEvaluated int `json:"not_evaluated"`
}

// Changed is the number of calls whose verdict would change.
func (s RecheckSummary) Changed() int {
	return s.NewlyBlocked + s.NewlyAllowed + s.NewlyPending + s.Reclassified
}

// Recheck re-evaluates every recorded tools/call with an [Evaluator] and
// compares the verdict with the recorded one. It evaluates each call at its
// intent and compares at its outcome, so it holds only the calls in
// flight, whatever the size of the stream. It executes nothing.
type Recheck struct {
	eval     Evaluator
	only     map[string]bool
	open     map[[2]string]*CallCheck
	sessions map[string]bool
	// profiles is the active profile of each gateway session (one whose
	// session.opened names its default profile).
	profiles map[string]string
	calls    callQueue // the host's requests, for their arguments
	sum      RecheckSummary
}

// NewRecheck returns a recheck of the given sessions (every session when
// none are given).
func NewRecheck(eval Evaluator, sessions ...string) *Recheck {
	r := &Recheck{eval: eval, open: map[[2]string]*CallCheck{}, sessions: map[string]bool{}, profiles: map[string]string{}, calls: callQueue{}}
	if len(sessions) > 0 {
		r.only = map[string]bool{}
		for _, s := range sessions {
			r.only[s] = true
		}
	}
	return r
}

// Fold folds one event. At a call's outcome it returns the call's check
// (changed or not); ok is false otherwise.
func (r *Recheck) Fold(rec events.Record) (CallCheck, bool) {
	e := rec.Event
	if r.only != nil && !r.only[e.Session] {
		return CallCheck{}, false
	}
	switch e.Kind {
	case schemas.KindSessionOpened:
		r.sessions[e.Session] = true
		if p := profileOf(e.Payload); p != "" {
			r.profiles[e.Session] = p
		}
	case schemas.KindProfileSwitched:
		if _, gw := r.profiles[e.Session]; gw {
			if p := profileOf(e.Payload); p != "" {
				r.profiles[e.Session] = p
			}
		}
	case schemas.KindSessionClosed:
		// Its requests will get no intent now: a recheck over a long
		// history holds only the open sessions' requests.
		delete(r.calls, e.Session)
	case schemas.KindFrameC2S:
		var fp schemas.FramePayload
		if json.Unmarshal(e.Payload, &fp) == nil {
			r.calls.frame(e.Session, fp.Bytes)
		}
	case schemas.KindCallIntent:
		cp := callPayload(e.Payload)
		r.sum.Calls++
		req := CallRequest{Session: e.Session, Tool: cp.ToolID}
		req.Args, _ = r.calls.take(e.Session, cp.ToolID, parseAuditLine(cp.Line).RequestDigest)
		evaluated := cp.ToolID != schemas.UnknownToolID
		if profile, gw := r.profiles[e.Session]; gw && evaluated {
			// The gateway asks its rules about "<server>__<tool>" with
			// the capability and the active profile as role; its
			// meta-tools (aegis__set_profile, or aegis.set_profile with no
			// "__") are never asked: no server may be named "aegis". A
			// server name holds no "__", so the first one splits.
			server, tool, ok := strings.Cut(cp.ToolID, gatewaySeparator)
			req.Capability, req.Role, evaluated = server+"."+tool, profile, ok && server != metaServer
		}
		if !evaluated {
			r.sum.NotEvaluated++
			return CallCheck{}, false
		}
		c := &CallCheck{Session: e.Session, CallID: cp.CallID, Tool: cp.ToolID, Time: e.Time, Pos: rec.Pos}
		c.Now = r.eval(req, e.Time)
		r.open[[2]string{e.Session, cp.CallID}] = c
	case schemas.KindCallOutcome:
		cp := callPayload(e.Payload)
		k := [2]string{e.Session, cp.CallID}
		c := r.open[k]
		if c == nil {
			return CallCheck{}, false
		}
		delete(r.open, k)
		l := parseAuditLine(cp.Line)
		c.Recorded = Verdict{Status: l.Policy.Status, Reason: l.Policy.Reason, Rule: l.DecisionAxes.MatchedRule, ApprovalRef: l.DecisionAxes.ApprovalRef}
		c.Change = classify(c.Recorded, c.Now)
		r.count(c.Change)
		return *c, true
	}
	return CallCheck{}, false
}

// metaServer is the namespace of the gateway's meta-tools, which no
// server may take (policy's reserved server name).
const metaServer = "aegis"

// gatewaySeparator joins a gateway's server and tool names in a wire name:
// policy.NameSeparator, which this pure fold does not import.
const gatewaySeparator = "__"

func (r *Recheck) count(change string) {
	switch change {
	case Unchanged:
		r.sum.Unchanged++
	case NewlyBlocked:
		r.sum.NewlyBlocked++
	case NewlyAllowed:
		r.sum.NewlyAllowed++
	case NewlyPending:
		r.sum.NewlyPending++
	case Reclassified:
		r.sum.Reclassified++
	}
}

// Finish returns the calls still in flight (no outcome, so no recorded
// verdict; their new verdict is in Now) and the summary.
func (r *Recheck) Finish() ([]CallCheck, RecheckSummary) {
	out := make([]CallCheck, 0, len(r.open))
	for _, c := range r.open {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pos.Less(out[j].Pos) })
	sum := r.sum
	sum.InFlight = len(out)
	sum.Sessions = len(r.sessions)
	return out, sum
}

// classify compares a recorded verdict with a new one. A call that went
// through on an approval was pending_approval as far as the policy goes.
func classify(rec, now Verdict) string {
	was := rec.Status
	if was == schemas.StatusAllowed && rec.ApprovalRef != "" {
		was = schemas.StatusPendingApproval
	}
	blocked := func(s string) bool { return s == schemas.StatusDenied || s == schemas.StatusRateLimited }
	switch {
	case was == now.Status:
		return Unchanged
	case now.Status == schemas.StatusAllowed:
		return NewlyAllowed
	case now.Status == schemas.StatusPendingApproval:
		return NewlyPending
	case blocked(now.Status) && blocked(was):
		return Reclassified
	default:
		return NewlyBlocked
	}
}
