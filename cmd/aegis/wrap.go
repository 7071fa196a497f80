package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/relay"
	"github.com/aegis-dev/aegis/sandbox"
)

const wrapUsage = `Usage:
  aegis wrap --audit PATH --signing-key PATH [--state-dir DIR] [--max-state-size SIZE]
             [--hub URL[,URL…] [--host NAME] [--hub-nkey FILE | --hub-creds FILE] [--hub-ca FILE]]
             [--checkpoint-lines N] [--checkpoint-interval D]
             [--witness-policy FILE [--witness-interval D]]
             [--metrics-listen ADDR [--metrics-allow-remote]] [--otlp-endpoint URL]
             [--policy FILE [--approval-ttl D] [--approvers FILE]]
             [--confine [--allow-read P]… [--allow-write P]… [--allow-net HOST:PORT]…
                        [--allow-exec-support] [--allow-udp] [--allow-mptcp] [--best-effort]]
             -- CMD [ARGS…]

Runs the MCP server CMD and relays its stdio with the host byte for byte,
recording every frame in the state directory's event stream and every
tools/call as a signed, hash-chained audit record:

  - a tools/call reaches the server only after its intent is on disk;
  - its answer reaches the host only after its outcome is on disk;
  - the record is projected to --audit (schema v2 JSON lines), which
    'aegis verify' checks offline and 'aegis export' can rebuild.

--audit and --signing-key are both required (make a key with 'aegis
keygen'). The key is loaded, the store opened and the record file created
and locked before the server starts: a wrap that cannot record never starts
a server. One process at a time writes a record file; a second wrap (or
gateway) on the same --audit is refused and told the first one's PID. The
directory of --audit must exist. '--' ends aegis's flags;
everything after it is the server's argv, --help included.

--policy FILE decides every tools/call before it may reach the server: a
refused call (deny, rate_limit over budget, pending_approval) is answered
with JSON-RPC error -32042 and never relayed; a batch with one refused call
is refused whole; the error's data.aegis says why (reason) and what to do
(hint). A pending call prints its arguments and the 'aegis approve ID'
command to run; an approval lets the same tool with the same arguments
through once, until the approval expires (--approval-ttl, default 10m,
from the refusal). See 'aegis help approve'. 'aegis approve' finds this
process through a 0600 credentials file in $XDG_RUNTIME_DIR/aegis, or, with
XDG_RUNTIME_DIR unset, in run/ inside the state directory: then give it the
same --state-dir.

Without --approvers, any process of this user that can run 'aegis approve'
can approve, an agent with a shell tool included. --approvers FILE (public
keys from 'aegis keygen --approver', one per line) takes an approval only
when it carries a signature, by one of those keys, of this approval's id,
this session, the tool and the arguments' digest: 'aegis approve
--approver-key KEY ID' asks for the key's passphrase on the terminal. Any
other approve is refused and recorded; the decision line of a signed one
names the approver's key id. A file that cannot be read or parsed, or that
lists nobody, refuses the start. See 'aegis help approve'.

--confine runs the server under Landlock and seccomp (deny by default; the
--allow-* flags grant paths and TCP ports) and signs what was enforced into
the record before the server starts. It needs Linux: elsewhere (macOS)
aegis refuses to start rather than run the server unconfined. Grants that would expose the signing
key, the record or aegis's directories, missing grant paths and anything the
kernel cannot enforce are refused unless --best-effort. The filter also
denies the kernel keyrings (keyctl, add_key, request_key), and the server
starts in a new, empty session keyring.

Memory stays bounded whatever the server or the host writes: while the
frames read from one side and not yet on disk and written on pass a bound
(a few dozen MiB, at least one 16 MiB frame), aegis stops reading that side
until they are. A flood of large frames slows to the disk's pace.

--max-state-size SIZE (such as 10GiB or 500MiB) caps the state directory's
event stream. At the cap aegis fails closed: the event that does not fit is
refused, the server is stopped, and aegis exits 1 saying the directory
reached its cap. Nothing is ever dropped or deleted to make room; every
acknowledged event stays. Raise the cap, or export the record and start a
new --state-dir. Without it the stream grows until the disk is full, which
fails the same way.

--hub links the event store to a fleet's NATS hub as a leaf node (the
hub's leaf node URLs, nats:// or tls://), under the JetStream domain
--host (default: this machine's host name), with --hub-nkey (the link key
'aegis hub enroll' made for this host) or --hub-creds, and --hub-ca, for
the link. The hub mirrors the stream once 'aegis hub enroll HOST' made
its mirror. Nothing waits for the hub: a call still waits only for this
machine's disk, and while the link is down the events wait here. See
'aegis help hub' and docs/fleet.md. With --policy, approvals can also be
given over the hub by a fleet approver (aegis approve --hub).

Every tools/list answer pins the server's tools (keyed by CMD [ARGS…]) to
the digest of their definitions at first sight, across sessions; a tool
that later changes, or is added, is recorded, and under --policy a call to
it is refused until 'aegis approve ID' pins its new definition (the
policy's on_tool_change; see 'aegis help pins').

The record gets a signed checkpoint (its Merkle tree's size and root) every
--checkpoint-lines lines (default 1024), --checkpoint-interval after the
first line none covers yet (default 10s), and at every close: an event in
the stream, and a line of the RECORD.checkpoints file beside it. See
'aegis help verify'.

Each checkpoint is also a leaf of the state directory's anchor log (origin
aegis/anchor/<key_id>, one per state directory and key, in the event
stream). --witness-policy FILE (or the policy's witnesses:) submits the
anchor log's checkpoints to the witnesses it lists with a URL (C2SP
tlog-witness), at most once per --witness-interval (default 10s) per
witness, beside the relay: no call waits for a witness. Their
cosignatures are events; 'aegis prove anchor' puts them in a bundle that
'aegis verify --witness-policy' checks offline. See docs/VERIFY.md.

` + telemetryHelp + `
Not covered by --confine: file metadata outside the grants (stat, and
chmod/chown/utimes/xattrs: a root server can chmod the signing key, though
not read it); system calls the filter does not name, System V IPC and POSIX
message queues; CPU, memory, process and disk limits; the environment
(the server inherits aegis's); the stdio descriptors; under
--allow-exec-support, /proc (every process's cmdline, key descriptions in
/proc/keys) and /etc; hosts of --allow-net (ports only). Covered: ptrace of
and signals to processes outside the sandbox, abstract unix sockets, mount.
The full list is in docs/CONFINEMENT.md of the source.

The server's stderr passes through to aegis's stderr. The server runs in
its own process group, and aegis is the subreaper of everything it starts:
SIGINT and SIGTERM are forwarded to all of it (a second one kills it all).
Before the server starts (while aegis opens its state directory and
catches up the record), a signal ends aegis at once, with 128+N, and no
server is started. A state directory whose event stream lost messages is
refused before any server runs (see docs/FILES.md).
When the server exits, whatever it left running, even in a new session,
gets SIGTERM and, --grace later (default 5s), SIGKILL; aegis returns only
once every process the server started is gone. aegis exits with the server's
exit status (128+N if a signal N ended it), 1 if recording failed, 127 if
the server could not be started.

Example:
  $ aegis keygen --out key
  $ aegis wrap --audit calls.aarl --signing-key key -- npx -y @modelcontextprotocol/server-everything
`

