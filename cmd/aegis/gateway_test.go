package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gatewayRules are the rules of the scripted gateway session, written as a
// policy file for aegis recheck: add needs a human while the developer
// profile is active.
const gatewayRules = `rules:
  - id: add-needs-a-human
    action: pending_approval
    tool: example__add
    role: developer
`

// gatewayConfig is the scripted gateway session's file: the example server
// behind developer (the default) and deploy, which only a human can grant.
func gatewayConfig(bin string) string {
	return `version: 1
servers:
  example:
    command: ` + filepath.Join(bin, "aegis-example-server") + `
profiles:
  developer:
    allow: [example.echo, example.add]
  deploy:
    extends: developer
    allow: ["example.*"]
    allowed_transitions: [developer]
activation:
  default_profile: developer
error_disclosure: verbose
` + gatewayRules
}

// gateway starts aegis gateway with config, driven over raw JSON-RPC
// lines like a wrap.
func (l *live) gateway(config string) *wrapProc {
	l.t.Helper()
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		l.t.Fatal(err)
	}
	return l.start(exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state))
}

// The approval ids of gatewaySession: the first session of a fresh state
// directory is number 1, and its approvals take their numbers from one
// counter (the add call that rode on the approval took number 2).
const (
	gwAddApproval = "apr-add-needs-a-human-example__add-1.1"
	gwEscalation  = "esc-1.3"
)

// gatewaySession runs the scripted gateway session: an allowed call, a call
// that needs a human, its approval and the approved call, an escalation
// from developer to deploy approved from a second process (and approved
// again, which is refused), and a call that only deploy allows.
func gatewaySession(t *testing.T) *live {
	t.Helper()
	l := newLive(t, "")
	w := l.gateway(gatewayConfig(l.bin))
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"example__echo","arguments":{"message":"hello"}}`); !strings.Contains(a, `hello`) {
		t.Fatalf("echo: %s", a)
	}
	if a := w.call(2, "tools/call", `{"name":"example__add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	if id != gwAddApproval {
		t.Fatalf("approval prompt names %q, want %s", id, gwAddApproval)
	}
	// The approver sees which rule asked, under which profile.
	if out, _, code := l.aegisStdout("approvals", "--json"); code != 0 || !strings.Contains(out, `"matched_rule": "add-needs-a-human"`) || !strings.Contains(out, `"profile": "developer"`) {
		t.Fatalf("approvals --json: exit %d\n%s", code, out)
	}
	if out, code := l.aegis("approve", id); code != 0 {
		t.Fatalf("aegis approve %s: %d %s", id, code, out)
	}
	if a := w.call(3, "tools/call", `{"name":"example__add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	if a := w.call(4, "tools/call", `{"name":"aegis__set_profile","arguments":{"name":"deploy"}}`); !strings.Contains(a, "code=AEGIS_PENDING_APPROVAL active=developer approval="+gwEscalation+`"`) {
		t.Fatalf("escalation: %s", a)
	}
	if id := w.approvalID(); id != gwEscalation {
		t.Fatalf("approval prompt names %q, want %s", id, gwEscalation)
	}
	if out, code := l.aegis("approve", gwEscalation); code != 0 {
		t.Fatalf("aegis approve %s: %d %s", gwEscalation, code, out)
	}
	if out, code := l.aegis("approve", gwEscalation); code == 0 || !strings.Contains(out, "already resolved") {
		t.Fatalf("aegis approve %s a second time: %d %s", gwEscalation, code, out)
	}
	if a := w.call(5, "tools/call", `{"name":"aegis__approval_status","arguments":{"id":"`+gwEscalation+`"}}`); !strings.Contains(a, `"approved"`) {
		t.Fatalf("approval status: %s", a)
	}
	if a := w.call(6, "tools/call", `{"name":"example__slow","arguments":{"ms":1}}`); !strings.Contains(a, "slept") {
		t.Fatalf("slow as deploy: %s", a)
	}
	w.finish()
	return l
}

