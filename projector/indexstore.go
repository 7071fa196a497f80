package projector

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/aegis-dev/aegis/events"
)

// The snapshot of an [Index] in the store's index folder: a head and the
// sessions in chunks of indexChunk, in stream order. Only the last session
// of a state directory still changes (one writer per directory), so a save
// rewrites the last chunk or two and the head, whatever the history holds.
//
// The head is written last and names the revision of every chunk it was
// saved with and a digest of the stream message it was folded to. A
// snapshot whose chunks are not those revisions (a save cut short), or
// whose message is not in the stream (a state directory put back from an
// older copy), is thrown away and the index is folded from the stream.
const (
	indexVersion = 1
	indexChunk   = 64
	indexHeadKey = "index.v1.head"
)

func chunkKey(k int) string { return "index.v1.chunk." + strconv.Itoa(k) }

type indexHead struct {
	Version  int                  `json:"version"`
	At       events.Position      `json:"at"`
	Digest   string               `json:"digest"`
	Sessions int                  `json:"sessions"`
	Chunks   []uint64             `json:"chunks"`
	Files    map[string]FileStamp `json:"files,omitempty"`
	Rotation *RotationInfo        `json:"rotation,omitempty"`
	Pins     []Pin                `json:"pins,omitempty"`
}

type sessionSnap struct {
	Summary  SessionSummary    `json:"summary"`
	InFlight []string          `json:"in_flight,omitempty"`
	Resolved map[string]string `json:"resolved,omitempty"`
	Span     *spanSnap         `json:"span,omitempty"`
}

type spanSnap struct {
	RecordSpan
	DigestState []byte `json:"digest_state,omitempty"`
}

// snapshotState is what the index knows of its last save.
type snapshotState struct {
	revs []uint64        // the revision of each chunk saved
	at   events.Position // the position saved (or loaded)
	ok   bool            // at is set
}

// IndexSource is what an [Index] is folded from and saved beside: a
// stream and an index folder that belongs to it. [*events.Store] is one
// (its own stream and folder); [*events.MirrorIndex] is another (a host's
// mirror on a hub, with a folder on the reading machine).
type IndexSource interface {
	// Replay calls fn for every event at or after from, in stream order,
	// as [events.Store.Replay] does.
	Replay(ctx context.Context, from events.Position, fn func(events.Record) error) error
	// MessageDigest names the message at seq, as
	// [events.Store.MessageDigest] does.
	MessageDigest(ctx context.Context, seq uint64) (string, error)
	// IndexGet and IndexPut read and replace one value of the folder, as
	// [events.Store.IndexGet] and [events.Store.IndexPut] do.
	IndexGet(ctx context.Context, key string) ([]byte, uint64, error)
	IndexPut(ctx context.Context, key string, val []byte) (uint64, error)
}

var (
	_ IndexSource = (*events.Store)(nil)
	_ IndexSource = (*events.MirrorIndex)(nil)
)

// LoadIndex returns the index of st's stream: its snapshot from st's index
// folder, if there is a sound one, with every later event folded in.
// A snapshot that cannot be used is logged and the whole stream folded;
// the index is a cache, never a source. each, if not nil, is called per
// event folded. Damage is returned as [Store.Replay] returns it.
func LoadIndex(ctx context.Context, st IndexSource, log *slog.Logger, each func()) (*Index, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ix, err := loadSnapshot(ctx, st)
	if err != nil {
		if !errors.Is(err, events.ErrNoIndex) {
			log.Info("index snapshot not used; folding the stream", "reason", err)
		}
		ix = &Index{}
	}
	if err := ix.Update(ctx, st, each); err != nil {
		return nil, err
	}
	return ix, nil
}

// Update folds the events after the last one folded.
func (ix *Index) Update(ctx context.Context, st IndexSource, each func()) error {
	_, err := ix.update(ctx, st, nil, 0, each)
	return err
}

// UpdateSome folds the events after the last one folded, stopping at the
// first message boundary after about budget bytes of payload, and reports
// whether it stopped early. A session folds its own stream this way beside
// the relay, so that a flood of large frames is read back at a bounded
// pace instead of all at once: the embedded server keeps every block it
// reads cached for a while, and a fold that kept up with a flood of
// 16 MiB frames more than doubled the process's memory.
func (ix *Index) UpdateSome(ctx context.Context, st IndexSource, budget int64) (more bool, err error) {
	return ix.update(ctx, st, nil, budget, nil)
}

// updateTapped is [Index.UpdateSome] that first folds what tap holds of
// the messages after the index's end (see [events.CommitTap]), and reads
// only the rest back from the stream. A tap hands out a message exactly as
// the stream would, except for a frame event's frame, which no part of the
// fold reads (the session index counts frames, and nothing else looks at
// them), so the index comes out the same either way.
func (ix *Index) updateTapped(ctx context.Context, st IndexSource, tap *events.CommitTap, budget int64) (more bool, err error) {
	return ix.update(ctx, st, tap, budget, nil)
}

