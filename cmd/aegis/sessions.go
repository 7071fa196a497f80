package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const sessionsUsage = `Usage:
  aegis sessions [--state-dir DIR | --name NAME] [--json]
  aegis sessions --hub URL --host HOST [--hub-creds FILE] [--hub-ca FILE] [--json]

Lists every session in the state directory's stream, oldest first, one
line each:
  SESSION  STARTED  ENDED  STATE  EXIT  CALLS  REFUSED  APPROVALS  COMMAND

STATE is how the session ended: closed (it has a close line), running (no
close line yet, and its aegis process holds the state directory now),
killed (no close line, and its process is gone: killed, crashed, or its
recording failed) or, read from a hub, unclosed (no close line there; the
hub cannot tell whether it still runs). ENDED is the close time; for a
session that did not close, ~ marks the time of its last event. EXIT is
the wrapped server's exit status. CALLS counts recorded tools/calls,
REFUSED the ones aegis kept from the server, APPROVALS the approvals
requested (and what became of them: one revoked after its approval counts
as denied). COMMAND is the wrapped command, or a gateway's configuration
followed by the servers it skipped and where they failed
("· skipped: fs (start)"); replay shows why.

--json prints a JSON array with one object per session (id, started,
ended, last_event, state, pid, argv, audit_path, key_id, events, frames,
calls, refusals, in_flight, approvals, confined, profile, child_exit,
skipped). skipped lists a gateway's servers that could not be used
(server, stage, error).
profile is the profile active at the session's last event (a gateway's
default profile until it switches; "-" for aegis wrap). approvals counts
requested, approved, denied, expired, used, refused (requests aegis
refused) and duplicate (resolutions that changed nothing, such as the
second record older gateways wrote of each escalation decision).

Every listing is a projection of the stream, read from the index that
aegis keeps beside it (DIR/index) and the events after it. A running aegis
wrap holds its state directory exclusively, so no other process can open
the stream while it runs; aegis then lists from the index that process
keeps and saves every second, and says so on stderr (the last second of
the running session may be missing from its counts). A directory without
an index (from an older aegis) is read from a private snapshot copy of the
stream instead (made under DIR/readers and removed afterwards).

--hub (a fleet hub's client URLs) with --host lists the sessions of that
host's mirror on the hub, off the host. The index of the mirror is kept
in a cache on this machine, $XDG_CACHE_HOME/aegis/hub/HOST-XXXXXXXX (else
~/.cache/aegis/hub/…; XXXXXXXX names the hub by its URLs), mode 0700, so
that each run reads only the messages that reached the mirror since the
last. The cache is never a source: one that does not match the mirror is
thrown away and the mirror read again; removing it loses nothing but
time.

Examples:
  $ aegis sessions
  $ aegis sessions --name server-everything
  $ aegis sessions --hub nats://hub-1:4222 --host laptop-7
`

