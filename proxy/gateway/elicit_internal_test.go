package gateway

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy"
)

// A host that has many elicited calls denied over a long session cannot
// grow the gateway's memory of denials past one approval TTL's worth: a
// denial is forgotten once its approval would have expired.
func TestDeniedElicitationsAreForgottenAtTheirExpiry(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	g := &gateway{cfg: Config{Now: func() time.Time { return now }}, log: slog.New(slog.DiscardHandler)}
	const ttl = 10 * time.Minute
	deny := func(i int) {
		p := proxy.PendingApproval{ApprovalID: fmt.Sprintf("apr-%d", i), ToolID: "s__t", ArgsDigest: fmt.Sprint(i), ExpiresAt: now.Add(ttl)}
		g.elicited(p)
		g.elicitDecided(proxy.ApprovalOp{Op: "deny", ApprovalID: p.ApprovalID}, proxy.ApprovalReply{OK: true, Decided: &p})
	}
	for i := range 1000 {
		deny(i)
		now = now.Add(time.Second) // 1000 denials over 16 minutes, each held 10
	}
	if n := len(g.el.denied); n > int(ttl/time.Second)+1 {
		t.Fatalf("the gateway holds %d denials; want at most the %d of one approval TTL", n, int(ttl/time.Second)+1)
	}
	if _, ok := g.deniedCall("s__t", "999", now); !ok {
		t.Fatal("the newest denial was forgotten before its expiry")
	}
}
