package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const consoleUsage = `Usage:
  aegis console [--state-dir DIR | --name NAME] [--listen 127.0.0.1:PORT] [--allow-remote] [--approver-key FILE]
  aegis console --hub URL (--hub-nkey FILE | --hub-creds FILE) [--hub-ca FILE] [--host HOST] [--listen …] [--approver-key FILE]

Serves a web page for the human at the keyboard: the sessions of the
state directory (the columns of 'aegis sessions'), one session's
transcript (what 'aegis replay' prints, following it while it runs), and
the tool calls that wait for approval in every running aegis process of
yours (as 'aegis approvals' lists them: tool, arguments, digest, session,
expiry), with Approve and Deny buttons that send exactly what 'aegis
approve --session' and 'aegis deny --session' send. With --approver-key
(the file 'aegis keygen --approver' wrote) every Approve asks for the
key's passphrase in the page and is signed with the key, as 'aegis
approve --approver-key' signs it, so a process run with --approvers takes
it; without it the console's Approve is unsigned, and such a process
refuses it. The page updates
itself over server-sent events; its tab title counts the approvals that
wait, and it raises a browser notification when you allow it. Every
asset is in the binary: the page loads nothing from the network.

Records: each record file the state directory's index knows, with what
'aegis verify' prints first for it (Verified, Indeterminate or Tampered,
and why), its files (sealed segments and the live file) and the last
signed checkpoint it was checked against (lines, root, when written). The
verdict is pinned to the keys the state directory's sessions signed with
(their key_ids, from the index), as 'aegis verify --key' would pin it; a
record that publishes another key stays unpinned, and the page says
which key. A check reads the whole record, so it runs in the background,
one file at a time, only after a file changed, and at most every 10
seconds per record (--recheck-every); the page says when it was taken
and how many lines it read. A record whose session still runs is
Indeterminate (no close yet).

With --hub (the hub's client URLs) it shows the fleet of that hub
instead of a state directory: each enrolled host (the hub's mirror
AEGIS_<host> of its stream) with its mirror's lag (how many messages it
is behind the host's stream), when the hub last heard from the host, the
mirror's last sequence and last message time, and the calls that wait
for approval on any host, with their host (as 'aegis approvals --hub'
lists them). Approve and Deny go over the hub, as 'aegis approve --hub
--host HOST --session ID' sends them. The hosts and the mirrors are read
by the hub's reader: --hub-creds, or a user in the URLs; the approvals
are asked as the fleet approver of --hub-nkey (the key 'aegis hub
approver' wrote), else of --hub-creds. With --host, that host's sessions
and transcripts are read from its mirror, as 'aegis sessions --hub' and
'aegis replay --hub' read them. The hub is asked in the background while
a page is open, a round every few seconds; the page says when.

On start it prints a login link on stdout. The link works once: opening
it sets a session cookie (HttpOnly, SameSite=Strict) in that browser, and
any later use of it is refused; restart aegis console for a new one.
Every request must carry that cookie and a Host header naming the
console's address; a request that changes something must also come from
the console's own page (its Origin).

  --state-dir DIR   the state directory of the aegis processes to show
                    (default $XDG_STATE_HOME/aegis or ~/.local/state/aegis,
                    or the only one aegis init made under it); running
                    processes are found as 'aegis approvals' finds them
  --name NAME       the state directory aegis init made for the server
                    NAME (DEFAULT/NAME), instead of --state-dir
  --listen ADDR     the address to serve on (default 127.0.0.1 and a free
                    port). An address off loopback is refused unless
                    --allow-remote is given as well
  --allow-remote    allow a --listen address off loopback (plain HTTP: a
                    warning says so); it must name one address
  --approver-key F  sign approvals with this approver key; its passphrase
                    is asked in the page with each Approve, used for that
                    one approval and never kept (loopback only)
  --recheck-every D the least time between two checks of one record file
                    (default 10s, at least 1s): longer for large records,
                    each check reads the whole file
  --hub URL         show the fleet of this hub (client URLs,
                    comma-separated) instead of a state directory
  --hub-nkey FILE   the fleet approver's key that asks the hosts
  --hub-creds FILE  NATS credentials for the hub (the reader of the
                    mirrors; the approver too without --hub-nkey)
  --hub-ca FILE     CA bundle (PEM) the hub's certificate must chain to
  --host HOST       with --hub: list this host's sessions from its mirror

What it reads: while an aegis process holds the state directory, that
process's stream itself, through the read-only identity in its
credentials file: the sessions list and an open transcript are woken
each time a message is stored, and read what is new. (From an
aegis that offers no reader, the index it saves every second.) With no
process holding the directory, a private snapshot copy of the stream,
read once. The approvals come live from the running processes over
their approval channel. The console never takes the state directory's
lock, so it never keeps an aegis wrap from starting.

Approval links: an aegis gateway of the same state directory gives a
host that shows URL elicitations a link to the one approval its call
waits for, on this console: the link works once, for that approval only,
until it expires, and opens a page that says what was asked, with
Approve and Deny (signed with --approver-key's passphrase). The console
writes console-<pid>.json (0600) into the runtime directory for the
gateway to find it, with the key that links are made with; a restart
ends every earlier link.

Stop it with Ctrl-C.

Example:
  $ aegis console
  aegis console: open this link once to log in:
  http://127.0.0.1:40117/login?token=5f0c…
`