func (m *Main) runSessions(ctx context.Context, args []string) error {
	fs := m.newFlagSet("sessions")
	sc := addStateChoice(fs)
	dir := sc.dir
	asJSON := fs.Bool("json", false, "print a JSON array")
	hub := addReaderFlags(fs)
	if err := m.parseFlags(fs, sessionsUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run: aegis sessions [--state-dir DIR | --name NAME] [--json]", "sessions: unexpected argument %q", fs.Arg(0))
	}
	if err := hub.noneWithout(); err != nil {
		return err
	}
	if hub.set() {
		if sc.set() {
			return usagef("aegis sessions --hub URL --host HOST [--json]", "sessions --hub reads the hub's mirror: no --state-dir")
		}
		return m.sessionsMirror(ctx, hub, *asJSON)
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	ix, holder, done, err := m.stateIndex(ctx, *dir, "sessions")
	if err != nil {
		return err
	}
	defer done()
	list := ix.Sessions(holder)
	if r := ix.Rotation(); r != nil && !*asJSON {
		dir, _ := m.stateDir(*dir)
		where := "pruned"
		if !r.Stream.Prune {
			where = "in " + filepath.Join(dir, r.Stream.Archive) + " (list them with --state-dir there)"
		}
		fmt.Fprintf(m.Stderr, "aegis: note: the sessions before %s were sealed by a rotation; their stream is %s\n",
			r.Time.UTC().Format(time.RFC3339), where)
	}
	where, _ := m.stateDir(*dir)
	return m.printSessions(list, *asJSON, where)
}

// sessionsMirror lists the sessions of a host's mirror on the hub. It
// folds the mirror into an index kept in a cache on this machine
// (hubCacheDir), so that each run reads only the messages that reached
// the mirror since the last; a cache that does not match the mirror is
// thrown away and the mirror folded again. A session without a close line
// there is unclosed: the hub cannot tell whether it still runs.
func (m *Main) sessionsMirror(ctx context.Context, hub *hubFlags, asJSON bool) error {
	cache, err := hubCacheDir(m.Getenv, splitURLs(*hub.urls), *hub.host)
	if err != nil {
		return err
	}
	mirror, err := hub.open(ctx, "sessions")
	if err != nil {
		return err
	}
	defer mirror.Close()
	src, err := events.NewMirrorIndex(mirror, cache)
	if err != nil {
		return withHint(err, "the cache is only a copy of what the hub holds: make it private (chmod 700) or remove it")
	}
	log := m.logger()
	prog := m.newProgress("sessions")
	var folded int64
	ix, err := projector.LoadIndex(ctx, src, log, func() { folded++; prog.add() })
	prog.done()
	if err != nil {
		return fmt.Errorf("read the hub: %w", err)
	}
	log.Debug("folded the hub's mirror", "host", *hub.host, "events", folded, "at", ix.At.Seq, "cache", cache)
	if err := ix.Save(ctx, src); err != nil {
		// The next run folds more; this one's listing is whole.
		log.Debug("the cache of the hub's mirror was not saved", "cache", cache, "reason", err)
	}
	return m.printSessions(ix.Sessions(projector.ReadElsewhere), asJSON, "the hub's mirror of "+*hub.host)
}

// hubCacheDir is the folder where aegis keeps its index of host's mirror
// on the hub at urls: $XDG_CACHE_HOME/aegis/hub/<host>-<hub>, else
// ~/.cache/aegis/hub/<host>-<hub>, where <hub> is 8 hex digits of the
// SHA-256 of the hub's URLs (sorted, comma-separated), so that the
// mirrors of one host on two hubs keep two caches.
func hubCacheDir(getenv func(string) string, urls []string, host string) (string, error) {
	base := getenv("XDG_CACHE_HOME")
	if !filepath.IsAbs(base) {
		home := getenv("HOME")
		if home == "" {
			return "", withHint(errors.New("sessions --hub keeps a cache, and neither XDG_CACHE_HOME nor HOME is set"), "set XDG_CACHE_HOME to a folder of yours")
		}
		base = filepath.Join(home, ".cache")
	}
	urls = slices.Clone(urls)
	slices.Sort(urls)
	sum := sha256.Sum256([]byte(strings.Join(urls, ",")))
	return filepath.Join(base, "aegis", "hub", host+"-"+hex.EncodeToString(sum[:4])), nil
}

// printSessions prints a listing, as a table or (asJSON) a JSON array;
// where names what was read, for the note that it holds no session.
func (m *Main) printSessions(list []projector.SessionSummary, asJSON bool, where string) error {
	w := bufio.NewWriter(m.Stdout)
	defer w.Flush()
	if asJSON {
		if list == nil {
			list = []projector.SessionSummary{}
		}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintf(m.Stderr, "aegis: no sessions in %s\n", where)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTARTED\tENDED\tSTATE\tEXIT\tCALLS\tREFUSED\tAPPROVALS\tCOMMAND")
	for _, s := range list {
		ended, exit := endCells(s)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.ID, s.Started.UTC().Format(time.RFC3339), ended, s.State, exit,
			s.Calls, s.Refusals, approvalCell(s.Approvals), commandOf(s))
	}
	return tw.Flush()
}

// endCells are the ENDED and EXIT columns of a session: its close time,
// or ~ and its last event's for one that did not close; the wrapped
// server's exit status, or -.
func endCells(s projector.SessionSummary) (ended, exit string) {
	ended = "~" + s.LastEvent.UTC().Format(time.RFC3339)
	if s.Ended != nil {
		ended = s.Ended.UTC().Format(time.RFC3339)
	}
	exit = "-"
	if s.Exit != nil && s.Exit.Code != nil {
		exit = strconv.Itoa(*s.Exit.Code)
	}
	return ended, exit
}

func approvalCell(a projector.ApprovalCounts) string {
	if a.Requested == 0 {
		return "0"
	}
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{a.Approved, "approved"}, {a.Denied, "denied"}, {a.Expired, "expired"}} {
		if p.n > 0 {
			parts = append(parts, strconv.Itoa(p.n)+" "+p.what)
		}
	}
	if len(parts) == 0 {
		return strconv.Itoa(a.Requested)
	}
	return strconv.Itoa(a.Requested) + " (" + strings.Join(parts, ", ") + ")"
}