func (m *Main) runWrap(ctx context.Context, args []string) error {
	dash := -1
	for i, a := range args {
		if a == "--" {
			dash = i
			break
		}
	}
	flagArgs, argv := args, []string(nil)
	if dash >= 0 {
		flagArgs, argv = args[:dash], args[dash+1:]
	}
	fs := m.newFlagSet("wrap")
	audit := fs.String("audit", "", "record file")
	keyPath := fs.String("signing-key", "", "signing key file")
	stateDir := fs.String("state-dir", "", "state directory")
	var maxState sizeFlag
	fs.Var(&maxState, "max-state-size", "cap on the state directory's event stream, such as 10GiB")
	hubf := addHubFlags(fs)
	cpf := addCheckpointFlags(fs)
	tf := addTelemetryFlags(fs)
	grace := fs.Duration("grace", relay.DefaultGrace, "how long the server may answer after the host closed stdin")
	policyPath := fs.String("policy", "", "policy file deciding every tools/call")
	approvalTTL := fs.Duration("approval-ttl", proxy.DefaultApprovalTTL, "how long a pending approval can be acted on")
	approversPath := fs.String("approvers", "", "approvers file: only their signed approvals are taken")
	confine := fs.Bool("confine", false, "confine the server with Landlock and seccomp")
	cf := &confineFlags{
		execSupport: fs.Bool("allow-exec-support", false, "grant read on the system dirs a dynamic program needs"),
		bestEffort:  fs.Bool("best-effort", false, "run with what the kernel can enforce, recording each degradation"),
		allowUDP:    fs.Bool("allow-udp", false, "allow UDP sockets (Landlock cannot restrict them on this kernel)"),
		allowMPTCP:  fs.Bool("allow-mptcp", false, "allow MPTCP sockets (Landlock cannot restrict them)"),
	}
	fs.Var(&cf.read, "allow-read", "grant read on PATH (repeatable)")
	fs.Var(&cf.write, "allow-write", "grant read and write on PATH (repeatable)")
	fs.Var(&cf.net, "allow-net", "grant TCP connect to HOST:PORT (repeatable)")
	if err := m.parseFlags(fs, wrapUsage, flagArgs); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("aegis wrap --audit PATH --signing-key PATH -- "+fs.Arg(0)+" … (a client that takes the first `--` for itself, such as the MCP Inspector, needs a `--` of its own before aegis)", "wrap takes no positional arguments; put the server command after `--` (got %q)", fs.Arg(0))
	}
	if dash < 0 || len(argv) == 0 {
		return usagef("aegis wrap --audit PATH --signing-key PATH -- CMD [ARGS…]", "wrap requires a server command after `--`")
	}
	if *audit == "" || *keyPath == "" {
		return usagef("make a key with 'aegis keygen --out KEY', then: aegis wrap --audit calls.aarl --signing-key KEY -- CMD", "wrap needs both --audit and --signing-key")
	}

	maxBytes, err := stateSizeCap(maxState)
	if err != nil {
		return err
	}
	hub, err := hubf.config()
	if err != nil {
		return err
	}
	checkpoints, err := cpf.policy()
	if err != nil {
		return err
	}
	witnesses, err := cpf.witnesses()
	if err != nil {
		return err
	}
	tcfg, err := tf.config(m)
	if err != nil {
		return err
	}
	key, err := m.loadKey(*keyPath)
	if err != nil {
		return err
	}
	var set *policy.Set
	if *policyPath != "" {
		data, err := os.ReadFile(*policyPath)
		if err != nil {
			return withHint(fmt.Errorf("could not load policy %s: %w", *policyPath, err), "--policy takes a YAML policy file; see 'aegis help wrap'")
		}
		if set, err = policy.Parse(*policyPath, data); err != nil {
			return withHint(fmt.Errorf("could not load policy: %w", err), "fix the policy file; the server was not started")
		}
	} else if *approvalTTL != proxy.DefaultApprovalTTL {
		return usagef("add --policy FILE", "--approval-ttl needs --policy")
	}
	if *approvalTTL <= 0 {
		return usagef("for example --approval-ttl 10m", "--approval-ttl must be positive")
	}
	if set != nil && set.Witnesses() != nil {
		if witnesses != nil {
			return usagef("name the witnesses once: in the policy's witnesses: or with --witness-policy", "--witness-policy and the policy's witnesses: both name witnesses")
		}
		witnesses = set.Witnesses()
	}
	if *approversPath != "" && set == nil {
		return usagef("add --policy FILE: approvals exist only under a policy", "--approvers needs --policy")
	}
	approvers, err := m.loadApprovers(*approversPath)
	if err != nil {
		return err
	}
	var profile *sandbox.Profile
	if *confine {
		if err := confineSupported(runtime.GOOS, "--confine"); err != nil {
			return err
		}
		p, err := m.confineProfile(cf, *keyPath, *audit, *stateDir)
		if err != nil {
			return err
		}
		profile = p
	} else if cf.any() {
		return usagef("add --confine to confine the server; the --allow-* flags only shape its profile", "--allow-read, --allow-write, --allow-net, --allow-exec-support, --allow-udp, --allow-mptcp and --best-effort need --confine")
	}
	// Signals work from here on: until the server starts, one ends aegis
	// at once (opening and catching up a big state directory takes time),
	// and no server is started; from then on Wrap forwards them to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	start := m.watchStart(ctx, sigs)
	defer start.done()

	store, err := m.openStoreToRecord(start.ctx, *stateDir, true, maxBytes, hub)
	if err != nil {
		return start.err(err)
	}
	defer store.Close(context.Background())
	tx, err := m.startTelemetry(start.ctx, store, tcfg)
	if err != nil {
		return start.err(err)
	}
	defer m.closeTelemetry(tx)
	log := m.logger()
	anchor, stopWitnessing, err := startAnchor(store, key, witnesses, *cpf.witnessInterval, log)
	if err != nil {
		return start.err(err)
	}
	defer stopWitnessing()

	open := func(fact *sandbox.Fact) (*projector.Session, error) {
		cfg := projector.SessionConfig{Store: store, Key: key, AuditPath: *audit, Argv: argv, Version: Version, Logger: log, IndexEvery: indexEvery, Checkpoints: checkpoints, Anchor: anchor}
		if fact != nil {
			cfg.Confinement = fact
		}
		return start.openSession(cfg)
	}

	self, _ := os.Executable()
	res, werr := relay.Wrap(ctx, relay.Config{
		Open: open, Confine: profile, Self: self,
		Stdin: m.Stdin, Stdout: m.Stdout, Stderr: m.Stderr,
		Argv: argv, Signals: sigs, Grace: *grace, Logger: log,
		Policy: set, ApprovalTTL: *approvalTTL, Approvers: approvers, Prompt: m.Stderr,
		Approvals: m.approvalServer(store), ApprovalLink: m.approvalLinker(store.Dir()),
	})
	var se *relay.StartError
	var ce *relay.ConfineError
	var oe *proxy.OpenError
	switch {
	case errors.As(werr, &ce):
		if errors.Is(werr, sandbox.ErrRefused) {
			return withHint(fmt.Errorf("confinement refused; the server did not run and nothing was recorded as enforced: %w", ce.Err), "fix the --allow-* grants, or pass --best-effort to run with what the kernel can enforce (the record then lists each degradation)")
		}
		return fmt.Errorf("%w", werr)
	case errors.As(werr, &oe):
		return openSessionError(oe.Err, *audit)
	}
	sess := res.Session
	var stop *relay.StoppedError
	if werr != nil && !errors.As(werr, &se) && !errors.As(werr, &stop) {
		sess.Abandon()
		hint := "the record holds everything acknowledged before the failure; 'aegis verify' will report the session as unfinished"
		if errors.Is(werr, events.ErrFull) {
			hint = fullHint(store.Dir())
		} else if errors.Is(werr, events.ErrDiskFull) {
			hint = diskFullHint(store.Dir())
		}
		return &exitError{code: 1, err: werr, hint: hint}
	}
	if res.Confinement != nil {
		for _, d := range res.Confinement.Degradations {
			m.warnf("confinement degraded (--best-effort): %s", d)
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sess.Close(cctx); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("close audit session: %w", err)}
	}
	m.closeTelemetry(tx)
	tx = nil
	stopWitnessing() // saves the anchor log's snapshot, before the store closes
	if err := store.Close(cctx); err != nil {
		return &exitError{code: 1, err: err}
	}
	if se != nil {
		return &exitError{code: 127, err: se, hint: "check the command after `--`; the record holds an open and a close line for this attempt"}
	}
	if stop != nil {
		hint := "the record is closed and complete: each call the server had not answered has an outcome that says why, and child.exited says what aegis did (aegis replay shows both)"
		if errors.Is(stop, relay.ErrFrameTooLarge) {
			hint += "; a frame of more than 16 MiB cannot be recorded as one event, so an MCP server or host must keep each message under that size"
		}
		return &exitError{code: 1, err: stop, hint: hint}
	}
	if res.ServerExitedFirst {
		m.warnf("the server exited (status %d) before the host closed stdin", res.ExitCode)
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}

