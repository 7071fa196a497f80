package sandbox

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// seccompData encodes struct seccomp_data for the x/net/bpf VM. The kernel
// loads 32-bit words in host order and the VM in big-endian, so each word
// is stored big-endian at the offset where a little-endian host keeps it.
func seccompData(nr uint32, auditArch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], auditArch)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))       // low word first
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32)) // then high
	}
	return b
}

type verdict string

const (
	allowed  verdict = "allow"
	eperm    verdict = "EPERM"
	enosys   verdict = "ENOSYS"
	hiGarble         = 0xdead_0000_0000
)

func run(t *testing.T, prog []bpf.Instruction, data []byte) verdict {
	t.Helper()
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	switch uint32(ret) {
	case seccompRetOK:
		return allowed
	case seccompRetErr | errnoEPERM:
		return eperm
	case seccompRetErr | 38:
		return enosys
	}
	t.Fatalf("unexpected seccomp return %#x", ret)
	return ""
}

func TestFilterDecisions(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("syscall numbers below are x86_64")
	}
	nr := func(name string) uint32 { return uint32(arch.X86_64.SyscallNames[name]) }
	x86 := uint32(arch.X86_64.ID)
	noNet := Profile{}
	net := Profile{Net: []NetGrant{{Host: "127.0.0.1", Port: 8080}}}
	udp := Profile{Net: net.Net, AllowUDP: true}
	mptcp := Profile{Net: net.Net, AllowMPTCP: true}

	for _, tc := range []struct {
		name string
		p    Profile
		data []byte
		want verdict
	}{
		{"tcp_socket_without_net_grant", noNet, seccompData(nr("socket"), x86, afInet, sockStream, 0), eperm},
		{"unix_socket_without_net_grant", noNet, seccompData(nr("socket"), x86, afUnix, sockStream, 0), eperm},
		{"connect_an_inherited_socket_without_net_grant", noNet, seccompData(nr("connect"), x86, 3, 0x1000, 16), eperm},
		{"stream_socketpair_for_a_runtime", noNet, seccompData(nr("socketpair"), x86, afUnix, sockStream|sockCloexec, 0, 0x1000), allowed},
		{"datagram_socketpair", noNet, seccompData(nr("socketpair"), x86, afUnix, sockDgram, 0, 0x1000), eperm},
		{"socketpair_with_garbage_in_the_upper_bits", noNet, seccompData(nr("socketpair"), x86, hiGarble|afUnix, sockStream, 0, 0x1000), eperm},
		{"sendto_with_a_destination", noNet, seccompData(nr("sendto"), x86, 3, 0x1000, 5, 0, 0x2000, 16), eperm},
		{"send_on_a_socketpair", noNet, seccompData(nr("sendto"), x86, 3, 0x1000, 5, 0, 0, 0), allowed},
		{"io_uring_setup", noNet, seccompData(nr("io_uring_setup"), x86, 1, 0x1000), eperm},
		{"pidfd_getfd_takes_a_socket", noNet, seccompData(nr("pidfd_getfd"), x86, 3, 4, 0), eperm},
		{"ordinary_read", noNet, seccompData(nr("read"), x86, 0, 0x1000, 10), allowed},
		{"x32_socket", noNet, seccompData(x32SyscallBit|41, x86, afInet, sockStream, 0), enosys},

		{"tcp_socket_with_net_grant", net, seccompData(nr("socket"), x86, afInet, sockStream|sockNonblock|sockCloexec, 0), allowed},
		{"tcp6_socket_with_net_grant", net, seccompData(nr("socket"), x86, afInet6, sockStream, ipprotoTCP), allowed},
		{"connect_is_left_to_landlock", net, seccompData(nr("connect"), x86, 3, 0x1000, 16), allowed},
		{"mptcp_socket", net, seccompData(nr("socket"), x86, afInet, sockStream, ipprotoMPTCP), eperm},
		{"mptcp_socket_with_garbage_in_the_upper_bits", net, seccompData(nr("socket"), x86, hiGarble|afInet, hiGarble|sockStream, hiGarble|ipprotoMPTCP), eperm},
		{"tcp_socket_with_garbage_in_the_upper_bits_is_denied_too", net, seccompData(nr("socket"), x86, afInet, sockStream, hiGarble), eperm},
		{"udp_socket", net, seccompData(nr("socket"), x86, afInet, sockDgram, 0), eperm},
		{"sctp_socket", net, seccompData(nr("socket"), x86, afInet, sockStream, 132), eperm},
		{"raw_socket", net, seccompData(nr("socket"), x86, afInet, 3, 1), eperm},
		{"netlink_socket", net, seccompData(nr("socket"), x86, 16, 3, 0), eperm},
		{"unix_socket_with_net_grant", net, seccompData(nr("socket"), x86, afUnix, sockStream, 0), eperm},
		{"tcp_fast_open_sendto", net, seccompData(nr("sendto"), x86, 3, 0x1000, 5, msgFastopen, 0x2000, 16), eperm},
		{"tcp_fast_open_sendmsg", net, seccompData(nr("sendmsg"), x86, 3, 0x1000, msgFastopen|0x40), eperm},
		{"tcp_fast_open_sendmmsg", net, seccompData(nr("sendmmsg"), x86, 3, 0x1000, 2, msgFastopen), eperm},
		{"plain_send_on_a_tcp_socket", net, seccompData(nr("sendto"), x86, 3, 0x1000, 5, 0x40, 0, 0), allowed},
		{"listen_autobinds_a_port", net, seccompData(nr("listen"), x86, 3, 1), eperm},
		{"udp_socket_when_allowed", udp, seccompData(nr("socket"), x86, afInet, sockDgram|sockCloexec, 0), allowed},
		{"mptcp_socket_when_allowed", mptcp, seccompData(nr("socket"), x86, afInet6, sockStream, ipprotoMPTCP), allowed},
		{"udp_stays_denied_when_only_mptcp_is_allowed", mptcp, seccompData(nr("socket"), x86, afInet, sockDgram, 0), eperm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := buildFilter(tc.p)
			prog, err := fp.policy.Assemble()
			if err != nil {
				t.Fatal(err)
			}
			if got := run(t, prog, tc.data); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestArchGuardDecisions(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86_64 ABIs")
	}
	prog, abis, err := archGuard()
	if err != nil {
		t.Fatal(err)
	}
	if abis["x86_64"] != "filtered" || abis["i386"] != "refused" || abis["x32"] != "refused" {
		t.Fatalf("syscall_abis %v", abis)
	}
	x86, i386 := uint32(arch.X86_64.ID), uint32(arch.I386.ID)
	for _, tc := range []struct {
		name string
		data []byte
		want verdict
	}{
		{"native_call", seccompData(41, x86), allowed},
		{"i386_socket_via_int_0x80", seccompData(359, i386, 2, 1, 0), eperm},
		{"i386_socketcall", seccompData(102, i386, 1, 0x1000), eperm},
		{"i386_open_a_file", seccompData(5, i386, 0x1000, 0), eperm},
		{"x32_socket", seccompData(x32SyscallBit|41, x86, 2, 1, 0), eperm},
		{"arm_call", seccompData(281, uint32(arch.ARM.ID)), eperm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, prog, tc.data); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
