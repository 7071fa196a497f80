package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

const eventsUsage = `Usage:
  aegis events list   [--state-dir DIR | --name NAME] [--session ID] [--follow] [--json]
  aegis events append [--state-dir DIR | --name NAME] [--session ID] --kind KIND [PAYLOAD_JSON]

list prints every event in the stream, one line each, in stream order:
  <position> <time> <session> <kind> <payload summary>
With --json it prints each envelope as stored. --follow keeps printing new
events until interrupted.

append adds one event (default kind note, payload {}) and prints its
position once it is durable. It is for inspection and demos; aegis itself
appends through the proxy.

--state-dir defaults to $XDG_STATE_HOME/aegis, else ~/.local/state/aegis;
when that holds no event stream but exactly one state directory of aegis
init's (DEFAULT/NAME), events reads that one (see docs/FILES.md). --name
NAME reads the one aegis init made for the server NAME.
A state directory is used by one aegis process at a time.

Example:
  $ aegis events append --state-dir /tmp/s --kind note '{"text":"hello"}'
  1.0
  $ aegis events list --state-dir /tmp/s
`

func defaultStateDir(getenv func(string) string) (string, error) {
	d, err := events.DefaultDir(getenv)
	if err != nil {
		return "", withHint(fmt.Errorf("no state directory: %w", err), "pass --state-dir DIR")
	}
	return d, nil
}

func (m *Main) runEvents(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("run 'aegis help events'", "events: missing subcommand (list or append)")
	}
	switch args[0] {
	case "list":
		return m.eventsList(ctx, args[1:])
	case "append":
		return m.eventsAppend(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(m.Stdout, eventsUsage)
		return nil
	}
	return usagef("run 'aegis help events'", "events: unknown subcommand %q", args[0])
}

// openStore opens the state directory and turns a lock conflict into a
// message that says what to do.
func (m *Main) openStore(ctx context.Context, dirFlag string) (*events.Store, error) {
	return m.openStoreWith(ctx, dirFlag, false)
}

// openStoreWith opens the store, with the approval channel when approvals
// is set.
func (m *Main) openStoreWith(ctx context.Context, dirFlag string, approvals bool) (*events.Store, error) {
	return m.openStoreCapped(ctx, dirFlag, approvals, 0, nil)
}

// openStoreCapped opens the store with the state directory capped at
// maxBytes (0: no cap, see events.Config.MaxBytes), linked to hub when it
// is not nil.
func (m *Main) openStoreCapped(ctx context.Context, dirFlag string, approvals bool, maxBytes int64, hub *events.HubConfig) (*events.Store, error) {
	dir, err := m.stateDir(dirFlag)
	if err != nil {
		return nil, err
	}
	s, err := events.Open(ctx, events.Config{Dir: dir, Logger: m.logger(), Approvals: approvals, MaxBytes: maxBytes, Hub: hub})
	if err != nil {
		var le *events.LockedError
		if errors.As(err, &le) {
			return nil, withHint(err, "wait for that process to finish, or give this one its own --state-dir")
		}
		if errors.Is(err, events.ErrFull) {
			return nil, withHint(fmt.Errorf("will not start: %w", errors.Unwrap(err)), fullHint(dir))
		}
		return nil, openError(dir, err)
	}
	return s, nil
}

// openStoreToRead opens the state directory's stream to read it
// (events.Config.ReadOnly): it writes nothing, so it works on a disk that
// is full to the last byte. A lock conflict says what to do, as
// openStore's does.
func (m *Main) openStoreToRead(ctx context.Context, dirFlag string) (*events.Store, error) {
	dir, err := m.stateDir(dirFlag)
	if err != nil {
		return nil, err
	}
	if err := hasStream(dir); err != nil {
		return nil, err
	}
	s, err := events.Open(ctx, events.Config{Dir: dir, Logger: m.logger(), ReadOnly: true})
	if err != nil {
		var le *events.LockedError
		if errors.As(err, &le) {
			return nil, withHint(err, "wait for that process to finish, or give this one its own --state-dir")
		}
		return nil, openError(dir, err)
	}
	return s, nil
}

// openError says what to do about a state directory that did not open.
func openError(dir string, err error) error {
	var rp *events.RollPendingError
	if errors.As(err, &rp) {
		return withHint(err, "finish it with: aegis rotate --state-dir "+dir+" --signing-key KEY (nothing uses the directory until then)")
	}
	if full := events.DiskFull(dir); full != nil {
		return withHint(fmt.Errorf("open event store: %w (%v)", err, full), diskFullHint(dir))
	}
	return withHint(fmt.Errorf("open event store: %w", err), "check --state-dir: it must be a private (0700) directory you own, on a writable disk")
}

