// Package sandbox confines MCP server processes with Landlock and seccomp
// through a re-exec helper of the aegis binary, and reports the enforcement
// fact that is recorded before the server runs.
//
// # Invariants
//
//   - Deny by default. A [Profile] with no grants lets the child read and
//     write nothing but /dev/null, reach no network, and use no io_uring.
//     Exec support is never implied.
//   - The helper applies the whole profile, sets no_new_privs, verifies that
//     no protected path opens, and only then reports the [Fact]; the server
//     runs only after the proxy sends the go-ahead, so a fact is always on
//     record before the server's first instruction.
//   - A kernel or filesystem that cannot honour the profile refuses the exec
//     unless [Profile.BestEffort]; then each downgrade is listed in
//     [Fact.Degradations]. A refusal fact claims nothing enforced.
//   - The fact states only what the helper applied and read back; it never
//     restates the request as enforcement.
//   - A protected path is never reachable through a grant: [Profile.Validate]
//     refuses a grant that covers or lies inside one, and under BestEffort
//     the grant is narrowed around it (one rule per entry, so the
//     directories leading to it cannot be listed and entries created later
//     are not granted). The helper then tries to open every protected path
//     and refuses if one opens.
//   - The profile never appears in argv or the environment, and the server
//     inherits no descriptor but stdio: neither protocol pipe, nor any
//     descriptor the proxy itself inherited without close-on-exec.
//   - The server's whole process tree ends with the session. [StartTree]
//     starts the server (or the helper that becomes it) as the leader of
//     its own process group and makes this process a child subreaper, so
//     an orphan of the tree is reparented here, not to init. A tree is the
//     group, every process this process has as a child that is not the
//     registered leader of another tree (orphans, including those that
//     left the group with setsid or setpgid), and every descendant of
//     those. [Tree.Stop] sends them all SIGTERM, then SIGKILL after the
//     grace; [Tree.Kill] repeats SIGKILL until none is left; both reap the
//     orphans and return only when no process of the tree, zombies
//     included, is left (the leader's status is kept for [Tree.Wait]).
//     Hence a process that runs trees starts every child through
//     StartTree: any other child would be taken for an orphan.
//   - On Linux, a tree's leader gets SIGKILL from the kernel when this
//     process dies without ending it (PR_SET_PDEATHSIG): every leader is
//     started from one thread locked for good to a goroutine that never
//     returns, since the signal follows the thread that started the
//     child, not the process. The leader's own children are not covered:
//     they read EOF on stdin, as the leader does.
//   - This package imports nothing from the rest of aegis.
//
// # Wire format
//
// The proxy runs "SELF __confine-exec -- PROG ARGS..." ([Command]) with two
// pipes as [ControlFD] (3, proxy to helper) and [ReportFD] (4, helper to
// proxy):
//
//  1. proxy → fd 3: the [Profile] as one JSON line (at most 1 MiB; unknown
//     fields refused).
//  2. fd 4 → proxy: the [Fact] as one JSON line. A refusal is a Fact with
//     "refused" set and nothing enforced; the helper then exits with
//     [ExitRefused] without exec.
//  3. proxy → fd 3: the go-ahead, the single byte 'G' ([Child.Go]). Any
//     other byte, or EOF ([Child.Abort], a dead proxy), makes the helper
//     exit with ExitRefused without exec.
//  4. The helper execs the server. Every descriptor above stderr is
//     close-on-exec, so the proxy reads EOF on fd 4; if exec fails it first reads one line
//     {"exec_error":"..."} and the helper exits with [ExitExecFailed].
//
// # What is enforced
//
// Landlock (ABI 7 ruleset, TSYNC-free: enforced on the locked thread that
// execs): read grants get execute, read_file, read_dir; write grants add
// write_file, truncate, remove_*, make_dir, make_reg, make_sock, make_fifo,
// make_sym, but never make_char or make_block (a root child could mknod the
// disk and read it raw), refer or ioctl_dev. /dev/null is always granted
// read_file, write_file and truncate: shells and runtimes open it to discard
// output and fail without it, and it carries no data either way. Exec
// support grants /usr /lib /lib64 /bin /sbin /etc /proc and, of /dev, only
// zero, full, random and urandom (a grant on all of /dev would give a root
// child the raw block devices). A net grant becomes a TCP connect rule for
// its port; no port may be bound. IPC scoping (abstract unix sockets,
// signals) applies to processes outside the domain.
//
// Seccomp, loaded with no_new_privs and TSYNC, denies with EPERM; its
// default is allow (a network deny-list, not a syscall sandbox). See
// buildFilter for the exact rules: without net grants socket, connect,
// bind, listen, accept and sendto-with-address are denied; with net grants
// only AF_INET/AF_INET6 TCP sockets may be created (UDP and MPTCP only if
// allowed), so landlock's port rules see every connection, and
// MSG_FASTOPEN is denied. io_uring, pidfd_getfd, the kernel keyrings
// (keyctl, add_key, request_key) and datagram socketpairs are denied in
// both. Before the filter is loaded, the helper joins a new, empty session
// keyring on the thread that execs and reads it back, so the server does
// not share aegis's. A second filter refuses every system call made
// through a foreign ABI (i386 int 0x80, x32), which go-seccomp-bpf would
// otherwise send to its allow default.
//
// A root server keeps only chown, dac_override, fowner, fsetid, kill,
// setgid, setuid, net_bind_service, sys_chroot and audit_write: the bounding
// set loses the rest (sys_rawio would read /proc/kcore, sys_module and
// sys_boot would run kernel code).
//
// # Threat model and gaps
//
// The server is hostile code running with the grants of its profile.
// Known limits on Landlock ABI 7, each covered or recorded:
//
//   - MPTCP bypasses landlock TCP rules: denied at socket(2) unless
//     AllowMPTCP, which needs BestEffort and is a degradation.
//   - TCP Fast Open (sendto/sendmsg with MSG_FASTOPEN) connects without
//     connect(2) and bypasses landlock TCP rules on this kernel: denied.
//   - UDP is unrestricted before ABI 10: denied unless AllowUDP, which needs
//     BestEffort before ABI 10.
//   - Pathname unix-socket connect is unrestricted before ABI 9: AF_UNIX
//     socket(2) is denied; only stream/seqpacket socketpairs are allowed.
//   - Hosts are never enforced, only ports ([Fact.NetHostsEnforced]).
//   - Exec support is a named hole: the child can read /etc (as root,
//     /etc/shadow too) and walk /proc.
//   - Descriptors the proxy hands the server (stdio) are not filtered:
//     pass pipes, not sockets.
//   - Path protection is by path: a bind mount of a protected path
//     elsewhere is not detected (a second hard link is refused).
//
// Not covered at all, by landlock (ABI 7) or the filter (a deny-list whose
// default is allow); docs/CONFINEMENT.md says the same to users:
//
//   - File metadata outside the grants: stat (existence, size, owner,
//     times) of any path, and chmod, chown, utimes and xattr changes on
//     it. Landlock has no access right for them: a root server (it keeps
//     cap_chown and cap_fowner) can chmod or chown the signing key or the
//     record, though not read or write them.
//   - Every system call the filter does not name (kernel attack surface),
//     System V IPC and POSIX message queues of the same user, and user
//     namespaces (the landlock domain, the filters and no_new_privs hold
//     inside them).
//   - Resources: no CPU, memory, process-count or disk-space limit.
//   - The environment: the server gets the one its caller gives the
//     helper, secrets included (aegis wrap: aegis's; the gateway: a
//     minimal one and the server's own env, see proxy.ServerEnv).
//   - Under exec support, /proc: every process's cmdline and status, the
//     descriptions of the uid's keys in /proc/keys, the host's network
//     tables. Landlock's ptrace rules keep other processes' memory and
//     environ (ptrace access checks) out of reach.
//
// Covered beyond the grants: ptrace of and signals to processes outside the
// domain, and abstract unix sockets (landlock scoping, ABI 6 and up; the
// filter also denies AF_UNIX socket(2)); mount (landlock denies it to any
// confined process); the keyrings; the server's background processes (they
// end with the session, see [Tree]).
package sandbox
