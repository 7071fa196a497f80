package projector

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// markEvery is how many bytes of a session's lines lie between two marks
// of its [RecordSpan]: a catch-up after a crash reads at most this much of
// the session back from the stream, whatever the session holds.
const markEvery = 4 << 20

// RecordSpan is what one session wrote, or had to write, to its record
// file: its lines are the bytes [Offset, Offset+Bytes) of the file at
// Path, each followed by '\n'. It is folded from the stream like the
// export ([Record.Fold]): a session counts from a session.opened whose
// payload decodes and carries a line.
type RecordSpan struct {
	Session string `json:"session"`
	Path    string `json:"path"`
	Offset  int64  `json:"offset"`
	Lines   int    `json:"lines"`
	Bytes   int64  `json:"bytes"`
	// Tail is the hash of the last line (what the next session links to).
	Tail string `json:"tail"`
	// First is the position of the session.opened event.
	First events.Position `json:"first"`
	// Marks are, about every markEvery bytes, the position of the line
	// that begins there and how many bytes precede it.
	Marks []SpanMark `json:"marks,omitempty"`
	// Tree is the tree state of the last checkpoint the session signed
	// of its record file, nil before its first.
	Tree *TreeState `json:"tree,omitempty"`

	digest hash.Hash // SHA-256 of the span's bytes so far
}

// SpanMark is a point inside a [RecordSpan] where a read can begin.
type SpanMark struct {
	At    events.Position `json:"at"`
	Bytes int64           `json:"bytes"`
}

// Digest returns the SHA-256 (hex) of the span's bytes.
func (s *RecordSpan) Digest() string {
	if s.digest == nil {
		return schemas.HashHex(nil)
	}
	return hexSum(s.digest)
}

// markBefore returns the last mark at or before n bytes of the span (the
// zero mark, at the span's start, if none).
func (s *RecordSpan) markBefore(n int64) SpanMark {
	m := SpanMark{At: s.First}
	for _, k := range s.Marks {
		if k.Bytes > n {
			break
		}
		m = k
	}
	return m
}

func (s *RecordSpan) add(line string, at events.Position) {
	if s.digest == nil {
		s.digest = sha256.New()
	}
	if s.Bytes >= int64(len(s.Marks)+1)*markEvery {
		s.Marks = append(s.Marks, SpanMark{At: at, Bytes: s.Bytes})
	}
	b := []byte(line) // one copy for both hashes
	s.digest.Write(b)
	s.digest.Write([]byte{'\n'})
	s.Lines++
	s.Bytes += int64(len(line)) + 1
	s.Tail = schemas.HashHex(b)
}

// Index is the fold that start-up, aegis sessions and aegis export read
// instead of the whole stream: the session index ([SessionIndex]) and,
// per session, its [RecordSpan]. Its fold is pure; [LoadIndex] and
// [Index.Save] (indexstore.go, with the record file stamps) keep it as a
// snapshot in the store's index folder, so that a new process folds only
// the events after the snapshot.
type Index struct {
	sessions SessionIndex
	spans    map[string]*RecordSpan
	byPath   map[string][]*RecordSpan // in stream order
	// At is the position of the last event folded; Folded is false until
	// one was.
	At     events.Position
	Folded bool
	// dirty is the first session (in stream order) that changed since the
	// index was loaded or saved; saved is what the last save wrote.
	dirty int
	saved snapshotState
	// files are the record files checked whole, as they were when their
	// session closed (see FileStamp); unchecked are the ones CatchUp left
	// for [Index.CheckFile] beside the relay.
	files     map[string]FileStamp
	unchecked map[string]bool
	filesNew  bool // files or rotation changed since the last save
	// rotation is the rotation that began the stream (its first event).
	rotation *RotationInfo
	// pins are the tool pins (pins.go), saved in the head.
	pins PinSet
}

// FileStamp is what the kernel says of a record file that aegis checked
// whole and then closed: if its device, inode, size and change time are
// the same at the next start, no one wrote to it since, and it need not
// be read again. The change time is set by the kernel on every write and
// cannot be set back by the file's owner.
type FileStamp struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Ctime int64  `json:"ctime_ns"`
}

// needsCheck reports whether CatchUp left the record file at path to be
// checked whole beside the relay.
func (ix *Index) needsCheck(path string) bool { return ix.unchecked[path] }

