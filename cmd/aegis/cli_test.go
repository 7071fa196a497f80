package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// run runs the CLI in-process and returns exit code, stdout and stderr.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := m.Run(context.Background(), args)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2WithHint(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"frob"}, `aegis: error: unknown command "frob"`},
		{"unknown flag", []string{"events", "list", "--bogus"}, "aegis: error: events list: flag provided but not defined: -bogus"},
		{"version with argument", []string{"version", "x"}, "aegis: error: version takes no arguments"},
		{"events without subcommand", []string{"events"}, "aegis: error: events: missing subcommand"},
		{"unknown kind", []string{"events", "append", "--state-dir", "/nonexistent", "--kind", "approval.forged"}, `unknown kind "approval.forged"`},
		{"hub without subcommand", []string{"hub"}, "hub: missing subcommand"},
		{"hub enroll without the hub", []string{"hub", "enroll", "laptop-1"}, "hub enroll: needs one HOST and --hub"},
		{"hub enroll of a host that cannot be a domain", []string{"hub", "enroll", "a.b", "--hub", "nats://127.0.0.1:1"}, `hub enroll: name "a.b": use letters`},
		{"hub approver without a name", []string{"hub", "approver"}, "hub approver: needs a NAME"},
		{"hub approver of a name that cannot be a key file", []string{"hub", "approver", "../alice"}, `hub approver: name "../alice"`},
		{"approvals of a host without a hub", []string{"approvals", "--host", "laptop-1"}, "--hub-creds, --hub-nkey, --hub-ca and --host need --hub"},
		{"approve over the hub with a state directory", []string{"approve", "apr-1", "--hub", "nats://127.0.0.1:1", "--state-dir", "/tmp"}, "approve --hub asks the hosts over the hub: no --state-dir"},
		{"approve over the hub of a host that cannot be a domain", []string{"approve", "apr-1", "--hub", "nats://127.0.0.1:1", "--host", "a.b"}, `--host "a.b"`},
		{"a host without a hub", []string{"wrap", "--audit", "a.aarl", "--signing-key", "k", "--host", "x", "--", "true"}, "--hub-creds, --hub-nkey, --hub-ca and --host need --hub"},
		{"a host name that cannot be a domain", []string{"wrap", "--audit", "a.aarl", "--signing-key", "k", "--hub", "nats://127.0.0.1:1", "--host", "a.b", "--", "true"}, `host name "a.b" cannot name a host of a fleet`},
		{"prove without a proof kind", []string{"prove"}, "prove: missing inclusion, consistency or anchor"},
		{"prove inclusion without a line", []string{"prove", "inclusion", "calls.aarl"}, "prove inclusion: needs --line N"},
		{"session id that injects subjects", []string{"events", "list", "--session", "a.>"}, `bad --session "a.>"`},
		{"help for unknown command", []string{"help", "frob"}, `unknown command or topic "frob"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, nil, tc.args...)
			if code != 2 {
				t.Errorf("exit = %d, want 2 (stderr %q)", code, stderr)
			}
			if stdout != "" {
				t.Errorf("usage error wrote to stdout: %q", stdout)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tc.want)
			}
			if tc.args != nil && !strings.Contains(stderr, "aegis: hint: ") {
				t.Errorf("stderr = %q, want a hint", stderr)
			}
		})
	}
}

func TestHelpAndVersionGoToStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "events"}, {"help", "help"}, {"version"}, {"--version"}, {"-v"},
		{"version", "--help"}, {"events", "list", "-h"}} {
		code, stdout, stderr := run(t, nil, args...)
		if code != 0 || stdout == "" || stderr != "" {
			t.Errorf("aegis %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}

func TestNoStateDirSaysWhatToDo(t *testing.T) {
	code, _, stderr := run(t, map[string]string{}, "events", "list")
	if code != 1 || !strings.Contains(stderr, "aegis: error: no state directory") || !strings.Contains(stderr, "aegis: hint: pass --state-dir") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestEventsAppendThenList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	code, out, stderr := run(t, nil, "events", "append", "--state-dir", dir, `{"text":"hi"}`)
	if code != 0 || out != "1.0\n" {
		t.Fatalf("append: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = run(t, nil, "events", "append", "--state-dir", dir, "--kind", "frame.c2s", `{"bytes":"aGk="}`)
	if code != 0 || out != "2.0\n" {
		t.Fatalf("append frame: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = run(t, nil, "events", "list", "--state-dir", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("list: exit %d, %d lines: %q", code, len(lines), out)
	}
	f := strings.Fields(lines[1])
	if f[0] != "2.0" || f[3] != "frame.c2s" || f[4] != "2" || f[6] != `"hi"` {
		t.Errorf("list line = %q", lines[1])
	}
	code, _, stderr = run(t, nil, "events", "append", "--state-dir", dir, `[1]`)
	if code != 2 || !strings.Contains(stderr, "payload") {
		t.Errorf("append of a non-object payload: exit %d, stderr %q", code, stderr)
	}
}

// aegis version names the module version and VCS revision the binary was
// built from, so a user can tell which build they run.
func TestVersionLineNamesModuleAndRevision(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"a tagged go install", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "aegis " + Version + " · module v1.2.3 · go"},
		{"a build from a changed checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}},
			"aegis " + Version + " · module (devel) · revision 0123456789ab (modified) · go"},
		{"no build info", nil, "aegis " + Version + " · module unknown · go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := versionLine(func() (*debug.BuildInfo, bool) { return tc.bi, tc.bi != nil })
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("versionLine = %q, want it to start %q", got, tc.want)
			}
		})
	}
}

// An error says its cause once, then one hint, and names no internal
// package; testdata/errors holds each one as the user sees it.
func TestErrorsSayTheCauseOnce(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badKey := write("bad.key", "zz\n", 0o600)
	looseKey := write("loose.key", strings.Repeat("ab", 32)+"\n", 0o644)
	key := write("signing.key", strings.Repeat("cd", 32)+"\n", 0o600)
	policy := write("policy.yaml", "version: 1\nrules:\n  - id: a\n    action: deny\n     tool: x\n", 0o600)
	gateway := write("aegis.yaml", "version: 1\nservers:\n  a:\n    command: x\n   args: [1]\n", 0o600)
	record, err := filepath.Abs(filepath.Join("..", "..", "verifier", "testdata", "corpus", "verified.aarl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		cause  string
		golden string
	}{
		{"a key that is not a public key", []string{"verify", "--key", "zz", "x.aarl"}, "expected 64 lowercase hex characters", "verify-key-not-hex"},
		{"a client that took wrap's --", []string{"wrap", "--audit", "a", "--signing-key", "k", "server"}, "no positional arguments", "wrap-without-dashes"},
		{"a signing key that is not one", []string{"wrap", "--audit", "a.aarl", "--signing-key", badKey, "--", "true"}, "malformed key file", "signing-key-malformed"},
		{"a signing key others can read", []string{"wrap", "--audit", "a.aarl", "--signing-key", looseKey, "--", "true"}, "chmod 600", "signing-key-readable"},
		{"a policy indented wrong", []string{"wrap", "--audit", filepath.Join(dir, "a.aarl"), "--signing-key", key, "--policy", policy, "--", "true"}, "policy.yaml:5: ", "policy-yaml-line"},
		{"a gateway file indented wrong", []string{"gateway", "--config", gateway, "--audit", filepath.Join(dir, "a.aarl"), "--signing-key", key}, "aegis.yaml:5: ", "gateway-yaml-line"},
		{"a record verified without a key", []string{"verify", record}, "proves nothing about who wrote it", "verify-unpinned"},
		{"a command that does not exist", []string{"frob"}, `unknown command "frob"`, "unknown-command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, stderr := run(t, map[string]string{"HOME": dir}, tc.args...)
			if n := strings.Count(stderr, tc.cause); n != 1 {
				t.Errorf("the cause appears %d times: %q", n, stderr)
			}
			if n := strings.Count(stderr, "aegis: hint: "); n != 1 {
				t.Errorf("%d hints: %q", n, stderr)
			}
			for _, pkg := range []string{"verifier:", "projector:", "schemas:", "events:", "sandbox:", "proxy:"} {
				if strings.Contains(stderr, pkg) {
					t.Errorf("names the package %s: %q", pkg, stderr)
				}
			}
			got := strings.ReplaceAll(strings.ReplaceAll(stderr, dir, "<DIR>"), record, "<RECORD>")
			golden(t, filepath.Join("errors", tc.golden+".golden"), got)
		})
	}
}

// Every command follows one table of exit codes (docs/ERRORS.md): a
// mistake on the command line is 2 everywhere, verify included, so that a
// script reading verify's 1 as Tampered is never fooled by a typo.
func TestEveryCommandExitsTwoOnAUsageError(t *testing.T) {
	m := &Main{}
	for _, c := range m.commands() {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := run(t, map[string]string{"HOME": t.TempDir()}, c.name, "--no-such-flag")
			if code != exitUsage || !strings.Contains(stderr, "aegis: error: ") {
				t.Errorf("aegis %s --no-such-flag: exit %d, want %d\n%s", c.name, code, exitUsage, stderr)
			}
		})
	}
	for _, args := range [][]string{
		{"verify", "--key", "zz", "x.aarl"},
		{"verify"},
		{"verify", "--proof", "p.json", "x.aarl"},
		{"frob"},
	} {
		if code, _, stderr := run(t, nil, args...); code != exitUsage {
			t.Errorf("aegis %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
}
