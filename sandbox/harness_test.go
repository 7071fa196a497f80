package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// TestMain makes the test binary double as the helper: Command runs
// "SELF __confine-exec -- ...", and SELF is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == HelperArg {
		os.Exit(HelperMain(os.Args[2:], os.NewFile(ControlFD, "control"), os.NewFile(ReportFD, "report")))
	}
	code := m.Run()
	probes.cleanup()
	os.Exit(code)
}

// probes holds the probe programs, built once for the whole test binary.
var probes probeSet

type probeSet struct {
	once    sync.Once
	dir     string
	probe   string // static Go probe
	probe32 string // static C probe using int 0x80; "" without gcc
	err     error
	gccErr  error
}

func (ps *probeSet) build() {
	ps.dir, ps.err = os.MkdirTemp("", "sandbox-probes-")
	if ps.err != nil {
		return
	}
	ps.probe = filepath.Join(ps.dir, "probe")
	cmd := exec.Command("go", "build", "-o", ps.probe, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		ps.err = fmt.Errorf("go build probe: %v\n%s", err, out)
		return
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		ps.gccErr = err
		return
	}
	out := filepath.Join(ps.dir, "probe32")
	cmd = exec.Command(gcc, "-O0", "-static", "-fno-pie", "-no-pie", "-o", out, "testdata/probe32.c")
	if b, err := cmd.CombinedOutput(); err != nil {
		ps.gccErr = fmt.Errorf("gcc probe32: %v\n%s", err, b)
		return
	}
	// Some kernels (or hypervisors) have no i386 entry: int $0x80 faults
	// before any system call, so there is no way through it to test.
	if err := exec.Command(out, "entry").Run(); err != nil {
		ps.gccErr = fmt.Errorf("this kernel does not take int $0x80 (probe32 entry: %v), so the i386 system call path it would test does not exist here", err)
		return
	}
	ps.probe32 = out
}

func (ps *probeSet) cleanup() {
	if ps.dir != "" {
		os.RemoveAll(ps.dir)
	}
}

// probePaths builds the probes (once) and returns the Go probe's path.
func probePaths(t testing.TB) *probeSet {
	t.Helper()
	probes.once.Do(probes.build)
	if probes.err != nil {
		t.Fatal(probes.err)
	}
	return &probes
}

// requireConfinement skips unless the test can confine for real.
func requireConfinement(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("confinement tests run as root (CI does); skipping as uid", os.Geteuid())
	}
	if abi, err := ll.LandlockGetABIVersion(); err != nil || abi < requiredABI {
		t.Skipf("landlock ABI %d (err %v) < %d: confinement unavailable on this kernel", abi, err, requiredABI)
	}
}

// result is what one confined run produced.
type result struct {
	fact   Fact
	out    string // probe stdout
	stderr string
	exit   int   // exit status of the helper-then-server
	err    error // from Command, Start or Go
}

// outcome is "ok" or the errno name the probe reported.
func (r result) outcome() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	if strings.HasPrefix(r.out, "ok") {
		return "ok"
	}
	if name, _, ok := strings.Cut(strings.TrimPrefix(r.out, "errno="), " at "); ok {
		_, errno, _ := strings.Cut(name, " ")
		return errno
	}
	return fmt.Sprintf("unexpected output %q (exit %d, stderr %q)", r.out, r.exit, r.stderr)
}

// runConfined runs argv under profile through the helper (this binary).
func runConfined(t testing.TB, profile Profile, argv ...string) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Command(ctx, self, profile, argv)
	if err != nil {
		return result{err: err}
	}
	var out, stderr bytes.Buffer
	c.Cmd.Stdout, c.Cmd.Stderr = &out, &stderr
	f, err := c.Start()
	if err != nil {
		return result{fact: f, err: err, exit: c.Cmd.ProcessState.ExitCode()}
	}
	if err := c.Go(); err != nil {
		c.Cmd.Wait()
		return result{fact: f, err: err, exit: c.Cmd.ProcessState.ExitCode()}
	}
	werr := c.Cmd.Wait()
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		t.Fatalf("wait: %v", werr)
	}
	return result{fact: f, out: strings.TrimSpace(out.String()), stderr: stderr.String(), exit: c.Cmd.ProcessState.ExitCode()}
}

// runDirect runs argv unconfined, as the control of an escape test.
func runDirect(t testing.TB, argv ...string) result {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %v: %v", argv, err)
	}
	return result{out: strings.TrimSpace(out.String()), stderr: stderr.String(), exit: cmd.ProcessState.ExitCode()}
}

// tcpTarget is a loopback listener that counts what connected to it.
type tcpTarget struct {
	port     int
	accepted atomic.Int64
}

func (tt *tcpTarget) addr() string { return fmt.Sprintf("127.0.0.1:%d", tt.port) }

// listenTCP starts a TCP listener on 127.0.0.1 (loopback only).
func listenTCP(t testing.TB) *tcpTarget {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tt := &tcpTarget{port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tt.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return tt
}

// udpTarget is a loopback UDP socket that counts datagrams.
type udpTarget struct {
	port     int
	received atomic.Int64
}

func listenUDP(t testing.TB) *udpTarget {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ut := &udpTarget{port: pc.LocalAddr().(*net.UDPAddr).Port}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			ut.received.Add(1)
		}
	}()
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	return ut
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// layout is a temporary tree: a read grant, a write grant and an
// ungranted directory holding a secret and sockets.
type layout struct {
	root, readDir, writeDir, outside string
	secret, readFile                 string
	unixSock, dgramSock              string
}

func newLayout(t testing.TB) layout {
	t.Helper()
	root := t.TempDir()
	l := layout{
		root:     root,
		readDir:  filepath.Join(root, "ro"),
		writeDir: filepath.Join(root, "rw"),
		outside:  filepath.Join(root, "outside"),
	}
	for _, d := range []string{l.readDir, l.writeDir, l.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.secret = filepath.Join(l.outside, "secret")
	l.readFile = filepath.Join(l.readDir, "data")
	for _, f := range []string{l.secret, l.readFile} {
		if err := os.WriteFile(f, []byte("contents\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l.unixSock = filepath.Join(l.outside, "stream.sock")
	ln, err := net.Listen("unix", l.unixSock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	l.dgramSock = filepath.Join(l.outside, "dgram.sock")
	pc, err := net.ListenPacket("unixgram", l.dgramSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	return l
}

// profile is the base profile of a layout: the probes' directory and the
// read grant readable, the write grant writable.
func (l layout) profile(ps *probeSet) Profile {
	return Profile{ReadPaths: []string{ps.dir, l.readDir}, WritePaths: []string{l.writeDir}}
}