func commandOf(s projector.SessionSummary) string {
	c := projector.QuoteArgv(s.Argv)
	if s.Config != "" {
		c = "gateway " + projector.Printable(s.Config)
	}
	if s.Principal != nil {
		c += " · for " + projector.Printable(s.Principal.Short())
	}
	for i, k := range s.Skipped {
		if i == 0 {
			c += " · skipped: "
		} else {
			c += ", "
		}
		c += projector.Printable(k.Server + " (" + k.Stage + ")")
	}
	return c
}

// streamReader is read access to a state directory's stream: the store
// itself when no other process holds it, else a snapshot copy.
type streamReader struct {
	store *events.Store
	dir   string // the state directory
	// holder is the PID of the aegis process that holds the state
	// directory (0: none; this process, if it opened the store itself).
	holder int
	snap   *snapshot
}

// Close closes the store and removes a snapshot.
func (r *streamReader) Close() {
	if r.store != nil {
		r.store.Close(context.Background())
	}
	if r.snap != nil {
		r.snap.remove()
	}
}

// openStream opens a state directory's stream for reading. When another
// aegis process holds the directory (a running wrap holds it for its whole
// run, exclusively), it reads a snapshot copy instead, and says so.
func (m *Main) openStream(ctx context.Context, dirFlag string) (*streamReader, error) {
	dir, err := m.stateDir(dirFlag)
	if err != nil {
		return nil, err
	}
	if err := hasStream(dir); err != nil {
		return nil, err
	}
	s, err := events.Open(ctx, events.Config{Dir: dir, Logger: m.logger(), ReadOnly: true})
	if err == nil {
		return &streamReader{store: s, dir: dir}, nil
	}
	var le *events.LockedError
	if !errors.As(err, &le) {
		return nil, openError(dir, err)
	}
	snap, err := newSnapshot(dir)
	if err == nil {
		if _, err = snap.refresh(); err != nil {
			snap.remove()
		}
	}
	if err != nil {
		err = fmt.Errorf("%v, and a snapshot of its stream could not be made: %w", le, err)
		if full := events.DiskFull(dir); full != nil {
			// The copy needs room the disk does not have.
			return nil, withHint(fmt.Errorf("%w (%v)", err, full), "free space on the disk that holds "+dir+", or wait for that process to finish")
		}
		return nil, withHint(err, "wait for that process to finish, or free some disk space")
	}
	st, err := snap.open(ctx, m)
	if err != nil {
		snap.remove()
		return nil, withHint(fmt.Errorf("%v, and its stream could not be read from a snapshot: %w", le, err), "wait for that process to finish and try again")
	}
	fmt.Fprintf(m.Stderr, "aegis: note: %v, which holds it exclusively; reading a snapshot of its stream as of %s\n", le, time.Now().Format("15:04:05"))
	return &streamReader{store: st, dir: dir, holder: le.PID, snap: snap}, nil
}

// heldIndex returns the index that the aegis process holding the state
// directory keeps (and that process's PID), so that a listing costs the
// same while a session runs, however much the stream holds, instead of a
// copy of the whole stream. It returns nil when no process holds the
// directory or it keeps no index (an older aegis): read the stream then.
func (m *Main) heldIndex(dirFlag string) (*projector.Index, int, error) {
	dir, err := m.stateDir(dirFlag)
	if err != nil {
		return nil, 0, err
	}
	if err := hasStream(dir); err != nil {
		return nil, 0, err
	}
	pid := lockHolder(dir)
	if pid <= 0 || pid == os.Getpid() {
		return nil, 0, nil
	}
	ix, err := projector.ReadHeldIndex(dir)
	if err != nil {
		return nil, 0, nil
	}
	asOf := "its last save"
	if fi, err := os.Stat(filepath.Join(dir, events.IndexDir, "index.v1.head")); err == nil {
		asOf = fi.ModTime().Format("15:04:05")
	}
	fmt.Fprintf(m.Stderr, "aegis: note: %s is in use by aegis process %d; listing from the index it keeps, as of %s (it saves it every second)\n", dir, pid, asOf)
	return ix, pid, nil
}

// stateIndex returns the index of the state directory: the one its
// holder keeps, or else folded from the stream (what names the progress
// shown meanwhile), with the holder's PID (0 for none). done releases the
// stream once the index is no longer read.
func (m *Main) stateIndex(ctx context.Context, dirFlag, what string) (ix *projector.Index, holder int, done func(), err error) {
	ix, holder, err = m.heldIndex(dirFlag)
	if err != nil || ix != nil {
		return ix, holder, func() {}, err
	}
	rd, err := m.openStream(ctx, dirFlag)
	if err != nil {
		return nil, 0, nil, err
	}
	if ix, err = sessionIndex(ctx, rd.store, m.newProgress(what), m.logger()); err != nil {
		rd.Close()
		return nil, 0, nil, err
	}
	return ix, rd.holder, rd.Close, nil
}

