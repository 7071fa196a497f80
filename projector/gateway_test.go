package projector_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// gatewayOpen opens a gateway session; profile is the default profile its
// session.opened names ("" as gateways recorded before it did).
func (s *script) gatewayOpen(profile string) string {
	sess := s.id()
	l := s.audit(sess, s.must(schemas.Open{PublicKey: strings.Repeat("ab", 32)}.Line()))
	p := map[string]any{"line": l, "audit_path": "/r/calls.aarl", "audit_offset": 0, "key_id": strings.Repeat("c", 64),
		"pid": 4243, "argv": []string{"gateway", "/etc/aegis/aegis.yaml"}, "version": "test"}
	if profile != "" {
		p["profile"] = profile
	}
	s.add(sess, schemas.KindSessionOpened, p)
	return sess
}

// escalation records an escalation request as the gateway does.
func (s *script) escalation(sess, id, from, to string) {
	s.add(sess, schemas.KindApprovalRequested, map[string]any{"approval_id": id, "kind": "profile", "from": from, "to": to,
		"expires_at":    s.at.Add(10 * time.Minute),
		"profile_event": map[string]any{"kind": "switch.requested", "id": id, "from": from, "to": to, "source": "agent", "at": s.at}})
}

// escalationDecided records a decision on an escalation. legacy adds the
// second approval.resolved event that gateways wrote before one decision
// became one event: no line and no op, only the profile event.
func (s *script) escalationDecided(sess, id, op, by string, legacy bool) {
	v, pe := schemas.Approved(schemas.ApprovalScope{ToolID: "aegis.set_profile"}), "switch.approved"
	if op == "deny" {
		v, pe = schemas.Rejected("not now"), "switch.denied"
	}
	l := s.audit(sess, s.must(schemas.Decision{ApprovalID: id, Verdict: v}.Line()))
	s.add(sess, schemas.KindApprovalResolved, map[string]any{"line": l, "approval_id": id, "op": op, "by": by, "from": "developer", "to": "deploy"})
	if legacy {
		s.tick(2 * time.Millisecond)
		s.add(sess, schemas.KindApprovalResolved, map[string]any{"approval_id": id, "from": "developer", "to": "deploy",
			"profile_event": map[string]any{"kind": pe, "id": id, "source": "human", "at": s.at}})
	}
}

func transcript(t *testing.T, s *script, sess string) string {
	t.Helper()
	tl := projector.NewTimeline(sess)
	var b strings.Builder
	for _, r := range s.recs {
		if st, ok := tl.Fold(r); ok {
			b.WriteString(st.Line() + "\n")
		}
	}
	return b.String()
}

