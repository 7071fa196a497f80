//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// escape is one attack a confined server might try. The control runs the
// same probe unconfined first, so a denial means the confinement stopped
// it, not that the attack never worked here.
type escape struct {
	name    string
	argv    func(ps *probeSet) []string
	profile func(p Profile) Profile // adjusts the base profile; nil keeps it
	want    string                  // "ok" or the errno name the probe must report
	// envOnly marks attacks that depend on the machine (a kernel feature,
	// a device): a failing control skips instead of failing.
	envOnly bool
	// noControl: the attack needs the confinement's own setup (e.g. a
	// path that only exists as a grant) or has no unconfined meaning.
	noControl bool
	// undo is removed after the control, which may have created it.
	undo string
	// target, when set, must see no connection during the confined run
	// unless want is "ok".
	target *tcpTarget
}

func probe(args ...string) func(*probeSet) []string {
	return func(ps *probeSet) []string { return append([]string{ps.probe}, args...) }
}

func probe32(args ...string) func(*probeSet) []string {
	return func(ps *probeSet) []string { return append([]string{ps.probe32}, args...) }
}

func runEscapes(t *testing.T, cases []escape, base Profile) {
	ps := probePaths(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			argv := tc.argv(ps)
			if argv[0] == "" {
				t.Skipf("no i386 probe: %v", ps.gccErr)
			}
			if !tc.noControl {
				var ctlBefore int64
				if tc.target != nil {
					ctlBefore = tc.target.accepted.Load()
				}
				if ctl := runDirect(t, argv...); ctl.outcome() != "ok" {
					if tc.envOnly {
						t.Skipf("attack does not work here even unconfined: %s", ctl.outcome())
					}
					t.Fatalf("control: unconfined %v = %s, want ok", argv[1:], ctl.outcome())
				}
				if tc.target != nil {
					waitFor(t, "the control's connection", func() bool { return tc.target.accepted.Load() > ctlBefore })
				}
			}
			if tc.undo != "" {
				if err := os.Remove(tc.undo); err != nil {
					t.Fatal(err)
				}
			}
			var before int64
			if tc.target != nil {
				before = tc.target.accepted.Load()
			}
			prof := base
			if tc.profile != nil {
				prof = tc.profile(base)
			}
			r := runConfined(t, prof, argv...)
			if got := r.outcome(); got != tc.want {
				t.Fatalf("confined %v = %s, want %s (fact %+v)", argv[1:], got, tc.want, r.fact)
			}
			if tc.target != nil && tc.want != "ok" {
				if n := tc.target.accepted.Load() - before; n != 0 {
					t.Fatalf("the target accepted %d connections during the confined run", n)
				}
			}
		})
	}
}