// confineFlags are the --allow-* flags of wrap.
type confineFlags struct {
	read, write, net        multiFlag
	execSupport, bestEffort *bool
	allowUDP, allowMPTCP    *bool
}

func (c *confineFlags) any() bool {
	return len(c.read)+len(c.write)+len(c.net) > 0 || *c.execSupport || *c.bestEffort || *c.allowUDP || *c.allowMPTCP
}

// confineProfile turns the flags into a profile that also protects aegis's
// own files from the server: the signing key, the state directory, the
// runtime directory and the record file.
func (m *Main) confineProfile(c *confineFlags, keyPath, audit, stateDirFlag string) (*sandbox.Profile, error) {
	abs := func(flag, p string) (string, error) {
		a, err := filepath.Abs(p)
		if err != nil {
			return "", usagef("give an absolute or relative path", "%s %q: %v", flag, p, err)
		}
		return a, nil
	}
	p := &sandbox.Profile{ExecSupport: *c.execSupport, BestEffort: *c.bestEffort, AllowUDP: *c.allowUDP, AllowMPTCP: *c.allowMPTCP}
	for _, r := range c.read {
		a, err := abs("--allow-read", r)
		if err != nil {
			return nil, err
		}
		p.ReadPaths = append(p.ReadPaths, a)
	}
	for _, w := range c.write {
		a, err := abs("--allow-write", w)
		if err != nil {
			return nil, err
		}
		p.WritePaths = append(p.WritePaths, a)
	}
	for _, n := range c.net {
		host, port, err := net.SplitHostPort(n)
		pn, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || perr != nil || host == "" || pn == 0 {
			return nil, usagef("--allow-net takes HOST:PORT, e.g. 127.0.0.1:8080 (Landlock enforces the port; the host is recorded, not enforced)", "bad --allow-net %q", n)
		}
		p.Net = append(p.Net, sandbox.NetGrant{Host: host, Port: uint16(pn)})
	}
	if err := m.protect(p, keyPath, audit, stateDirFlag); err != nil {
		return nil, err
	}
	return p, nil
}