// streamEvent is an envelope as aegis events list --json prints it.
type streamEvent struct {
	Session string          `json:"session"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
}

// streamEvents returns every event in l's stream.
func (l *live) streamEvents() []streamEvent {
	l.t.Helper()
	code, out, stderr := cmd(l.t, nil, "events", "list", "--state-dir", l.state, "--json")
	if code != 0 {
		l.t.Fatalf("events list: exit %d: %s", code, stderr)
	}
	var evs []streamEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e streamEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			l.t.Fatalf("events list --json: %v: %q", err, line)
		}
		evs = append(evs, e)
	}
	return evs
}

// approvalEventsOf counts the approval.resolved and approval.refused events of
// session per approval id; every approval.resolved must carry its signed
// decision line.
func approvalEventsOf(t *testing.T, evs []streamEvent, session string) (resolved, refused map[string]int) {
	t.Helper()
	resolved, refused = map[string]int{}, map[string]int{}
	for _, e := range evs {
		if e.Session != session {
			continue
		}
		var p struct {
			ApprovalID string `json:"approval_id"`
			Line       string `json:"line"`
		}
		json.Unmarshal(e.Payload, &p)
		switch e.Kind {
		case "approval.resolved":
			resolved[p.ApprovalID]++
			if p.Line == "" {
				t.Errorf("approval.resolved without its decision line: %s", e.Payload)
			}
		case "approval.refused":
			refused[p.ApprovalID]++
		}
	}
	return resolved, refused
}

// sessionsJSON returns aegis sessions --json.
func (l *live) sessionsJSON() []struct {
	ID        string         `json:"id"`
	Profile   string         `json:"profile"`
	Approvals map[string]int `json:"approvals"`
} {
	l.t.Helper()
	_, out, _ := l.in("sessions", "--json")
	var list []struct {
		ID        string         `json:"id"`
		Profile   string         `json:"profile"`
		Approvals map[string]int `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		l.t.Fatalf("sessions --json: %v\n%s", err, out)
	}
	return list
}

// One human decision is one approval.resolved event: the gateway wrote a
// second one for every decision on an escalation (the profile event), which
// replay read as a denial after the approval and sessions counted as a
// second decision. A second approval is refused, not recorded as a
// decision; a denial after the approval, which revokes it, is a decision
// of its own and shown as the revocation it is.
func TestGatewayRecordsOneResolutionPerApproval(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := gatewaySession(t)

	// A second session: an escalation approved, then revoked.
	w := l.gateway(gatewayConfig(l.bin))
	w.initialize()
	a := w.call(1, "tools/call", `{"name":"aegis__set_profile","arguments":{"name":"deploy"}}`)
	esc := w.approvalID()
	if !strings.Contains(a, "approval="+esc+`"`) || esc == gwEscalation {
		t.Fatalf("escalation %s: %s", esc, a)
	}
	if out, code := l.aegis("approve", esc); code != 0 {
		t.Fatalf("aegis approve %s: %d %s", esc, code, out)
	}
	if out, code := l.aegis("deny", esc); code != 0 {
		t.Fatalf("aegis deny %s (revoke): %d %s", esc, code, out)
	}
	if a := w.call(2, "tools/call", `{"name":"aegis__approval_status","arguments":{"id":"`+esc+`"}}`); !strings.Contains(a, `"denied"`) {
		t.Fatalf("approval status after the revocation: %s", a)
	}
	w.finish()

	list := l.sessionsJSON()
	if len(list) != 2 {
		t.Fatalf("%d sessions", len(list))
	}
	evs := l.streamEvents()
	resolved, refused := approvalEventsOf(t, evs, list[0].ID)
	if len(resolved) != 2 || resolved[gwEscalation] != 1 || resolved[gwAddApproval] != 1 || len(refused) != 1 || refused[gwEscalation] != 1 {
		t.Errorf("first session: approval.resolved per approval %v, approval.refused %v", resolved, refused)
	}
	if a := list[0].Approvals; a["requested"] != 2 || a["approved"] != 2 || a["denied"] != 0 || a["refused"] != 1 || a["used"] != 1 || a["duplicate"] != 0 {
		t.Errorf("first session: approval counts %v", a)
	}
	_, out, _ := l.in("replay", list[0].ID)
	if strings.Count(out, gwEscalation+" approved by tester@") != 1 || strings.Contains(out, gwEscalation+" denied") || !strings.Contains(out, "approve "+gwEscalation+" by tester@") {
		t.Errorf("first session's replay:\n%s", out)
	}
	_, out, _ = l.in("sessions")
	if !strings.Contains(out, "2 (2 approved)") || !strings.Contains(out, "1 (1 denied)") {
		t.Errorf("sessions:\n%s", out)
	}

	resolved, refused = approvalEventsOf(t, evs, list[1].ID)
	if len(resolved) != 1 || resolved[esc] != 2 || len(refused) != 0 {
		t.Errorf("second session: approval.resolved per approval %v, approval.refused %v", resolved, refused)
	}
	if a := list[1].Approvals; a["requested"] != 1 || a["approved"] != 0 || a["denied"] != 1 || a["duplicate"] != 0 {
		t.Errorf("second session: approval counts %v", a)
	}
	_, out, _ = l.in("replay", list[1].ID)
	if strings.Count(out, esc+" approved by tester@") != 1 || strings.Count(out, esc+" denied by tester@") != 1 || !strings.Contains(out, "revokes its approval") {
		t.Errorf("second session's replay:\n%s", out)
	}
}

// transcriptSteps is a text transcript without its frame lines (the order
// in which the gateway's frames interleave with its events is not fixed),
// and without the checkpoints signed on the interval (10 s after a line
// none covers: a loaded machine makes one mid-session) but the last, made
// at the close.
func transcriptSteps(out string) string {
	lines := strings.SplitAfter(strings.TrimRight(out, "\n"), "\n")
	var b strings.Builder
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) > 2 && (f[2] == "c2s" || f[2] == "s2c" || f[2] == "signed" && i < len(lines)-1) {
			continue
		}
		b.WriteString(line)
	}
	return b.String() + "\n"
}

