//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAllowedAccessAndTheFact(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	key := filepath.Join(l.outside, "signing.key")
	if err := os.WriteFile(key, []byte("seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prof := l.profile(ps)
	prof.Protect = []string{key}

	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"read_inside_a_read_grant", []string{"read", l.readFile}, "ok"},
		{"write_inside_a_write_grant", []string{"write", filepath.Join(l.writeDir, "out")}, "ok"},
		{"discard_output_to_dev_null", []string{"write", "/dev/null"}, "ok"},
		{"no_new_privs_and_seccomp_hold_after_exec", []string{"nnp"}, "ok"},
		{"no_descriptor_but_stdio_is_inherited", []string{"fds"}, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runConfined(t, prof, append([]string{ps.probe}, tc.argv...)...)
			if r.outcome() != tc.want {
				t.Fatalf("%v = %s, want %s", tc.argv, r.outcome(), tc.want)
			}
			switch tc.argv[0] {
			case "nnp":
				if r.out != "ok no_new_privs=1 seccomp=2" {
					t.Fatalf("after exec: %q, want no_new_privs=1 seccomp=2 (filter mode)", r.out)
				}
			case "fds":
				if r.out != "ok" {
					t.Fatalf("server inherited descriptors above stderr: %q", r.out)
				}
			}
		})
	}

	r := runConfined(t, prof, ps.probe, "true")
	f := r.fact
	if r.err != nil {
		t.Fatal(r.err)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"landlock_abi 7", f.LandlockABI == requiredABI},
		{"landlock_fully_enforced", f.LandlockFullyEnforced},
		{"landlock_tcp_restricted", f.LandlockTCPRestricted},
		{"seccomp_applied", f.SeccompApplied},
		{"seccomp_network_denied", f.SeccompNetworkDenied},
		{"io_uring_denied", f.IOURingDenied},
		{"keyrings_denied", f.KeyringsDenied && slices.Contains(f.DeniedSyscalls, "keyctl") &&
			slices.Contains(f.DeniedSyscalls, "add_key") && slices.Contains(f.DeniedSyscalls, "request_key")},
		{"session_keyring_fresh", f.SessionKeyringFresh},
		{"no_new_privs", f.NoNewPrivs},
		{"protected_verified", f.ProtectedVerified},
		{"no degradations", len(f.Degradations) == 0},
		{"exec_path", f.ExecPath == ps.probe},
		{"protected_paths", slices.Equal(f.ProtectedPaths, []string{key})},
		{"i386 refused", f.SyscallABIs["i386"] == "refused" && f.SyscallABIs["x32"] == "refused" && f.SyscallABIs["x86_64"] == "filtered"},
		{"socket denied", slices.Contains(f.DeniedSyscalls, "socket")},
		{"net_hosts_enforced false", !f.NetHostsEnforced},
		{"caps dropped", !slices.Contains(f.CapsKept, "cap_sys_rawio") && !slices.Contains(f.CapsKept, "cap_sys_admin")},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("fact: %s does not hold", c.what)
		}
	}
	var devNull, readRule *FSRuleFact
	for i, rule := range f.FSRules {
		switch rule.Path {
		case "/dev/null":
			devNull = &f.FSRules[i]
		case l.readDir:
			readRule = &f.FSRules[i]
		}
	}
	if devNull == nil || devNull.Origin != "implicit" || slices.Contains(devNull.Access, "execute") {
		t.Errorf("fact: /dev/null rule %+v, want implicit read/write without execute", devNull)
	}
	if readRule == nil || !slices.Equal(readRule.Access, []string{"execute", "read_file", "read_dir"}) {
		t.Errorf("fact: read grant rule %+v", readRule)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), ":null") {
		t.Errorf("fact JSON holds a null: %s", b)
	}
	t.Logf("fact: %s", b)
}

func TestServerCapabilitiesAfterExec(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	r := runConfined(t, Profile{ReadPaths: []string{ps.dir}}, ps.probe, "caps")
	var want uint64
	for c := range keptCapabilities() {
		want |= 1 << c
	}
	if r.out != fmt.Sprintf("ok effective=%#x", want) {
		t.Fatalf("root server capabilities: %q, want effective=%#x", r.out, want)
	}
}

