package relay

import (
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

// prompt tells the operator how to act on a pending approval, and what
// they would approve: the tool and its arguments, escaped (projector.Printable) so
// that host-chosen text cannot act on the terminal.
func (r *relay) prompt(p proxy.PendingApproval) {
	if r.cfg.Prompt == nil {
		return
	}
	fmt.Fprint(r.cfg.Prompt, proxy.ApprovalPrompt(p))
}

// armExpiry records the approval's expiry when its time runs out: of the
// pending approval, or of the allowance it granted if that went unused.
func (r *relay) armExpiry(p proxy.PendingApproval) {
	time.AfterFunc(p.ExpiresAt.Sub(r.cfg.Now()), func() {
		if r.isStopped() {
			return
		}
		ev := map[string]string{"approval_id": p.ApprovalID}
		if _, ok := r.gate.Expire(p.ApprovalID); !ok {
			if !r.gate.Lapse(p.ApprovalID, r.cfg.Now()) {
				return
			}
			ev["reason"] = proxy.ReasonLapsed
		}
		if _, err := r.sess.Fact(schemas.KindApprovalExpired, ev); err != nil {
			r.log.Warn("record approval expiry", "err", err)
		}
	})
}

// handleApproval acts on a request from aegis approve, deny or approvals.
// Every decision is a signed decision line, durable before the reply; a
// request that cannot be honoured (unknown, already decided, expired) is
// refused with the reason and recorded as approval.refused.
func (r *relay) handleApproval(op proxy.ApprovalOp) proxy.ApprovalReply {
	if r.gate == nil {
		if op.Op == "list" {
			return proxy.ApprovalReply{OK: true}
		}
		return proxy.ApprovalReply{Error: "this session runs without --policy: no call in it waits for approval"}
	}
	if op.Op != "list" && r.isStopped() {
		return proxy.ApprovalReply{Error: "the session is ending"}
	}
	rep := proxy.DecideApproval(r.sess, r.gate, r.cfg.Approvers, op, r.cfg.Now(), r.fail)
	if p := r.el.Decided(op, rep, r.cfg.Now()); p != nil {
		// Not on the approval channel's answer: a host that reads
		// slowly holds only this.
		go r.elicitationComplete(p.ApprovalID)
	}
	return rep
}

// elicit makes why, the refusal of a call waiting for pending approval p
// (reason being the rule's), show the approval through URL elicitation
// when the host declared it: the link that opens it in aegis console, in
// the frame's data.elicitations; or, when no link can be made, why not
// and how to start the console, added to the hint. A host that declared
// no URL elicitation gets why unchanged.
func (r *relay) elicit(why *proxy.Refusal, p proxy.PendingApproval, reason string, now time.Time) {
	r.mu.Lock()
	url := r.hostURL
	r.mu.Unlock()
	if !url || r.cfg.ApprovalLink == nil {
		return
	}
	link, none := r.cfg.ApprovalLink(p)
	if link == "" {
		if why.Hint == "" {
			_, why.Hint = proxy.RefusalText(why.Code, why.ApprovalID)
		}
		why.Hint += "; to approve from the host instead: " + none
		return
	}
	why.Hint = proxy.ElicitedHint(p.ApprovalID)
	why.Elicitation = &proxy.Elicitation{ID: p.ApprovalID, URL: link, Message: proxy.ElicitationMessage(p, reason)}
	r.el.Add(p, now)
}

// elicitationComplete tells the host that the approval it showed as
// elicitation id was decided: notifications/elicitation/complete,
// recorded as a frame aegis wrote (frame.refusal) and durable before the
// host can read it, after the decision it tells of.
func (r *relay) elicitationComplete(id string) {
	if r.isStopped() || r.toHost == nil {
		return
	}
	frame := proxy.ElicitationCompleteFrame(id)
	ev, err := r.sess.FrameEvent(schemas.KindFrameRefusal, frame)
	var last *events.Receipt
	if err == nil {
		last, err = r.sess.Enqueue(ev)
	}
	if err != nil {
		r.log.Warn("tell the host an elicitation is complete", "approval", id, "err", err)
		return
	}
	r.send(r.toHost, outFrame{data: append(frame, '\n'), wait: last}, false)
}