func TestEscapesWithoutNetGrant(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	a := listenTCP(t)
	u := listenUDP(t)
	block := firstBlockDevice(t)
	key := userKey(t)

	cases := []escape{
		{name: "read_outside_the_grants", argv: probe("read", l.secret), want: "EACCES"},
		{name: "list_a_directory_outside_the_grants", argv: probe("read", l.outside), want: "EACCES", noControl: true},
		{name: "write_to_a_read_only_grant", argv: probe("write", filepath.Join(l.readDir, "planted")), want: "EACCES"},
		{name: "overwrite_a_file_in_a_read_only_grant", argv: probe("write", l.readFile), want: "EACCES"},
		{name: "mknod_the_disk_inside_a_write_grant", argv: probe("mknod-block", filepath.Join(l.writeDir, "disk")), want: "EACCES",
			undo: filepath.Join(l.writeDir, "disk")},
		{name: "tcp_connect_without_allow_net", argv: probe("connect", a.addr()), want: "EPERM", target: a},
		{name: "tcp_fast_open_without_allow_net", argv: probe("connect-tfo", a.addr()), want: "EPERM", target: a},
		{name: "mptcp_connect_without_allow_net", argv: probe("connect-mptcp", a.addr()), want: "EPERM", envOnly: true, target: a},
		{name: "i386_socket_via_int_0x80", argv: probe32("connect", strconv.Itoa(a.port)), want: "EPERM", target: a},
		{name: "udp_send_without_allow_net", argv: probe("udp-send", "127.0.0.1:"+strconv.Itoa(u.port)), want: "EPERM"},
		{name: "unix_socket_connect_outside_the_grants", argv: probe("unix-connect", l.unixSock), want: "EPERM"},
		{name: "datagram_socketpair_sendto_a_pathname_socket", argv: probe("socketpair-dgram-send", l.dgramSock), want: "EPERM"},
		{name: "listen_on_an_autobound_port", argv: probe("listen"), want: "EPERM"},
		{name: "raw_ip_socket", argv: probe("raw-socket"), want: "EPERM"},
		{name: "packet_socket", argv: probe("packet-socket"), want: "EPERM"},
		{name: "io_uring_setup", argv: probe("io-uring-setup"), want: "EPERM", envOnly: true},
		{name: "read_the_raw_disk_under_exec_support", argv: probe("read", block), want: "EACCES", envOnly: true,
			profile: func(p Profile) Profile { p.ExecSupport = true; return p }},
		{name: "read_kernel_memory_under_exec_support", argv: probe("read", "/proc/kcore"), want: "EPERM", envOnly: true,
			profile: func(p Profile) Profile { p.ExecSupport = true; return p }},
		{name: "read_a_key_in_the_user_keyring", argv: probe("key-search", "user", key.desc), want: "EPERM"},
		{name: "read_a_key_by_its_id", argv: probe("key-read", key.id), want: "EPERM"},
		{name: "find_a_key_through_the_session_keyring", argv: probe("key-search", "session", key.desc), want: "EPERM", envOnly: true},
		{name: "request_a_key", argv: probe("request-key", key.desc), want: "EPERM", envOnly: true},
		{name: "reach_the_persistent_keyring", argv: probe("keyring-persistent"), want: "EPERM", envOnly: true},
		{name: "add_a_key", argv: probe("add-key"), want: "EPERM"},
	}
	runEscapes(t, cases, l.profile(ps))
	if a.accepted.Load() == 0 || u.received.Load() == 0 {
		t.Errorf("controls did not reach the targets (tcp %d, udp %d)", a.accepted.Load(), u.received.Load())
	}
}

func TestEscapesWithNetGrant(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	granted := listenTCP(t)
	other := listenTCP(t)
	u := listenUDP(t)
	key := userKey(t)
	base := l.profile(ps)
	base.Net = []NetGrant{{Host: "127.0.0.1", Port: uint16(granted.port)}}

	cases := []escape{
		{name: "tcp_connect_to_the_granted_port_succeeds", argv: probe("connect", granted.addr()), want: "ok"},
		{name: "tcp_connect_to_another_port", argv: probe("connect", other.addr()), want: "EACCES", target: other},
		{name: "tcp_fast_open_to_another_port", argv: probe("connect-tfo", other.addr()), want: "EPERM", target: other},
		{name: "tcp_fast_open_to_the_granted_port", argv: probe("connect-tfo", granted.addr()), want: "EPERM", target: granted},
		{name: "mptcp_connect_to_the_granted_port", argv: probe("connect-mptcp", granted.addr()), want: "EPERM", envOnly: true, target: granted},
		{name: "mptcp_connect_to_another_port", argv: probe("connect-mptcp", other.addr()), want: "EPERM", envOnly: true, target: other},
		{name: "mptcp_socket_with_garbage_in_the_upper_argument_bits", argv: probe("mptcp-hibits", other.addr()), want: "EPERM", envOnly: true, target: other},
		{name: "i386_connect_to_the_granted_port", argv: probe32("connect", strconv.Itoa(granted.port)), want: "EPERM", target: granted},
		{name: "i386_connect_to_another_port", argv: probe32("connect", strconv.Itoa(other.port)), want: "EPERM", target: other},
		{name: "udp_send", argv: probe("udp-send", "127.0.0.1:"+strconv.Itoa(u.port)), want: "EPERM"},
		{name: "unix_socket_connect_outside_the_grants", argv: probe("unix-connect", l.unixSock), want: "EPERM"},
		{name: "datagram_socketpair_sendto_a_pathname_socket", argv: probe("socketpair-dgram-send", l.dgramSock), want: "EPERM"},
		{name: "listen_on_an_autobound_port", argv: probe("listen"), want: "EPERM"},
		{name: "raw_ip_socket", argv: probe("raw-socket"), want: "EPERM"},
		{name: "packet_socket", argv: probe("packet-socket"), want: "EPERM"},
		{name: "io_uring_setup", argv: probe("io-uring-setup"), want: "EPERM", envOnly: true},
		{name: "read_outside_the_grants", argv: probe("read", l.secret), want: "EACCES"},
		{name: "read_a_key_in_the_user_keyring", argv: probe("key-search", "user", key.desc), want: "EPERM"},
		{name: "reach_the_persistent_keyring", argv: probe("keyring-persistent"), want: "EPERM", envOnly: true},
	}
	runEscapes(t, cases, base)
	if granted.accepted.Load() == 0 {
		t.Error("nothing reached the granted port: the controls are broken")
	}
}

