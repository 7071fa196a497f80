package sandbox

import (
	"fmt"
	"slices"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// Values of socket(2) arguments the filter compares. The filter only uses
// NotEqual and BitsSet on the low word: the kernel truncates these int
// arguments to 32 bits, so garbage in the upper bits makes a NotEqual
// comparison deny (never allow), and BitsSet only looks at what the kernel
// sees. An "Equal" deny rule would be bypassed by setting the upper bits.
const (
	afUnix         = 1
	afInet         = 2
	afInet6        = 10
	sockStream     = 1
	sockDgram      = 2
	sockSeqpacket  = 5
	sockNonblock   = 0o4000
	sockCloexec    = 0o2000000
	ipprotoTCP     = 6
	ipprotoUDP     = 17
	ipprotoMPTCP   = 262
	msgFastopen    = 0x20000000
	x32SyscallBit  = 0x40000000
	seccompRetErr  = 0x00050000 // SECCOMP_RET_ERRNO
	seccompRetOK   = 0x7fff0000 // SECCOMP_RET_ALLOW
	errnoEPERM     = 1
	seccompDataNr  = 0
	seccompDataArc = 4
)

// filterPlan is the network filter for a profile and what the fact says
// about it.
type filterPlan struct {
	policy         seccomp.Policy
	networkDenied  bool
	deniedSyscalls []string
	allowedSockets []string
	deniedSockets  []string
}

// withFlags returns typ with every combination of SOCK_NONBLOCK and
// SOCK_CLOEXEC.
func withFlags(types ...uint64) []uint64 {
	var out []uint64
	for _, t := range types {
		out = append(out, t, t|sockNonblock, t|sockCloexec, t|sockNonblock|sockCloexec)
	}
	return out
}

// noneOf is the condition set "argument arg is none of values".
func noneOf(arg uint32, values ...uint64) seccomp.ArgumentConditions {
	var cs seccomp.ArgumentConditions
	for _, v := range values {
		cs = append(cs, seccomp.Condition{Argument: arg, Operation: seccomp.NotEqual, Value: v})
	}
	return cs
}

func deny(name string, sets ...seccomp.ArgumentConditions) []seccomp.NameWithConditions {
	var out []seccomp.NameWithConditions
	for _, s := range sets {
		out = append(out, seccomp.NameWithConditions{Name: name, Conditions: s})
	}
	return out
}

// buildFilter returns the network filter for p. Every match returns EPERM;
// the default is allow: this is a network deny-list, not a syscall sandbox.
//
// Both profiles deny io_uring (its ring issues socket and connect without a
// system call the filter could inspect), listen/accept (listen(2) on an
// unbound socket autobinds a port without the bind(2) landlock checks),
// pidfd_getfd (it takes a socket from another process), the kernel
// keyrings (keyctl, add_key, request_key: the user keyring is reachable by
// uid from any session keyring, and the persistent keyring holds Kerberos
// caches; landlock does not cover them) and any socketpair but AF_UNIX
// stream/seqpacket (a datagram socketpair can sendto(2) any pathname
// socket, which landlock before ABI 9 does not check).
//
// Without net grants: socket, connect, bind are denied outright, and sendto
// with a destination address. With net grants: socket is allowed only for
// AF_INET/AF_INET6 SOCK_STREAM with protocol 0 or IPPROTO_TCP (plus UDP and
// MPTCP when allowed), so landlock's TCP port rules see every connection;
// and MSG_FASTOPEN is denied on sendto/sendmsg/sendmmsg, because TCP Fast
// Open connects from sendto(2) without the connect(2) landlock checks.
func buildFilter(p Profile) filterPlan {
	pairTypes := withFlags(sockStream, sockSeqpacket)
	socketpair := deny("socketpair", noneOf(0, afUnix), noneOf(1, pairTypes...))
	always := []string{"listen", "accept", "accept4", "pidfd_getfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
		"keyctl", "add_key", "request_key"}
	fp := filterPlan{networkDenied: len(p.Net) == 0}
	group := seccomp.SyscallGroup{Action: seccomp.ActionErrno}

	if fp.networkDenied {
		group.Names = append([]string{"socket", "connect", "bind"}, always...)
		group.NamesWithCondtions = append(socketpair,
			deny("sendto", noneOf(4, 0))...) // a destination address
		fp.deniedSyscalls = slices.Concat(group.Names, []string{"sendto with an address"})
		fp.allowedSockets = []string{"socketpair AF_UNIX SOCK_STREAM", "socketpair AF_UNIX SOCK_SEQPACKET"}
		fp.deniedSockets = []string{"socket(2) of every family", "socketpair other than AF_UNIX stream/seqpacket"}
	} else {
		types := withFlags(sockStream)
		protos := []uint64{0, ipprotoTCP}
		allowed := []string{"AF_INET SOCK_STREAM IPPROTO_TCP", "AF_INET6 SOCK_STREAM IPPROTO_TCP"}
		denied := []string{"AF_UNIX", "AF_NETLINK", "AF_PACKET", "every family but AF_INET and AF_INET6",
			"SOCK_RAW", "every type but SOCK_STREAM"}
		if p.AllowUDP {
			types = append(types, withFlags(sockDgram)...)
			protos = append(protos, ipprotoUDP)
			allowed = append(allowed, "AF_INET SOCK_DGRAM IPPROTO_UDP", "AF_INET6 SOCK_DGRAM IPPROTO_UDP")
		} else {
			denied = append(denied, "SOCK_DGRAM (UDP)")
		}
		if p.AllowMPTCP {
			protos = append(protos, ipprotoMPTCP)
			allowed = append(allowed, "AF_INET SOCK_STREAM IPPROTO_MPTCP", "AF_INET6 SOCK_STREAM IPPROTO_MPTCP")
		} else {
			denied = append(denied, "IPPROTO_MPTCP")
		}
		denied = append(denied, "IPPROTO_SCTP", "every other protocol", "MSG_FASTOPEN on sendto/sendmsg/sendmmsg",
			"socketpair other than AF_UNIX stream/seqpacket")
		allowed = append(allowed, "socketpair AF_UNIX SOCK_STREAM", "socketpair AF_UNIX SOCK_SEQPACKET")

		group.Names = always
		var conds []seccomp.NameWithConditions
		conds = append(conds, deny("socket", noneOf(0, afInet, afInet6), noneOf(1, types...), noneOf(2, protos...))...)
		conds = append(conds, socketpair...)
		fastOpen := func(arg uint32) seccomp.ArgumentConditions {
			return seccomp.ArgumentConditions{{Argument: arg, Operation: seccomp.BitsSet, Value: msgFastopen}}
		}
		conds = append(conds, deny("sendto", fastOpen(3))...)
		conds = append(conds, deny("sendmsg", fastOpen(2))...)
		conds = append(conds, deny("sendmmsg", fastOpen(3))...)
		group.NamesWithCondtions = conds
		fp.deniedSyscalls = always
		fp.allowedSockets = allowed
		fp.deniedSockets = denied
	}
	fp.policy = seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{group}}
	return fp
}

// archGuard returns the second filter: EPERM for every system call made
// through an ABI other than the native one (on x86_64: i386 via int 0x80,
// and x32). go-seccomp-bpf sends a foreign-arch call to the default action,
// which is allow, so without this guard an i386 socketcall bypasses the
// network filter. It also returns the syscall_abis of the fact.
func archGuard() ([]bpf.Instruction, map[string]string, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, nil, fmt.Errorf("syscall ABI guard: %w", err)
	}
	deny := bpf.RetConstant{Val: seccompRetErr | errnoEPERM}
	allow := bpf.RetConstant{Val: seccompRetOK}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArc, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		deny,
	}
	abis := map[string]string{native.Name: "filtered"}
	if native.ID == arch.X86_64.ID {
		prog = append(prog,
			bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32SyscallBit, SkipTrue: 1},
			allow,
			deny,
		)
		abis["i386"] = "refused"
		abis["x32"] = "refused"
	} else {
		prog = append(prog, allow)
		abis["compat"] = "refused"
	}
	return prog, abis, nil
}
