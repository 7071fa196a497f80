package projector

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

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
	line, ok := lineOf(e)
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

// Export writes to w the audit lines of the sessions named in ids, in
// stream order, each followed by '\n': byte for byte what [Record.Fold]
// and [Record.WriteSessions] give, without holding the record. It reads
// the stream once, from the first chosen session's session.opened on, and
// holds one event at a time, so its memory does not grow with the record.
// ix must be folded to the stream's end; a session whose lines in the
// stream are not what the index counted is an error. each, if not nil, is
// called per event read.
func Export(ctx context.Context, s *events.Store, ix *Index, ids []string, w io.Writer, each func()) (lines int, err error) {
	chosen := map[string]*RecordSpan{}
	var from events.Position
	for _, id := range ids {
		sp := ix.spans[id]
		if sp == nil {
			continue // no audit lines (its session.opened carries none)
		}
		if len(chosen) == 0 || sp.First.Less(from) {
			from = sp.First
		}
		chosen[id] = sp
	}
	if len(chosen) == 0 {
		return 0, nil
	}
	written := map[string]int{}
	err = s.Replay(ctx, from, func(r events.Record) error {
		if each != nil {
			each()
		}
		sp := chosen[r.Event.Session]
		if sp == nil || r.Pos.Less(sp.First) {
			return nil
		}
		line, ok := lineOf(r.Event)
		if !ok {
			return nil
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return err
		}
		written[sp.Session]++
		lines++
		return nil
	})
	if err != nil {
		return lines, err
	}
	for id, sp := range chosen {
		if written[id] != sp.Lines {
			return lines, fmt.Errorf("session %s: the stream gave %d audit lines, its index counted %d", id, written[id], sp.Lines)
		}
	}
	return lines, nil
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
// where that session's lines will start. It is [Index.CatchUp] with the
// store's index ([LoadIndex]).
func CatchUp(ctx context.Context, s *events.Store, path string) (prevTail string, offset int64, err error) {
	ix, err := LoadIndex(ctx, s, nil, nil)
	if err != nil {
		return "", 0, fmt.Errorf("read audit record from stream: %w", err)
	}
	return ix.CatchUp(ctx, s, path)
}

// syncCheckBytes bounds the record file that [Index.CatchUp] checks whole
// before it returns; a larger file's earlier sessions are checked by
// [Index.CheckFile], which a session runs beside the relay.
const syncCheckBytes = 16 << 20

// CatchUp brings the record file at path (absolute) up to date with the
// stream, as the index (folded to the stream's end) says it should be, and
// returns the tail a new session links to and the file offset where that
// session's lines will start.
//
// If the stream holds a session that recorded to path, the file from that
// session's offset on must be a prefix of its lines (a crash can stop the
// file projection early, even mid-line); the missing rest is appended and
// fsynced. Anything else (a shorter file, different bytes, extra bytes) is
// [ErrRecordDiverged]: aegis does not append to a record it cannot account
// for. A file the stream knows nothing about is taken as it is, unless its
// last line is torn.
//
// Neither the file nor the session is read whole: a complete file is
// checked by its last line, a short one from the session's last mark
// before its end ([RecordSpan]). A file of up to syncCheckBytes is also
// checked whole against the digests of every session that wrote to it
// ([Index.CheckFile]); a larger one is left to the caller, and a file that
// no one wrote to since a session that had it checked closed it
// ([FileStamp]) is not read again.
func (ix *Index) CatchUp(ctx context.Context, s *events.Store, path string) (prevTail string, offset int64, err error) {
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
	spans := ix.byPath[path]
	if sealed, ok := ix.rotation.sealed(path); ok && len(spans) == 0 {
		// A rotation sealed it, and nothing was recorded to it since: it
		// starts empty, linked to the segment's last line.
		if size != 0 {
			where := "carried its chain over"
			if sealed.SealedAs != "" {
				where = "moved its lines to " + sealed.SealedAs
			}
			return "", 0, fmt.Errorf("%w: %s holds %d bytes, but the rotation of %s %s and nothing was recorded to it since (written by something else, or a segment moved back?)",
				ErrRecordDiverged, path, size, ix.rotation.Time.UTC().Format(time.RFC3339), where)
		}
		return sealed.Tail, 0, nil
	}
	if len(spans) == 0 {
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
	last := spans[len(spans)-1]
	off, end := last.Offset, last.Offset+last.Bytes
	diverged := fmt.Errorf("%w: %s differs from what session %s recorded from byte %d on (changed, or written by something else?)", ErrRecordDiverged, path, last.Session, off)
	switch {
	case size < off:
		return "", 0, fmt.Errorf("%w: %s is %d bytes, but session %s began writing at byte %d (truncated?)", ErrRecordDiverged, path, size, last.Session, off)
	case size > end:
		return "", 0, diverged
	case size == end:
		t, err := tailOfFile(f, size)
		if err != nil && !errors.Is(err, ErrTornTail) {
			return "", 0, fmt.Errorf("read record file: %w", err)
		}
		if err != nil || t.NeedsNewline || t.Hash != last.Tail {
			return "", 0, diverged
		}
	default:
		same, err := complete(ctx, s, f, path, last, size)
		if err != nil {
			return "", 0, err
		}
		if !same {
			return "", 0, diverged
		}
	}
	switch {
	case size == end && ix.unchangedSince(path, f):
		// Checked whole when its last session closed it, and no one has
		// written to it since.
	case end <= syncCheckBytes:
		if err := ix.CheckFile(ctx, path); err != nil {
			return "", 0, err
		}
	default:
		if ix.unchecked == nil {
			ix.unchecked = map[string]bool{}
		}
		ix.unchecked[path] = true
	}
	return last.Tail, end, nil
}

// complete finishes a record file of size bytes that holds the start of
// span's lines: it reads the session from its last mark before the file's
// end, checks the bytes the file holds from there and appends the rest. It
// reports false if the file holds something else.
func complete(ctx context.Context, s *events.Store, f *os.File, path string, span *RecordSpan, size int64) (bool, error) {
	have := size - span.Offset // bytes of the span the file holds
	m := span.markBefore(have)
	file := bufio.NewReader(io.NewSectionReader(f, span.Offset+m.Bytes, have-m.Bytes))
	out, err := openPrivateExisting(path, recordWhat, recordInto)
	if err != nil {
		return false, fmt.Errorf("complete record file: %w", err)
	}
	defer out.Close()
	w := bufio.NewWriterSize(out, 64<<10)
	pos := m.Bytes
	errDiffers := errors.New("differs")
	got := make([]byte, 64<<10)
	err = s.ReplaySubjectFrom(ctx, "aegis."+span.Session+".>", m.At, func(r events.Record) error {
		line, ok := lineOf(r.Event)
		if !ok || r.Event.Session != span.Session {
			return nil
		}
		for _, part := range [][]byte{[]byte(line), {'\n'}} {
			// The part the file holds is compared, a piece at a time.
			for pos < have && len(part) > 0 {
				n := min(int64(len(part)), have-pos, int64(len(got)))
				if _, err := io.ReadFull(file, got[:n]); err != nil || !bytes.Equal(got[:n], part[:n]) {
					return errDiffers
				}
				part = part[n:]
				pos += n
			}
			if len(part) > 0 {
				if _, err := w.Write(part); err != nil {
					return fmt.Errorf("complete record file: %w", err)
				}
				pos += int64(len(part))
			}
		}
		return nil
	})
	if errors.Is(err, errDiffers) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read audit record from stream: %w", err)
	}
	if pos != span.Bytes {
		return false, fmt.Errorf("read audit record from stream: session %s holds %d bytes of lines from byte %d on, its index says %d", span.Session, pos-m.Bytes, m.Bytes, span.Bytes-m.Bytes)
	}
	if err := w.Flush(); err != nil {
		return false, fmt.Errorf("complete record file: %w", err)
	}
	if err := out.Sync(); err != nil {
		return false, fmt.Errorf("complete record file: %w", err)
	}
	return true, nil
}

// lineOf returns the audit line an event carries, for the kinds that can
// carry one; frames, the bulk of the stream, are not decoded.
func lineOf(e schemas.Event) (string, bool) {
	switch e.Kind {
	case schemas.KindSessionOpened, schemas.KindCallIntent, schemas.KindCallOutcome,
		schemas.KindSessionClosed, schemas.KindApprovalResolved:
		return decodeLine(e)
	}
	return "", false
}

// CheckFile checks the record file at path against what every session
// that recorded to it says it wrote: the SHA-256 of each session's bytes.
// It reads the file once, in pieces. A difference is [ErrRecordDiverged],
// naming the session and its bytes.
func (ix *Index) CheckFile(ctx context.Context, path string) error {
	spans := ix.SpansFor(path)
	if len(spans) == 0 {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("check record file: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for _, sp := range spans {
		h := sha256.New()
		r := io.NewSectionReader(f, sp.Offset, sp.Bytes)
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := r.Read(buf)
			h.Write(buf[:n])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("check record file: %w", err)
			}
		}
		if hexSum(h) != sp.Digest() {
			return fmt.Errorf("%w: bytes %d to %d of %s are not what session %s recorded there (changed, or written by something else?)", ErrRecordDiverged, sp.Offset, sp.Offset+sp.Bytes, path, sp.Session)
		}
	}
	return nil
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
			return Tail{}, fmt.Errorf("read record tail: %w", err)
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
			return Tail{}, fmt.Errorf("read record tail: %w", err)
		}
		tail = append(chunk, tail...)
		end -= n
		trimmed := bytes.TrimRight(tail, "\n")
		if len(trimmed) > 0 && bytes.IndexByte(trimmed, '\n') >= 0 {
			break
		}
		if len(tail) > maxTailLine {
			return Tail{}, fmt.Errorf("the last line of the record is longer than %d bytes: %w", maxTailLine, ErrTornTail)
		}
	}
	t, err := TailOf(bytes.NewReader(tail))
	if err != nil {
		return Tail{}, err
	}
	t.NeedsNewline = needsNewline
	return t, nil
}

// ExportReplay writes to w the audit lines of the events that replay
// delivers, in its order, each followed by '\n', keeping the sessions that
// keep accepts (nil: all) by their session.opened: what [Export] writes of
// a store, for a stream read elsewhere, such as a hub's mirror. It holds one
// event at a time.
func ExportReplay(replay func(func(events.Record) error) error, keep func(id string, so SessionOpened) bool, w io.Writer) (lines, sessions int, err error) {
	chosen := map[string]bool{}
	err = replay(func(r events.Record) error {
		e := r.Event
		if e.Kind == schemas.KindSessionOpened {
			var so SessionOpened
			if json.Unmarshal(e.Payload, &so) == nil && (keep == nil || keep(e.Session, so)) && !chosen[e.Session] {
				chosen[e.Session] = true
				sessions++
			}
		}
		if !chosen[e.Session] {
			return nil
		}
		line, ok := lineOf(e)
		if !ok {
			return nil
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return err
		}
		lines++
		return nil
	})
	return lines, sessions, err
}
