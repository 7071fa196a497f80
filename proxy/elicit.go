package proxy

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// Elicits are the approvals of one session shown to its host through URL
// elicitation, and the denials of them: what wrap and the gateway share of
// in-band approvals (see the gateway's elicit.go and the relay's
// approvals.go for how each shows them). The zero value is ready.
//
// An approval is open from [Elicits.Add] until it is decided
// ([Elicits.Decided]) or expires; only an open approval's decision is told
// to the host, once. A denial of an open approval holds, for the same
// tool and arguments, until the approval would have expired
// ([Elicits.Denied]); the denials kept are those of one approval TTL,
// however long the session.
type Elicits struct {
	mu     sync.Mutex
	open   map[string]time.Time     // approval id -> its expiry
	denied map[string]Denial        // tool + "\x00" + args_digest -> its denial
	waits  map[string]chan struct{} // approval id -> closed when it is decided
}

// Denial is an elicited approval that a human denied.
type Denial struct {
	ApprovalID, Reason string
	Expires            time.Time
}

// Decision is the decision that refuses a call that d denied, rule being
// the rule that asked for the approval.
func (d Denial) Decision(rule string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, MatchedRule: rule,
		Reason: fmt.Sprintf("a human denied this call (approval %s: %s)", d.ApprovalID, d.Reason)}
}

// Add registers pending approval p as shown to the host, at now.
func (e *Elicits) Add(p PendingApproval, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open == nil {
		e.open, e.waits = map[string]time.Time{}, map[string]chan struct{}{}
	}
	for id, exp := range e.open {
		if now.After(exp) {
			delete(e.open, id)
			delete(e.waits, id) // its waiter waits until the expiry, no longer
		}
	}
	e.open[p.ApprovalID] = p.ExpiresAt
	if e.waits[p.ApprovalID] == nil {
		e.waits[p.ApprovalID] = make(chan struct{})
	}
}

// Wait is closed when open approval id is decided; nil when id is not
// open (decided already, expired, or never shown).
func (e *Elicits) Wait(id string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch, ok := e.waits[id]; ok {
		return ch
	}
	return nil
}

// Denied is the denial that answers a call of tool with arguments of
// argsDigest at now, if a human denied its elicited approval.
func (e *Elicits) Denied(tool, argsDigest string, now time.Time) (Denial, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.denied[denialKey(tool, argsDigest)]
	if ok && !now.Before(d.Expires) {
		delete(e.denied, denialKey(tool, argsDigest))
		return Denial{}, false
	}
	return d, ok
}

func denialKey(tool, argsDigest string) string { return tool + "\x00" + argsDigest }

// Decided takes the reply rep to op, at now: when it decided an open
// approval it closes its wait, keeps a denial, and returns the approval,
// whose decision (durable by then) the caller tells the host; else nil.
func (e *Elicits) Decided(op ApprovalOp, rep ApprovalReply, now time.Time) *PendingApproval {
	if !rep.OK || rep.Decided == nil {
		return nil
	}
	p := rep.Decided
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.open[p.ApprovalID]
	delete(e.open, p.ApprovalID)
	if ch, w := e.waits[p.ApprovalID]; w {
		close(ch)
		delete(e.waits, p.ApprovalID)
	}
	if !ok {
		return nil
	}
	if op.Op == "deny" {
		if e.denied == nil {
			e.denied = map[string]Denial{}
		}
		for k, d := range e.denied {
			if !now.Before(d.Expires) {
				delete(e.denied, k)
			}
		}
		reason := op.Reason
		if reason == "" {
			reason = "denied by operator"
		}
		e.denied[denialKey(p.ToolID, p.ArgsDigest)] = Denial{ApprovalID: p.ApprovalID, Reason: reason, Expires: p.ExpiresAt}
	}
	return p
}

// ElicitationMessage is the message of the url-mode elicitation that
// shows pending approval p to the human, reason being why it waits. The
// host-chosen text in it (tool, arguments, rule) goes through
// [projector.Printable].
func ElicitationMessage(p PendingApproval, reason string) string {
	args := projector.Printable(p.Args)
	if len(args) > 200 {
		args = strings.ToValidUTF8(args[:200], "") + "…" // a rune cut in two is dropped
	}
	why := "rule " + projector.Printable(p.MatchedRule) + " says a human must approve it first"
	if reason != "" {
		why += " (" + strings.TrimSuffix(projector.Printable(reason), ".") + ")"
	}
	return fmt.Sprintf("aegis: the agent asks to call %s with %s; %s. Open the link to see the call and approve or deny it in aegis console (approval %s, until %s UTC); the agent calls again once you have decided.",
		projector.Printable(p.ToolID), args, why, p.ApprovalID, p.ExpiresAt.UTC().Format("15:04:05"))
}

// ElicitedHint is the refusal hint of a call whose approval the host
// shows through URL elicitation.
func ElicitedHint(approvalID string) string {
	return "open the link the host shows (or run: aegis approve " + QuoteArg(approvalID) + "), then call the tool again with the same arguments: the approval lets it through once"
}

// ElicitationCompleteFrame is the notifications/elicitation/complete
// that tells a host that the approval it showed as elicitation id was
// decided.
func ElicitationCompleteFrame(id string) []byte {
	params, err := schemas.EncodeValue(map[string]any{"elicitationId": strings.ToValidUTF8(id, "\uFFFD")})
	if err != nil {
		params = []byte(`{}`) // a string, made valid above: cannot happen
	}
	b := append([]byte(`{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":`), params...)
	return append(b, '}')
}