// A stream of an older gateway holds two approval.resolved events for each
// decision on an escalation: the second one must neither flip the first
// (it read as a denial after every approval) nor count as a decision. A
// denial of an approved escalation is a revocation (the gateway allows it
// until the switch applies); an approval after a denial changes nothing.
func TestSecondResolutionOfOneApprovalDoesNotFlipIt(t *testing.T) {
	s := newScript(t)
	sess := s.gatewayOpen("")
	s.escalation(sess, "esc-1", "developer", "deploy")
	s.tick(time.Second)
	s.escalationDecided(sess, "esc-1", "approve", "ann@box, pid 7", true)
	s.escalation(sess, "esc-2", "developer", "deploy")
	s.escalationDecided(sess, "esc-2", "approve", "ann@box, pid 7", true)
	s.tick(time.Second)
	s.escalationDecided(sess, "esc-2", "deny", "bob@box, pid 8", true)
	s.escalation(sess, "esc-3", "developer", "deploy")
	s.escalationDecided(sess, "esc-3", "deny", "bob@box, pid 8", false)
	s.escalationDecided(sess, "esc-3", "approve", "ann@box, pid 7", false)

	got := transcript(t, s, sess)
	want := `  +0.000s  -        open      pid 4243 · gateway /etc/aegis/aegis.yaml · audit /r/calls.aarl · key cccccccccccc… · seq 0
  +0.000s  -        approval  requested esc-1 for profile developer -> deploy · expires 2026-09-01T10:10:00Z
  +1.000s  -        approval  esc-1 approved by ann@box, pid 7 · profile developer -> deploy · seq 1
  +1.002s  -        approval  approve esc-1 · duplicate resolution, ignored: already approved
  +1.002s  -        approval  requested esc-2 for profile developer -> deploy · expires 2026-09-01T10:10:01Z
  +1.002s  -        approval  esc-2 approved by ann@box, pid 7 · profile developer -> deploy · seq 2
  +1.004s  -        approval  approve esc-2 · duplicate resolution, ignored: already approved
  +2.004s  -        approval  esc-2 denied by bob@box, pid 8 "not now" · revokes its approval · profile developer -> deploy · seq 3
  +2.006s  -        approval  deny esc-2 · duplicate resolution, ignored: already denied
  +2.006s  -        approval  requested esc-3 for profile developer -> deploy · expires 2026-09-01T10:10:02Z
  +2.006s  -        approval  esc-3 denied by bob@box, pid 8 "not now" · profile developer -> deploy · seq 4
  +2.006s  -        approval  approve esc-3 by ann@box, pid 7 · duplicate resolution, ignored: already denied · seq 5
`
	if got != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", got, want)
	}

	var ix projector.SessionIndex
	var ap projector.Approvals
	for _, r := range s.recs {
		ix.Fold(r)
		ap.Fold(r)
	}
	c, _ := json.Marshal(ix.Sessions(0)[0].Approvals)
	if want := `{"requested":3,"approved":1,"denied":2,"expired":0,"used":0,"refused":0,"duplicate":4}`; string(c) != want {
		t.Errorf("approval counts %s, want %s", c, want)
	}
	var states []string
	for _, a := range ap.All() {
		states = append(states, a.ApprovalID+" "+a.State+" by "+a.By)
	}
	if got, want := strings.Join(states, "; "), "esc-1 approved by ann@box, pid 7; esc-2 denied by bob@box, pid 8; esc-3 denied by bob@box, pid 8"; got != want {
		t.Errorf("approvals: %s, want %s", got, want)
	}
}