// sameDir reports whether a and b name the same directory path.
func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// approvalServer returns the hook that serves approval requests for a
// wrap session: it listens on the store's approval channel and writes the
// approver credentials (0600) to the runtime directory for aegis approve,
// deny and approvals to find; stop removes them.
func (m *Main) approvalServer(store *events.Store) func(string, func(proxy.ApprovalOp) proxy.ApprovalReply) (func(), error) {
	var noted sync.Once // a gateway serving HTTP clients opens a channel per session
	return func(session string, handle func(proxy.ApprovalOp) proxy.ApprovalReply) (func(), error) {
		l, err := store.ListenApprovals(session, func(req events.ApprovalRequest) events.ApprovalReply {
			r := handle(proxy.ApprovalOp{Op: req.Op, ApprovalID: req.ApprovalID, Reason: req.Reason, By: req.By, Approver: req.Approver})
			out := events.ApprovalReply{OK: r.OK, Error: r.Error, Message: r.Message}
			conv := func(p proxy.PendingApproval) events.PendingApproval {
				return events.PendingApproval{ApprovalID: p.ApprovalID, ToolID: p.ToolID,
					RequestDigest: p.RequestDigest, ArgsDigest: p.ArgsDigest, RequestedAt: p.RequestedAt, ExpiresAt: p.ExpiresAt,
					Arguments: p.Args, ArgumentsBytes: p.ArgsBytes, MatchedRule: p.MatchedRule, Profile: p.Profile, PinDigest: p.PinDigest,
					Principal: p.Principal.Short()}
			}
			for _, p := range r.Pending {
				out.Pending = append(out.Pending, conv(p))
			}
			if r.Decided != nil {
				d := conv(*r.Decided)
				out.Decided = &d
			}
			return out
		})
		if err != nil {
			return nil, err
		}
		stateDir, err := filepath.Abs(store.Dir())
		if err != nil {
			l.Close()
			return nil, err
		}
		dir, err := events.RuntimeDir(m.Getenv, stateDir)
		if err != nil {
			l.Close()
			return nil, withHint(fmt.Errorf("runtime directory: %w", err), runtimeDirHint(m.Getenv))
		}
		path, err := events.WriteApprovalCreds(dir, l.Creds())
		if err != nil {
			l.Close()
			return nil, err
		}
		if m.Getenv("XDG_RUNTIME_DIR") == "" {
			if def, err := defaultStateDir(m.Getenv); err != nil || !sameDir(def, stateDir) {
				noted.Do(func() {
					fmt.Fprintf(m.Stderr, "aegis: note: XDG_RUNTIME_DIR is unset, so the approval channel is found through --state-dir; run aegis approve, deny and approvals with --state-dir %s\n", stateDir)
				})
			}
		}
		return func() {
			l.Close()
			events.RemoveApprovalCreds(path)
		}, nil
	}
}