// An approval request says what it is for: the escalation's switch
// (developer -> deploy), where replay printed "for  ·", and the tool of a
// call's approval. The golden transcript is the gateway session's story.
func TestReplayApprovalRequestNamesItsTarget(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := gatewaySession(t)
	code, out, stderr := l.in("replay", "last")
	if code != 0 || stderr != "" {
		t.Fatalf("replay: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, "requested "+gwEscalation+" for profile developer -> deploy · expires") || !strings.Contains(out, "requested "+gwAddApproval+" for example__add · expires") || strings.Contains(out, "for  ·") {
		t.Errorf("replay:\n%s", out)
	}
	golden(t, "replay-gateway.golden", l.normalizer().norm(transcriptSteps(out)))
}

// The active profile is known from the start: the gateway records its
// default profile in session.opened, so replay shows it before the first
// switch and sessions shows it for a session that never switches.
func TestGatewayDefaultProfileShownFromTheStart(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := gatewaySession(t)
	w := l.gateway(gatewayConfig(l.bin)) // a second session, no switch
	w.initialize()
	w.finish()

	_, out, _ := l.in("replay", "--json", "last")
	var st struct {
		Kind    string `json:"kind"`
		Profile string `json:"profile"`
		Opened  struct {
			Profile string `json:"profile"`
		} `json:"opened"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &st); err != nil || st.Kind != "session.opened" || st.Profile != "developer" || st.Opened.Profile != "developer" {
		t.Errorf("first step of the second session: %+v (%v)\n%s", st, err, out)
	}
	list := l.sessionsJSON()
	if len(list) != 2 || list[0].Profile != "deploy" || list[1].Profile != "developer" {
		t.Errorf("sessions profiles: %+v", list)
	}
	_, out, _ = l.in("replay", list[0].ID)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) < 2 || f[1] == "-" {
			t.Errorf("a step without a profile: %q", line)
		}
	}
}

// Rechecked under the rules it ran with, the gateway session changes
// nothing: the call that went through on an approval was asked about with
// its capability and the active profile, as the gateway asked, so it is
// pending_approval as it was, not newly allowed.
func TestRecheckApprovedGatewayCallNotNewlyAllowed(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := gatewaySession(t)
	same := writePolicy(t, l.dir, "same.yaml", "version: 1\n"+gatewayRules)
	code, out, stderr := l.in("recheck", "--policy", same)
	if code != 0 || stderr != "" || !strings.Contains(out, "6 call(s) in 1 session(s): no verdict would change (4 unchanged, 0 in flight, 2 not evaluated)") {
		t.Errorf("same rules: exit %d, stderr %q\n%s", code, stderr, out)
	}
	// Without the rule, both add calls are newly allowed; nothing else.
	none := writePolicy(t, l.dir, "none.yaml", "version: 1\n")
	code, out, _ = l.in("recheck", "--policy", none)
	if code != 1 || strings.Count(out, "newly allowed\n") != 2 || !strings.Contains(out, "2 would change (0 newly blocked, 2 newly allowed") {
		t.Errorf("no rules: exit %d\n%s", code, out)
	}
}

// A server that fails to start is skipped, and the session says so where
// an operator looks: aegis sessions (after the configuration, and in
// --json) and aegis replay (a skipped line with the reason). The servers
// that did start are named in their started and exited lines.
func TestGatewaySkippedServerShown(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := newLive(t, "")
	missing := filepath.Join(l.dir, "no-such-server")
	w := l.gateway(`version: 1
servers:
  gone:
    command: ` + missing + `
  example:
    command: ` + filepath.Join(l.bin, "aegis-example-server") + `
profiles:
  p:
    allow: ["example.*"]
activation:
  default_profile: p
`)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"example__echo","arguments":{"message":"hi"}}`); !strings.Contains(a, "hi") {
		t.Fatalf("echo: %s", a)
	}
	w.finish()

	_, out, _ := l.in("sessions")
	if !strings.Contains(out, "aegis.yaml · skipped: gone (start)") {
		t.Errorf("sessions does not show the skipped server:\n%s", out)
	}
	_, out, _ = l.in("sessions", "--json")
	var list []struct {
		Skipped []struct{ Server, Stage, Error string } `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || len(list[0].Skipped) != 1 ||
		list[0].Skipped[0].Server != "gone" || list[0].Skipped[0].Stage != "start" || !strings.Contains(list[0].Skipped[0].Error, missing) {
		t.Errorf("sessions --json: %v\n%s", err, out)
	}
	_, out, _ = l.in("replay", "last")
	for _, want := range []string{"skipped   server gone skipped at start: ", "started   example pid ", "exited    example pid "} {
		if !strings.Contains(out, want) {
			t.Errorf("replay does not show %q:\n%s", want, out)
		}
	}
}
