package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aegis-dev/aegis/events"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const exportUsage = `Usage:
  aegis export [--state-dir DIR | --name NAME] [--session ID]… [--audit PATH] [--salvage] --out FILE
  aegis export --hub URL --host HOST [--hub-creds FILE] [--hub-ca FILE] [--session ID]… [--audit PATH] --out FILE

Rebuilds an audit record from the event stream: the canonical lines of the
chosen sessions, in stream order (whatever the order of --session), byte
for byte as 'aegis wrap' projected them to its --audit file. It reads the
stream once and holds one event at a time, so a record of any size
exports in the same memory. With --session (repeatable) only those sessions;
with --audit only the sessions that recorded to that path; with neither,
every session in the stream. --out - writes to stdout. A file is written
to a new FILE.tmp-* (mode 0600), fsynced, then renamed.

A session cut short by a crash exports everything that was acknowledged;
'aegis verify' then reports it as Indeterminate (unanchored tail) and names
the calls in flight.

A damaged state directory (stream messages lost from its files) is never
exported as if it were whole: export fails, exits 1, writes nothing, and
says which stream messages were lost and what of the record went with
them (which sessions, which audit lines). With --salvage it writes what
is left, in stream order, with a gap line ("line_type":"gap") wherever
lines may be missing. 'aegis verify --allow-gaps' reports such a record
as Indeterminate (record_gap) and checks every line around the gaps;
without --allow-gaps a gap is lines dropped, Tampered. A salvage that
found gaps still exits 1, after writing FILE.

--hub reads the host's mirror on a fleet's hub instead of a state
directory (the hub's client URLs; --host names the host, --hub-creds and
--hub-ca the connection): the same lines, from the copy off the machine.
--audit then matches the path exactly as the host recorded it.

Example:
  $ aegis export --name server-everything --out rebuilt.aarl
  $ cmp ~/.local/share/aegis/server-everything.aarl rebuilt.aarl