// openStoreToRecord opens the store for a command that records (wrap,
// gateway). A session appended after lost messages would go on as if
// they had never been, so it refuses a damaged stream.
func (m *Main) openStoreToRecord(ctx context.Context, dirFlag string, approvals bool, maxBytes int64, hub *events.HubConfig) (*events.Store, error) {
	s, err := m.openStoreCapped(ctx, dirFlag, approvals, maxBytes, hub)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ctx); err != nil {
		s.Close(context.Background())
		return nil, withHint(fmt.Errorf("will not start; no server was started: %w", err), damageHint)
	}
	if a := s.Archived(); a != nil {
		s.Close(context.Background())
		return nil, withHint(fmt.Errorf("will not start; no server was started: %s: %w", s.Dir(), events.ErrArchived),
			"record into the live state directory this archive was rolled out of; read this one with aegis sessions, replay or export --state-dir "+s.Dir())
	}
	return s, nil
}

func (m *Main) eventsList(ctx context.Context, args []string) error {
	fs := m.newFlagSet("events list")
	sc := addStateChoice(fs)
	dir := sc.dir
	session := fs.String("session", "", "only this session")
	follow := fs.Bool("follow", false, "keep printing new events")
	asJSON := fs.Bool("json", false, "print envelopes as stored")
	if err := m.parseFlags(fs, eventsUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'aegis help events'", "events list: unexpected argument %q", fs.Arg(0))
	}
	if *session != "" && !schemas.ValidID(*session) {
		return usagef("a session id is 26 characters of Crockford base32, as printed by 'aegis events list'", "events list: bad --session %q", *session)
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	s, err := m.openStoreToRead(ctx, *dir)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	w := bufio.NewWriter(m.Stdout)
	defer w.Flush()
	print := func(r events.Record) error {
		if *session != "" && r.Event.Session != *session {
			return nil
		}
		if *asJSON {
			b, err := r.Event.Encode()
			if err != nil {
				return err
			}
			w.Write(b)
			w.WriteByte('\n')
		} else {
			fmt.Fprintf(w, "%s %s %s %s %s\n", r.Pos, r.Event.Time.Format(time.RFC3339Nano), r.Event.Session, r.Event.Kind, summary(r.Event))
		}
		if *follow {
			return w.Flush()
		}
		return nil
	}
	if *follow {
		err = s.Follow(ctx, events.Position{}, print)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	return s.Replay(ctx, events.Position{}, print)
}

// summary renders a payload for one line: frames as their bytes (quoted,
// cut at 120), anything else as its JSON (cut likewise).
func summary(e schemas.Event) string {
	if e.Kind == schemas.KindFrameC2S || e.Kind == schemas.KindFrameS2C {
		var fp schemas.FramePayload
		if err := json.Unmarshal(e.Payload, &fp); err == nil {
			s := fmt.Sprintf("%q", cut(string(fp.Bytes), 120))
			return fmt.Sprintf("%d bytes %s", len(fp.Bytes), s)
		}
	}
	return cut(string(e.Payload), 160)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (m *Main) eventsAppend(ctx context.Context, args []string) error {
	fs := m.newFlagSet("events append")
	sc := addStateChoice(fs)
	dir := sc.dir
	session := fs.String("session", "", "session id (default: a new one)")
	kind := fs.String("kind", string(schemas.KindNote), "event kind")
	if err := m.parseFlags(fs, eventsUsage, args); err != nil {
		return err
	}
	payload := "{}"
	switch fs.NArg() {
	case 0:
	case 1:
		payload = fs.Arg(0)
		if payload == "-" {
			b, err := io.ReadAll(m.Stdin)
			if err != nil {
				return fmt.Errorf("read payload from stdin: %w", err)
			}
			payload = strings.TrimSpace(string(b))
		}
	default:
		return usagef("quote the payload as one argument", "events append: want at most one PAYLOAD_JSON argument, got %d", fs.NArg())
	}
	if !schemas.Kind(*kind).Known() {
		return usagef("known kinds: "+kindList(), "events append: unknown kind %q", *kind)
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	s, err := m.openStore(ctx, *dir)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	sess := *session
	if sess == "" {
		if sess, err = s.NewSession(); err != nil {
			return err
		}
	}
	e, err := s.NewEvent(sess, schemas.Kind(*kind), json.RawMessage(payload))
	if err == nil {
		err = e.Validate()
	}
	if err != nil {
		return usagef("the payload must be a JSON object; frames need {\"bytes\":\"<base64>\"}", "events append: %v", err)
	}
	pos, err := s.Append(ctx, e)
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	fmt.Fprintf(m.Stdout, "%s\n", pos)
	return nil
}

func kindList() string {
	var ks []string
	for _, k := range schemas.Kinds() {
		ks = append(ks, string(k))
	}
	sortStrings(ks)
	return strings.Join(ks, ", ")
}
