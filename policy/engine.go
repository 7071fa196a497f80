package policy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// Request is what a call is asked about. Tool is the tool's name exactly as
// the call gives it (wrap's tool_id). Capability and Role are the optional
// axes; a caller that does not know them leaves them empty, and then no rule
// that names a concrete capability or role matches (wrap asks with Tool
// only). Session, when set, gives every session its own rate window;
// otherwise a rule's window is per tool.
type Request struct {
	Tool       string
	Capability string
	Role       string
	Session    string
	// Server is the gateway's server of the tool ("" in wrap), and Args
	// the call's params.arguments as JSON (nil when absent); only rules
	// with a condition (when:) read them.
	Server string
	Args   []byte
	// Principal is who makes the call, when a validated OAuth token named
	// them (gateway --listen); nil otherwise. Only conditions read it.
	Principal *schemas.Principal
}

// Verdict is the outcome of an evaluation. The zero Verdict is [Deny], so a
// Decision that was never filled in refuses.
type Verdict uint8

// The verdicts of an evaluation.
const (
	Deny            Verdict = iota // refused by a deny rule or the default
	Allow                          // relay the call
	RateLimited                    // refused: the rule's window is spent
	PendingApproval                // refused until a person approves ApprovalID
)

// String returns the verdict's name: deny, allow, rate_limited or
// pending_approval.
func (v Verdict) String() string {
	switch v {
	case Deny:
		return "deny"
	case Allow:
		return "allow"
	case RateLimited:
		return "rate_limited"
	case PendingApproval:
		return "pending_approval"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// ReasonDefaultDeny is the Reason of a denial by "default: deny".
const ReasonDefaultDeny = "no matching rule (default deny)"

// Decision is the verdict on one [Request] and what goes with it.
//
//   - Reason is set for Deny and RateLimited: the rule's reason, else
//     "denied by rule `<id>`", "rate limit exceeded for `<id>` (<max> per
//     <per_seconds>s)" or [ReasonDefaultDeny]. For PendingApproval it is the
//     rule's reason, if any, for display.
//   - MatchedRule is the id of the rule that decided, "" when the default
//     did.
//   - ApprovalID is set for PendingApproval by [Engine.Evaluate]:
//     "apr-<rule_id>-<tool>-<session>.<n>" from the Engine's [ApprovalIDs]
//     (see there; "apr-<rule_id>-<tool>-<n>" without a session), rule id
//     and tool made shell-safe.
//   - Limits are the winning allow or rate_limit rule's limits.
//   - Park and Timeout are the pending_approval rule's park setting: when
//     Park is true the caller may hold the call for up to Timeout instead of
//     refusing it at once.
type Decision struct {
	Verdict     Verdict
	Reason      string
	MatchedRule string
	ApprovalID  string
	Limits      Limits
	Park        bool
	Timeout     time.Duration
}

// Record returns the policy member of the call's outcome line: allowed,
// denied or rate_limited with Reason, or pending_approval with ApprovalID.
func (d Decision) Record() schemas.Policy {
	switch d.Verdict {
	case Allow:
		return schemas.PolicyAllowed()
	case RateLimited:
		return schemas.PolicyRateLimited(d.Reason)
	case PendingApproval:
		return schemas.PolicyPendingApproval(d.ApprovalID)
	}
	return schemas.PolicyDenied(d.Reason)
}

// Refusal codes, the data.aegis.code of a -32042 refusal frame.
const (
	CodePolicyDenied    = "POLICY_DENIED"
	CodeRateLimited     = "RATE_LIMITED"
	CodePendingApproval = "PENDING_APPROVAL"
	CodeHostDenied      = "HOST_DENIED"
)

// RefusalCode returns the data.aegis.code that refuses a call with decision
// d: POLICY_DENIED for Deny, RATE_LIMITED, PENDING_APPROVAL, and HOST_DENIED
// for Allow, which is refused only as the sibling of a refused call in the
// same batch.
func RefusalCode(d Decision) string {
	switch d.Verdict {
	case Allow:
		return CodeHostDenied
	case RateLimited:
		return CodeRateLimited
	case PendingApproval:
		return CodePendingApproval
	}
	return CodePolicyDenied
}

// Engine evaluates requests against one [Set] and holds the state that
// evaluation keeps: the fixed rate windows and the approval ids it hands
// out. Both live in memory only and start empty. An Engine is safe for
// concurrent use.
type Engine struct {
	set *Set
	ids atomic.Pointer[ApprovalIDs]

	mu        sync.Mutex
	windows   map[windowKey]window
	sweepSize int // sweep expired windows when the map reaches this size
}

// windowKey names one fixed window: upstream's "<rule_id>::<tool>::<session
// or tool>", held as a struct so that ids or tools containing "::" cannot
// share a window.
type windowKey struct {
	rule        int // index in Set.rules
	tool, scope string
}

type window struct {
	opened time.Time
	count  uint32
}

const minSweep = 1024

// NewEngine returns an Engine for set with no rate windows open and
// approval ids of its own, without a session (NewApprovalIDs(0)). It panics
// if set is nil.
func NewEngine(set *Set) *Engine {
	if set == nil {
		panic("policy: NewEngine with a nil Set")
	}
	e := &Engine{set: set, windows: make(map[windowKey]window), sweepSize: minSweep}
	e.ids.Store(NewApprovalIDs(0))
	return e
}

// SetApprovalIDs makes e take its approval ids from ids, the session's
// ([ApprovalIDs]), from its next pending_approval decision on. It panics if
// ids is nil.
func (e *Engine) SetApprovalIDs(ids *ApprovalIDs) {
	if ids == nil {
		panic("policy: SetApprovalIDs with nil")
	}
	e.ids.Store(ids)
}

// Set returns the Set that e evaluates against.
func (e *Engine) Set() *Set { return e.set }

// Evaluate decides req at time now and commits the decision: an admitted
// rate_limit call counts against its window, and a pending_approval decision
// takes the next approval number. The rules, in order:
//
//  1. If any deny rule matches, the best matching deny decides
//     (deny-overrides), however specific an allow is.
//  2. Else the best matching rule of the other actions decides.
//  3. Else the file's default decides.
//
// "Best" means most concrete axes (tool, capability, role that are not
// "*"), then the higher priority, then the earlier rule in the file.
//
// A rate_limit rule admits (Allow, with its limits) while fewer than max
// calls were admitted in its window, and refuses (RateLimited) otherwise. A
// window opens at the first admitted call and is replaced by a new one at
// the first call at or after opened + per_seconds. A clock that steps back
// keeps the current window.
func (e *Engine) Evaluate(req Request, now time.Time) Decision {
	return e.decide(&req, now, true)
}

// Preview returns what Evaluate would decide for req at now without
// changing any state: no window counts the call and no approval number is
// taken, so a PendingApproval preview has an empty ApprovalID.
func (e *Engine) Preview(req Request, now time.Time) Decision {
	return e.decide(&req, now, false)
}

func (e *Engine) decide(req *Request, now time.Time, commit bool) Decision {
	i, cerr := e.set.match(req)
	if cerr != nil {
		r := &e.set.rules[i]
		return Decision{Verdict: Deny, MatchedRule: r.id,
			Reason: "the condition of rule `" + r.id + "` could not be decided, and a call that a condition cannot decide is refused: " + cerr.Error()}
	}
	if i < 0 {
		if e.set.defaultDeny {
			return Decision{Verdict: Deny, Reason: ReasonDefaultDeny}
		}
		return Decision{Verdict: Allow}
	}
	r := &e.set.rules[i]
	switch r.action {
	case actionAllow:
		return Decision{Verdict: Allow, MatchedRule: r.id, Limits: r.limits}
	case actionRateLimit:
		if e.admit(i, r, req, now, commit) {
			return Decision{Verdict: Allow, MatchedRule: r.id, Limits: r.limits}
		}
		return Decision{Verdict: RateLimited, Reason: r.denyReason, MatchedRule: r.id}
	case actionPendingApproval:
		d := Decision{
			Verdict:     PendingApproval,
			Reason:      r.reason,
			MatchedRule: r.id,
			Park:        r.park,
			Timeout:     time.Duration(r.timeoutSeconds) * time.Second,
		}
		if commit {
			d.ApprovalID = e.ids.Load().Next("apr", r.id, req.Tool)
		}
		return d
	}
	return Decision{Verdict: Deny, Reason: r.denyReason, MatchedRule: r.id}
}

// match returns the index of the deciding rule, or -1 when none matches.
// A condition that cannot be evaluated stops it: the rule's index comes
// back with the error, and the call is denied.
func (s *Set) match(req *Request) (int, error) {
	deny, other := -1, -1
	var denyRank, otherRank rank
	var in condInput
	for i := range s.rules {
		r := &s.rules[i]
		if (r.tool != "" && r.tool != req.Tool) ||
			(r.capability != "" && r.capability != req.Capability) ||
			(r.role != "" && r.role != req.Role) {
			continue
		}
		if r.when != nil {
			if in == nil {
				var err error
				if in, err = input(req); err != nil {
					return i, err
				}
			}
			ok, err := r.when.eval(in)
			if err != nil {
				return i, err
			}
			if !ok {
				continue
			}
		}
		if r.action == actionDeny {
			if deny < 0 || r.rank.beats(denyRank) {
				deny, denyRank = i, r.rank
			}
		} else if other < 0 || r.rank.beats(otherRank) {
			other, otherRank = i, r.rank
		}
	}
	if deny >= 0 {
		return deny, nil
	}
	return other, nil
}

// admit reports whether rule i admits req at now, counting the call when
// commit is set.
func (e *Engine) admit(i int, r *rule, req *Request, now time.Time, commit bool) bool {
	key := windowKey{rule: i, tool: req.Tool, scope: req.Session}
	if key.scope == "" {
		key.scope = req.Tool
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.windows[key]
	if !ok || now.Sub(w.opened) >= r.per {
		if commit {
			if !ok {
				e.sweep(now)
			}
			e.windows[key] = window{opened: now, count: 1}
		}
		return true // max is at least 1
	}
	if w.count >= r.max {
		return false
	}
	if commit {
		w.count++
		e.windows[key] = w
	}
	return true
}

// sweep drops expired windows once the map has doubled since the last
// sweep, so that a stream of distinct tool names or sessions cannot grow
// it without bound. An expired window acts exactly like a missing one, so
// sweeping never changes a decision. e.mu must be held.
func (e *Engine) sweep(now time.Time) {
	if len(e.windows) < e.sweepSize {
		return
	}
	for k, w := range e.windows {
		if now.Sub(w.opened) >= e.set.rules[k.rule].per {
			delete(e.windows, k)
		}
	}
	e.sweepSize = max(minSweep, 2*len(e.windows))
}