// errBudget stops a replay at a message boundary once the budget is spent.
var errBudget = errors.New("fold budget spent")

func (ix *Index) update(ctx context.Context, st IndexSource, tap *events.CommitTap, budget int64, each func()) (bool, error) {
	from := events.Position{}
	if ix.Folded {
		// A replay hands out every event of a message before it returns,
		// and a budget stops it only between messages, so the index
		// always stands at the end of a message: the next one is where to
		// go on (and a stream that did not grow is one request, not a
		// read).
		from = events.Position{Seq: ix.At.Seq + 1}
	}
	var spent int64
	fold := func(r events.Record) error {
		if budget > 0 && spent >= budget && r.Pos.Index == 0 {
			return errBudget
		}
		ix.fold(r)
		spent += int64(len(r.Event.Payload))
		if each != nil {
			each()
		}
		return nil
	}
	var err error
	rest := true
	if tap != nil {
		if !ix.Folded {
			// Nothing folded yet: the stream's first message is 1
			// (a stream a rotation began starts later, which the tap
			// sees as a gap, so that the stream is read).
			from = events.Position{Seq: 1}
		}
		if from, err = tap.Replay(ctx, from, fold); err == nil {
			// Read the stream only for what the tap will not hand out
			// (see CommitTap.Rest); the session's own commits since are
			// the next update's.
			rest, err = tap.Rest(ctx, from)
		}
	}
	if err == nil && rest {
		err = st.Replay(ctx, from, fold)
	}
	if errors.Is(err, errBudget) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("fold the event stream: %w", err)
	}
	return false, nil
}

func loadSnapshot(ctx context.Context, st IndexSource) (*Index, error) {
	return decodeSnapshot(func(key string) ([]byte, uint64, error) { return st.IndexGet(ctx, key) },
		func(seq uint64) (string, error) { return st.MessageDigest(ctx, seq) })
}

// ReadHeldIndex reads the index that the aegis process holding the state
// directory dir keeps, without opening the stream (which that process
// holds exclusively): what a reader can show while a session runs. The
// holder checked it against the stream when it started and saves it every
// second or so; this reads it whole and self-consistent, but cannot check
// it against the stream itself.
func ReadHeldIndex(dir string) (*Index, error) {
	return decodeSnapshot(func(key string) ([]byte, uint64, error) { return events.ReadIndex(dir, key) }, nil)
}

// decodeSnapshot reads a snapshot through get; digest, if not nil, gives
// the digest of a stream message to check the head against.
func decodeSnapshot(get func(key string) ([]byte, uint64, error), digest func(seq uint64) (string, error)) (*Index, error) {
	b, _, err := get(indexHeadKey)
	if err != nil {
		return nil, err
	}
	var h indexHead
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("index head: %w", err)
	}
	if h.Version != indexVersion {
		return nil, fmt.Errorf("index version %d, want %d", h.Version, indexVersion)
	}
	if h.At.Seq == 0 || len(h.Chunks) != (h.Sessions+indexChunk-1)/indexChunk {
		return nil, fmt.Errorf("index head is inconsistent")
	}
	if digest != nil {
		d, err := digest(h.At.Seq)
		if err != nil {
			return nil, fmt.Errorf("index was folded to a message the stream does not hold: %w", err)
		}
		if d != h.Digest {
			return nil, fmt.Errorf("index was folded from another stream (message %d differs)", h.At.Seq)
		}
	}
	ix := &Index{At: h.At, Folded: true, spans: map[string]*RecordSpan{}, byPath: map[string][]*RecordSpan{},
		sessions: SessionIndex{byID: map[string]*indexEntry{}}}
	for k, rev := range h.Chunks {
		b, got, err := get(chunkKey(k))
		if err != nil {
			return nil, fmt.Errorf("index chunk %d: %w", k, err)
		}
		if got != rev {
			return nil, fmt.Errorf("index chunk %d is revision %d, the head names %d (a save was cut short)", k, got, rev)
		}
		var c []sessionSnap
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("index chunk %d: %w", k, err)
		}
		for _, s := range c {
			if err := ix.restore(s); err != nil {
				return nil, fmt.Errorf("index chunk %d: %w", k, err)
			}
		}
	}
	if len(ix.sessions.list) != h.Sessions {
		return nil, fmt.Errorf("index holds %d sessions, the head says %d", len(ix.sessions.list), h.Sessions)
	}
	ix.dirty = h.Sessions
	ix.saved = snapshotState{revs: h.Chunks, at: h.At, ok: true}
	ix.files = h.Files
	ix.rotation = h.Rotation
	ix.restorePins(h.Pins)
	return ix, nil
}