// hasStream refuses a state directory that holds no stream, rather than
// creating an empty one as a side effect of reading.
func hasStream(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return withHint(fmt.Errorf("no event stream in %s", dir), "aegis wrap records there; pass the --state-dir it used")
		}
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

// snapshot is a private copy of a state directory's JetStream files (and
// its index, events.IndexDir) under DIR/readers/<pid>-<random>, opened
// with an embedded server of its own.
// It never takes the state directory's lock, so it never stops an aegis
// wrap from starting. Files are copied again only when their size or
// modification time changed, so refreshing a snapshot of a large stream
// copies little more than its last block.
//
// A copy taken while a writer appends can end in a torn message; the
// embedded server's recovery drops it, so a snapshot holds a prefix of the
// stream: every event that was durable when its block was copied.
type snapshot struct {
	src    string // DIR
	root   string // the copy's state directory
	stamps map[string]stamp
}

type stamp struct {
	size  int64
	mtime time.Time
}

func newSnapshot(stateDir string) (*snapshot, error) {
	readers := filepath.Join(stateDir, "readers")
	if err := os.MkdirAll(readers, 0o700); err != nil {
		return nil, err
	}
	cleanReaders(readers)
	var rnd [6]byte
	rand.Read(rnd[:])
	root := filepath.Join(readers, strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(root, 0o700); err != nil {
		return nil, err
	}
	return &snapshot{src: stateDir, root: root, stamps: map[string]stamp{}}, nil
}

// cleanReaders removes snapshots left by readers that are gone.
func cleanReaders(readers string) {
	ents, err := os.ReadDir(readers)
	if err != nil {
		return
	}
	for _, e := range ents {
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if pid != os.Getpid() && !platform.Alive(pid) {
			os.RemoveAll(filepath.Join(readers, e.Name()))
		}
	}
}

// refresh copies the source files that changed since the last refresh and
// removes copies of files that are gone. It reports whether anything
// changed.
func (s *snapshot) refresh() (bool, error) {
	changed := false
	seen := map[string]bool{}
	for _, sub := range []string{events.IndexDir, "jetstream"} {
		err := filepath.WalkDir(filepath.Join(s.src, sub), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil // removed while we walked, or no index yet
				}
				return err
			}
			rel, err := filepath.Rel(s.src, p)
			if err != nil {
				return err
			}
			dst := filepath.Join(s.root, rel)
			if d.IsDir() {
				return os.MkdirAll(dst, 0o700)
			}
			if !d.Type().IsRegular() || sub == events.IndexDir && projector.AnchorSnapshotFile(d.Name()) {
				// A reader records nothing: the anchor log's snapshot
				// (its hashes grow with every checkpoint) stays behind.
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			seen[rel] = true
			st := stamp{fi.Size(), fi.ModTime()}
			if old, ok := s.stamps[rel]; ok && old == st {
				return nil
			}
			if err := copyFile(p, dst); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			s.stamps[rel] = st
			changed = true
			return nil
		})
		if err != nil {
			return false, err
		}
	}
	// The stream's base, if a rotation began it: without it the copy's
	// stream would look cut at its head.
	if b, err := os.ReadFile(filepath.Join(s.src, events.BaseFile)); err == nil {
		if err := os.WriteFile(filepath.Join(s.root, events.BaseFile), b, 0o600); err != nil {
			return false, err
		}
	}
	for rel := range s.stamps {
		if !seen[rel] {
			os.Remove(filepath.Join(s.root, rel))
			delete(s.stamps, rel)
			changed = true
		}
	}
	return changed, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// open opens the copy. If the copy cannot be opened (a file caught in an
// unlucky state), it is copied afresh once. The embedded server's
// recovery of a copy taken mid-write (it drops a torn last message and
// rebuilds its index) is expected, so its warnings are shown only with
// AEGIS_DEBUG.
func (s *snapshot) open(ctx context.Context, m *Main) (*events.Store, error) {
	log := slog.New(slog.DiscardHandler)
	if m.Getenv("AEGIS_DEBUG") != "" {
		log = m.logger()
	}
	st, err := events.Open(ctx, events.Config{Dir: s.root, Logger: log, ReadOnly: true})
	if err == nil {
		return st, nil
	}
	os.RemoveAll(filepath.Join(s.root, "jetstream"))
	s.stamps = map[string]stamp{}
	if _, rerr := s.refresh(); rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	return events.Open(ctx, events.Config{Dir: s.root, Logger: log, ReadOnly: true})
}

