//go:build linux

package proxy_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// listen opens a loopback TCP listener that accepts and closes.
func listen(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// confinement returns the confinement member of the record's first open line.
func confinement(t *testing.T, audit string) map[string]any {
	t.Helper()
	h := &harness{t: t, audit: audit}
	opens := ofType(h.lines(), "open")
	if len(opens) == 0 {
		t.Fatal("no open line")
	}
	v, ok := opens[len(opens)-1].Get("confinement")
	if !ok {
		t.Fatal("the open line has no confinement member")
	}
	m, _ := v.(map[string]any)
	return m
}

// Escape attempts by a real probe run as the server of aegis wrap
// --confine. Each row is named after the attack it stops; the controls
// show the same probe succeeds where it is allowed.
func TestWrapConfineStopsEscapes(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	needRoot(t)
	c := newCLI(t)
	probe := bin(t, "probe")
	probeDir := filepath.Dir(probe)
	ro := filepath.Join(c.dir, "ro")
	rw := filepath.Join(c.dir, "rw")
	os.Mkdir(ro, 0o755)
	os.Mkdir(rw, 0o755)
	os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o644)
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("secret"), 0o644)
	open := listen(t)
	closed := listen(t)
	grants := []string{"--allow-read", probeDir, "--allow-read", ro, "--allow-write", rw}
	// A unix socket outside the grants, listening.
	sock := filepath.Join(t.TempDir(), "outside.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	// The i386 probe needs gcc (it is static C using int 0x80).
	probe32 := ""
	if gcc, err := exec.LookPath("gcc"); err == nil {
		probe32 = filepath.Join(probeDir, "probe32")
		if out, err := exec.Command(gcc, "-O0", "-static", "-fno-pie", "-no-pie", "-o", probe32, "../sandbox/testdata/probe32.c").CombinedOutput(); err != nil {
			t.Fatalf("build probe32: %v\n%s", err, out)
		}
		// Without an i386 entry in the kernel, int $0x80 faults before any
		// system call: there is no such path to escape through here.
		if err := exec.Command(probe32, "entry").Run(); err != nil {
			t.Logf("this kernel does not take int $0x80 (%v); the i386 cases are skipped", err)
			probe32 = ""
		}
	}
	// A key in the user keyring, readable by the uid (the Kerberos-cache
	// case): the confined server must not read it.
	keyDesc := "aegis-wrap-escape-test-" + strconv.Itoa(os.Getpid())
	keyID, err := unix.AddKey("user", keyDesc, []byte("secret"), unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		t.Fatalf("add a key to the user keyring: %v", err)
	}
	defer unix.KeyctlInt(unix.KEYCTL_INVALIDATE, keyID, 0, 0, 0)
	if err := unix.KeyctlSetperm(keyID, 0x3f0b0000); err != nil { // possessor all; user view, read, search
		t.Fatal(err)
	}
	netGrant := append(append([]string{}, grants...), "--allow-net", "127.0.0.1:"+strconv.Itoa(open))
	cases := []struct {
		name   string
		grants []string
		probe  []string
		ok     bool
	}{
		{"control: read inside a read grant", grants, []string{"read", filepath.Join(ro, "f")}, true},
		{"control: write inside a write grant", grants, []string{"write", filepath.Join(rw, "new")}, true},
		{"read outside the grants", grants, []string{"read", outside}, false},
		{"read a key in the user keyring", grants, []string{"key-search", "user", keyDesc}, false},
		{"reach the persistent keyring", grants, []string{"keyring-persistent"}, false},
		{"write to a read-only grant", grants, []string{"write", filepath.Join(ro, "f")}, false},
		{"TCP connect with no --allow-net", grants, []string{"connect", "127.0.0.1:" + strconv.Itoa(open)}, false},
		{"UDP send with no --allow-net", grants, []string{"udp-send", "127.0.0.1:" + strconv.Itoa(open)}, false},
		{"io_uring_setup", grants, []string{"io-uring-setup"}, false},
		{"unix socket connect outside the grants", grants, []string{"unix-connect", sock}, false},
		{"i386 connect through int 0x80 with no --allow-net", grants, []string{"@probe32", "connect", strconv.Itoa(open)}, false},
		{"i386 connect through int 0x80 to the granted port", netGrant, []string{"@probe32", "connect", strconv.Itoa(open)}, false},
		{"control: TCP connect to the granted port", netGrant, []string{"connect", "127.0.0.1:" + strconv.Itoa(open)}, true},
		{"TCP connect to another port", netGrant, []string{"connect", "127.0.0.1:" + strconv.Itoa(closed)}, false},
		{"MPTCP connect to the granted port", netGrant, []string{"connect-mptcp", "127.0.0.1:" + strconv.Itoa(open)}, false},
		{"UDP send with a TCP grant", netGrant, []string{"udp-send", "127.0.0.1:" + strconv.Itoa(open)}, false},
		{"read the signing key (best effort narrows the grant around it)", []string{"--allow-read", probeDir, "--allow-read", c.dir, "--best-effort"}, []string{"read", c.key}, false},
		{"read the state directory's lock", []string{"--allow-read", probeDir, "--allow-read", c.dir, "--best-effort"}, []string{"read", filepath.Join(c.state, "lock")}, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			audit := filepath.Join(c.dir, "confine-"+strconv.Itoa(i)+".aarl")
			args := append([]string{"wrap", "--audit", audit, "--signing-key", c.key, "--state-dir", c.state, "--confine"}, tc.grants...)
			if tc.probe[0] == "@probe32" {
				if probe32 == "" {
					t.Skip("no i386 probe: no gcc, or a kernel without int $0x80")
				}
				args = append(append(args, "--", probe32), tc.probe[1:]...)
			} else {
				args = append(append(args, "--", probe), tc.probe...)
			}
			out, stderr, code := c.aegis(args...)
			if tc.ok && (code != 0 || !strings.HasPrefix(out, "ok")) {
				t.Fatalf("allowed attempt failed: exit %d, out %q, stderr %q", code, out, stderr)
			}
			if !tc.ok && (code != 1 || !strings.HasPrefix(out, "errno=")) {
				t.Fatalf("escape was not stopped by the kernel: exit %d, out %q, stderr %q", code, out, stderr)
			}
			vout, _, vcode := c.aegis("verify", "--key", c.pub, audit)
			if vcode != 0 {
				t.Fatalf("record: %s", vout)
			}
			f := confinement(t, audit)
			bestEffort := strings.Contains(strings.Join(tc.grants, " "), "--best-effort")
			if f["seccomp_applied"] != true || f["landlock_fully_enforced"] != !bestEffort {
				t.Errorf("fact: seccomp_applied %v, landlock_fully_enforced %v (best effort %v)", f["seccomp_applied"], f["landlock_fully_enforced"], bestEffort)
			}
			if d, _ := f["degradations"].([]any); bestEffort != (len(d) > 0) {
				t.Errorf("degradations %v with best effort %v", d, bestEffort)
			}
			wantNet := !strings.Contains(strings.Join(tc.grants, " "), "--allow-net")
			if f["seccomp_network_denied"] != wantNet {
				t.Errorf("seccomp_network_denied %v, want %v", f["seccomp_network_denied"], wantNet)
			}
		})
	}
}