func (m *Main) runConsole(ctx context.Context, args []string) error {
	fs := m.newFlagSet("console")
	sc := addStateChoice(fs)
	dir := sc.dir
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	allowRemote := fs.Bool("allow-remote", false, "allow an address off loopback")
	keyPath := fs.String("approver-key", "", "approver key to sign approvals with")
	recheck := fs.Duration("recheck-every", recordEvery, "least time between two checks of one record file")
	hub := addApproverFlags(fs)
	if err := m.parseFlags(fs, consoleUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run: aegis console [--state-dir DIR | --name NAME] [--listen 127.0.0.1:PORT]", "console: unexpected argument %q", fs.Arg(0))
	}
	if err := hub.noneWithout(); err != nil {
		return err
	}
	if *recheck < recordEveryMin {
		return usagef(fmt.Sprintf("give --recheck-every %v or more, such as --recheck-every 1m", recordEveryMin), "console: --recheck-every %v: a check reads the whole record file, so it cannot be asked for more often than every %v", *recheck, recordEveryMin)
	}
	if hub.set() && sc.set() {
		return usagef("aegis console --state-dir DIR, or aegis console --hub URL [--host HOST] --hub-nkey FILE|--hub-creds FILE", "console: --state-dir and --hub are alternatives: the console shows one state directory, or the fleet of one hub")
	}
	remote, err := console.CheckListen(*listen, *allowRemote)
	if err != nil {
		if remote && !*allowRemote {
			return usagef("serve on loopback (127.0.0.1:PORT), or add --allow-remote if you mean it", "console: %v", err)
		}
		return usagef("name one address, such as --listen 192.0.2.7:8700", "console: %v", err)
	}
	var key *approverKeyFile
	signer := ""
	if *keyPath != "" {
		if remote {
			return usagef("serve on loopback to sign approvals in the page", "console: --approver-key with an address off loopback would send the key's passphrase over plain HTTP")
		}
		if key, err = readApproverKey(*keyPath); err != nil {
			return err
		}
		signer = filepath.Base(*keyPath)
	}
	stateDir := ""
	if !hub.set() {
		if err := m.chooseStateDir(sc); err != nil {
			return err
		}
		if stateDir, err = m.stateDir(*dir); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return withHint(fmt.Errorf("console: listen on %s: %w", *listen, err), "choose another port with --listen 127.0.0.1:PORT")
	}
	defer ln.Close()
	hosts := console.ListenHosts(ln.Addr())
	if h, _, _ := net.SplitHostPort(*listen); remote && net.ParseIP(h) == nil {
		hosts = append([]string{net.JoinHostPort(h, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))}, hosts...)
	}
	if remote {
		m.warnf("the console listens on %s, off loopback, over plain HTTP: anyone who can reach it and read the login link, or the cookie on the wire, can approve calls", ln.Addr())
	}
	bg, cancelBG := context.WithCancel(ctx) // the background checks and questions
	defer cancelBG()
	changed := make(chan struct{}, 1)
	var src console.Source
	if hub.set() {
		src = newHubConsole(bg, m, hub, key)
	} else {
		local := &consoleSource{m: m, dirFlag: *dir, stateDir: stateDir, key: key, records: newRecordChecker(bg, stateDir, *recheck)}
		go local.feed(bg, changed)
		src = local
	}
	var linkKey []byte
	if !hub.set() {
		// Approval links: a gateway of this state directory links its
		// pending approvals here (console_links.go). Without them the
		// console still serves; the gateway's hosts get the hint instead.
		path, key, err := m.offerLinks(stateDir, "http://"+hosts[0])
		if err != nil {
			m.warnf("approval links are off: %v", err)
		} else {
			linkKey = key
			defer os.Remove(path)
		}
	}
	srv, err := console.New(console.Config{Source: src, Logger: m.logger(), Hosts: hosts, Random: rand.Reader, Signer: signer, Changed: changed, LinkKey: linkKey})
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "aegis console: open this link once to log in:\n%s\n", srv.LoginURL())

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go srv.Run(ctx)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	return nil
}

