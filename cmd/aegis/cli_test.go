package main

import (
	"bytes"
	"context"
	"path/filepath"
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
		{"session id that injects subjects", []string{"events", "list", "--session", "a.>"}, `bad --session "a.>"`},
		{"help for unknown command", []string{"help", "frob"}, `unknown command "frob"`},
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
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "events"}, {"version"}, {"--version"}, {"events", "list", "-h"}} {
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
