package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// movingConfig has two profiles the agent may move between freely, and
// deploy, which only a human grants from developer.
func movingConfig(bin string) string {
	return `version: 1
servers:
  example:
    command: ` + filepath.Join(bin, "aegis-example-server") + `
profiles:
  developer:
    allow: [example.echo]
    allowed_transitions: [reviewer]
  reviewer:
    allow: [example.echo]
    allowed_transitions: [developer]
  deploy:
    extends: developer
    allow: ["example.*"]
    allowed_transitions: [developer]
activation:
  default_profile: developer
`
}

// toolText returns the text of a tools/call answer line.
func toolText(t *testing.T, line string) string {
	t.Helper()
	var a struct {
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &a); err != nil || len(a.Result.Content) == 0 {
		t.Fatalf("not a tool result: %v %s", err, line)
	}
	return a.Result.Content[0].Text
}

// TestApprovalAfterTheAgentMovedOn: the agent asks for deploy from
// developer, then moves to reviewer before the human answers. aegis
// approve still succeeds (the human's decision is not lost); applying it
// from reviewer is refused and does not spend it; back in developer it
// applies, once; and a second approve is refused.
func TestApprovalAfterTheAgentMovedOn(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := newLive(t, "")
	w := l.gateway(movingConfig(l.bin))
	w.initialize()
	id := 1
	call := func(name, args string) string {
		t.Helper()
		id++
		return toolText(t, w.call(id, "tools/call", `{"name":"`+name+`","arguments":`+args+`}`))
	}
	// esc-1.1: the first approval of session 1 (the state directory's first).
	if got := call("aegis__set_profile", `{"name":"deploy"}`); got != "code=AEGIS_PENDING_APPROVAL active=developer approval=esc-1.1" {
		t.Fatalf("escalation: %q", got)
	}
	if id := w.approvalID(); id != "esc-1.1" {
		t.Fatalf("approval prompt names %q", id)
	}
	if got := call("aegis__set_profile", `{"name":"reviewer"}`); got != "code=OK active=reviewer approval=" {
		t.Fatalf("edge switch: %q", got)
	}
	out, code := l.aegis("approve", "esc-1.1")
	if code != 0 || !strings.Contains(out, "approved esc-1.1") || !strings.Contains(out, "the agent is in reviewer now") {
		t.Fatalf("aegis approve esc-1.1 while the agent is in reviewer: %d %s", code, out)
	}
	// Applied from the wrong profile: refused, not spent.
	if got := call("aegis__approval_status", `{"id":"esc-1.1"}`); got != "pending: approved for a switch from developer, but the active profile is reviewer" {
		t.Fatalf("status from reviewer: %q", got)
	}
	if got := call("example__slow", `{"ms":1}`); !strings.Contains(got, "AEGIS_CAP_DENIED") || !strings.Contains(got, `"active_profile":"reviewer"`) {
		t.Fatalf("slow while in reviewer: %q", got)
	}
	// Back where it was asked from: the approval applies, once.
	if got := call("aegis__set_profile", `{"name":"developer"}`); got != "code=OK active=developer approval=" {
		t.Fatalf("back to developer: %q", got)
	}
	if got := call("aegis__approval_status", `{"id":"esc-1.1"}`); got != "approved" {
		t.Fatalf("status from developer: %q", got)
	}
	if got := call("example__slow", `{"ms":1}`); !strings.Contains(got, "slept") {
		t.Fatalf("slow as deploy: %q", got)
	}
	if got := call("aegis__approval_status", `{"id":"esc-1.1"}`); got != "denied: already used" {
		t.Fatalf("approval replayed: %q", got)
	}
	if out, code := l.aegis("approve", "esc-1.1"); code == 0 || !strings.Contains(out, "already resolved") {
		t.Fatalf("aegis approve esc-1.1 a second time: %d %s", code, out)
	}
	w.finish()

	list := l.sessionsJSON()
	if len(list) != 1 {
		t.Fatalf("%d sessions", len(list))
	}
	resolved, refused := approvalEventsOf(t, l.streamEvents(), list[0].ID)
	if resolved["esc-1.1"] != 1 || refused["esc-1.1"] != 1 {
		t.Errorf("approval.resolved %v, approval.refused %v; want one of each for esc-1.1", resolved, refused)
	}
	var switches []string
	for _, e := range l.streamEvents() {
		if e.Kind != "profile.switched" {
			continue
		}
		var p struct {
			Profile string `json:"profile"`
		}
		json.Unmarshal(e.Payload, &p)
		switches = append(switches, p.Profile)
	}
	if got := strings.Join(switches, " "); got != "reviewer developer deploy" {
		t.Errorf("profile.switched events: %q, want reviewer developer deploy", got)
	}
}