func TestMissingGrant(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	missing := filepath.Join(l.root, "missing")
	marker := filepath.Join(l.writeDir, "ran")
	prof := l.profile(ps)
	prof.ReadPaths = append(prof.ReadPaths, missing)

	t.Run("refuses_without_best_effort", func(t *testing.T) {
		r := runConfined(t, prof, ps.probe, "write", marker)
		if !isErrRefused(r.err) || !strings.Contains(r.err.Error(), missing) {
			t.Fatalf("err %v, want a refusal naming %s", r.err, missing)
		}
		assertAbsent(t, marker)
	})
	t.Run("runs_with_best_effort_and_records_it", func(t *testing.T) {
		be := prof
		be.BestEffort = true
		r := runConfined(t, be, ps.probe, "write", marker)
		if r.outcome() != "ok" {
			t.Fatalf("best effort: %s", r.outcome())
		}
		if !hasDegradation(r.fact, missing) || r.fact.LandlockFullyEnforced {
			t.Fatalf("fact %+v: want a degradation naming %s and not fully enforced", r.fact, missing)
		}
	})
	t.Run("helper_refuses_a_grant_removed_after_validation", func(t *testing.T) {
		marker := filepath.Join(l.writeDir, "ran-after-removal")
		gone := filepath.Join(l.root, "gone")
		if err := os.Mkdir(gone, 0o755); err != nil {
			t.Fatal(err)
		}
		p := l.profile(ps)
		p.ReadPaths = append(p.ReadPaths, gone)
		c, err := Command(context.Background(), selfExe(t), p, []string{ps.probe, "write", marker})
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(gone)
		f, err := c.Start()
		if !isErrRefused(err) || f.Refused == "" || f.LandlockABI != 0 || f.SeccompApplied || f.NoNewPrivs {
			t.Fatalf("Start = %+v, %v; want a refusal fact claiming nothing", f, err)
		}
		if c.Cmd.ProcessState.ExitCode() != ExitRefused {
			t.Fatalf("helper exit %d, want %d", c.Cmd.ProcessState.ExitCode(), ExitRefused)
		}
		assertAbsent(t, marker)
	})
}

