package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leftover is the process a spawner server leaves behind: it ignores
// SIGTERM and appends to its file every 10 ms.
type leftover struct {
	t   *testing.T
	out string
	pid int
}

func newLeftover(t *testing.T, dir, name string) *leftover {
	l := &leftover{t: t, out: filepath.Join(dir, name)}
	t.Cleanup(func() {
		if l.pid > 0 && l.exists() {
			if p, err := os.FindProcess(l.pid); err == nil {
				p.Kill() // a failed test leaves nothing running
			}
		}
	})
	return l
}

// spawner returns argv running server through the spawner fixture.
func (l *leftover) spawner(flags []string, server ...string) []string {
	argv := append([]string{bin(l.t, "spawner"), "-out", l.out}, flags...)
	return append(append(argv, "--"), server...)
}

// started waits until the leftover process has written its pid: up to
// 90 s, as the spawner waits up to 60 s for it before it runs the server
// (a make test run, beside the 16 MiB floods' fsyncs, once saw it take
// longer than the 20 s it had).
func (l *leftover) started() int {
	l.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, _ := os.ReadFile(l.out)
		if line, _, ok := bytes.Cut(b, []byte("\n")); ok {
			pid, err := strconv.Atoi(string(line))
			if err != nil {
				l.t.Fatalf("leftover pid line %q", line)
			}
			l.pid = pid
			return pid
		}
		why, _ := os.ReadFile(l.out + ".err")
		if len(why) > 0 {
			l.t.Fatalf("the server's background process did not start: %s", why)
		}
		if time.Now().After(deadline) {
			l.t.Fatal("the server's background process never started, and the spawner reported nothing: something killed it")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exists reports whether the leftover's pid is still a spawner process,
// running or a zombie nobody reaped.
func (l *leftover) exists() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", l.pid))
	return err == nil && strings.Contains(string(b), "(spawner)")
}

// requireGone fails unless the leftover process is gone, reaped, and its
// file no longer grows.
func (l *leftover) requireGone() {
	l.t.Helper()
	l.started()
	if l.exists() {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", l.pid))
		l.t.Errorf("the server's background process %d outlived the session: %s", l.pid, b)
	}
	size := func() int64 {
		fi, err := os.Stat(l.out)
		if err != nil {
			l.t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	time.Sleep(100 * time.Millisecond)
	if after := size(); after != before {
		l.t.Errorf("the server's background process still writes after the session: %d -> %d bytes", before, after)
	}
}

// A server's background process that ignores SIGTERM, wherever it hides,
// ends with the session: when the host leaves, when the server ignores the
// host leaving, and on a second signal.
func TestWrapEndsTheWholeServerTree(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`
	cases := []struct {
		name   string
		flags  []string
		linger bool // the server ignores stdin EOF and SIGTERM
		end    string
	}{
		{name: "background_grandchild_ignores_sigterm", end: "host_leaves"},
		{name: "grandchild_calls_setsid", flags: []string{"-setsid"}, end: "host_leaves"},
		{name: "orphaned_grandchild_calls_setsid", flags: []string{"-setsid", "-orphan"}, end: "host_leaves"},
		{name: "orphan_hides_in_aegis_process_group", flags: []string{"-orphan", "-join-pgid"}, end: "host_leaves"},
		{name: "server_ignores_the_host_leaving", flags: []string{"-setsid"}, linger: true, end: "host_leaves"},
		{name: "second_signal_with_an_orphan_in_its_own_session", flags: []string{"-setsid", "-orphan"}, linger: true, end: "two_signals"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			l := newLeftover(t, h.dir, "leftover")
			server := []string{bin(t, "rawserver")}
			if tc.linger {
				server = append(server, "-linger")
			}
			var input io.Reader = strings.NewReader(joinLines(call))
			var sigs chan os.Signal
			if tc.end == "two_signals" {
				pr, pw := io.Pipe()
				defer pw.Close()
				input, sigs = pr, make(chan os.Signal, 2)
				go func() {
					pw.Write([]byte(joinLines(call)))
					l.started()
					sigs <- syscall.SIGTERM
					time.Sleep(100 * time.Millisecond)
					sigs <- syscall.SIGTERM
				}()
			}
			run := h.run(l.spawner(tc.flags, server...), input, 300*time.Millisecond, sigs)
			if run.err != nil {
				t.Fatal(run.err)
			}
			l.requireGone()
		})
	}
}

// When recording fails, the server is stopped so that nothing more runs
// unrecorded: its background processes too.
func TestWrapStoreFailureEndsTheWholeServerTree(t *testing.T) {
	h := newHarness(t)
	l := newLeftover(t, h.dir, "leftover")
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		l.started()
		h.store.Close(context.Background())
		pw.Write([]byte(joinLines(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)))
	}()
	run := h.run(l.spawner([]string{"-setsid", "-orphan"}, bin(t, "rawserver"), "-linger"), pr, 5*time.Second, nil)
	if run.err == nil || !strings.Contains(run.err.Error(), "recording failed") {
		t.Fatalf("Wrap = %v, want a recording failure", run.err)
	}
	l.requireGone()
}

// Under --confine, the helper's process group and the subreaper hold too.
func TestWrapConfinedServerTreeEnds(t *testing.T) {
	needRoot(t)
	parallel(t) // aegis runs in a process of its own, and waits out its grace
	c := newCLI(t)
	rw := t.TempDir()
	l := newLeftover(t, rw, "leftover")
	argv := l.spawner([]string{"-setsid", "-orphan"}, bin(t, "rawserver"))
	// The grace is the server's to exit on its own once stdin ends, which
	// it does at once; the wrap waits all of it, as the leftover holds the
	// server's stdout. 300 ms was too short on a loaded machine: the wrap
	// stopped the server itself and reported its SIGTERM (exit 143).
	args := append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--grace", "3s",
		"--confine", "--allow-read", filepath.Dir(argv[0]), "--allow-write", rw, "--"}, argv...)
	if out, stderr, code := c.aegis(args...); code != 0 {
		t.Fatalf("aegis wrap: exit %d, out %q, stderr %q", code, out, stderr)
	}
	l.requireGone()
}

// The gateway ends every downstream server's tree when the host leaves.
func TestGatewayEndsEveryServerTree(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	c := newCLI(t)
	a := newLeftover(t, c.dir, "leftover-a")
	b := newLeftover(t, c.dir, "leftover-b")
	quote := func(ss []string) string {
		var q []string
		for _, s := range ss {
			q = append(q, strconv.Quote(s))
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	example := bin(t, "aegis-example-server")
	sa, sb := a.spawner([]string{"-setsid", "-orphan"}, example), b.spawner(nil, example)
	config := filepath.Join(c.dir, "aegis.yaml")
	os.WriteFile(config, []byte(`version: 1
servers:
  a:
    command: `+sa[0]+`
    args: `+quote(sa[1:])+`
  b:
    command: `+sb[0]+`
    args: `+quote(sb[1:])+`
profiles:
  observer:
    allow: [a.echo, b.echo]
activation:
  default_profile: observer
`), 0o600)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.started()
	b.started()
	in.Close() // the host leaves
	if err := cmd.Wait(); err != nil {
		t.Fatalf("aegis gateway: %v\n%s", err, stderr.String())
	}
	a.requireGone()
	b.requireGone()
}

// aegis killed outright (SIGKILL, a host's last resort: the TypeScript
// SDK's client SIGKILLs a server that has not exited 1 s after SIGTERM)
// cannot end its servers itself: each server it started gets SIGKILL
// from the kernel as aegis dies, even one that ignores stdin EOF and
// SIGTERM, rather than running on as an orphan.
func TestKilledAegisTakesItsServerWithIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	parallel(t)
	for _, mode := range []string{"wrap", "gateway"} {
		t.Run(mode, func(t *testing.T) {
			c := newCLI(t)
			pidFile := filepath.Join(c.dir, "server.pid")
			// The server writes its pid, then is rawserver, which ignores
			// stdin EOF and SIGTERM.
			server := []string{"/bin/sh", "-c", `echo $$ > "$0"; exec "$1" -linger`, pidFile, bin(t, "rawserver")}
			var cmd *exec.Cmd
			if mode == "wrap" {
				argv := c.wrapArgv(server...)
				cmd = exec.Command(argv[0], argv[1:]...)
			} else {
				cmd = gatewayCmd(t, c, map[string][]string{"raw": server}, []string{"raw.*"}, nil)
			}
			cmd.Env = gatewayEnv(t)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var pid int
			for deadline := time.Now().Add(60 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
				b, _ := os.ReadFile(pidFile)
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatal("the server never wrote its pid")
				}
			}
			proc, err := os.FindProcess(pid)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proc.Kill() }) // a failed test leaves nothing running
			if err := proc.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("the server (pid %d) does not run: %v", pid, err)
			}
			cmd.Process.Kill()
			<-done
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				if err != nil || strings.Contains(string(b), ") Z ") {
					break // gone, or dead and waiting for init to reap it
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server (pid %d) outlived aegis killed by 10 s: %s", pid, b)
				}
			}
		})
	}
}