func (ix *Index) restore(s sessionSnap) error {
	sum := s.Summary
	if sum.ID == "" || ix.sessions.byID[sum.ID] != nil {
		return fmt.Errorf("session %q twice or without id", sum.ID)
	}
	en := &indexEntry{pos: len(ix.sessions.list), sum: &sum, inflight: map[string]bool{}, resolved: resolutions{}}
	for _, id := range s.InFlight {
		en.inflight[id] = true
	}
	for k, v := range s.Resolved {
		en.resolved[k] = v
	}
	ix.sessions.byID[sum.ID] = en
	ix.sessions.list = append(ix.sessions.list, &sum)
	if s.Span != nil {
		sp := s.Span.RecordSpan
		if sp.Session != sum.ID {
			return fmt.Errorf("span of %q filed under %q", sp.Session, sum.ID)
		}
		if len(s.Span.DigestState) > 0 {
			h := sha256.New()
			if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.Span.DigestState); err != nil {
				return fmt.Errorf("span digest of %s: %w", sp.Session, err)
			}
			sp.digest = h
		}
		ix.spans[sp.Session] = &sp
		ix.byPath[sp.Path] = append(ix.byPath[sp.Path], &sp)
	}
	return nil
}

// Save writes the index to st's index folder: the chunks that
// changed since the last save, then the head. A snapshot cut short by a
// crash is detected and thrown away by the next [LoadIndex].
func (ix *Index) Save(ctx context.Context, st IndexSource) error {
	return ix.saveTapped(ctx, st, nil)
}

// saveTapped is [Index.Save] that takes the digest of the message the
// index stands at from tap when it has it ([events.CommitTap.Digest]),
// rather than reading the message back.
func (ix *Index) saveTapped(ctx context.Context, st IndexSource, tap *events.CommitTap) error {
	if !ix.Folded || ix.saved.ok && ix.saved.at == ix.At && !ix.filesNew {
		return nil // nothing new since the last save
	}
	digest, ok := "", false
	if tap != nil {
		digest, ok = tap.Digest(ix.At.Seq)
	}
	var err error
	if !ok {
		digest, err = st.MessageDigest(ctx, ix.At.Seq)
	}
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	n := len(ix.sessions.list)
	from := min(ix.dirty, n) / indexChunk
	revs := append([]uint64(nil), ix.saved.revs[:min(from, len(ix.saved.revs))]...)
	for k := len(revs); k*indexChunk < n; k++ {
		var c []sessionSnap
		for _, s := range ix.sessions.list[k*indexChunk : min(n, (k+1)*indexChunk)] {
			c = append(c, ix.snap(s.ID))
		}
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("save index: %w", err)
		}
		rev, err := st.IndexPut(ctx, chunkKey(k), b)
		if err != nil {
			return fmt.Errorf("save index: %w", err)
		}
		revs = append(revs, rev)
	}
	b, err := json.Marshal(indexHead{Version: indexVersion, At: ix.At, Digest: digest, Sessions: n, Chunks: revs, Files: ix.files, Rotation: ix.rotation, Pins: ix.pinsSnap()})
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if _, err := st.IndexPut(ctx, indexHeadKey, b); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	ix.saved = snapshotState{revs: revs, at: ix.At, ok: true}
	ix.dirty = n
	ix.filesNew = false
	return nil
}

func (ix *Index) snap(id string) sessionSnap {
	en := ix.sessions.byID[id]
	s := sessionSnap{Summary: *en.sum}
	s.Summary.State = ""
	for c := range en.inflight {
		s.InFlight = append(s.InFlight, c)
	}
	if len(en.resolved) > 0 {
		s.Resolved = en.resolved
	}
	if sp := ix.spans[id]; sp != nil {
		s.Span = &spanSnap{RecordSpan: *sp}
		if sp.digest != nil {
			s.Span.DigestState, _ = sp.digest.(encoding.BinaryMarshaler).MarshalBinary()
		}
	}
	return s
}

// unchangedSince reports whether the record file f is as it was when a
// session that had it checked whole closed it.
func (ix *Index) unchangedSince(path string, f *os.File) bool {
	want, ok := ix.files[path]
	if !ok || f == nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	got, ok := StampOf(fi)
	return ok && got == want
}

// stampFile notes that the record file at path was checked whole and is
// now closed, as it is now.
func (ix *Index) stampFile(path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if st, ok := StampOf(fi); ok {
		if ix.files == nil {
			ix.files = map[string]FileStamp{}
		}
		ix.files[path] = st
		ix.filesNew = true
	}
}