func TestProtectedPaths(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	stateDir := filepath.Join(l.writeDir, "state")
	key := filepath.Join(stateDir, "signing.key")
	sibling := filepath.Join(l.writeDir, "notes")
	for _, d := range []string{stateDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{key, sibling} {
		if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	prof := l.profile(ps)
	prof.Protect = []string{key}

	t.Run("reading_a_protected_key_inside_a_granted_parent_is_refused_at_validate", func(t *testing.T) {
		err := prof.Validate()
		if !isErrRefused(err) || !strings.Contains(err.Error(), fmt.Sprintf("grant %q covers protected path %q", l.writeDir, key)) {
			t.Fatalf("Validate = %v, want it to name the grant and the protected path", err)
		}
	})
	t.Run("a_grant_through_a_symlink_covers_the_same_key", func(t *testing.T) {
		link := filepath.Join(l.root, "link")
		if err := os.Symlink(stateDir, link); err != nil {
			t.Fatal(err)
		}
		p := Profile{ReadPaths: []string{link}, Protect: []string{key}}
		if err := p.Validate(); !isErrRefused(err) {
			t.Fatalf("Validate = %v, want a refusal", err)
		}
	})
	t.Run("a_grant_inside_a_protected_directory_is_refused", func(t *testing.T) {
		p := Profile{ReadPaths: []string{key}, Protect: []string{stateDir}}
		if err := p.Validate(); !isErrRefused(err) || !strings.Contains(err.Error(), "inside protected path") {
			t.Fatalf("Validate = %v", err)
		}
	})
	t.Run("a_second_hard_link_to_the_key_is_refused", func(t *testing.T) {
		other := filepath.Join(l.readDir, "key-link")
		if err := os.Link(key, other); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(other)
		p := Profile{Protect: []string{key}}
		if err := p.Validate(); !isErrRefused(err) || !strings.Contains(err.Error(), "hard links") {
			t.Fatalf("Validate = %v", err)
		}
	})
	t.Run("best_effort_narrows_the_grant_around_the_key", func(t *testing.T) {
		be := prof
		be.BestEffort = true
		if err := be.Validate(); err != nil {
			t.Fatal(err)
		}
		r := runConfined(t, be, ps.probe, "read-key", key)
		if r.outcome() != "EACCES" {
			t.Fatalf("read protected key = %s, want EACCES", r.outcome())
		}
		if !r.fact.ProtectedVerified || !hasDegradation(r.fact, "narrowed") || r.fact.LandlockFullyEnforced {
			t.Fatalf("fact %+v: want protected_verified, a narrowing degradation, not fully enforced", r.fact)
		}
		if r := runConfined(t, be, ps.probe, "read", sibling); r.outcome() != "ok" {
			t.Fatalf("read sibling of the key = %s, want ok", r.outcome())
		}
		if r := runConfined(t, be, ps.probe, "write", filepath.Join(l.writeDir, "new")); r.outcome() != "EACCES" {
			t.Fatalf("create in the narrowed directory = %s, want EACCES (its own rule is gone)", r.outcome())
		}
		if r := runConfined(t, be, ps.probe, "write", sibling); r.outcome() != "ok" {
			t.Fatalf("write the sibling = %s, want ok", r.outcome())
		}
	})
}

func TestExecOutsideTheGrants(t *testing.T) {
	requireConfinement(t)
	dynamic := "/bin/true"
	if _, err := os.Stat(dynamic); err != nil {
		t.Skip("no /bin/true")
	}
	t.Run("a_server_outside_every_grant_is_refused_before_restricting", func(t *testing.T) {
		r := runConfined(t, Profile{}, dynamic)
		if !isErrRefused(r.err) || !strings.Contains(r.err.Error(), "outside every grant") {
			t.Fatalf("err %v", r.err)
		}
	})
	t.Run("exec_support_starts_a_dynamically_linked_server", func(t *testing.T) {
		r := runConfined(t, Profile{ExecSupport: true}, dynamic)
		if r.err != nil || r.exit != 0 {
			t.Fatalf("err %v exit %d stderr %q", r.err, r.exit, r.stderr)
		}
	})
	t.Run("a_failed_exec_after_the_go_ahead_is_reported", func(t *testing.T) {
		dir := t.TempDir()
		script := filepath.Join(dir, "server.sh")
		if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := runConfined(t, Profile{ReadPaths: []string{dir}}, script) // /bin/sh not granted
		if r.err == nil || !strings.Contains(r.err.Error(), "exec") || r.exit != ExitExecFailed {
			t.Fatalf("err %v exit %d, want an exec error and exit %d", r.err, r.exit, ExitExecFailed)
		}
	})
}

func TestTheServerRunsOnlyAfterTheGoAhead(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	marker := filepath.Join(l.writeDir, "ran")
	c, err := Command(context.Background(), selfExe(t), l.profile(ps), []string{ps.probe, "write", marker})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // give a wrongly eager helper time to exec
	assertAbsent(t, marker)
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	if code := c.Cmd.ProcessState.ExitCode(); code != ExitRefused {
		t.Fatalf("aborted helper exit %d, want %d", code, ExitRefused)
	}
	assertAbsent(t, marker)
	if err := c.Go(); err == nil {
		t.Fatal("Go after Abort succeeded")
	}
}

func TestTheProfileStaysOutOfArgvAndEnvironment(t *testing.T) {
	grant := filepath.Join(t.TempDir(), "secret-grant-name")
	if err := os.Mkdir(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	p := Profile{ReadPaths: []string{grant}, Protect: []string{"/nonexistent/aegis/key"}, BestEffort: true}
	c, err := Command(context.Background(), "/proc/self/exe", p, []string{"/bin/true", "arg"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/proc/self/exe", HelperArg, "--", "/bin/true", "arg"}; !slices.Equal(c.Cmd.Args, want) {
		t.Fatalf("argv %q, want %q", c.Cmd.Args, want)
	}
	for _, kv := range c.Cmd.Environ() {
		if strings.Contains(kv, "secret-grant-name") || strings.Contains(kv, "aegis/key") {
			t.Fatalf("profile leaked into the environment: %q", kv)
		}
	}
}

func assertAbsent(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists (err %v): the server ran", path, err)
	}
}

func selfExe(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}