`

type multiFlag []string

func (f *multiFlag) String() string     { return fmt.Sprint(*f) }
func (f *multiFlag) Set(v string) error { *f = append(*f, v); return nil }

func (m *Main) runExport(ctx context.Context, args []string) error {
	fs := m.newFlagSet("export")
	sc := addStateChoice(fs)
	dir := sc.dir
	var sessions multiFlag
	fs.Var(&sessions, "session", "session id (repeatable)")
	audit := fs.String("audit", "", "only sessions that recorded to this path")
	out := fs.String("out", "", "output file, or - for stdout")
	salvage := fs.Bool("salvage", false, "write what a damaged stream still holds, with its gaps marked")
	hub := addReaderFlags(fs)
	if err := m.parseFlags(fs, exportUsage, args); err != nil {
		return err
	}
	if err := hub.noneWithout(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'aegis help export'", "export: unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return usagef("aegis export --out FILE", "export: --out is required")
	}
	for _, s := range sessions {
		if !schemas.ValidID(s) {
			return usagef("session ids are printed by 'aegis events list'", "export: bad --session %q", s)
		}
	}
	if hub.set() {
		if sc.set() || *salvage {
			return usagef("aegis export --hub URL --host HOST [--session ID]… [--audit PATH] --out FILE", "export --hub reads the hub's mirror: no --state-dir or --salvage")
		}
		return m.exportMirror(ctx, hub, sessions, *audit, *out)
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	// Reading never creates a state directory.
	stateDir, err := m.stateDir(*dir)
	if err != nil {
		return err
	}
	store, err := m.openStoreToRead(ctx, stateDir)
	if err != nil {
		return err
	}
	defer store.Close(context.Background())
	ix, err := sessionIndex(ctx, store, m.newProgress("index"), m.logger())
	if errors.Is(err, events.ErrDamaged) || *salvage {
		return m.salvage(ctx, store, err, sessions, *audit, *out, !*salvage)
	}
	if err != nil {
		return err
	}
	var ids []string
	switch {
	case len(sessions) > 0:
		seen := map[string]bool{}
		for _, s := range sessions {
			if _, ok := ix.Span(s); !ok {
				return withHint(fmt.Errorf("export: no session %s in the stream", s), "list sessions with: aegis sessions --state-dir DIR")
			}
			if !seen[s] {
				seen[s] = true
				ids = append(ids, s)
			}
		}
	case *audit != "":
		abs, names, err := recordNames(*audit)
		if err != nil {
			return err
		}
		for _, s := range ix.Spans() {
			if names[s.Path] {
				ids = append(ids, s.Session)
			}
		}
		if len(ids) == 0 {
			return withHint(fmt.Errorf("export: no session in the stream recorded to %s", abs), "give the --audit path exactly as wrap got it, or use --session")
		}
	default:
		for _, s := range ix.Spans() {
			ids = append(ids, s.Session)
		}
	}
	prog := m.newProgress("export")
	var n int
	err = writeOut(*out, prog.clearing(m.Stdout), func(w io.Writer) (err error) {
		n, err = projector.Export(ctx, store, ix, ids, w, prog.add)
		prog.done()
		return err
	})
	if errors.Is(err, events.ErrDamaged) {
		// A message that did not load while it was read.
		return m.salvage(ctx, store, fmt.Errorf("export: %w", err), sessions, *audit, *out, true)
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(m.Stderr, "aegis: exported %d lines of %d sessions to %s\n", n, len(ids), *out)
	return nil
}

// exportMirror exports from a host's mirror on the hub: the sessions
// named, or those that recorded to audit (the path as the host recorded
// it), or all.
func (m *Main) exportMirror(ctx context.Context, hub *hubFlags, sessions []string, audit, out string) error {
	mirror, err := hub.open(ctx, "export")
	if err != nil {
		return err
	}
	defer mirror.Close()
	var names map[string]bool
	if audit != "" {
		names = map[string]bool{audit: true}
	}
	keep := keepSessions(sessions, names)
	var lines, n int
	err = writeOut(out, m.Stdout, func(w io.Writer) (err error) {
		lines, n, err = projector.ExportReplay(func(fn func(events.Record) error) error { return mirror.Replay(ctx, events.Position{}, fn) }, keep, w)
		return err
	})
	if err != nil {
		return fmt.Errorf("export from the hub: %w", err)
	}
	fmt.Fprintf(m.Stderr, "aegis: exported %d lines of %d sessions from the hub's mirror of %s to %s\n", lines, n, *hub.host, out)
	return nil
}

// salvage reads a damaged stream as far as it loads. With dry, it writes
// nothing and returns damage (the error that showed it) with what was
// lost; otherwise it writes the record that is left to out, with gap
// lines, and returns an error if it found any gap.
func (m *Main) salvage(ctx context.Context, store *events.Store, damage error, sessions []string, audit, out string, dry bool) error {
	var names map[string]bool
	if audit != "" {
		var err error
		if _, names, err = recordNames(audit); err != nil {
			return err
		}
	}
	keep := keepSessions(sessions, names)
	prog := m.newProgress("salvage")
	if dry {
		rep, err := projector.Salvage(ctx, store, keep, io.Discard, prog.add)
		prog.done()
		if err != nil || len(rep.Gaps) == 0 {
			return damage
		}
		return fmt.Errorf("%w\nwhat the record lost:\n%s", damage, strings.TrimRight(projector.GapsText(rep.Gaps), "\n"))
	}
	var rep projector.SalvageReport
	err := writeOut(out, m.Stdout, func(w io.Writer) (err error) {
		rep, err = projector.Salvage(ctx, store, keep, w, prog.add)
		prog.done()
		return err
	})
	if err != nil {
		return fmt.Errorf("export --salvage: %w", err)
	}
	if len(rep.Gaps) == 0 {
		fmt.Fprintf(m.Stderr, "aegis: exported %d lines of %d sessions to %s; the stream lost nothing\n", rep.Lines, rep.Sessions, out)
		return nil
	}
	return withHint(fmt.Errorf("the event stream in %s is damaged; wrote a salvaged record of %d lines of %d sessions to %s, with %d gaps marked:\n%s",
		store.Dir(), rep.Lines, rep.Sessions, out, len(rep.Gaps), strings.TrimRight(projector.GapsText(rep.Gaps), "\n")),
		"'aegis verify --allow-gaps FILE' reports a salvaged record as Indeterminate (record_gap) and checks every line around the gaps; restore the state directory from a backup to get the lost lines back")
}

// writeOut writes with fill to out: stdout for "-", else a new
// FILE.tmp-* beside it, fsynced, then renamed to FILE (removed if fill
// fails).
func writeOut(out string, stdout io.Writer, fill func(io.Writer) error) error {
	if out == "-" {
		w := bufio.NewWriter(stdout)
		if err := fill(w); err != nil {
			return err
		}
		return w.Flush()
	}
	// A new file of its own (O_EXCL, mode 0600): a fixed name could be
	// one that another user made first, or a link to a file of the user's.
	f, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(f, 256<<10)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// recordNames returns the absolute path of a record file and the names
// sessions may have recorded it under: that path and, with its symbolic
// links resolved, the one aegis records now.
func recordNames(p string) (string, map[string]bool, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", nil, err
	}
	names := map[string]bool{abs: true}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		names[r] = true
	}
	return abs, names, nil
}

// keepSessions chooses sessions by id when any are named, else by the
// record path their session.opened names (one of auditNames), else all
// (nil).
func keepSessions(sessions []string, auditNames map[string]bool) func(string, projector.SessionOpened) bool {
	switch {
	case len(sessions) > 0:
		want := map[string]bool{}
		for _, s := range sessions {
			want[s] = true
		}
		return func(id string, _ projector.SessionOpened) bool { return want[id] }
	case auditNames != nil:
		return func(_ string, so projector.SessionOpened) bool { return auditNames[so.AuditPath] }
	}
	return nil
}
