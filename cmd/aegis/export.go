package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aegis-dev/aegis/schemas"
)

const exportUsage = `Usage:
  aegis export [--state-dir DIR] [--session ID]… [--audit PATH] --out FILE

Rebuilds an audit record from the event stream: the canonical lines of the
chosen sessions, in stream order, byte for byte as 'aegis wrap' projected
them to its --audit file. With --session (repeatable) only those sessions;
with --audit only the sessions that recorded to that path; with neither,
every session in the stream. --out - writes to stdout. A file is written
to FILE.tmp, fsynced, then renamed.

A session cut short by a crash exports everything that was acknowledged;
'aegis verify' then reports it as Indeterminate (unanchored tail) and names
the calls in flight.

Example:
  $ aegis export --state-dir ~/.local/state/aegis --audit calls.aarl --out rebuilt.aarl
  $ cmp calls.aarl rebuilt.aarl
`

type multiFlag []string

func (f *multiFlag) String() string     { return fmt.Sprint(*f) }
func (f *multiFlag) Set(v string) error { *f = append(*f, v); return nil }

func (m *Main) runExport(ctx context.Context, args []string) error {
	fs := m.newFlagSet("export")
	dir := fs.String("state-dir", "", "state directory")
	var sessions multiFlag
	fs.Var(&sessions, "session", "session id (repeatable)")
	audit := fs.String("audit", "", "only sessions that recorded to this path")
	out := fs.String("out", "", "output file, or - for stdout")
	if err := m.parseFlags(fs, exportUsage, args); err != nil {
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
	store, err := m.openStore(ctx, *dir)
	if err != nil {
		return err
	}
	defer store.Close(context.Background())
	rec, err := m.readRecord(ctx, store)
	if err != nil {
		return err
	}
	var ids []string
	switch {
	case len(sessions) > 0:
		known := map[string]bool{}
		for _, s := range rec.Sessions {
			known[s.ID] = true
		}
		for _, s := range sessions {
			if !known[s] {
				return withHint(fmt.Errorf("export: no session %s in the stream", s), "list sessions with: aegis events list --state-dir DIR | grep session.opened")
			}
			ids = append(ids, s)
		}
	case *audit != "":
		abs, err := filepath.Abs(*audit)
		if err != nil {
			return err
		}
		for _, s := range rec.SessionsFor(abs) {
			ids = append(ids, s.ID)
		}
		if len(ids) == 0 {
			return withHint(fmt.Errorf("export: no session in the stream recorded to %s", abs), "give the --audit path exactly as wrap got it, or use --session")
		}
	default:
		for _, s := range rec.Sessions {
			ids = append(ids, s.ID)
		}
	}
	if *out == "-" {
		w := bufio.NewWriter(m.Stdout)
		if _, err := rec.WriteSessions(w, ids); err != nil {
			return err
		}
		return w.Flush()
	}
	tmp := *out + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w := bufio.NewWriter(f)
	n, err := rec.WriteSessions(w, ids)
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
		err = os.Rename(tmp, *out)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(m.Stderr, "aegis: exported %d lines of %d sessions to %s\n", n, len(ids), *out)
	return nil
}
