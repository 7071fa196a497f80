package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// ApprovalPrompt is the stderr prompt of a pending tool call approval.
func ApprovalPrompt(p PendingApproval) string {
	id := QuoteArg(projector.Printable(p.ApprovalID))
	if p.PinDigest != "" {
		return fmt.Sprintf("aegis: tool changed: tools/call %q was refused: the tool's definition changed since it was pinned (now %s); approval %s (expires %s)\n"+
			"aegis: hint: review the new definition (aegis replay shows the listing), then run: aegis approve %s to pin it   (or: aegis deny %s)\n",
			projector.Printable(p.ToolID), Short(p.PinDigest), id, p.ExpiresAt.Local().Format(time.Kitchen), id, id)
	}
	by := ""
	if p.Principal != nil {
		by = " by " + projector.Printable(p.Principal.Short())
	}
	return fmt.Sprintf("aegis: approval needed: tools/call %q%s was refused pending approval %s (expires %s)\n"+
		"aegis:   arguments: %s\n"+
		"aegis: hint: to let it through once, run: aegis approve %s   (or: aegis deny %s)\n",
		p.ToolID, by, id, p.ExpiresAt.Local().Format(time.Kitchen), ShowArgs(p.Args, p.ArgsBytes, p.ArgsDigest), id, id)
}

// DecideApproval acts on an approval request against a gate: list, or
// approve/deny a pending approval with a signed decision line durable before
// the reply. A request that cannot be honoured is refused with the reason
// and recorded as approval.refused. fail is called if recording fails.
//
// With approvers, an approve must carry a valid signature by one of them
// over this approval's id, this session, its tool and its arguments'
// digest ([schemas.Approvers.Check]); one that does not is refused and
// recorded with the reason, and the approval stays pending for a signed
// approve (or a deny, which needs no signature: it only fails closed).
func DecideApproval(sess *projector.Session, g *Gate, approvers *schemas.Approvers, op ApprovalOp, now time.Time, fail func(error)) ApprovalReply {
	switch op.Op {
	case "list":
		return ApprovalReply{OK: true, Pending: g.List(now)}
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
		if _, err := sess.Fact(schemas.KindApprovalRefused, RefusedFact(op, why)); err != nil {
			fail(err)
		}
		return ApprovalReply{Error: why}
	}
	d := schemas.Decision{ApprovalID: p.ApprovalID, ApproverKeyID: approver.KeyID, Principal: p.Principal}
	by := ""
	if p.Principal != nil {
		by = " by " + projector.Printable(p.Principal.Short())
	}
	msg := ""
	if op.Op == "approve" {
		d.Verdict = schemas.Approved(schemas.ApprovalScope{ToolID: p.ToolID})
		msg = fmt.Sprintf("approved %s: the next tools/call %q%s with the same arguments goes through once, until %s (when the approval expires)",
			p.ApprovalID, p.ToolID, by, p.ExpiresAt.Local().Format("15:04:05"))
		if approver.KeyID != "" {
			msg += "; signed by " + approver.Label()
		}
	} else {
		reason := op.Reason
		if reason == "" {
			reason = "denied by operator"
		}
		d.Verdict = schemas.Rejected(reason)
		msg = fmt.Sprintf("denied %s%s (%s)", p.ApprovalID, by, reason)
	}
	rc, err := sess.Decision(d, ResolvedFact(op, p.ApprovalID, approver))
	if err == nil {
		_, err = rc.Wait(context.Background())
	}
	if err != nil {
		fail(err)
		return ApprovalReply{Error: "could not record the decision: " + err.Error()}
	}
	if op.Op == "approve" {
		g.grant(p)
		if g.Pins != nil {
			if ok, err := g.Pins.Approved(p.ApprovalID); err != nil {
				fail(err)
				return ApprovalReply{Error: "could not record the pin: " + err.Error()}
			} else if ok {
				msg = fmt.Sprintf("approved %s: %q is pinned to its new definition (%s); calls to it go through again", p.ApprovalID, p.ToolID, Short(p.PinDigest))
			}
		}
	} else {
		g.denied(p.ApprovalID)
	}
	return ApprovalReply{OK: true, Message: msg, Decided: p}
}

// RefusedFact is the payload of an approval.refused event: the request,
// who sent it, why it was refused and, when it was signed, by which key.
func RefusedFact(op ApprovalOp, why string) map[string]string {
	m := map[string]string{"approval_id": op.ApprovalID, "op": op.Op, "by": op.By, "reason": why}
	if op.Approver != nil && op.Approver.KeyID != "" {
		m["approver_key_id"] = op.Approver.KeyID
	}
	return m
}

// ResolvedFact is the payload of an approval.resolved event beside its
// decision line; approver is the one whose signature the approve carried
// (zero without approvers).
func ResolvedFact(op ApprovalOp, id string, approver schemas.Approver) map[string]string {
	m := map[string]string{"approval_id": id, "op": op.Op, "by": op.By}
	if approver.KeyID != "" {
		m["approver_key_id"] = approver.KeyID
		if approver.Name != "" {
			m["approver"] = approver.Name
		}
	}
	return m
}
