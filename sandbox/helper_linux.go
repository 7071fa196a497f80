//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// HelperMain runs the confinement helper and returns its exit status; it
// returns only when it did not exec. args are the arguments after
// [HelperArg]: "--", then the server's argv. control and report are the
// inherited pipes at [ControlFD] and [ReportFD].
//
// In order: read the profile from control; resolve the server with
// exec.LookPath; drop capabilities a root server must not hold; enforce
// landlock; check that no protected path opens; join a fresh session
// keyring; load the seccomp network filter (no_new_privs, TSYNC) and the
// syscall ABI guard; write the fact
// to report; wait for the go-ahead byte on control; exec the server. Every
// descriptor above stderr is close-on-exec first, so the server inherits
// stdio and nothing else: neither pipe, nor anything the proxy inherited.
//
// When anything cannot be enforced and the profile is not best effort, it
// reports a refusal fact (claiming nothing enforced) and returns
// [ExitRefused] without exec. It also returns ExitRefused, without exec,
// when control closes before the go-ahead.
//
// The calling goroutine is locked to its OS thread and never unlocked: the
// landlock domain is enforced on that thread alone, and that thread execs,
// so the server inherits it. Seccomp filters are synchronized to every
// thread of the helper (TSYNC).
func HelperMain(args []string, control, report *os.File) int {
	runtime.LockOSThread()
	kernelABI, _ := ll.LandlockGetABIVersion()
	refuse := func(err error) int {
		reason := err.Error()
		var re *RefusalError
		if errors.As(err, &re) {
			reason = strings.Join(re.Problems, "; ")
		}
		_ = writeLine(report, refusedFact(reason, max(kernelABI, 0)))
		return ExitRefused
	}
	// The server gets stdio and nothing else: not the protocol pipes, and
	// not a descriptor the proxy itself inherited without close-on-exec
	// (os/exec passes those through).
	if err := closeOnExecFrom(3); err != nil {
		return refuse(err)
	}
	if len(args) < 2 || args[0] != "--" {
		return refuse(errors.New("helper usage: " + HelperArg + " -- PROG [ARGS...]"))
	}
	argv := args[1:]
	in := bufio.NewReader(control)
	line, err := readLine(in)
	if err != nil {
		return refuse(fmt.Errorf("read profile: %w", err))
	}
	var p Profile
	if err := decodeStrict(line, &p); err != nil {
		return refuse(fmt.Errorf("decode profile: %w", err))
	}
	fact, path, err := confine(p, argv)
	if err != nil {
		return refuse(err)
	}
	if err := writeLine(report, fact); err != nil {
		return ExitRefused
	}
	if b, err := in.ReadByte(); err != nil || b != goAhead {
		return ExitRefused
	}
	err = syscall.Exec(path, argv, os.Environ())
	_ = writeLine(report, execReport{ExecError: fmt.Sprintf("exec %q: %v", path, err)})
	return ExitExecFailed
}