func (s *snapshot) remove() { os.RemoveAll(s.root) }

// lockHolder returns the PID of the process that holds the state
// directory's lock, without touching the lock: from /proc/locks where it
// can, else from the PID the holder writes into the lock file, if that
// process is alive. 0 means nobody holds it.
func lockHolder(dir string) int {
	path := filepath.Join(dir, "lock")
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if data, err := os.ReadFile("/proc/locks"); err == nil {
		if want, ok := procLocksID(fi); ok {
			for _, line := range strings.Split(string(data), "\n") {
				f := strings.Fields(line)
				// "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123 0 EOF"; waiters
				// have "->" after the number.
				if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
					continue
				}
				if pid, err := strconv.Atoi(f[4]); err == nil {
					return pid
				}
			}
			return 0
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !platform.Alive(pid) {
		return 0
	}
	return pid
}

// resolveSession finds the session an argument names: a full id, a unique
// prefix of one (case does not matter), or "last" for the newest.
func resolveSession(list []projector.SessionSummary, arg string) (projector.SessionSummary, error) {
	if len(list) == 0 {
		return projector.SessionSummary{}, withHint(fmt.Errorf("no sessions in the stream"), "aegis wrap records sessions; check --state-dir")
	}
	if arg == "last" {
		return list[len(list)-1], nil
	}
	want := strings.ToUpper(arg)
	var found []projector.SessionSummary
	for _, s := range list {
		if s.ID == want {
			return s, nil
		}
		if strings.HasPrefix(s.ID, want) {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return projector.SessionSummary{}, withHint(fmt.Errorf("no session %s in the stream", arg), "list them with: aegis sessions")
	case 1:
		return found[0], nil
	}
	return projector.SessionSummary{}, withHint(fmt.Errorf("%q names %d sessions", arg, len(found)), "give more of the id; list them with: aegis sessions")
}

// sessionIndex returns the store's index ([projector.LoadIndex]): its
// snapshot with the events after it folded in, which it saves again so
// that the next reader folds less. A snapshot that cannot be saved (a full
// disk, say) costs the next reader time, nothing else.
// log, if not nil, is told (at debug level) how many events were folded.
func sessionIndex(ctx context.Context, st *events.Store, prog *progress, log *slog.Logger) (*projector.Index, error) {
	folded := 0
	ix, err := projector.LoadIndex(ctx, st, log, func() { folded++; prog.add() })
	prog.done()
	if err != nil {
		return nil, fmt.Errorf("read the event stream: %w", err)
	}
	if log != nil {
		log.Debug("session index", "dir", st.Dir(), "folded", folded, "at", ix.At.String())
	}
	ix.Save(ctx, st)
	return ix, nil
}

// progress shows a running count of events on stderr while a long pass
// over the stream runs, when stderr is a terminal; otherwise it is nil and
// says nothing.
type progress struct {
	w     io.Writer
	label string
	n     int64
	start time.Time
	last  time.Time
	shown bool
}

// progressEvery is how often progress redraws.
const progressEvery = 200 * time.Millisecond

func (m *Main) newProgress(label string) *progress {
	f, ok := m.Stderr.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	now := time.Now()
	return &progress{w: f, label: label, start: now, last: now}
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// add counts one event.
func (p *progress) add() {
	if p == nil {
		return
	}
	p.n++
	if p.n&1023 != 0 {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	rate := float64(p.n) / now.Sub(p.start).Seconds()
	fmt.Fprintf(p.w, "\raegis: %s: %s events (%s/s)\x1b[K", p.label, groupDigits(p.n), groupDigits(int64(rate)))
	p.shown = true
}

// clearing returns w, or, when progress shows, a writer that clears the
// progress line before each write to w: a transcript printed to the same
// terminal is never mixed with it, and progress redraws below it.
func (p *progress) clearing(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return clearingWriter{p, w}
}

type clearingWriter struct {
	p *progress
	w io.Writer
}

func (c clearingWriter) Write(b []byte) (int, error) {
	c.p.done()
	return c.w.Write(b)
}

// done clears the progress line.
func (p *progress) done() {
	if p == nil || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
	p.shown = false
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// validSessionArg checks a SESSION argument's shape before any I/O.
func validSessionArg(arg string) bool {
	if arg == "last" {
		return true
	}
	if arg == "" || len(arg) > 26 {
		return false
	}
	return schemas.ValidID(strings.ToUpper(arg) + strings.Repeat("0", 26-len(arg)))
}
