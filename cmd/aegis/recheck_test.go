package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writePolicy(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The scripted session, recorded under scriptedPolicy (fail denied, add
// pending approval, approved once), rechecked under the same policy, a
// stricter one and a looser one.
func TestRecheckStricterAndLooser(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l, _ := scriptedSession(t, false)
	n := l.normalizer()

	same := writePolicy(t, l.dir, "same.yaml", "# the recorded policy, written differently\nversion: 1\ndefault: allow\nrules:\n  - {id: no-fail, action: deny, tool: fail, reason: fail is disabled here}\n  - {id: gate-add, action: pending_approval, tool: add}\n")
	code, out, stderr := l.in("recheck", "--policy", same)
	if code != 0 || stderr != "" || !strings.Contains(out, "4 call(s) in 1 session(s): no verdict would change (4 unchanged, 0 in flight, 0 not evaluated)") {
		t.Errorf("same policy: exit %d, stderr %q\n%s", code, stderr, out)
	}

	stricter := writePolicy(t, l.dir, "stricter.yaml", `version: 1
default: deny
rules:
  - id: gate-add
    action: pending_approval
    tool: add
  - id: no-fail
    action: deny
    tool: fail
    reason: still no
`)
	code, out, stderr = l.in("recheck", "--policy", stricter)
	if code != 1 || stderr != "" {
		t.Errorf("stricter: exit %d, stderr %q", code, stderr)
	}
	golden(t, "recheck-stricter.golden", n.norm(strings.ReplaceAll(out, stricter, "<POLICY>")))

	looser := writePolicy(t, l.dir, "looser.yaml", "version: 1\ndefault: allow\n")
	code, out, _ = l.in("recheck", "--policy", looser, "--json", "last")
	if code != 1 {
		t.Errorf("looser: exit %d", code)
	}
	var res struct {
		PolicySetHash string `json:"policy_set_hash"`
		Changes       []struct {
			CallID   string `json:"call_id"`
			Tool     string `json:"tool"`
			Change   string `json:"change"`
			Recorded struct {
				Status      string `json:"status"`
				ApprovalRef string `json:"approval_ref"`
			} `json:"recorded"`
			Now struct {
				Status string `json:"status"`
			} `json:"now"`
		} `json:"changes"`
		Summary struct {
			Calls        int `json:"calls"`
			NewlyAllowed int `json:"newly_allowed"`
			Unchanged    int `json:"unchanged"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	var got []string
	for _, c := range res.Changes {
		got = append(got, c.CallID+" "+c.Tool+" "+c.Recorded.Status+"→"+c.Now.Status+" "+c.Change)
	}
	want := []string{"call-2 fail denied→allowed newly_allowed", "call-3 add pending_approval→allowed newly_allowed", "call-4 add allowed→allowed newly_allowed"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || res.Summary.Calls != 4 || res.Summary.NewlyAllowed != 3 || res.Summary.Unchanged != 1 || len(res.PolicySetHash) != 64 {
		t.Errorf("looser:\n%s\nwant:\n%s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
	if res.Changes[2].Recorded.ApprovalRef != "apr-gate-add-add-1.1" { // the first approval of session 1
		t.Errorf("the approved call's recorded verdict: %+v", res.Changes[2])
	}

	pending := writePolicy(t, l.dir, "pending.yaml", "version: 1\nrules:\n  - {id: ask, action: pending_approval, tool: echo}\n  - {id: no-fail, action: deny, tool: fail}\n  - {id: gate-add, action: pending_approval, tool: add}\n")
	code, out, _ = l.in("recheck", "--policy", pending)
	if code != 1 || !strings.Contains(out, "call-1  echo") || !strings.Contains(out, "newly pending") || !strings.Contains(out, "1 would change (0 newly blocked, 0 newly allowed, 1 newly pending, 0 reclassified)") {
		t.Errorf("pending: exit %d\n%s", code, out)
	}
}

func TestRecheckUnreadable(t *testing.T) {
	dir := t.TempDir()
	good := writePolicy(t, dir, "good.yaml", "version: 1\n")
	bad := writePolicy(t, dir, "bad.yaml", "version: 1\nrules:\n  - id: x\n    action: maybe\n")
	none := filepath.Join(dir, "none")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"recheck"}, 2, "recheck: --policy is required"},
		{[]string{"recheck", "--policy", good, "a.>"}, 2, `recheck: bad SESSION "a.>"`},
		{[]string{"recheck", "--policy", filepath.Join(dir, "missing.yaml")}, 2, "could not read policy"},
		{[]string{"recheck", "--policy", bad}, 2, "could not load policy: " + bad + ":4: rules[0].action"},
		{[]string{"recheck", "--policy", good, "--state-dir", none}, 2, "no event stream in " + none},
	}
	for _, c := range cases {
		code, out, stderr := cmd(t, nil, c.args...)
		if code != c.code || out != "" || !strings.Contains(stderr, "aegis: error: "+c.want) || !strings.Contains(stderr, "aegis: hint: ") {
			t.Errorf("aegis %q: exit %d, stdout %q, stderr %q; want %d and %q", c.args, code, out, stderr, c.code, c.want)
		}
	}
	// A stream without that session.
	state := filepath.Join(dir, "state")
	if code, _, stderr := cmd(t, nil, "events", "append", "--state-dir", state, `{"text":"x"}`); code != 0 {
		t.Fatal(stderr)
	}
	code, _, stderr := cmd(t, nil, "recheck", "--policy", good, "--state-dir", state, "01M8NT0JSNKCRH3HWPGW88AMBV")
	if code != 2 || !strings.Contains(stderr, "no session 01M8NT0JSNKCRH3HWPGW88AMBV in the stream") {
		t.Errorf("unknown session: exit %d, stderr %q", code, stderr)
	}
	code, out, _ := cmd(t, nil, "recheck", "--policy", good, "--state-dir", state)
	if code != 0 || !strings.Contains(out, "0 call(s) in 0 session(s): no verdict would change") {
		t.Errorf("empty stream: exit %d, %q", code, out)
	}
}

// recheck decides a rule's condition on the arguments the host sent, as
// the proxy did live: under the recorded policy nothing changes, and under
// one whose condition reads the arguments otherwise exactly the calls it
// names change.
func TestRecheckEvaluatesConditionsOnTheArguments(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "version: 1\ndefault: allow\nrules:\n  - id: no-secrets\n    action: deny\n    tool: echo\n    when: args.message.contains(\"secret\")\n")
	w := l.wrap(false)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"hello"}}`); !strings.Contains(a, "hello") {
		t.Fatalf("hello: %s", a)
	}
	if a := w.call(2, "tools/call", `{"name":"echo","arguments":{"message":"my secret"}}`); !strings.Contains(a, "-32042") {
		t.Fatalf("secret: %s", a)
	}
	w.finish()
	code, out, stderr := l.in("recheck", "--policy", l.policy)
	if code != 0 || !strings.Contains(out, "2 call(s) in 1 session(s): no verdict would change (2 unchanged") {
		t.Errorf("same policy: exit %d, stderr %q\n%s", code, stderr, out)
	}
	other := writePolicy(t, l.dir, "other.yaml", "version: 1\ndefault: allow\nrules:\n  - id: no-hello\n    action: deny\n    tool: echo\n    when: args.message == \"hello\"\n")
	code, out, _ = l.in("recheck", "--policy", other, "--json")
	var res struct {
		Changes []struct {
			Change string `json:"change"`
			Now    struct {
				Rule string `json:"rule"`
			} `json:"now"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || len(res.Changes) != 2 {
		t.Fatalf("other policy: exit %d, %v\n%s", code, err, out)
	}
	if res.Changes[0].Change != "newly_blocked" || res.Changes[0].Now.Rule != "no-hello" || res.Changes[1].Change != "newly_allowed" {
		t.Errorf("changes %+v; want hello newly blocked by no-hello, the secret newly allowed", res.Changes)
	}
}
