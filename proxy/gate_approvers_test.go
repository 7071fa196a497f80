package proxy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/policy"
)

// A refused approver signature leaves the approval pending: the agent's
// unsigned approve cannot use up or expire the call a human may still
// approve, and nothing is granted.
func TestRefusedApproverSignatureLeavesTheApprovalPending(t *testing.T) {
	g := pendingGate(t)
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	args := json.RawMessage(`{"v":1}`)
	gd := g.decide("deploy", args, now)
	id := gd.Decision.ApprovalID
	g.Request(PendingApproval{ApprovalID: id, ToolID: "deploy", ArgsDigest: gd.ArgsDigest, RequestedAt: now, ExpiresAt: now.Add(g.TTL)})
	var seen PendingApproval
	p, why := g.resolveIf(id, now, func(p PendingApproval) string { seen = p; return "no approver signature" })
	if p != nil || why != "no approver signature" || seen.ArgsDigest != gd.ArgsDigest || seen.ToolID != "deploy" {
		t.Fatalf("refused check: %v %q, checked %+v", p, why, seen)
	}
	if list := g.List(now); len(list) != 1 || list[0].ApprovalID != id {
		t.Fatalf("pending after a refused signature: %+v", list)
	}
	if again := g.decide("deploy", args, now); again.Decision.Verdict != policy.PendingApproval {
		t.Fatalf("a call after a refused signature: %v", again.Decision.Verdict)
	}
	p, why = g.resolveIf(id, now, func(PendingApproval) string { return "" })
	if p == nil {
		t.Fatalf("a good signature: %s", why)
	}
	g.grant(p)
	if used := g.decide("deploy", args, now); used.Decision.Verdict != policy.Allow || used.Approval != id {
		t.Fatalf("the signed approval: %v %q", used.Decision.Verdict, used.Approval)
	}
}
