package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const exportUsage = `Usage:
  aegis export [--state-dir DIR] [--session ID]… [--audit PATH] --out FILE

Rebuilds an audit record from the event stream: the canonical lines of the
chosen sessions, in stream order (whatever the order of --session), byte
for byte as 'aegis wrap' projected them to its --audit file. It reads the
stream once and holds one event at a time, so a record of any size
exports in the same memory. With --session (repeatable) only those sessions;
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
	ix, err := sessionIndex(ctx, store, m.newProgress("index"))
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
		abs, err := filepath.Abs(*audit)
		if err != nil {
			return err
		}
		spans := ix.SpansFor(abs)
		if len(spans) == 0 {
			if r, err := filepath.EvalSymlinks(abs); err == nil {
				spans = ix.SpansFor(r)
			}
		}
		for _, s := range spans {
			ids = append(ids, s.Session)
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
	if *out == "-" {
		w := bufio.NewWriter(prog.clearing(m.Stdout))
		_, err := projector.Export(ctx, store, ix, ids, w, prog.add)
		prog.done()
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		return w.Flush()
	}
	tmp := *out + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w := bufio.NewWriterSize(f, 256<<10)
	n, err := projector.Export(ctx, store, ix, ids, w, prog.add)
	prog.done()
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
