package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events/hubtest"
)

// enrollHostAndApprover enrolls host-1 on the hub and makes the fleet
// approver alice, as an admin does with aegis hub enroll and aegis hub
// approver, and has the hub take both users; it returns the host's link
// key file and alice's hub key file.
func (l *live) enrollHostAndApprover(h *hubtest.Hub, clientURLs string) (hostKey, approverKey string) {
	l.t.Helper()
	// A hub just started may not have elected its JetStream leader yet.
	nc, _ := h.JetStream(context.Background())
	nc.Close()
	userBlock := func(out string) string {
		_, block, _ := strings.Cut(out, "then reload them (nats-server --signal reload):\n")
		block, _, _ = strings.Cut(block, "\n\n")
		return block
	}
	hostKey = filepath.Join(l.dir, "host-1.nkey")
	out, code := l.aegis("hub", "enroll", "host-1", "--hub", clientURLs, "--key-out", hostKey)
	if code != 0 {
		l.t.Fatalf("enroll: %d\n%s", code, out)
	}
	users := []string{userBlock(out)}
	approverKey = filepath.Join(l.dir, "alice.nkey")
	if out, code = l.aegis("hub", "approver", "alice", "--key-out", approverKey); code != 0 {
		l.t.Fatalf("hub approver: %d\n%s", code, out)
	}
	users = append(users, userBlock(out))
	h.SetLeafUsers(users...)
	return hostKey, approverKey
}

// TestFleetApproverNeedsAnApproverKey: a fleet approver's hub key lets it
// ask a host, not approve for a human. On a host run with --approvers, an
// approve over the hub without an approver's signature is refused, and
// the signed one, checked by the host against its own pending call, lets
// the call through once.
func TestFleetApproverNeedsAnApproverKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub and aegis wrap")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.NewSecured(t, 3)
	clientURLs := strings.Join(h.ClientURLs(), ",")
	l := newLive(t, scriptedPolicy)
	const pass = "correct horse battery"
	alice, aliceKey, approvers := approverFiles(t, l.dir, "alice", pass)

	hostKey, hubKey := l.enrollHostAndApprover(h, clientURLs)

	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--approvers", approvers, "--hub", strings.Join(h.LeafURLs(), ","), "--host", "host-1", "--hub-nkey", hostKey,
		"--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	const add = `{"name":"add","arguments":{"a":2,"b":3}}`
	if a := w.call(1, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	hub := []string{"--hub", strings.ReplaceAll(clientURLs, "admin:admin@", ""), "--hub-nkey", hubKey}
	var last string
	waitFor(t, 60*time.Second, "the approver sees the pending call", func() bool {
		out, errs, code := l.aegisStdout(append([]string{"approvals", "--json"}, hub...)...)
		var rows []approvalRow
		last = fmt.Sprintf("exit %d\n%s\n%s", code, out, errs)
		return code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 1 && rows[0].ApprovalID == id
	}, func() string { return last })

	if out, code := l.aegis(append([]string{"approve", id}, hub...)...); code != 1 || !strings.Contains(out, "carries no approver signature") {
		t.Fatalf("unsigned approve over the hub: %d\n%s", code, out)
	}
	if a := w.call(2, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add after the unsigned approve: %s", a)
	}
	w.approvalID()
	code, stdout, stderr := withTerminal(t, map[string]string{"USER": "alice"}, &typist{lines: []string{pass}},
		append([]string{"approve", id, "--approver-key", aliceKey, "--host", "host-1"}, hub...)...)
	if code != 0 || !strings.Contains(stdout, "signed by alice") || !strings.Contains(stdout, "(host host-1)") || !strings.Contains(stderr, "approving "+id+" in host host-1, session ") {
		t.Fatalf("signed approve over the hub: %d\n%s\n%s", code, stdout, stderr)
	}
	if a := w.call(3, "tools/call", add); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	w.finish()
	if out := l.mustAegis("replay", "--state-dir", l.state, "last"); !strings.Contains(out, "over the hub") {
		t.Errorf("replay does not say the approval came over the hub:\n%s", out)
	}
	b := string(readFile(t, l.audit))
	if !strings.Contains(b, `"approver_key_id":"`+alice.KeyID()+`"`) {
		t.Fatalf("no decision line names %s", alice.KeyID())
	}
}
