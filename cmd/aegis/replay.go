package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/cmd/aegis/telemetry"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const replayUsage = `Usage:
  aegis replay [--state-dir DIR | --name NAME] [--frames] [--json] [--follow] SESSION
  aegis replay [--state-dir DIR | --name NAME] [--frames] [--json] --follow
  aegis replay --hub URL --host HOST [--hub-creds FILE] [--hub-ca FILE] [--frames] [--json] SESSION|last
  aegis replay [--state-dir DIR | --name NAME] --otlp URL SESSION

Prints a session as a transcript, one line per event in stream order (the
order aegis made them durable):
  +OFFSET  PROFILE  WHAT  DETAIL
each frame summarised (method, tool, id, size), each intent and each
verdict with its reason and rule, each approval with what it is for (the
tool, or a gateway's profile switch "profile FROM -> TO") and who resolved
it, the confinement fact, the child's start and exit (a gateway's:
each server's name and PID, and what ended it), each server a gateway
skipped ("skipped  server fs skipped at start: WHY"), and the close.
PROFILE is the profile active at that step: a gateway session's default
profile from its start, then each switch ("-" for aegis wrap, which has
no profiles). An approval is resolved once: a denial after an approval is
shown as revoking it, and any other second resolution (older gateways
recorded each escalation decision twice) as a duplicate that changed
nothing. A call with an intent and no outcome is listed as in-flight at
the end; a session with no close line ends with how it ended: killed (its
process is gone) or running.

SESSION is a session id as 'aegis sessions' prints it, a unique prefix of
one, or "last". The transcript is built only from the event stream.

  --frames   print each frame's exact bytes on the line after it, after
             "    > " (a frame never holds a newline); on a terminal,
             control characters and bytes that are not UTF-8 are shown
             as \xNN so that a recorded frame cannot drive it
  --json     one JSON object per step, per line (frames' bytes in base64
             with --frames)
  --follow   keep printing as the stream grows, until SESSION ends (it
             closes, or its process is gone) or, without SESSION, forever,
             across sessions and aegis processes, until interrupted

A running aegis wrap holds its state directory exclusively, so no other
process can open the stream while it runs. aegis replay then reads a
private snapshot copy of the stream (under DIR/readers, removed after) that
holds every event durable when it was taken, and says so on stderr (on a
disk too full for the copy, it reads that process's stream itself, as
--follow SESSION does). SESSION is found in the index, and only its own
messages are read, so a replay costs what the session holds, not what
the stream does. Read commands open the stream read-only and write
nothing to it: they work on a disk that is full to the last byte.
--follow SESSION, while an aegis process holds the directory, reads that
process's stream itself through the read-only identity of its
credentials file, woken each time a message of the session is stored; it
ends when the session does (for a session of that process, when the
process exits, after the record's last checkpoint). Otherwise, and
without SESSION, --follow reads through snapshots, refreshed as the
stream's files change. It never takes the state directory's lock, so it
never keeps an aegis wrap from starting, and without SESSION it goes on
following when one process ends and the next begins. Long replays show
progress on stderr when it is a terminal.

--otlp URL exports the session's spans over OTLP to a collector instead
of printing it (http/protobuf, such as http://127.0.0.1:4318, or gRPC with
OTEL_EXPORTER_OTLP_PROTOCOL=grpc): one span per tools/call, with the
approval wait that let it through, under the same trace and span ids that
the recording process exported with --otlp-endpoint (a call that carried
the host's traceparent joins the host's trace), so that an incident can
be looked at in a trace viewer after the fact. Only the running process
knew when each commit was acknowledged: the commits' spans are not
re-emitted. See docs/telemetry.md.

--hub (a fleet hub's client URLs) with --host prints the session from
that host's mirror on the hub, reading only the session's own messages.
SESSION is then a whole id, as 'aegis sessions' prints it on the host, or
last (the last session that began). A session without a close line there
ends "unclosed": the hub cannot tell whether it still runs.

Example:
  $ aegis replay last
  $ aegis replay --name server-everything last
  $ aegis replay --follow --frames 01KAQ3T5PS
`

// followPoll is how often --follow looks for new events.
const followPoll = 250 * time.Millisecond

type replayOpts struct {
	frames, asJSON, follow bool
	prefix                 bool // prefix each line with the session id (every session)
	// escapeFrames is set when stdout is a terminal: --frames then escapes
	// control characters and invalid UTF-8, so a recorded frame cannot
	// drive the terminal. Redirected, the bytes are exact.
	escapeFrames bool
}

func (m *Main) runReplay(ctx context.Context, args []string) error {
	fs := m.newFlagSet("replay")
	sc := addStateChoice(fs)
	dir := sc.dir
	var o replayOpts
	fs.BoolVar(&o.frames, "frames", false, "print each frame's exact bytes")
	fs.BoolVar(&o.asJSON, "json", false, "one JSON object per step")
	fs.BoolVar(&o.follow, "follow", false, "keep printing as the stream grows")
	otlp := fs.String("otlp", "", "export the session's spans over OTLP to this collector URL instead of printing it")
	hub := addReaderFlags(fs)
	pos, err := m.parseInterspersed(fs, replayUsage, args)
	if err != nil {
		return err
	}
	if err := hub.noneWithout(); err != nil {
		return err
	}
	if f, ok := m.Stdout.(*os.File); ok && isTerminal(f) {
		o.escapeFrames = true
	}
	arg := ""
	switch {
	case len(pos) == 1:
		arg = pos[0]
		if !validSessionArg(arg) {
			return usagef("a session id is 26 characters of Crockford base32 (or a prefix of one, or last), as 'aegis sessions' prints it", "replay: bad SESSION %q", arg)
		}
	case len(pos) > 1:
		return usagef("replay one session at a time", "replay: want one SESSION, got %d", len(pos))
	case !o.follow:
		return usagef("list sessions with 'aegis sessions', then: aegis replay SESSION (or aegis replay --follow)", "replay: which session? give SESSION")
	}
	if *otlp != "" {
		if o.follow || hub.set() || o.frames || o.asJSON || arg == "" {
			return usagef("aegis replay --otlp http://HOST:4318 SESSION", "replay --otlp exports one recorded session of a state directory: no --follow, --hub, --frames or --json")
		}
		if err := (telemetry.Config{OTLPEndpoint: *otlp}).Check(); err != nil {
			return usagef("aegis replay --otlp http://HOST:4318 SESSION (OTEL_EXPORTER_OTLP_PROTOCOL=grpc for a gRPC collector, such as http://HOST:4317)", "replay: %v", err)
		}
	}
	if hub.set() {
		if o.follow || sc.set() {
			return usagef("aegis replay --hub URL --host HOST SESSION", "replay --hub reads the hub's mirror: no --follow or --state-dir")
		}
		return m.replayMirror(ctx, hub, arg, o)
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	if o.follow {
		stateDir, err := m.stateDir(*dir)
		if err != nil {
			return err
		}
		sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = m.follow(sctx, stateDir, arg, o)
		if errors.Is(err, context.Canceled) {
			return nil // interrupted: following ends there
		}
		return err
	}
	rd, err := m.openStream(ctx, *dir)
	if err != nil {
		if held, herr := m.replayHeldOnFullDisk(ctx, *dir, arg, o); held {
			return herr
		}
		return err
	}
	defer rd.Close()
	ix, err := sessionIndex(ctx, rd.store, m.newProgress("sessions"), m.logger())
	if err != nil {
		return err
	}
	if *otlp != "" {
		return m.replayOTLP(ctx, rd.store, ix, rd.holder, arg, *otlp)
	}
	return m.replaySession(ctx, rd.store, ix, rd.holder, arg, o)
}

// subjectReader reads the events of one subject from a position on: a
// store, or the stream of the process that holds one.
type subjectReader interface {
	ReplaySubjectFrom(ctx context.Context, subject string, from events.Position, fn func(events.Record) error) error
}

// sessionNamed finds the session arg names, by its id or as
// resolveSession reads a name ("last", a prefix), in ix.
func sessionNamed(ix *projector.Index, holder int, arg string) (projector.SessionSummary, error) {
	id := arg
	if !schemas.ValidID(arg) {
		s, err := resolveSession(ix.Sessions(0), arg)
		if err != nil {
			return projector.SessionSummary{}, err
		}
		id = s.ID
	}
	sum, ok := ix.Session(id, holder)
	if !ok {
		return projector.SessionSummary{}, withHint(fmt.Errorf("no session %s in the stream", id), "list them with: aegis sessions")
	}
	return sum, nil
}

// replaySession prints the session that arg names. The index says which
// session that is, where it begins and how it ended; the transcript reads
// only that session's messages, from its first on: a replay costs what
// the session holds, not what the stream does.
func (m *Main) replaySession(ctx context.Context, src subjectReader, ix *projector.Index, holder int, arg string, o replayOpts) error {
	sum, err := sessionNamed(ix, holder, arg)
	if err != nil {
		return err
	}
	id := sum.ID
	prog := m.newProgress("replay")
	w := bufio.NewWriterSize(prog.clearing(m.Stdout), 64<<10)
	defer w.Flush()
	tl := projector.NewTimeline(id)
	var last events.Record
	read := 0
	err = src.ReplaySubjectFrom(ctx, "aegis."+id+".>", events.Position{Seq: sum.First.Seq}, func(r events.Record) error {
		read++
		prog.add()
		if r.Event.Session != id {
			return nil
		}
		st, ok := tl.Fold(r)
		if !ok {
			return nil
		}
		last = r
		return writeStep(w, st, r, o)
	})
	prog.done()
	if err != nil {
		return fmt.Errorf("read the event stream: %w", err)
	}
	m.logger().Debug("replay", "session", id, "from", sum.First.String(), "read", read)
	for _, st := range tl.Finish(id, sum.State, last) {
		if err := writeStep(w, st, last, o); err != nil {
			return err
		}
	}
	return w.Flush()
}

// replayHeldOnFullDisk replays a session of a state directory that another
// aegis process holds, on a disk with no room for a snapshot copy of its
// stream: it reads that process's stream itself, through the read-only
// identity of its credentials file (as --follow does), with the index
// folded from it. It reports false, and does nothing, unless the disk is
// full and the holder offers a reader.
func (m *Main) replayHeldOnFullDisk(ctx context.Context, dirFlag, arg string, o replayOpts) (bool, error) {
	stateDir, err := m.stateDir(dirFlag)
	if err != nil || events.DiskFull(stateDir) == nil {
		return false, nil
	}
	r, creds, err := m.liveReader(ctx, stateDir)
	if err != nil || r == nil {
		return false, nil
	}
	defer r.Close()
	ix, err := projector.LoadIndex(ctx, r, m.logger(), nil)
	if err != nil {
		return true, fmt.Errorf("read the event stream of aegis process %d: %w", creds.PID, err)
	}
	fmt.Fprintf(m.Stderr, "aegis: note: %s is in use by aegis process %d and its disk is full, with no room for a snapshot; reading that process's stream itself\n", stateDir, creds.PID)
	return true, m.replaySession(ctx, r, ix, creds.PID, arg, o)
}

// replayMirror prints a session from a host's mirror on the hub, reading
// that session's messages only. SESSION is a full id or last.
func (m *Main) replayMirror(ctx context.Context, hub *hubFlags, arg string, o replayOpts) error {
	mirror, err := hub.open(ctx, "replay")
	if err != nil {
		return err
	}
	defer mirror.Close()
	id := arg
	switch {
	case arg == "last":
		var ok bool
		if id, ok, err = mirror.LastSession(ctx); err != nil {
			return fmt.Errorf("read the hub: %w", err)
		} else if !ok {
			return fmt.Errorf("the hub's mirror of %s holds no session", *hub.host)
		}
	case !schemas.ValidID(arg):
		return usagef("with --hub, give the whole session id (as aegis sessions prints it on the host) or last", "replay --hub: %q is not a whole session id", arg)
	}
	w := bufio.NewWriterSize(m.Stdout, 64<<10)
	defer w.Flush()
	tl := projector.NewTimeline(id)
	var ix projector.SessionIndex
	var last events.Record
	err = mirror.ReplaySession(ctx, id, func(r events.Record) error {
		ix.Fold(r)
		st, ok := tl.Fold(r)
		if !ok {
			return nil
		}
		last = r
		return writeStep(w, st, r, o)
	})
	if err != nil {
		return fmt.Errorf("read the hub: %w", err)
	}
	sum, ok := ix.Get(id, 0)
	if !ok {
		return withHint(fmt.Errorf("the hub's mirror of %s holds no session %s", *hub.host, id), "list sessions on the host with: aegis sessions")
	}
	state := projector.StateUnclosed
	if sum.State == projector.StateClosed {
		state = projector.StateClosed
	}
	for _, st := range tl.Finish(id, state, last) {
		if err := writeStep(w, st, last, o); err != nil {
			return err
		}
	}
	return w.Flush()
}

// writeStep prints one step; rec is the event it came from (for --frames).
func writeStep(w *bufio.Writer, st projector.Step, rec events.Record, o replayOpts) error {
	var raw []byte
	if o.frames && st.Frame != nil {
		var fp schemas.FramePayload
		json.Unmarshal(rec.Event.Payload, &fp)
		raw = fp.Bytes
	}
	if o.asJSON {
		if raw != nil {
			st.Frame.Bytes = raw
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		w.Write(b)
		return w.WriteByte('\n')
	}
	if o.prefix {
		w.WriteString(st.Session)
		w.WriteString("  ")
	}
	w.WriteString(st.Line())
	w.WriteByte('\n')
	if st.Frame != nil && o.frames {
		w.WriteString("    > ")
		if o.escapeFrames {
			raw = printableBytes(raw)
		}
		w.Write(raw)
		w.WriteByte('\n')
	}
	return nil
}

// printableBytes escapes control characters (C0, DEL, C1) and bytes that
// are not UTF-8 as \xNN (\uNNNN for C1), leaving everything else as it is.
func printableBytes(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1, r < 0x20, r == 0x7f:
			out = fmt.Appendf(out, "\\x%02x", b[0])
		case r >= 0x80 && r < 0xa0:
			out = fmt.Appendf(out, "\\u%04x", r)
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// follow prints a session (or every session) as the stream grows. It reads
// only snapshot copies, refreshed when the stream's files change, so it
// never holds the state directory's lock. A session ends when its close
// line arrives, or when its process no longer holds the state directory
// (checked before each read, so the read that follows has everything that
// process wrote).
//
// One session, of a directory that a running aegis holds and offers its
// stream reader in: then the stream itself is followed, through that
// process ([Main.followLive]), and no file is read while it runs.
func (m *Main) follow(ctx context.Context, stateDir, arg string, o replayOpts) error {
	if arg != "" {
		r, creds, err := m.liveReader(ctx, stateDir)
		if err != nil {
			return fmt.Errorf("follow: %w", err)
		}
		if r != nil {
			defer r.Close()
			id := arg
			if !schemas.ValidID(arg) {
				ix, err := projector.LoadIndex(ctx, r, m.logger(), nil)
				if err != nil {
					return fmt.Errorf("follow: %w", err)
				}
				s, err := resolveSession(ix.Sessions(creds.PID), arg)
				if err != nil {
					return err
				}
				id = s.ID
			}
			return m.followLive(ctx, stateDir, r, creds, id, o)
		}
	}
	o.prefix = arg == "" && !o.asJSON
	w := bufio.NewWriterSize(m.Stdout, 64<<10)
	defer w.Flush()
	var snap *snapshot
	defer func() {
		if snap != nil {
			snap.remove()
		}
	}()
	id := ""
	if schemas.ValidID(arg) {
		id = arg
	}
	tl := projector.NewTimeline(id)
	var ix projector.SessionIndex
	last := map[string]events.Record{}
	finished := map[string]bool{}
	next := events.Position{}
	waiting, checked := false, false
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(followPoll):
			}
		}
		if _, err := os.Stat(filepath.Join(stateDir, "jetstream")); err != nil {
			if !waiting {
				fmt.Fprintf(m.Stderr, "aegis: waiting for a stream in %s\n", stateDir)
				waiting = true
			}
			continue
		}
		if snap == nil {
			var err error
			if snap, err = newSnapshot(stateDir); err != nil {
				return fmt.Errorf("follow: %w", err)
			}
		}
		holder := lockHolder(stateDir)
		changed, err := snap.refresh()
		if err != nil {
			return fmt.Errorf("follow: copy the stream: %w", err)
		}
		if changed {
			st, err := snap.open(ctx, m)
			if err != nil {
				return fmt.Errorf("follow: read a snapshot of the stream: %w", err)
			}
			if id == "" && arg != "" {
				ix0, err := sessionIndex(ctx, st, m.newProgress("sessions"), m.logger())
				if err != nil {
					st.Close(context.Background())
					return err
				}
				s, err := resolveSession(ix0.Sessions(0), arg)
				if err != nil {
					st.Close(context.Background())
					return err
				}
				id = s.ID
				tl = projector.NewTimeline(id)
			}
			prog := m.newProgress("replay")
			if err := w.Flush(); err != nil {
				st.Close(context.Background())
				return err
			}
			w.Reset(prog.clearing(m.Stdout))
			err = st.Replay(ctx, next, func(r events.Record) error {
				prog.add()
				next = events.Position{Seq: r.Pos.Seq, Index: r.Pos.Index + 1}
				if id != "" && r.Event.Session != id {
					if r.Event.Kind == schemas.KindSessionOpened {
						ix.Fold(r)
					}
					return nil
				}
				ix.Fold(r)
				step, ok := tl.Fold(r)
				if !ok {
					return nil
				}
				last[r.Event.Session] = r
				return writeStep(w, step, r, o)
			})
			prog.done()
			st.Close(context.Background())
			if err != nil {
				return fmt.Errorf("follow: read the event stream: %w", err)
			}
		}
		if changed && !checked && id != "" {
			checked = true
			if _, ok := ix.Get(id, holder); !ok {
				return withHint(fmt.Errorf("no session %s in the stream", id), "list them with: aegis sessions")
			}
		}
		// A session has ended when its process held the store neither
		// before the read (so the read has all it wrote) nor after it (a
		// process that started meanwhile may have opened it). A closed
		// session of a process that still holds it is not over: its
		// record's last checkpoint follows the close line.
		after := lockHolder(stateDir)
		runningAfter := map[string]bool{}
		for _, s := range ix.Sessions(after) {
			runningAfter[s.ID] = s.State == projector.StateRunning
		}
		for _, s := range ix.Sessions(holder) {
			held := s.PID != 0 && (s.PID == holder || s.PID == after)
			if finished[s.ID] || s.State == projector.StateRunning || runningAfter[s.ID] || held {
				continue
			}
			finished[s.ID] = true
			for _, st := range tl.Finish(s.ID, s.State, last[s.ID]) {
				if err := writeStep(w, st, last[s.ID], o); err != nil {
					return err
				}
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if id != "" && finished[id] {
			return nil
		}
	}
}
