// Command probe is the program the sandbox escape tests run under
// confinement. Each subcommand attempts one thing with raw system calls
// (never a library fallback that could hide which call failed) and reports
// on stdout:
//
//	ok [detail]          exit 0: the attempt succeeded
//	errno=N NAME at OP   exit 1: the kernel refused OP with errno N
//
// Exit status 2 is a usage error. It is built with CGO_ENABLED=0 so that it
// is static and needs no loader or libc grants.
package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const ipprotoMPTCP = 262

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	err := run(os.Args[1], os.Args[2:])
	var fail *failure
	switch {
	case err == nil:
	case errors.As(err, &fail):
		fmt.Printf("errno=%d %s at %s\n", int(fail.errno), unix.ErrnoName(fail.errno), fail.op)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: probe read FILE | write FILE | read-key FILE
       probe connect HOST:PORT | connect-mptcp HOST:PORT | connect-tfo HOST:PORT
       probe mptcp-hibits HOST:PORT | udp-send HOST:PORT | listen
       probe unix-connect PATH | socketpair-dgram-send PATH
       probe raw-socket | packet-socket | io-uring-setup | mknod-block PATH
       probe key-search user|session DESC | key-read ID | request-key DESC
       probe add-key | keyring-persistent | chmod PATH OCTAL
       probe fds | nnp | caps | true`)
	os.Exit(2)
}

type failure struct {
	op    string
	errno syscall.Errno
}

func (f *failure) Error() string { return fmt.Sprintf("%s: %v", f.op, f.errno) }

func fail(op string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return &failure{op: op, errno: errno}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func ok(format string, args ...any) error {
	fmt.Println(strings.TrimSpace("ok " + fmt.Sprintf(format, args...)))
	return nil
}

func arg(args []string, n int) string {
	if len(args) != n {
		usage()
	}
	return args[0]
}

func run(cmd string, args []string) error {
	switch cmd {
	case "true":
		return ok("")
	case "read", "read-key":
		f, err := os.Open(arg(args, 1))
		if err != nil {
			return fail("open", err)
		}
		defer f.Close()
		n, err := io.Copy(io.Discard, io.LimitReader(f, 1<<20))
		if err != nil {
			return fail("read", err)
		}
		return ok("%d bytes", n)
	case "mknod-block":
		// A block device node for the first disk (8:0) inside a grant.
		if err := unix.Mknod(arg(args, 1), unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))); err != nil {
			return fail("mknod", err)
		}
		return ok("")
	case "caps":
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return fail("capget", err)
		}
		eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
		return ok("effective=%#x", eff)
	case "write":
		if err := os.WriteFile(arg(args, 1), []byte("probe\n"), 0o600); err != nil {
			return fail("open", err)
		}
		return ok("")
	case "connect":
		return connect(arg(args, 1), unix.SOCK_STREAM, 0, false)
	case "connect-mptcp":
		return connect(arg(args, 1), unix.SOCK_STREAM, ipprotoMPTCP, false)
	case "connect-tfo":
		return connect(arg(args, 1), unix.SOCK_STREAM, 0, true)
	case "mptcp-hibits":
		return mptcpHighBits(arg(args, 1))
	case "udp-send":
		return udpSend(arg(args, 1))
	case "listen":
		return listenEphemeral()
	case "unix-connect":
		return unixConnect(arg(args, 1))
	case "socketpair-dgram-send":
		return socketpairDgramSend(arg(args, 1))
	case "raw-socket":
		return socketOnly(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "packet-socket":
		return socketOnly(unix.AF_PACKET, unix.SOCK_RAW, 0)
	case "io-uring-setup":
		return ioUringSetup()
	case "key-search":
		if len(args) != 2 {
			usage()
		}
		ring := unix.KEY_SPEC_USER_KEYRING
		if args[0] == "session" {
			ring = unix.KEY_SPEC_SESSION_KEYRING
		}
		id, err := unix.KeyctlSearch(ring, "user", args[1], 0)
		if err != nil {
			return fail("keyctl_search", err)
		}
		return readKey(id)
	case "key-read":
		id, err := strconv.Atoi(arg(args, 1))
		if err != nil {
			return err
		}
		return readKey(id)
	case "request-key":
		return requestKey(arg(args, 1))
	case "add-key":
		if _, err := unix.AddKey("user", "aegis-probe", []byte("probe"), unix.KEY_SPEC_PROCESS_KEYRING); err != nil {
			return fail("add_key", err)
		}
		return ok("")
	case "keyring-persistent":
		// The uid's persistent keyring (where Kerberos caches live),
		// linked into the probe's own process keyring.
		id, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, -1, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
		if err != nil {
			return fail("keyctl_get_persistent", err)
		}
		return ok("keyring %d", id)
	case "chmod":
		if len(args) != 2 {
			usage()
		}
		mode, err := strconv.ParseUint(args[1], 8, 32)
		if err != nil {
			return err
		}
		if err := unix.Chmod(args[0], uint32(mode)); err != nil {
			return fail("chmod", err)
		}
		return ok("")
	case "fds":
		return openFDs()
	case "nnp":
		nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
		if err != nil {
			return fail("prctl", err)
		}
		mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
		if err != nil {
			return fail("prctl", err)
		}
		return ok("no_new_privs=%d seccomp=%d", nnp, mode)
	}
	usage()
	return nil
}

func sockaddr(hostport string) (unix.Sockaddr, error) {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return nil, err
	}
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, nil
}

func connect(hostport string, typ, proto int, fastOpen bool) error {
	sa, err := sockaddr(hostport)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, typ, proto)
	if err != nil {
		return fail("socket", err)
	}
	defer unix.Close(fd)
	if fastOpen {
		// TCP Fast Open: the SYN goes out from sendto(2), without connect(2).
		if err := unix.Sendto(fd, []byte("probe"), unix.MSG_FASTOPEN, sa); err != nil {
			return fail("sendto", err)
		}
		return ok("")
	}
	if err := unix.Connect(fd, sa); err != nil {
		return fail("connect", err)
	}
	return ok("")
}

// mptcpHighBits asks for an MPTCP socket with garbage in the upper 32 bits
// of the int arguments: the kernel truncates them, a filter comparing full
// 64-bit values with "equal" would not.
func mptcpHighBits(hostport string) error {
	sa, err := sockaddr(hostport)
	if err != nil {
		return err
	}
	const hi = 0xdead_0000_0000
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, hi|unix.AF_INET, hi|unix.SOCK_STREAM, hi|ipprotoMPTCP)
	if e != 0 {
		return fail("socket", e)
	}
	defer unix.Close(int(fd))
	if err := unix.Connect(int(fd), sa); err != nil {
		return fail("connect", err)
	}
	return ok("")
}

func udpSend(hostport string) error {
	sa, err := sockaddr(hostport)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return fail("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte("probe"), 0, sa); err != nil {
		return fail("sendto", err)
	}
	return ok("")
}

// listenEphemeral listens without bind(2): the kernel autobinds an
// ephemeral port, a path that landlock's bind rule never sees.
func listenEphemeral() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return fail("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.Listen(fd, 1); err != nil {
		return fail("listen", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	return ok("port %d", sa.(*unix.SockaddrInet4).Port)
}

func unixConnect(path string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return fail("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return fail("connect", err)
	}
	return ok("")
}

// socketpairDgramSend uses an unnamed datagram socketpair to send to a
// pathname socket: no socket(2) and no connect(2) involved.
func socketpairDgramSend(path string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		return fail("socketpair", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := unix.Sendto(fds[0], []byte("probe"), 0, &unix.SockaddrUnix{Name: path}); err != nil {
		return fail("sendto", err)
	}
	return ok("")
}

func socketOnly(domain, typ, proto int) error {
	fd, err := unix.Socket(domain, typ, proto)
	if err != nil {
		return fail("socket", err)
	}
	unix.Close(fd)
	return ok("")
}

func ioUringSetup() error {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, e := unix.Syscall(425, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if e != 0 {
		return fail("io_uring_setup", e)
	}
	unix.Close(int(fd))
	return ok("")
}

// openFDs lists the descriptors above stderr that the process inherited.
func openFDs() error {
	var open []string
	for fd := 3; fd < 64; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			open = append(open, strconv.Itoa(fd))
		}
	}
	return ok("%s", strings.Join(open, ","))
}

func readKey(id int) error {
	buf := make([]byte, 4096)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
	if err != nil {
		return fail("keyctl_read", err)
	}
	return ok("%d bytes", n)
}

// requestKey finds a user key by description through the thread, process
// and session keyrings, with no callout (a NULL callout_info), and reads it.
func requestKey(desc string) error {
	typ, err := unix.BytePtrFromString("user")
	if err != nil {
		return err
	}
	d, err := unix.BytePtrFromString(desc)
	if err != nil {
		return err
	}
	id, _, e := unix.Syscall6(unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(d)), 0, 0, 0, 0)
	if e != 0 {
		return fail("request_key", e)
	}
	return readKey(int(id))
}
