package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// prompt tells the operator how to act on a pending approval, and what
// they would approve: the tool and its arguments, escaped (projector.Printable) so
// that host-chosen text cannot act on the terminal.
func (r *relay) prompt(p PendingApproval) {
	if r.cfg.Prompt == nil {
		return
	}
	fmt.Fprint(r.cfg.Prompt, approvalPrompt(p))
}

// approvalPrompt is the stderr prompt of a pending tool call approval.
func approvalPrompt(p PendingApproval) string {
	id := quoteArg(projector.Printable(p.ApprovalID))
	if p.PinDigest != "" {
		return fmt.Sprintf("aegis: tool changed: tools/call %q was refused: the tool's definition changed since it was pinned (now %s); approval %s (expires %s)\n"+
			"aegis: hint: review the new definition (aegis replay shows the listing), then run: aegis approve %s to pin it   (or: aegis deny %s)\n",
			projector.Printable(p.ToolID), short(p.PinDigest), id, p.ExpiresAt.Local().Format(time.Kitchen), id, id)
	}
	return fmt.Sprintf("aegis: approval needed: tools/call %q was refused pending approval %s (expires %s)\n"+
		"aegis:   arguments: %s\n"+
		"aegis: hint: to let it through once, run: aegis approve %s   (or: aegis deny %s)\n",
		p.ToolID, id, p.ExpiresAt.Local().Format(time.Kitchen), ShowArgs(p.Args, p.ArgsBytes, p.ArgsDigest), id, id)
}

// armExpiry records the approval's expiry when its time runs out: of the
// pending approval, or of the allowance it granted if that went unused.
func (r *relay) armExpiry(p PendingApproval) {
	time.AfterFunc(p.ExpiresAt.Sub(r.cfg.Now()), func() {
		if r.isStopped() {
			return
		}
		ev := map[string]string{"approval_id": p.ApprovalID}
		if _, ok := r.gate.expire(p.ApprovalID); !ok {
			if !r.gate.lapse(p.ApprovalID, r.cfg.Now()) {
				return
			}
			ev["reason"] = reasonLapsed
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
func (r *relay) handleApproval(op ApprovalOp) ApprovalReply {
	if r.gate == nil {
		if op.Op == "list" {
			return ApprovalReply{OK: true}
		}
		return ApprovalReply{Error: "this session runs without --policy: no call in it waits for approval"}
	}
	if op.Op != "list" && r.isStopped() {
		return ApprovalReply{Error: "the session is ending"}
	}
	return decideApproval(r.sess, r.gate, r.cfg.Approvers, op, r.cfg.Now(), r.fail)
}

// decideApproval acts on an approval request against a gate: list, or
// approve/deny a pending approval with a signed decision line durable before
// the reply. A request that cannot be honoured is refused with the reason
// and recorded as approval.refused. fail is called if recording fails.
//
// With approvers, an approve must carry a valid signature by one of them
// over this approval's id, this session, its tool and its arguments'
// digest ([schemas.Approvers.Check]); one that does not is refused and
// recorded with the reason, and the approval stays pending for a signed
// approve (or a deny, which needs no signature: it only fails closed).
func decideApproval(sess *projector.Session, g *gate, approvers *schemas.Approvers, op ApprovalOp, now time.Time, fail func(error)) ApprovalReply {
	switch op.Op {
	case "list":
		return ApprovalReply{OK: true, Pending: g.list(now)}
	case "approve", "deny":
	default:
		return ApprovalReply{Error: fmt.Sprintf("unknown request %q", op.Op)}
	}
	var approver schemas.Approver
	var check func(PendingApproval) string
	if approvers != nil && op.Op == "approve" {
		check = func(p PendingApproval) string {
			ap, err := approvers.Check(schemas.ApprovalClaim{ApprovalID: p.ApprovalID, Session: sess.ID(), Target: p.ToolID, ArgsDigest: p.ArgsDigest}, op.Approver)
			if err != nil {
				return err.Error()
			}
			approver = ap
			return ""
		}
	}
	p, why := g.resolveIf(op.ApprovalID, now, check)
	if p == nil {
		if _, err := sess.Fact(schemas.KindApprovalRefused, refusedFact(op, why)); err != nil {
			fail(err)
		}
		return ApprovalReply{Error: why}
	}
	d := schemas.Decision{ApprovalID: p.ApprovalID, ApproverKeyID: approver.KeyID}
	msg := ""
	if op.Op == "approve" {
		d.Verdict = schemas.Approved(schemas.ApprovalScope{ToolID: p.ToolID})
		msg = fmt.Sprintf("approved %s: the next tools/call %q with the same arguments goes through once, until %s (when the approval expires)",
			p.ApprovalID, p.ToolID, p.ExpiresAt.Local().Format("15:04:05"))
		if approver.KeyID != "" {
			msg += "; signed by " + approver.Label()
		}
	} else {
		reason := op.Reason
		if reason == "" {
			reason = "denied by operator"
		}
		d.Verdict = schemas.Rejected(reason)
		msg = fmt.Sprintf("denied %s (%s)", p.ApprovalID, reason)
	}
	rc, err := sess.Decision(d, resolvedFact(op, p.ApprovalID, approver))
	if err == nil {
		_, err = rc.Wait(context.Background())
	}
	if err != nil {
		fail(err)
		return ApprovalReply{Error: "could not record the decision: " + err.Error()}
	}
	if op.Op == "approve" {
		g.grant(p)
		if g.pins != nil {
			if ok, err := g.pins.approved(p.ApprovalID); err != nil {
				fail(err)
				return ApprovalReply{Error: "could not record the pin: " + err.Error()}
			} else if ok {
				msg = fmt.Sprintf("approved %s: %q is pinned to its new definition (%s); calls to it go through again", p.ApprovalID, p.ToolID, short(p.PinDigest))
			}
		}
	} else {
		g.denied(p.ApprovalID)
	}
	return ApprovalReply{OK: true, Message: msg, Decided: p}
}

// refusedFact is the payload of an approval.refused event: the request,
// who sent it, why it was refused and, when it was signed, by which key.
func refusedFact(op ApprovalOp, why string) map[string]string {
	m := map[string]string{"approval_id": op.ApprovalID, "op": op.Op, "by": op.By, "reason": why}
	if op.Approver != nil && op.Approver.KeyID != "" {
		m["approver_key_id"] = op.Approver.KeyID
	}
	return m
}

// resolvedFact is the payload of an approval.resolved event beside its
// decision line; approver is the one whose signature the approve carried
// (zero without approvers).
func resolvedFact(op ApprovalOp, id string, approver schemas.Approver) map[string]string {
	m := map[string]string{"approval_id": id, "op": op.Op, "by": op.By}
	if approver.KeyID != "" {
		m["approver_key_id"] = approver.KeyID
		if approver.Name != "" {
			m["approver"] = approver.Name
		}
	}
	return m
}
