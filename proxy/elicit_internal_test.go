package proxy

import (
	"fmt"
	"testing"
	"time"
)

// A host that has many elicited calls denied over a long session cannot
// grow the memory of denials (wrap's or the gateway's) past one approval
// TTL's worth: a denial is forgotten once its approval would have
// expired.
func TestDeniedElicitationsAreForgottenAtTheirExpiry(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var el Elicits
	const ttl = 10 * time.Minute
	deny := func(i int) {
		p := PendingApproval{ApprovalID: fmt.Sprintf("apr-%d", i), ToolID: "s__t", ArgsDigest: fmt.Sprint(i), ExpiresAt: now.Add(ttl)}
		el.Add(p, now)
		if el.Decided(ApprovalOp{Op: "deny", ApprovalID: p.ApprovalID}, ApprovalReply{OK: true, Decided: &p}, now) == nil {
			t.Fatalf("the denial of open approval %s is not told to the host", p.ApprovalID)
		}
	}
	for i := range 1000 {
		deny(i)
		now = now.Add(time.Second) // 1000 denials over 16 minutes, each held 10
	}
	if n := len(el.denied); n > int(ttl/time.Second)+1 {
		t.Fatalf("%d denials are held; want at most the %d of one approval TTL", n, int(ttl/time.Second)+1)
	}
	if _, ok := el.Denied("s__t", "999", now); !ok {
		t.Fatal("the newest denial was forgotten before its expiry")
	}
	if _, ok := el.Denied("s__t", "1", now); ok {
		t.Fatal("a denial is held past its approval's expiry")
	}
	// A decision of an approval never shown, or shown once and decided
	// already, is not told to the host again.
	p := PendingApproval{ApprovalID: "apr-x", ExpiresAt: now.Add(ttl)}
	if el.Decided(ApprovalOp{Op: "approve"}, ApprovalReply{OK: true, Decided: &p}, now) != nil {
		t.Fatal("an approval never shown through an elicitation is told to the host")
	}
	el.Add(p, now)
	el.Decided(ApprovalOp{Op: "approve"}, ApprovalReply{OK: true, Decided: &p}, now)
	if el.Decided(ApprovalOp{Op: "approve"}, ApprovalReply{OK: true, Decided: &p}, now) != nil {
		t.Fatal("a decision is told to the host twice")
	}
}
