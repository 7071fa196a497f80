package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// SessionInfo describes one recorded session.
type SessionInfo struct {
	ID      string
	Opened  SessionOpened
	Lines   int  // audit lines in the stream
	Closed  bool // a close line is in the stream
	FirstAt events.Position
}

// Record is the audit record as the stream holds it: per session, the
// canonical lines in chain order.
type Record struct {
	Sessions []SessionInfo
	lines    map[string][][]byte
}

// Lines returns the canonical lines of a session, in order.
func (r *Record) Lines(session string) [][]byte { return r.lines[session] }

// Fold folds one event into the record. It is the pure core of the export
// and of [CatchUp]: a replay of the same events always gives the same
// record.
func (r *Record) Fold(rec events.Record) {
	e := rec.Event
	if r.lines == nil {
		r.lines = map[string][][]byte{}
	}
	var line string
	ok := false
	switch e.Kind {
	case schemas.KindSessionOpened, schemas.KindCallIntent, schemas.KindCallOutcome,
		schemas.KindSessionClosed, schemas.KindApprovalResolved:
		// The kinds whose events can carry an audit line; frames, the bulk
		// of the stream, are not decoded.
		line, ok = decodeLine(e)
	}
	if e.Kind == schemas.KindSessionOpened {
		var so SessionOpened
		if json.Unmarshal(e.Payload, &so) != nil {
			return
		}
		r.Sessions = append(r.Sessions, SessionInfo{ID: e.Session, Opened: so, FirstAt: rec.Pos})
	}
	if !ok {
		return
	}
	if _, known := r.lines[e.Session]; !known && e.Kind != schemas.KindSessionOpened {
		// A line before its session's open: not from a session writer.
		return
	}
	r.lines[e.Session] = append(r.lines[e.Session], []byte(line))
	for i := range r.Sessions {
		if r.Sessions[i].ID == e.Session {
			r.Sessions[i].Lines++
			if e.Kind == schemas.KindSessionClosed {
				r.Sessions[i].Closed = true
			}
		}
	}
}