// closeOnExecFrom marks every descriptor from first up close-on-exec.
func closeOnExecFrom(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("close_range: %w", err)
	}
	entries, err := os.ReadDir("/proc/self/fd") // before Linux 5.11
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// confine applies p to the calling (locked) thread and returns the fact and
// the resolved server path. It returns a *RefusalError when p cannot be
// honoured and is not best effort.
func confine(p Profile, argv []string) (Fact, string, error) {
	pl, err := newPlan(p)
	if err != nil {
		return Fact{}, "", err
	}
	if err := pl.refusal(); err != nil {
		return Fact{}, "", err
	}
	path, err := exec.LookPath(argv[0])
	if err == nil {
		path, err = filepath.Abs(path)
	}
	if err != nil {
		return Fact{}, "", &RefusalError{Problems: []string{fmt.Sprintf("server %q: %v", argv[0], err)}}
	}
	if real := resolve(path); pl.abi > 0 && !pl.executable(real) {
		return Fact{}, "", &RefusalError{Problems: []string{fmt.Sprintf(
			"server %q (%s) lies outside every grant: the kernel would refuse to execute it; grant its directory or use exec support", argv[0], real)}}
	}

	f := Fact{
		ExecPath:          path,
		KernelLandlockABI: pl.kernelABI,
		NetGrants:         p.Net,
		ExecSupport:       p.ExecSupport,
		Degradations:      slices.Clone(pl.problems), // empty unless best effort
	}
	for _, pr := range pl.protect {
		f.ProtectedPaths = append(f.ProtectedPaths, pr.path)
	}
	// degrade records a problem under best effort and refuses otherwise.
	degrade := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if !p.BestEffort {
			return &RefusalError{Problems: []string{msg}}
		}
		f.Degradations = append(f.Degradations, msg)
		return nil
	}

	kept, err := dropCapabilities()
	if err != nil {
		if err := degrade("capabilities not dropped: %v", err); err != nil {
			return Fact{}, "", err
		}
	}
	f.CapsKept = kept

	landlocked := false
	if pl.abi > 0 {
		if err := restrictThread(pl); err != nil {
			if err := degrade("landlock not enforced: %v", err); err != nil {
				return Fact{}, "", err
			}
		} else {
			landlocked = true
			pl.landlockFacts(&f)
		}
	}

	reachable := 0
	for _, pr := range pl.protect {
		if opens(pr.path) || opens(pr.real) {
			reachable++
			if err := degrade("protected path %q is reachable by the child", pr.path); err != nil {
				return Fact{}, "", err
			}
		}
	}
	f.ProtectedVerified = landlocked && reachable == 0

	// A session keyring of its own, before the filter denies keyctl: the
	// keyring links of aegis's session are not the server's to follow.
	if err := freshSessionKeyring(); err == nil {
		f.SessionKeyringFresh = true
	} else if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
		// ENOSYS: no keyrings in this kernel. EPERM: an outer filter
		// (a container's) already denies keyctl to this process and the
		// server. Either way there is no keyring to reach.
		if err := degrade("session keyring not replaced: %v", err); err != nil {
			return Fact{}, "", err
		}
	}
	if err := loadFilters(p, &f); err != nil {
		if err := degrade("%v", err); err != nil {
			return Fact{}, "", err
		}
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	f.NoNewPrivs = err == nil && nnp == 1
	if !f.NoNewPrivs {
		if err := degrade("no_new_privs is not set"); err != nil {
			return Fact{}, "", err
		}
	}
	return f, path, nil
}

// freshSessionKeyring makes the calling thread join a new, anonymous
// session keyring (KEYCTL_JOIN_SESSION_KEYRING with a NULL name) and reads
// back that it did; the thread that execs passes it to the server.
// Credentials are per thread: this must run on the thread that execs.
func freshSessionKeyring() error {
	before, _ := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	id, err := unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0)
	if err != nil {
		return err
	}
	after, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	if err != nil {
		return fmt.Errorf("read back the session keyring: %w", err)
	}
	if after != id || after == before {
		return fmt.Errorf("the session keyring is %d after joining %d (was %d)", after, id, before)
	}
	return nil
}

// restrictThread enforces the plan's landlock ruleset on the calling
// thread, which must be locked and must be the thread that execs.
func restrictThread(pl *plan) error {
	fd, flags, err := pl.config().NewRulesetFD(pl.rules()...)
	if err != nil {
		return err
	}
	if fd < 0 {
		return errors.New("nothing to enforce at this landlock ABI")
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}

// opens reports whether path can be opened for reading.
func opens(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// loadFilters loads the network filter and then the syscall ABI guard, and
// records in f what was loaded.
func loadFilters(p Profile, f *Fact) error {
	if !seccompSupported() {
		return errors.New("seccomp is not available")
	}
	fp := buildFilter(p)
	guard, abis, err := archGuard()
	if err != nil {
		return err
	}
	err = seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: fp.policy})
	if err != nil {
		return fmt.Errorf("seccomp network filter: %w", err)
	}
	f.SeccompAction = "errno EPERM"
	f.DeniedSyscalls = fp.deniedSyscalls
	f.AllowedSockets = fp.allowedSockets
	f.DeniedSockets = fp.deniedSockets
	f.IOURingDenied = true
	f.KeyringsDenied = true
	if err := loadRaw(guard); err != nil {
		f.SyscallABIs = map[string]string{"native": "filtered", "foreign": "not refused: bypasses the filter"}
		return fmt.Errorf("seccomp syscall ABI guard: %w", err)
	}
	f.SyscallABIs = abis
	f.SeccompApplied = true
	f.SeccompNetworkDenied = fp.networkDenied
	return nil
}

// loadRaw loads a BPF program as a seccomp filter on every thread.
func loadRaw(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if e != 0 {
		return e
	}
	if r != 0 {
		return fmt.Errorf("thread %d could not be synchronized", r)
	}
	return nil
}

func seccompSupported() bool { return seccomp.Supported() }
