package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// typist is a terminal on which a test types: each ReadPassphrase takes
// the next line, and what was asked is kept.
type typist struct {
	lines   []string
	prompts []string
}

func (t *typist) ReadPassphrase(prompt string) ([]byte, error) {
	t.prompts = append(t.prompts, prompt)
	if len(t.lines) == 0 {
		return nil, errors.New("the test typed nothing more")
	}
	l := t.lines[0]
	t.lines = t.lines[1:]
	return []byte(l), nil
}

func (t *typist) Close() error { return nil }

// withTerminal runs one command in-process, with a terminal that types
// lines; stdin holds text that must never be taken for a passphrase.
func withTerminal(t *testing.T, env map[string]string, tty *typist, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdin: strings.NewReader("stdin is not the terminal\n"), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] }, OpenTerminal: func() (Terminal, error) { return tty, nil },
		approverWorkFactor: 10}
	ctx, cancel := context.WithTimeout(context.Background(), commandLimit)
	defer cancel()
	code := m.Run(ctx, args)
	return code, out.String(), errb.String()
}

// approverFiles makes an approver key (a low scrypt work factor: tests
// open it many times) and an approvers file listing it; it returns the
// key, its file and the approvers file.
func approverFiles(t *testing.T, dir, name, pass string) (projector.ApproverKey, string, string) {
	t.Helper()
	k, err := projector.GenerateApproverKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, name+".age")
	if err := projector.WriteApproverKeyFile(keyPath, k, []byte(pass), 10, false); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(dir, "approvers")
	if err := os.WriteFile(list, []byte("# who may approve\n"+schemas.ApproverLine(k.PublicKey(), name)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return k, keyPath, list
}

// wrapWithApprovers starts aegis wrap under the live policy with an
// approvers file.
func (l *live) wrapWithApprovers(approvers string) *wrapProc {
	l.t.Helper()
	return l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--approvers", approvers, "--", filepath.Join(l.bin, "aegis-example-server")))
}

// noTTY runs the aegis binary in a new session, so that it has no
// controlling terminal, with stdin holding a passphrase it must not take.
func (l *live) noTTY(args ...string) (string, int) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandLimit)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(l.bin, "aegis"), args...)
	c.Env = l.env
	c.Stdin = strings.NewReader("correct horse battery\ncorrect horse battery\n")
	noTerminal(c)
	b, err := c.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(b), ee.ExitCode()
	}
	if err != nil {
		l.t.Fatal(err)
	}
	return string(b), 0
}

