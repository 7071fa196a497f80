package relay

import (
	"fmt"
	"time"

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
	return proxy.DecideApproval(r.sess, r.gate, r.cfg.Approvers, op, r.cfg.Now(), r.fail)
}