// fold folds one event. Only Update calls it, with every event of a
// message, so the index stands at a message's end between calls.
func (ix *Index) fold(rec events.Record) {
	if ix.spans == nil {
		ix.spans = map[string]*RecordSpan{}
		ix.byPath = map[string][]*RecordSpan{}
	}
	// The line is read out of its payload once, for both folds: an
	// outcome's was read twice, the larger part of the fold's cost.
	line, ok := lineOf(rec.Event)
	if i := ix.sessions.foldLine(rec, line, true); i >= 0 && i < ix.dirty {
		ix.dirty = i
	}
	switch rec.Event.Kind {
	case schemas.KindStoreRotated:
		ix.foldRotation(rec)
	case schemas.KindRecordCheckpoint:
		ix.foldCheckpoint(rec)
	}
	ix.foldPins(rec)
	ix.foldSpan(rec, line, ok)
	ix.At, ix.Folded = rec.Pos, true
}

// foldSpan is [Record.Fold] reduced to sizes and digests: the same
// sessions and the same lines, none of them kept. line and ok are
// [lineOf] the event.
func (ix *Index) foldSpan(rec events.Record, line string, ok bool) {
	e := rec.Event
	if !ok && e.Kind != schemas.KindSessionOpened {
		return
	}
	sp := ix.spans[e.Session]
	if sp == nil {
		if e.Kind != schemas.KindSessionOpened || !ok {
			return
		}
		var so SessionOpened
		if json.Unmarshal(e.Payload, &so) != nil {
			return
		}
		sp = &RecordSpan{Session: e.Session, Path: so.AuditPath, Offset: so.AuditOffset, First: rec.Pos}
		ix.spans[e.Session] = sp
		ix.byPath[sp.Path] = append(ix.byPath[sp.Path], sp)
	}
	if !ok {
		return
	}
	sp.add(line, rec.Pos)
}

// foldCheckpoint keeps the tree state of a session's checkpoint of its
// own record file.
func (ix *Index) foldCheckpoint(rec events.Record) {
	sp := ix.spans[rec.Event.Session]
	var cp RecordCheckpoint
	if sp == nil || json.Unmarshal(rec.Event.Payload, &cp) != nil || cp.AuditPath != sp.Path || cp.Bytes < sp.Offset {
		return
	}
	st := cp.TreeState
	sp.Tree = &st
	if en := ix.sessions.byID[rec.Event.Session]; en != nil && en.pos < ix.dirty {
		ix.dirty = en.pos
	}
}

// treeFor returns the tree state of the last checkpoint of the record file
// at path that covers at most its first end bytes, nil when there is none.
func (ix *Index) treeFor(path string, end int64) *TreeState {
	spans := ix.byPath[path]
	for i := len(spans) - 1; i >= 0; i-- {
		if st := spans[i].Tree; st != nil && st.Bytes <= end {
			return st
		}
	}
	return nil
}

// Sessions is [SessionIndex.Sessions].
func (ix *Index) Sessions(holderPID int) []SessionSummary { return ix.sessions.Sessions(holderPID) }

// Session returns the summary of the session id, as [Index.Sessions] has
// it, and whether the index holds it.
func (ix *Index) Session(id string, holderPID int) (SessionSummary, bool) {
	return ix.sessions.Get(id, holderPID)
}

// Span returns a session's span.
func (ix *Index) Span(session string) (RecordSpan, bool) {
	sp := ix.spans[session]
	if sp == nil {
		return RecordSpan{}, false
	}
	return *sp, true
}

// SpansFor returns, in stream order, the spans of the sessions that
// recorded to path.
func (ix *Index) SpansFor(path string) []RecordSpan {
	out := make([]RecordSpan, 0, len(ix.byPath[path]))
	for _, sp := range ix.byPath[path] {
		out = append(out, *sp)
	}
	return out
}

// Spans returns every span, in stream order.
func (ix *Index) Spans() []RecordSpan {
	var out []RecordSpan
	for _, s := range ix.sessions.list {
		if sp := ix.spans[s.ID]; sp != nil {
			out = append(out, *sp)
		}
	}
	return out
}

// hexSum is the hex SHA-256 so far; Sum leaves the running digest as it is.
func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