// TestMPTCPAndUDPOptIns shows what AllowMPTCP and AllowUDP cost on a kernel
// whose landlock cannot restrict them: refused, or (best effort) allowed to
// every port and recorded as a degradation.
func TestMPTCPAndUDPOptIns(t *testing.T) {
	requireConfinement(t)
	ps := probePaths(t)
	l := newLayout(t)
	granted := listenTCP(t)
	other := listenTCP(t)
	u := listenUDP(t)
	base := l.profile(ps)
	base.Net = []NetGrant{{Host: "127.0.0.1", Port: uint16(granted.port)}}

	mptcp := base
	mptcp.AllowMPTCP = true
	r := runConfined(t, mptcp, ps.probe, "connect-mptcp", other.addr())
	if !isRefusal(r.err, "MPTCP") {
		t.Fatalf("AllowMPTCP without best effort: err %v, want a refusal naming MPTCP", r.err)
	}
	mptcp.BestEffort = true
	if ctl := runDirect(t, ps.probe, "connect-mptcp", other.addr()); ctl.outcome() == "ok" {
		r = runConfined(t, mptcp, ps.probe, "connect-mptcp", other.addr())
		if r.outcome() != "ok" || !hasDegradation(r.fact, "MPTCP") {
			t.Fatalf("best-effort MPTCP to an ungranted port = %s, degradations %q; want ok and recorded", r.outcome(), r.fact.Degradations)
		}
	}

	udp := base
	udp.AllowUDP = true
	if abi, _ := ll.LandlockGetABIVersion(); abi >= udpABI {
		t.Skip("landlock restricts UDP here; the opt-in is not a degradation")
	}
	r = runConfined(t, udp, ps.probe, "udp-send", "127.0.0.1:"+strconv.Itoa(u.port))
	if !isRefusal(r.err, "UDP") {
		t.Fatalf("AllowUDP without best effort: err %v, want a refusal naming UDP", r.err)
	}
	udp.BestEffort = true
	r = runConfined(t, udp, ps.probe, "udp-send", "127.0.0.1:"+strconv.Itoa(u.port))
	if r.outcome() != "ok" || !hasDegradation(r.fact, "UDP") {
		t.Fatalf("best-effort UDP = %s, degradations %q; want ok and recorded", r.outcome(), r.fact.Degradations)
	}
	waitFor(t, "the datagram", func() bool { return u.received.Load() > 0 })
}

// testKey is a key the test put in the user keyring, where every process
// of the uid can find it: the user keyring is linked from the default
// session keyring, and readable to the uid.
type testKey struct{ id, desc string }

func userKey(t testing.TB) testKey {
	t.Helper()
	desc := fmt.Sprintf("aegis-escape-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	id, err := unix.AddKey("user", desc, []byte("secret"), unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		t.Skipf("no key can be added to the user keyring here: %v", err)
	}
	t.Cleanup(func() { unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0) })
	// Possessor all, user view, read and search: readable by id too.
	if err := unix.KeyctlSetperm(id, 0x3f000000|0x000b0000); err != nil {
		t.Fatal(err)
	}
	return testKey{id: strconv.Itoa(id), desc: desc}
}

func isRefusal(err error, mentions string) bool {
	return err != nil && strings.Contains(err.Error(), mentions) && isErrRefused(err)
}

func isErrRefused(err error) bool { return errors.Is(err, ErrRefused) }

func hasDegradation(f Fact, mentions string) bool {
	for _, d := range f.Degradations {
		if strings.Contains(d, mentions) {
			return true
		}
	}
	return false
}

// firstBlockDevice returns a block device node under /dev that this
// (unconfined, root) process can open, or a missing path (the case then
// skips through its failing control).
func firstBlockDevice(t testing.TB) string {
	entries, err := os.ReadDir("/dev")
	if err != nil {
		return "/dev/nonexistent-block-device"
	}
	for _, e := range entries {
		if e.Type()&os.ModeDevice == 0 || e.Type()&os.ModeCharDevice != 0 {
			continue
		}
		if f, err := os.Open("/dev/" + e.Name()); err == nil {
			f.Close()
			return "/dev/" + e.Name()
		}
	}
	return "/dev/nonexistent-block-device"
}