// A grant that would expose aegis's own files is refused unless
// --best-effort; a missing grant path likewise, and the record says what
// was degraded.
func TestWrapConfineRefusesUnlessBestEffort(t *testing.T) {
	needRoot(t)
	c := newCLI(t)
	probe := bin(t, "probe")
	missing := filepath.Join(c.dir, "does-not-exist")
	for _, tc := range []struct {
		name, want string
		grants     []string
	}{
		{"grant covering the signing key", "covers protected path", []string{"--allow-read", c.dir}},
		{"missing granted path", "does-not-exist", []string{"--allow-read", missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			audit := filepath.Join(c.dir, strings.ReplaceAll(tc.name, " ", "-")+".aarl")
			base := append([]string{"wrap", "--audit", audit, "--signing-key", c.key, "--state-dir", c.state, "--confine", "--allow-read", filepath.Dir(probe)}, tc.grants...)
			_, stderr, code := c.aegis(append(base, "--", probe, "true")...)
			if code != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--best-effort") {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if _, err := os.Stat(audit); err == nil {
				t.Fatal("a refused confinement left a record claiming a session")
			}
			out, stderr, code := c.aegis(append(append(base, "--best-effort"), "--", probe, "true")...)
			if code != 0 || !strings.HasPrefix(out, "ok") || !strings.Contains(stderr, "confinement degraded") {
				t.Fatalf("--best-effort: exit %d, out %q, stderr %q", code, out, stderr)
			}
			f := confinement(t, audit)
			if d, _ := f["degradations"].([]any); len(d) == 0 {
				t.Fatalf("the record does not list the degradation: %v", f)
			}
		})
	}
}

// The official reference server still works confined, and the signed
// record says how.
func TestWrapConfineEverythingServer(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	needRoot(t)
	argv := mcptest.EverythingServer(t)
	c := newCLI(t)
	pkgRoot := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(argv[1])))) // …/node_modules
	wrap := append([]string{bin(t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state,
		"--confine", "--allow-exec-support", "--allow-read", filepath.Dir(argv[0]), "--allow-read", pkgRoot, "--"}, argv...)
	ctx := t.Context()
	cs, err := mcptest.Connect(ctx, wrap, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list confined: %v", err)
	}
	cs.Close()
	if len(tools.Tools) == 0 {
		t.Fatal("no tools")
	}
	if out, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: %s", out)
	}
	f := confinement(t, c.audit)
	b, _ := json.Marshal(f)
	if f["seccomp_network_denied"] != true || f["landlock_fully_enforced"] != true {
		t.Fatalf("fact %s", b)
	}
}

// A confined server gets its environment through the confinement helper,
// which execs it with exactly what the gateway gave the helper: the
// minimal base and its own env, nothing else of aegis's.
func TestGatewayConfinedServerEnvironment(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	needRoot(t)
	every := mcptest.EverythingServer(t)
	pkgRoot := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(every[1])))) // …/node_modules
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-confined\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	g := c.startGateway(`version: 1
servers:
  c:
    command: `+every[0]+`
    args: `+quoteArgs(every[1:])+`
    env: {AEGIS_TEST_TOKEN: {file: `+tokenFile+`}}
    confine:
      allow_read: [`+filepath.Dir(every[0])+`, `+pkgRoot+`]
      allow_exec_support: true
profiles:
  p:
    allow: ["c.*"]
activation:
  default_profile: p
`, gatewayEnv(t, "AEGIS_TEST_UNLISTED=unlisted"))
	g.initialize()
	a := g.call(1, "tools/call", `{"name":"c__get-env","arguments":{}}`)
	if !strings.Contains(a, `\"AEGIS_TEST_TOKEN\": \"tok-confined\"`) || strings.Contains(a, "AEGIS_TEST_UNLISTED") || !strings.Contains(a, `\"PATH\"`) {
		t.Errorf("the confined server's environment: %s", a)
	}
	if code, _ := g.finish(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, g.stderr)
	}
	evs, _ := c.events()
	if exits := payloads(evs, "child.exited"); len(exits) != 1 || exits[0]["code"] != 0.0 {
		t.Errorf("child.exited: %v", exits)
	}
}