// An escalation's request names the switch it asks for; a call's approval
// names its tool.
func TestApprovalRequestShowsWhatItIsFor(t *testing.T) {
	s := newScript(t)
	sess := s.gatewayOpen("developer")
	s.escalation(sess, "esc-1", "developer", "deploy")
	s.requested(sess, "apr-gate-example__add-1", "example__add", time.Minute)
	// Only the profile event says what the switch was.
	s.add(sess, schemas.KindApprovalRequested, map[string]any{"approval_id": "esc-2",
		"profile_event": map[string]any{"kind": "switch.requested", "id": "esc-2", "from": "deploy", "to": "admin", "source": "agent", "at": s.at}})
	s.add(sess, schemas.KindApprovalRequested, map[string]any{"approval_id": "x-3"})
	tl := projector.NewTimeline(sess)
	var texts []string
	for _, r := range s.recs {
		if st, ok := tl.Fold(r); ok && st.Approval != nil {
			texts = append(texts, st.Text())
			if b, _ := json.Marshal(st.Approval); st.Approval.ApprovalID == "esc-1" && !strings.Contains(string(b), `"from":"developer","to":"deploy"`) {
				t.Errorf("esc-1 step: %s", b)
			}
		}
	}
	want := []string{
		"requested esc-1 for profile developer -> deploy · expires 2026-09-01T10:10:00Z",
		"requested apr-gate-example__add-1 for example__add · expires 2026-09-01T10:01:00Z",
		"requested esc-2 for profile deploy -> admin",
		"requested x-3",
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
}

// A gateway session names its default profile at the start: every step
// before the first switch, the session index and the profile fold show it.
func TestDefaultProfileShownBeforeTheFirstSwitch(t *testing.T) {
	s := newScript(t)
	sess := s.gatewayOpen("developer")
	s.intent(sess, wrapCall(1, "example__echo"))
	stay := s.gatewayOpen("observer")
	s.tick(time.Second)
	s.add(sess, schemas.KindProfileSwitched, map[string]any{"profile": "deploy"})
	s.intent(sess, wrapCall(2, "example__slow"))
	wrap := s.open("srv")

	tl := projector.NewTimeline(sess)
	var profiles []string
	for _, r := range s.recs {
		if st, ok := tl.Fold(r); ok {
			profiles = append(profiles, st.Kind+"@"+st.Profile)
			if b, _ := json.Marshal(st.Opened); st.Opened != nil && !strings.Contains(string(b), `"profile":"developer"`) {
				t.Errorf("open step: %s", b)
			}
		}
	}
	if got, want := strings.Join(profiles, " "), "session.opened@developer call.intent@developer profile.switched@deploy call.intent@deploy"; got != want {
		t.Errorf("profiles by step: %s, want %s", got, want)
	}
	var ix projector.SessionIndex
	var pf projector.Profiles
	for _, r := range s.recs {
		ix.Fold(r)
		pf.Fold(r)
	}
	for id, want := range map[string]string{sess: "deploy", stay: "observer", wrap: projector.NoProfile} {
		if got, _ := ix.Get(id, 0); got.Profile != want {
			t.Errorf("session index: %s profile %q, want %q", id, got.Profile, want)
		}
		if got := pf.Active(id); got != want {
			t.Errorf("profile fold: %s profile %q, want %q", id, got, want)
		}
	}
}

// The gateway asked its rules with the capability and the active profile
// as role, and let an approved call through. Rechecked under the same
// rules, the call is pending_approval as it was, not newly allowed; the
// meta-tools, which no rule is asked about, are not evaluated.
func TestRecheckAsksAboutAGatewayCallAsTheGatewayDid(t *testing.T) {
	const rules = "version: 1\nrules:\n  - {id: gate, action: pending_approval, tool: example__add, role: developer}\n  - {id: cap, action: deny, capability: example.fail}\n"
	s := newScript(t)
	sess := s.gatewayOpen("developer")
	add := wrapCall(1, "example__add")
	s.intent(sess, add)
	s.outcome(sess, add.Refused(schemas.PolicyPendingApproval("apr-gate-example__add-1"), "gate"))
	add2 := wrapCall(2, "example__add")
	s.intent(sess, add2)
	o := add2.Answered(schemas.HashHex(nil), 1)
	o.DecisionAxes.MatchedRule, o.DecisionAxes.ApprovalRef = "gate", "apr-gate-example__add-1"
	s.outcome(sess, o)
	fail := wrapCall(3, "example__fail")
	s.intent(sess, fail)
	s.outcome(sess, fail.Refused(schemas.PolicyDenied("denied by rule `cap`"), "cap"))
	meta := wrapCall(4, "aegis.set_profile")
	s.intent(sess, meta)
	s.outcome(sess, meta.Answered(schemas.HashHex(nil), 0))
	// In deploy the rule does not apply: add is allowed as it was.
	s.add(sess, schemas.KindProfileSwitched, map[string]any{"profile": "deploy"})
	add3 := wrapCall(5, "example__add")
	s.intent(sess, add3)
	s.outcome(sess, add3.Answered(schemas.HashHex(nil), 1))

	got, _, sum := recheck(t, s, rules)
	k := func(call string) string { return sess[22:] + "/" + call }
	for call, want := range map[string]string{"call-1": schemas.StatusPendingApproval, "call-2": schemas.StatusPendingApproval, "call-3": schemas.StatusDenied, "call-5": schemas.StatusAllowed} {
		if c := got[k(call)]; c.Change != projector.Unchanged || c.Now.Status != want {
			t.Errorf("%s: %+v, want unchanged, now %s", call, c, want)
		}
	}
	if sum.Changed() != 0 || sum.NotEvaluated != 1 || sum.Unchanged != 4 {
		t.Errorf("summary %+v", sum)
	}
	// A wrap session is still asked with the tool alone.
	w := newScript(t)
	ws := w.open("srv")
	wc := wrapCall(1, "example__add")
	w.intent(ws, wc)
	w.outcome(ws, wc.Answered(schemas.HashHex(nil), 1))
	if got, _, _ := recheck(t, w, rules); got[ws[22:]+"/call-1"].Change != projector.Unchanged {
		t.Errorf("wrap call: %+v", got)
	}
}