// loadKey loads a signing key file, turning each refusal into a message
// that says what to do.
func (m *Main) loadKey(keyPath string) (projector.PrivateKey, error) {
	key, err := projector.LoadKeyFile(keyPath)
	if err == nil {
		return key, nil
	}
	switch {
	case errors.Is(err, projector.ErrKeyFilePermissions):
		return key, withHint(fmt.Errorf("refusing signing key: %w", err), platform.FixCommand(keyPath, false))
	case errors.Is(err, projector.ErrInsecureDevKey):
		return key, withHint(fmt.Errorf("refusing signing key: %w", err), "generate a real one with: aegis keygen --out KEY")
	case errors.Is(err, os.ErrNotExist):
		return key, withHint(fmt.Errorf("signing key %s does not exist", keyPath), "generate one with: aegis keygen --out "+keyPath)
	}
	return key, withHint(fmt.Errorf("refusing signing key: %w", err), "a key file is one line of 64 lowercase hex characters, as 'aegis keygen' writes it")
}

// protect adds aegis's own files to a confinement profile: the signing key,
// the record, the state directory and the runtime directory.
func (m *Main) protect(p *sandbox.Profile, keyPath, audit, stateDirFlag string) error {
	stateDir, err := m.stateDir(stateDirFlag)
	if err != nil {
		return err
	}
	for _, q := range []string{keyPath, audit, stateDir} {
		a, err := filepath.Abs(q)
		if err != nil {
			return err
		}
		p.Protect = append(p.Protect, a)
	}
	// The runtime directory holds the approver credentials of this and
	// other sessions: with them a server could approve its own calls.
	if x := m.Getenv("XDG_RUNTIME_DIR"); x != "" {
		if filepath.IsAbs(x) {
			p.Protect = append(p.Protect, filepath.Join(x, "aegis"))
		}
	} else if def, err := defaultStateDir(m.Getenv); err == nil {
		// Without it, each state directory has its own (inside it, so
		// protected above); the default one serves every wrap run
		// without --state-dir.
		if a, err := filepath.Abs(def); err == nil && a != p.Protect[len(p.Protect)-1] {
			p.Protect = append(p.Protect, a)
		}
	}
	return nil
}