// ReadRecord replays the whole stream into a Record.
func ReadRecord(ctx context.Context, s *events.Store) (*Record, error) {
	r := &Record{}
	err := s.Replay(ctx, events.Position{}, func(rec events.Record) error {
		r.Fold(rec)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read audit record from stream: %w", err)
	}
	return r, nil
}

// WriteSessions writes the given sessions' lines, each followed by '\n', in
// the order given.
func (r *Record) WriteSessions(w io.Writer, ids []string) (int, error) {
	n := 0
	for _, id := range ids {
		for _, l := range r.lines[id] {
			if _, err := w.Write(l); err != nil {
				return n, err
			}
			if _, err := w.Write([]byte{'\n'}); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// SessionsFor returns, in stream order, the sessions that recorded to path.
func (r *Record) SessionsFor(path string) []SessionInfo {
	var out []SessionInfo
	for _, s := range r.Sessions {
		if s.Opened.AuditPath == path {
			out = append(out, s)
		}
	}
	return out
}

// ErrRecordDiverged is wrapped by [CatchUp] when the record file does not
// hold what the stream says was written to it.
var ErrRecordDiverged = errors.New("record file does not match the event stream")

// CatchUp brings the record file at path (absolute) up to date with the
// stream and returns the tail a new session links to and the file offset
// where that session's lines will start.
//
// If the stream holds a session that recorded to path, the file from that
// session's offset on must be a prefix of its lines (a crash can stop the
// file projection early, even mid-line); the missing rest is appended and
// fsynced. Anything else (a shorter file, different bytes, extra bytes) is
// [ErrRecordDiverged]: aegis does not append to a record it cannot account
// for. A file the stream knows nothing about is taken as it is, unless its
// last line is torn.
func CatchUp(ctx context.Context, s *events.Store, path string) (prevTail string, offset int64, err error) {
	// Only the session.opened events and the last matching session's own
	// events are read, not the whole stream: start-up stays fast however
	// much the state directory holds.
	rec := &Record{}
	var lastID string
	err = s.ReplaySubject(ctx, "aegis.*."+string(schemas.KindSessionOpened), func(r events.Record) error {
		var so SessionOpened
		if json.Unmarshal(r.Event.Payload, &so) == nil && so.AuditPath == path {
			lastID = r.Event.Session
		}
		return nil
	})
	if err == nil && lastID != "" {
		err = s.ReplaySubject(ctx, "aegis."+lastID+".>", func(r events.Record) error {
			rec.Fold(r)
			return nil
		})
	}
	if err != nil {
		return "", 0, fmt.Errorf("read audit record from stream: %w", err)
	}
	// The file is never read whole: only its last line, or what the last
	// session wrote to it, is.
	var size int64
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", 0, fmt.Errorf("read record file: %w", err)
	default:
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return "", 0, fmt.Errorf("read record file: %w", err)
		}
		size = fi.Size()
	}
	sessions := rec.SessionsFor(path)
	if len(sessions) == 0 {
		if size == 0 {
			return "", 0, nil
		}
		t, err := tailOfFile(f, size)
		if err != nil {
			return "", 0, fmt.Errorf("record file %s: %w", path, err)
		}
		if t.NeedsNewline {
			return "", 0, fmt.Errorf("record file %s does not end in a newline: %w", path, ErrTornTail)
		}
		return t.Hash, size, nil
	}
	last := sessions[len(sessions)-1]
	var want bytes.Buffer
	rec.WriteSessions(&want, []string{last.ID})
	off := last.Opened.AuditOffset
	if size < off {
		return "", 0, fmt.Errorf("%w: %s is %d bytes, but session %s began writing at byte %d (truncated?)", ErrRecordDiverged, path, size, last.ID, off)
	}
	same := size-off <= int64(want.Len())
	if same && size > off {
		same, err = sameBytes(io.NewSectionReader(f, off, size-off), want.Bytes()[:size-off])
		if err != nil {
			return "", 0, fmt.Errorf("read record file: %w", err)
		}
	}
	if !same {
		return "", 0, fmt.Errorf("%w: %s differs from what session %s recorded from byte %d on (changed, or written by something else?)", ErrRecordDiverged, path, last.ID, off)
	}
	if missing := want.Bytes()[size-off:]; len(missing) > 0 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return "", 0, fmt.Errorf("complete record file: %w", err)
		}
		if _, err := f.Write(missing); err != nil {
			f.Close()
			return "", 0, fmt.Errorf("complete record file: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return "", 0, fmt.Errorf("complete record file: %w", err)
		}
		if err := f.Close(); err != nil {
			return "", 0, fmt.Errorf("complete record file: %w", err)
		}
	}
	lines := rec.Lines(last.ID)
	tail := schemas.HashHex(lines[len(lines)-1])
	return tail, off + int64(want.Len()), nil
}

// sameBytes reports whether r holds exactly want, reading it in pieces.
func sameBytes(r io.Reader, want []byte) (bool, error) {
	buf := make([]byte, 64<<10)
	for len(want) > 0 {
		n, err := io.ReadFull(r, buf[:min(len(buf), len(want))])
		if !bytes.Equal(buf[:n], want[:n]) {
			return false, nil
		}
		want = want[n:]
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return len(want) == 0, nil
			}
			return false, err
		}
	}
	return true, nil
}

// maxTailLine bounds the last line tailOfFile reads back.
const maxTailLine = 64 << 20

// tailOfFile is TailOf for the last line of a file of size bytes only,
// read back from its end: start-up costs the same whatever the file holds.
func tailOfFile(f *os.File, size int64) (Tail, error) {
	needsNewline := false
	if size > 0 {
		var b [1]byte
		if _, err := f.ReadAt(b[:], size-1); err != nil {
			return Tail{}, fmt.Errorf("projector: read record tail: %w", err)
		}
		needsNewline = b[0] != '\n'
	}
	// Gather the file's end until it holds a newline before the last
	// non-empty line, or the file's start.
	var tail []byte
	end := size
	for end > 0 {
		n := min(end, 64<<10)
		chunk := make([]byte, n)
		if _, err := f.ReadAt(chunk, end-n); err != nil {
			return Tail{}, fmt.Errorf("projector: read record tail: %w", err)
		}
		tail = append(chunk, tail...)
		end -= n
		trimmed := bytes.TrimRight(tail, "\n")
		if len(trimmed) > 0 && bytes.IndexByte(trimmed, '\n') >= 0 {
			break
		}
		if len(tail) > maxTailLine {
			return Tail{}, fmt.Errorf("projector: the last line of the record is longer than %d bytes: %w", maxTailLine, ErrTornTail)
		}
	}
	t, err := TailOf(bytes.NewReader(tail))
	if err != nil {
		return Tail{}, err
	}
	t.NeedsNewline = needsNewline
	return t, nil
}