// TestAgentSelfApprovalRefusedWithApprovers: an agent that can run a shell
// runs aegis approve on its own pending call. With --approvers that is
// refused and recorded, and so is every signature that is not this
// approval's own by a listed key; the human's signed approve lets the
// call through once, and the decision line names the human's key id.
func TestAgentSelfApprovalRefusedWithApprovers(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, scriptedPolicy)
	const pass = "correct horse battery"
	alice, aliceKey, approvers := approverFiles(t, l.dir, "alice", pass)
	mallory, err := projector.GenerateApproverKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	w := l.wrapWithApprovers(approvers)
	w.initialize()
	const add = `{"name":"add","arguments":{"a":2,"b":3}}`
	if a := w.call(1, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()

	// The agent's approve, as any process of the user sends it.
	out, code := l.aegis("approve", id)
	if code != 1 || !strings.Contains(out, "carries no approver signature") || !strings.Contains(out, "aegis: hint: this aegis takes only approvals signed") {
		t.Fatalf("unsigned aegis approve %s: %d\n%s", id, code, out)
	}
	if a := w.call(2, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add after the refused approve: %s", a)
	}
	retryID := w.approvalID()

	// The agent with the key file but no terminal (and the passphrase on
	// stdin) gets no signature either.
	if out, code := l.noTTY("approve", "--approver-key", aliceKey, id); code != 1 || !strings.Contains(out, "no terminal to ask the passphrase on") {
		t.Fatalf("approve without a terminal: %d\n%s", code, out)
	}

	// Signatures that are not this approval's own, sent straight over
	// the approval channel.
	dir, err := events.RuntimeDirPath(func(k string) string { return map[string]string{"XDG_RUNTIME_DIR": l.runtime}[k] }, "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := events.ReadApprovalCreds(dir)
	if err != nil || len(list.Live) != 1 {
		t.Fatalf("credentials: %v %+v", err, list)
	}
	creds := list.Live[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ap, err := events.DialApprover(ctx, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	rep, err := ap.Do(ctx, events.ApprovalRequest{Op: events.OpList})
	if err != nil || len(rep.Pending) != 2 {
		t.Fatalf("list: %v %+v", err, rep)
	}
	var pending events.PendingApproval
	for _, p := range rep.Pending {
		if p.ApprovalID == id {
			pending = p
		}
	}
	own := schemas.ApprovalClaim{ApprovalID: id, Session: creds.Session, Target: pending.ToolID, ArgsDigest: pending.ArgsDigest}
	if pending.ToolID != "add" || len(own.ArgsDigest) != 64 {
		t.Fatalf("pending: %+v", pending)
	}
	for _, c := range []struct {
		name string
		key  projector.ApproverKey
		edit func(*schemas.ApprovalClaim)
		want string
	}{
		{"a key not in the approvers file", mallory, nil, "not in the approvers file"},
		{"a signature for another approval id", alice, func(c *schemas.ApprovalClaim) { c.ApprovalID = retryID }, "the approver signature is for approval"},
		{"a signature for other arguments", alice, func(c *schemas.ApprovalClaim) { c.ArgsDigest = strings.Repeat("0", 64) }, "for other arguments"},
		{"a signature for another session", alice, func(c *schemas.ApprovalClaim) { c.Session = "01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM" }, "for session"},
		{"a signature for another tool", alice, func(c *schemas.ApprovalClaim) { c.Target = "echo" }, `for "echo", not "add"`},
	} {
		claim := own
		if c.edit != nil {
			c.edit(&claim)
		}
		sig, err := c.key.Sign(claim)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ap.Do(ctx, events.ApprovalRequest{Op: events.OpApprove, ApprovalID: id, By: "agent", Approver: sig})
		if err != nil || rep.OK || !strings.Contains(rep.Error, c.want) {
			t.Errorf("%s: %v %+v, want a refusal with %q", c.name, err, rep, c.want)
		}
	}
	if a := w.call(3, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add after forged approvals: %s", a)
	}
	w.approvalID()

	// The human: the right key, its passphrase typed on the terminal
	// (a wrong one first).
	env := map[string]string{"XDG_RUNTIME_DIR": l.runtime, "USER": "alice"}
	tty := &typist{lines: []string{"wrong horse battery", pass}}
	code, stdout, stderr := withTerminal(t, env, tty, "approve", "--approver-key", aliceKey, id)
	if code != 0 || !strings.Contains(stdout, "signed by alice (key "+alice.KeyID()[:16]+")") {
		t.Fatalf("signed approve: %d\n%s\n%s", code, stdout, stderr)
	}
	if len(tty.prompts) != 2 || !strings.Contains(stderr, "wrong passphrase; try again") || !strings.Contains(stderr, "approving "+id+" in session "+creds.Session+": add, arguments {\"a\":2,\"b\":3}") {
		t.Fatalf("prompts %q\n%s", tty.prompts, stderr)
	}
	if a := w.call(4, "tools/call", add); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	if a := w.call(5, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("a second add on one approval: %s", a)
	}
	// The signed approval is spent: a second signed approve finds
	// nothing to sign.
	tty = &typist{lines: []string{pass}}
	if code, stdout, stderr := withTerminal(t, env, tty, "approve", "--approver-key", aliceKey, "--session", creds.Session, id); code != 1 || !strings.Contains(stderr, "not pending") {
		t.Fatalf("second signed approve: %d\n%s\n%s", code, stdout, stderr)
	}
	w.finish()

	// The record: one decision, naming alice's key id, and it verifies.
	b, err := os.ReadFile(l.audit)
	if err != nil {
		t.Fatal(err)
	}
	decisions := 0
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if m["line_type"] == "decision" {
			decisions++
			if m["approval_id"] != id || m["approver_key_id"] != alice.KeyID() {
				t.Fatalf("decision line: %s", line)
			}
		}
	}
	if decisions != 1 {
		t.Fatalf("%d decision lines", decisions)
	}
	if out, code := l.aegis("verify", "--key", schemas.PublicKeyHex(signingPublic(t, l.key)), l.audit); code != 0 {
		t.Fatalf("verify: %d\n%s", code, out)
	}
	// The transcript names the approver, and the key of each forged
	// signature that was refused.
	transcript := l.mustAegis("replay", "--state-dir", l.state, "last")
	if !strings.Contains(transcript, id+" approved by alice@") || !strings.Contains(transcript, "signed by alice (key "+alice.KeyID()[:16]+"…)") ||
		!strings.Contains(transcript, "signed by (key "+mallory.KeyID()[:16]+"…) refused: the approval is signed by key") {
		t.Errorf("transcript:\n%s", transcript)
	}
	// Every refusal is in the stream, with its reason.
	code, evs, _ := cmd(t, nil, "events", "list", "--state-dir", l.state, "--json")
	if code != 0 {
		t.Fatalf("events list: %d", code)
	}
	refused := 0
	for _, line := range strings.Split(strings.TrimSpace(evs), "\n") {
		var e schemas.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if e.Kind == schemas.KindApprovalRefused {
			var p map[string]string
			json.Unmarshal(e.Payload, &p)
			if p["reason"] == "" || p["approval_id"] != id {
				t.Fatalf("refusal: %s", e.Payload)
			}
			refused++
		}
	}
	// The unsigned approve and the five forged ones; the second signed
	// approve found nothing pending to sign and sent nothing.
	if refused != 6 {
		t.Fatalf("%d approval.refused events, want 6", refused)
	}
}

func signingPublic(t *testing.T, path string) ed25519.PublicKey {
	t.Helper()
	k, err := projector.LoadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}

// TestKeygenApproverAsksTwiceOnTheTerminal: the key is written only when
// the passphrase typed twice matches and is long enough; the printed line
// is an approvers file, and the key opens with that passphrase.
func TestKeygenApproverAsksTwiceOnTheTerminal(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "approver.age")
	env := map[string]string{"USER": "alice"}
	if code, _, stderr := withTerminal(t, env, &typist{lines: []string{"correct horse battery", "correct horse batterx"}}, "keygen", "--approver", "--out", out); code != 1 || !strings.Contains(stderr, "the two passphrases differ") {
		t.Fatalf("mismatch: %d %s", code, stderr)
	}
	if code, _, stderr := withTerminal(t, env, &typist{lines: []string{"short", "short"}}, "keygen", "--approver", "--out", out); code != 1 || !strings.Contains(stderr, "at least 8") {
		t.Fatalf("short: %d %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a key was written after a refused passphrase")
	}
	tty := &typist{lines: []string{"correct horse battery", "correct horse battery"}}
	code, stdout, stderr := withTerminal(t, env, tty, "keygen", "--approver", "--out", out, "--name", "Alice Example")
	if code != 0 {
		t.Fatalf("keygen --approver: %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "aegis-approver ") || !strings.HasSuffix(lines[0], " Alice Example") || !strings.HasPrefix(lines[1], "key_id ") {
		t.Fatalf("stdout:\n%s", stdout)
	}
	a, err := schemas.ParseApprovers([]byte(lines[0]))
	if err != nil {
		t.Fatal(err)
	}
	keyID := strings.TrimPrefix(lines[1], "key_id ")
	if ap, ok := a.Lookup(keyID); !ok || ap.Name != "Alice Example" {
		t.Fatalf("approvers line %q does not hold key %s", lines[0], keyID)
	}
	data, err := projector.ReadApproverKeyFile(out)
	if err != nil {
		t.Fatal(err)
	}
	k, err := projector.OpenApproverKey(data, []byte("correct horse battery"))
	if err != nil || k.KeyID() != keyID {
		t.Fatalf("open: %v", err)
	}
	if code, _, stderr := withTerminal(t, env, &typist{}, "keygen", "--approver", "--out", out); code != 1 || !strings.Contains(stderr, "already exists") {
		t.Fatalf("overwrite: %d %s", code, stderr)
	}
}

// TestApproverKeyNeedsATerminal: the real binary with no controlling
// terminal and the passphrase on stdin refuses to make a key, and says
// why.
func TestApproverKeyNeedsATerminal(t *testing.T) {
	l := &live{t: t, bin: bins(t), env: os.Environ()}
	out := filepath.Join(t.TempDir(), "approver.age")
	got, code := l.noTTY("keygen", "--approver", "--out", out)
	if code != 1 || !strings.Contains(got, "aegis: error: no terminal to ask the passphrase on") || !strings.Contains(got, "aegis: hint: run it from an interactive terminal") {
		t.Fatalf("keygen --approver without a terminal: %d\n%s", code, got)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a key was written")
	}
}

// TestWrapRefusesABadApproversFile: an approvers file that does not parse,
// lists nobody or that others may write refuses the start (fail closed),
// naming what is wrong.
func TestWrapRefusesABadApproversFile(t *testing.T) {
	l := newLive(t, scriptedPolicy)
	k, _ := projector.GenerateApproverKey(rand.Reader)
	for _, c := range []struct {
		name, file string
		mode       os.FileMode
		want       string
	}{
		{"a malformed line", "aegis-approver not-a-key alice\n", 0o600, "line 1: the public key must be 64 lowercase hex"},
		{"nobody listed", "# empty\n", 0o600, "lists no approver"},
		{"writable by others, who could add themselves", schemas.ApproverLine(k.PublicKey(), "alice") + "\n", 0o622, "group or others may write it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "approvers")
			if err := os.WriteFile(path, []byte(c.file), c.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, c.mode)
			out, code := l.aegis("wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state, "--policy", l.policy, "--approvers", path, "--", filepath.Join(l.bin, "aegis-example-server"))
			if code != 1 || !strings.Contains(out, c.want) || !strings.Contains(out, "aegis: hint:") {
				t.Fatalf("%d\n%s", code, out)
			}
		})
	}
	if out, code := l.aegis("wrap", "--audit", l.audit, "--signing-key", l.key, "--approvers", "x", "--", "true"); code != 2 || !strings.Contains(out, "--approvers needs --policy") {
		t.Fatalf("without --policy: %d\n%s", code, out)
	}
}

// TestAgentSelfEscalationRefusedWithApprovers: the attack of issue 19 as
// it was tried: the agent asks for deploy, gets esc-1.1, runs aegis approve
// esc-1.1 through a shell. With --approvers on the gateway that is refused,
// the agent stays where it was, and only the approver's signed approve
// promotes it; the decision line names the approver's key id.
func TestAgentSelfEscalationRefusedWithApprovers(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	l := newLive(t, "")
	const pass = "correct horse battery"
	alice, aliceKey, approvers := approverFiles(t, l.dir, "alice", pass)
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(movingConfig(l.bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key,
		"--state-dir", l.state, "--approvers", approvers))
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
	if out, code := l.aegis("approve", "esc-1.1"); code != 1 || !strings.Contains(out, "carries no approver signature") {
		t.Fatalf("the agent's aegis approve esc-1.1: %d %s", code, out)
	}
	if got := call("aegis__approval_status", `{"id":"esc-1.1"}`); !strings.HasPrefix(got, "pending") {
		t.Fatalf("status after the agent's approve: %q", got)
	}
	env := map[string]string{"XDG_RUNTIME_DIR": l.runtime, "USER": "alice"}
	code, stdout, stderr := withTerminal(t, env, &typist{lines: []string{pass}}, "approve", "--approver-key", aliceKey, "esc-1.1")
	if code != 0 || !strings.Contains(stdout, "approved esc-1.1") || !strings.Contains(stdout, "signed by alice") ||
		!strings.Contains(stderr, "aegis.set_profile developer -> deploy") {
		t.Fatalf("signed approve: %d\n%s\n%s", code, stdout, stderr)
	}
	if got := call("aegis__approval_status", `{"id":"esc-1.1"}`); got != "approved" {
		t.Fatalf("status after the signed approve: %q", got)
	}
	w.finish()
	b, err := os.ReadFile(l.audit)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"approver_key_id":"`+alice.KeyID()+`"`)) {
		t.Fatalf("no decision line names %s:\n%s", alice.KeyID(), b)
	}
	if out, code := l.aegis("verify", "--key", schemas.PublicKeyHex(signingPublic(t, l.key)), l.audit); code != 0 {
		t.Fatalf("verify: %d\n%s", code, out)
	}
}

// TestSignedApproveToAProcessWithoutApprovers: without --approvers the
// approval is taken as before, and the approver is told that nobody
// checked the signature (the record names no approver).
func TestSignedApproveToAProcessWithoutApprovers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, scriptedPolicy)
	const pass = "correct horse battery"
	_, aliceKey, _ := approverFiles(t, l.dir, "alice", pass)
	w := l.wrap(false)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	code, stdout, stderr := withTerminal(t, map[string]string{"XDG_RUNTIME_DIR": l.runtime}, &typist{lines: []string{pass}}, "approve", "--approver-key", aliceKey, id)
	if code != 0 || !strings.Contains(stdout, "approved "+id) || !strings.Contains(stderr, "aegis: warning: that aegis process runs without --approvers") {
		t.Fatalf("%d\n%s\n%s", code, stdout, stderr)
	}
	if a := w.call(2, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	w.finish()
	if b := readFile(t, l.audit); bytes.Contains(b, []byte("approver_key_id")) {
		t.Fatal("a decision line names an approver nobody checked")
	}
}