// consoleSource is the console's read model and its way to decide: the
// helpers of aegis sessions, replay, approvals, approve and deny.
type consoleSource struct {
	m        *Main
	dirFlag  string
	stateDir string
	key      *approverKeyFile // signs approvals; nil: they go unsigned
	records  *recordChecker   // the record files and their verify status

	mu      sync.Mutex
	cached  []console.SessionRow // read from a snapshot while nobody held the directory
	live    *liveIndex           // the holder's stream, followed (console_live.go)
	liveErr error                // why it could not be followed
}

// Sessions lists the sessions as aegis sessions does: from the index the
// holding process keeps, else from a snapshot of the stream (read again
// only after a process has held the directory since).
func (s *consoleSource) Sessions(ctx context.Context) ([]console.SessionRow, []string, error) {
	if err := hasStream(s.stateDir); err != nil {
		return nil, []string{fmt.Sprintf("no event stream in %s yet: aegis wrap records there", s.stateDir)}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rows, notes, ok := s.liveSessions(); ok {
		s.cached = nil
		return rows, notes, nil
	}
	var liveNote []string
	if s.liveErr != nil {
		liveNote = []string{fmt.Sprintf("the stream could not be followed live: %v", s.liveErr)}
	}
	if pid := lockHolder(s.stateDir); pid > 0 {
		s.cached = nil
		ix, err := projector.ReadHeldIndex(s.stateDir)
		if err != nil {
			return nil, nil, fmt.Errorf("aegis process %d holds %s and its index could not be read yet: %w", pid, s.stateDir, err)
		}
		return sessionRows(ix.Sessions(pid)), append(liveNote, fmt.Sprintf("sessions from the index that aegis process %d keeps of %s (saved every second)", pid, s.stateDir)), nil
	}
	note := []string{fmt.Sprintf("sessions from a snapshot of the stream in %s (no aegis process holds it)", s.stateDir)}
	if s.cached != nil {
		return s.cached, note, nil
	}
	snap, err := newSnapshot(s.stateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot of the stream: %w", err)
	}
	defer snap.remove()
	if _, err := snap.refresh(); err != nil {
		return nil, nil, fmt.Errorf("snapshot of the stream: %w", err)
	}
	st, err := snap.open(ctx, &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: s.m.Getenv})
	if err != nil {
		return nil, nil, fmt.Errorf("read a snapshot of the stream: %w", err)
	}
	defer st.Close(context.Background())
	ix, err := sessionIndex(ctx, st, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	// A holder may have started meanwhile: then read its index next time.
	if lockHolder(s.stateDir) == 0 {
		s.cached = sessionRows(ix.Sessions(0))
	}
	return sessionRows(ix.Sessions(0)), note, nil
}

// sessionRows formats sessions as aegis sessions prints them.
func sessionRows(list []projector.SessionSummary) []console.SessionRow {
	rows := make([]console.SessionRow, 0, len(list))
	for _, s := range list {
		ended, exit := endCells(s)
		rows = append(rows, console.SessionRow{ID: s.ID, Started: s.Started.UTC().Format(time.RFC3339), Ended: ended, State: s.State, Exit: exit,
			Calls: s.Calls, Refused: s.Refusals, Approvals: approvalCell(s.Approvals), Command: commandOf(s),
			Principal: projector.Printable(s.Principal.Short())})
	}
	return rows
}

// Pending asks every running process for its pending approvals, as aegis
// approvals does.
func (s *consoleSource) Pending(ctx context.Context) ([]console.Pending, []string, error) {
	q := s.quiet()
	procs, err := q.approvalProcesses(s.dirFlag)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	if len(procs) == 0 {
		notes = append(notes, "no aegis process of yours is running with an approval channel")
	}
	var rows []console.Pending
	for _, r := range q.askAll(ctx, procs, events.ApprovalRequest{Op: events.OpList, By: s.m.requester()}) {
		switch {
		case r.err != nil:
			notes = append(notes, r.err.Error())
		case !r.rep.OK:
			notes = append(notes, fmt.Sprintf("session %s (pid %d) refused to list its approvals: %s", r.creds.Session, r.creds.PID, r.rep.Error))
		default:
			for _, p := range r.rep.Pending {
				rows = append(rows, console.Pending{Session: r.creds.Session, PID: r.creds.PID, PendingApproval: p})
			}
		}
	}
	return rows, notes, nil
}

// quiet is the command line with its warnings (about credentials files
// of processes that have exited, say) sent to the console's log instead
// of repeated on stderr every second.
func (s *consoleSource) quiet() *Main {
	return &Main{Stdin: s.m.Stdin, Stdout: io.Discard, Stderr: io.Discard, Getenv: s.m.Getenv}
}

// Decide sends the request aegis approve --session SESSION ID (or deny,
// with --reason) sends, to the process that serves the session.
func (s *consoleSource) Decide(ctx context.Context, d console.Decision) (string, error) {
	procs, err := s.quiet().approvalProcesses(s.dirFlag)
	if err != nil {
		return "", err
	}
	var target *events.Creds
	for i := range procs {
		if procs[i].Session == d.Session {
			target = &procs[i]
		}
	}
	if target == nil {
		return "", fmt.Errorf("no running aegis process serves session %s", d.Session)
	}
	req := events.ApprovalRequest{Op: d.Op, ApprovalID: d.ApprovalID, By: s.m.requester()}
	if d.Link {
		req.By += ", through the approval link of aegis console"
	}
	if d.Op == events.OpDeny {
		req.Reason = d.Reason
	}
	if d.Op == events.OpApprove && s.key != nil {
		sig, err := s.sign(ctx, *target, d)
		if err != nil {
			return "", err
		}
		req.Approver = sig
	}
	rep, err := s.m.ask(ctx, *target, req)
	if err != nil {
		return "", fmt.Errorf("%w (%s)", err, approverHint(err))
	}
	if !rep.OK {
		return "", fmt.Errorf("session %s refused to %s %s: %s", target.Session, d.Op, d.ApprovalID, rep.Error)
	}
	msg := rep.Message
	if msg == "" {
		msg = fmt.Sprintf("%s %s in session %s", map[string]string{events.OpApprove: "approved", events.OpDeny: "denied"}[d.Op], d.ApprovalID, target.Session)
	}
	return msg, nil
}

// sign signs the approval d names, as the process of target lists it
// pending (its session, tool and arguments' digest), with the console's
// approver key opened by the passphrase the page sent.
func (s *consoleSource) sign(ctx context.Context, target events.Creds, d console.Decision) (*schemas.ApproverSignature, error) {
	p, err := s.quiet().pendingIn(ctx, target, d.ApprovalID)
	if err != nil {
		return nil, err
	}
	key, err := projector.OpenApproverKey(s.key.data, []byte(d.Passphrase))
	if errors.Is(err, projector.ErrWrongPassphrase) {
		return nil, fmt.Errorf("that is not the passphrase of %s: nothing was sent, the approval is still pending", filepath.Base(s.key.path))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.key.path, err)
	}
	return key.Sign(claimOf(target.Session, p))
}

// Transcript follows one session as aegis replay --follow SESSION does,
// line by line.
func (s *consoleSource) Transcript(ctx context.Context, session string, line func(string) error) error {
	lw := &lineWriter{fn: line}
	fm := &Main{Stdin: s.m.Stdin, Stdout: lw, Stderr: io.Discard, Getenv: s.m.Getenv}
	err := fm.follow(ctx, s.stateDir, session, replayOpts{})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// lineWriter calls fn with each whole line written to it.
type lineWriter struct {
	fn  func(string) error
	buf []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if err := w.fn(line); err != nil {
			return 0, err
		}
	}
}
