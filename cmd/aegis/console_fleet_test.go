package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events/hubtest"
)

// aegis console --hub shows the fleet of a real secured hub: the enrolled
// host with its mirror (how far behind, when last heard from, its last
// sequence and message time), the call that waits for approval on that
// host, named with its host, and the host's sessions from its mirror; an
// Approve from the console goes over the hub, as aegis approve --hub
// sends it, and lets the host's call through. The host's own /metrics
// shows its mirror's lag, labelled by host alone.
func TestConsoleFleetShowsHostsLagAndApprovals(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub and aegis wrap")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.NewSecured(t, 3)
	clientURLs := strings.Join(h.ClientURLs(), ",")
	l := newLive(t, consolePolicy)
	hostKey, aliceKey := l.enrollHostAndApprover(h, clientURLs)
	t.Cleanup(func() {
		if t.Failed() {
			for _, nd := range h.Nodes {
				log := nd.Log()
				t.Logf("hub node log, its end:\n%s", log[max(0, len(log)-3000):])
			}
		}
	})

	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--hub", strings.Join(h.LeafURLs(), ","), "--host", "host-1", "--hub-nkey", hostKey,
		"--metrics-listen", "127.0.0.1:0", "--", filepath.Join(l.bin, "aegis-example-server")))
	metrics := w.metricsAddr()
	w.initialize()
	const add = `{"name":"add","arguments":{"a":2,"b":3}}`
	if a := w.call(1, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()

	// The URLs carry the hub admin, who reads the mirrors; the approver's
	// key asks the hosts.
	con := l.console("--hub", clientURLs, "--hub-nkey", aliceKey, "--host", "host-1")
	c := loginClient(t, con)
	type state struct {
		Sessions []console.SessionRow `json:"sessions"`
		Pending  []console.Pending    `json:"pending"`
		Records  []console.RecordRow  `json:"records"`
		Fleet    *console.Fleet       `json:"fleet"`
		Notes    []string             `json:"notes"`
		Errors   []string             `json:"errors"`
	}
	var st state
	var host console.FleetHost
	var pending console.Pending
	waitFor(t, 150*time.Second, "the console shows host-1's mirror, its pending approval and its session", func() bool {
		st = state{}
		c.getJSON(t, "/api/state", &st)
		host, pending = console.FleetHost{}, console.Pending{}
		if st.Fleet != nil {
			for _, x := range st.Fleet.Hosts {
				if x.Host == "host-1" {
					host = x
				}
			}
		}
		for _, p := range st.Pending {
			if p.ApprovalID == id {
				pending = p
			}
		}
		return host.Mirrored && host.LastSeq > 0 && host.ActiveMS >= 0 && pending.Host != "" && len(st.Sessions) == 1
	}, func() string { return fmt.Sprintf("%+v", st) })

	if st.Records != nil {
		t.Errorf("a fleet console shows records: %+v", st.Records)
	}
	if st.Fleet.Hub == "" || strings.Contains(st.Fleet.Hub, "admin") || st.Fleet.CheckedAt == "" {
		t.Errorf("fleet %+v: want the hub named without its credentials, and when it was asked", st.Fleet)
	}
	// The mirror may still be behind (Lag) while it fills: it holds at
	// least one message, and none past its last sequence.
	if host.LastTime == "" || host.Messages == 0 || host.Messages > host.LastSeq || host.Error != "" || host.Pending != 1 {
		t.Errorf("host-1: %+v; want its mirror's last message time, no error, one pending", host)
	}
	if pending.Host != "host-1" || pending.ToolID != "add" || pending.MatchedRule != "gate-add" {
		t.Errorf("pending: %+v; want add on host-1, asked by gate-add", pending)
	}
	if s := st.Sessions[0]; s.ID != pending.Session || s.State != "unclosed" {
		t.Errorf("session %+v; want %s, unclosed (read from the hub)", s, pending.Session)
	}
	// The note of when the hub was asked is in UTC, as every time the page
	// shows; the times the page writes itself come in RFC 3339 UTC.
	var asked string
	for _, n := range st.Notes {
		if strings.HasPrefix(n, "approvals asked over the hub at ") {
			asked = n
		}
	}
	if times, others := timesIn(asked); len(times) != 1 || len(others) > 0 {
		t.Errorf("note %q (of %q): want the time it names in the form 2006-01-02 15:04:05 UTC", asked, st.Notes)
	}
	for _, at := range []string{st.Fleet.CheckedAt, host.LastTime} {
		if tm, err := time.Parse(time.RFC3339, at); err != nil || !strings.HasSuffix(at, "Z") {
			t.Errorf("fleet time %q (%v, %v): want RFC 3339 in UTC", at, tm, err)
		}
	}
	raw, _ := json.Marshal(host)
	t.Logf("host-1 on the hub: %s", raw)

	// Approve, over the hub; the host takes it once.
	body := fmt.Sprintf(`{"op":"approve","host":"host-1","session":%q,"approval_id":%q}`, pending.Session, id)
	if code, b := c.post(t, "/api/decide", body); code != 200 || !strings.Contains(b, "host host-1") {
		t.Fatalf("approve over the hub: %d %s", code, b)
	}
	if a := w.call(2, "tools/call", add); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	if code, b := c.post(t, "/api/decide", body); code != 409 || !strings.Contains(b, "refused to approve") {
		t.Fatalf("second approve: %d %s; want the host's refusal", code, b)
	}
	// A decision must name the host.
	if code, b := c.post(t, "/api/decide", fmt.Sprintf(`{"op":"deny","session":%q,"approval_id":%q}`, pending.Session, id)); code != 409 || !strings.Contains(b, "names the host") {
		t.Fatalf("deny without a host: %d %s", code, b)
	}
	// The host's own /metrics says how far the hub's mirror of it is
	// behind: once the mirror holds the whole stream, by nothing.
	var page string
	eventually(t, 30*time.Second, "host-1's page shows its mirror caught up", func() (bool, string) {
		_, page = httpGet(t, "http://"+metrics+"/metrics", "")
		return strings.Contains(page, `aegis_hub_mirror_lag{aegis_host="host-1"} 0`+"\n") &&
			strings.Contains(page, `aegis_hub_mirror_behind_seconds{aegis_host="host-1"} 0`+"\n"), page
	})
	checkDocumented(t, page)
	w.finish()
	if out := l.mustAegis("replay", "--state-dir", l.state, "last"); !strings.Contains(out, "over the hub") {
		t.Errorf("replay does not say the approval came over the hub:\n%s", out)
	}
}

// --state-dir and --hub are alternatives.
func TestConsoleHubAndStateDirAreAlternatives(t *testing.T) {
	code, _, errs := cmd(t, nil, "console", "--state-dir", t.TempDir(), "--hub", "nats://127.0.0.1:4222")
	if code != 2 || !strings.Contains(errs, "alternatives") {
		t.Fatalf("console --state-dir --hub: exit %d, %s", code, errs)
	}
	code, _, errs = cmd(t, nil, "console", "--hub-nkey", "x.nkey")
	if code != 2 || !strings.Contains(errs, "need --hub") {
		t.Fatalf("console --hub-nkey: exit %d, %s", code, errs)
	}
}