// openSessionError says why a session could not be opened on the record
// file audit, and what to do about it. The server never ran.
func openSessionError(err error, audit string) error {
	var unsafe *projector.UnsafeFileError
	switch {
	case errors.As(err, &unsafe):
		return withHint(unsafe, unsafe.Hint()+". The server was not started and nothing was recorded")
	case errors.Is(err, projector.ErrRecordDiverged):
		return withHint(fmt.Errorf("will not append to %s: %w", audit, err), "keep that file as evidence and check it with 'aegis verify'; use a new --audit path, or rebuild the record with 'aegis export'")
	case errors.Is(err, projector.ErrTornTail):
		return withHint(fmt.Errorf("will not append to %s: %w", audit, err), "the last write to it was cut short; check it with 'aegis verify' and use a new --audit path")
	case errors.Is(err, projector.ErrRecordLocked):
		return withHint(fmt.Errorf("will not append to %s: %w", audit, err), "a record file has one writer at a time, or its chains interleave; wait for that process to end, or give this one its own --audit path. The server was not started")
	case errors.Is(err, events.ErrDamaged):
		return withHint(fmt.Errorf("will not start; no server was started: %w", err), damageHint)
	case errors.Is(err, projector.ErrNoRecordDir):
		return withHint(err, "create the directory first, or give --audit a path in an existing directory. The server was not started and nothing was recorded")
	}
	return fmt.Errorf("open audit session: %w", err)
}

// confineSupported refuses confinement (what asks for it) on a system
// other than Linux: Landlock and seccomp are Linux's, and aegis never runs
// a server unconfined that the user asked to confine.
func confineSupported(goos, what string) error {
	if goos == "linux" {
		return nil
	}
	return withHint(fmt.Errorf("%s needs Linux (Landlock and seccomp confine the server), and this is %s: nothing was started", what, goos),
		"run without it (calls are still recorded and decided, the server is just not confined), or run aegis on Linux")
}
