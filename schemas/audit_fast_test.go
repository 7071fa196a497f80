package schemas

import (
	"bytes"
	"testing"
)

// The fast builders must give exactly the line the JSON round trip gives.
func TestFastLinesEqualPayloadLines(t *testing.T) {
	wall, peak := uint64(12), uint64(0)
	d := "0000000000000000000000000000000000000000000000000000000000000001"
	wc := WrapCall{CallID: "call-7", ToolID: "é<&>\u2028tool", RequestDigest: d, PolicySetHash: WrapPassthroughPolicySetHash}
	outcomes := map[string]Outcome{
		"answered":        wc.Answered(d, wall),
		"child exited":    wc.ChildExited(),
		"client closed":   wc.ClientClosed(),
		"malformed":       wc.Malformed(),
		"refused":         wc.Refused(PolicyRateLimited("too many"), "rule-1"),
		"pending":         wc.Refused(PolicyPendingApproval("apr-1"), "gate"),
		"sibling refused": wc.SiblingRefused(),
		"trap":            {CallID: "c", ToolID: "t", RequestDigest: d, PolicySetHash: d, Policy: PolicyAllowed(), Capability: CapabilityDenied("no"), Execution: ExecutionTrap("boom"), PeakMemoryBytes: &peak},
		"resource":        {CallID: "c", ToolID: "t", RequestDigest: d, PolicySetHash: d, Policy: PolicyAllowed(), Capability: Capability{Status: StatusDenied, Reason: "r", DeniedCapability: "x"}, Execution: ExecutionResourceExceeded("wall_clock"), DecisionAxes: DecisionAxes{Role: "ops", Capability: "fs.read", Session: "s", ApprovalRef: "a"}},
	}
	for name, o := range outcomes {
		t.Run(name, func(t *testing.T) {
			fast, ok, err := o.fastLine()
			if err != nil || !ok {
				t.Fatalf("fastLine: ok=%v err=%v", ok, err)
			}
			slow, err := payloadLine(LineOutcome, o)
			if err != nil {
				t.Fatal(err)
			}
			a, err1 := fast.Canonical()
			b, err2 := slow.Canonical()
			if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
				t.Fatalf("fast %s\nslow %s\n%v %v", a, b, err1, err2)
			}
		})
	}
	in := wc.Intent()
	withPrincipal := in
	withPrincipal.Principal = NewPrincipal("https://id.example", "id1", "cli", []string{"mcp", "a b"},
		map[string]any{"groups": []any{"eng", 3.0, map[string]any{}}, "email": "a@example.com", "n": 7.5}, []string{"groups", "email", "n", "absent"})
	for _, in := range []Intent{in, withPrincipal} {
		fast, _ := in.fastLine()
		slow, err := payloadLine(LineIntent, in)
		a, _ := fast.Canonical()
		b, _ := slow.Canonical()
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("intent fast %s slow %s (%v)", a, b, err)
		}
	}
	withTrace := withPrincipal
	withTrace.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	withTrace.ProtocolVersion = "2026-07-28"
	fast, _ := withTrace.fastLine()
	slow, _ := payloadLine(LineIntent, withTrace)
	a, _ := fast.Canonical()
	b, _ := slow.Canonical()
	if !bytes.Equal(a, b) || !bytes.Contains(a, []byte(`"traceparent":"00-4bf9`)) || !bytes.Contains(a, []byte(`"principal":`)) || !bytes.Contains(a, []byte(`"protocol_version":"2026-07-28"`)) {
		t.Fatalf("intent with principal and traceparent: fast %s slow %s", a, b)
	}
	// Unusual outcomes take the slow path.
	o := wc.Answered(d, wall)
	o.DecisionAxes.FS = &FSAxis{PathRaw: "a", PathCanonical: "b"}
	if _, ok, _ := o.fastLine(); ok {
		t.Error("an fs axis took the fast path")
	}
	bad := wc
	bad.ToolID = "\xff"
	if _, ok := bad.Intent().fastLine(); ok {
		t.Error("invalid UTF-8 took the fast path")
	}
}
