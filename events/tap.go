package events

import (
	"context"
	"slices"
	"sync"

	"github.com/aegis-dev/aegis/schemas"
)

// A CommitTap keeps, for one reader, the events of the messages this store
// commits, with their stream sequences, so that the reader can fold what
// was just committed without reading it back from the stream: a read back
// goes through a consumer of the embedded server, which loads the blocks
// it reads into the server's cache, and cost a recording session about as
// much CPU as its own commits (the index folds the stream every second).
//
// It holds only what this store acknowledged, in commit order; messages
// that another publisher put on the stream (an approval request) are not
// in it, and [CommitTap.Replay] stops at the first gap they leave, so the
// reader reads the rest from the stream as before. A frame event is kept
// without its frame (see [schemas.FrameEnvelope]): the reader folds frames
// by their envelope. What the tap holds is bounded (tapLimit); past it, it
// lets go of everything and the reader reads back from the stream.
type CommitTap struct {
	s     *Store
	mu    sync.Mutex
	msgs  []tapMsg
	bytes int
}

// tapMsg is one committed message: its sequence and its events' data.
type tapMsg struct {
	seq    uint64
	events [][]byte
}

// tapLimit bounds the bytes one tap holds between two reads: about a
// second of recorded calls at a few thousand calls a second.
const tapLimit = 8 << 20

// TapCommits starts a tap on the messages this store commits from now on.
// Close it when done: until then, each commit hands it its events.
func (s *Store) TapCommits() *CommitTap {
	t := &CommitTap{s: s}
	s.tapMu.Lock()
	defer s.tapMu.Unlock()
	taps := slices.Clone(s.taps.Load().list())
	taps = append(taps, t)
	s.taps.Store(&tapList{taps})
	return t
}

// Close stops the tap and lets go of what it holds.
func (t *CommitTap) Close() {
	s := t.s
	s.tapMu.Lock()
	taps := slices.DeleteFunc(slices.Clone(s.taps.Load().list()), func(x *CommitTap) bool { return x == t })
	s.taps.Store(&tapList{taps})
	s.tapMu.Unlock()
	t.mu.Lock()
	t.msgs, t.bytes = nil, 0
	t.mu.Unlock()
}

// tapList is the store's taps, replaced whole when one starts or stops,
// so that a commit reads it without a lock.
type tapList struct{ taps []*CommitTap }

func (l *tapList) list() []*CommitTap {
	if l == nil {
		return nil
	}
	return l.taps
}

// tapData returns what a tap keeps of a batch about to be published (nil
// without a tap): each event's data, a frame event's without its frame.
// It runs before publish lets go of the items' data.
func (s *Store) tapData(batch []*item) [][]byte {
	if len(s.taps.Load().list()) == 0 {
		return nil
	}
	out := make([][]byte, len(batch))
	for i, it := range batch {
		out[i] = it.data
		if it.kind == schemas.KindFrameC2S || it.kind == schemas.KindFrameS2C || it.kind == schemas.KindFrameRefusal {
			if env, ok := schemas.FrameEnvelope(it.data); ok {
				out[i] = env
			}
		}
	}
	return out
}

// tapped hands every tap the events of the message committed at seq.
func (s *Store) tapped(seq uint64, evs [][]byte) {
	n := 0
	for _, d := range evs {
		n += len(d)
	}
	for _, t := range s.taps.Load().list() {
		t.mu.Lock()
		if t.bytes+n > tapLimit {
			// The reader reads these back from the stream instead.
			t.msgs, t.bytes = nil, 0
		}
		t.msgs = append(t.msgs, tapMsg{seq: seq, events: evs})
		t.bytes += n
		t.mu.Unlock()
	}
}

// Replay calls fn, in stream order, for the events at or after from that
// the tap holds, as long as they follow from without a gap: the message at
// from.Seq, then the one after it, and so on, as [Store.Replay] would hand
// them out, except that a frame event comes without its frame (its payload
// is {"bytes":""}). It returns the position after the last message it
// handed out (from, if none): the caller reads on from there with
// [Store.Replay], which finds whatever the tap did not have. The tap lets
// go of everything it held. An error from fn is returned as it is.
func (t *CommitTap) Replay(ctx context.Context, from Position, fn func(Record) error) (Position, error) {
	t.mu.Lock()
	msgs := t.msgs
	t.msgs, t.bytes = nil, 0
	t.mu.Unlock()
	next := from
	for _, m := range msgs {
		if m.seq < next.Seq {
			continue // read already
		}
		if m.seq > next.Seq {
			break // another publisher's message lies between
		}
		evs := make([]schemas.Event, len(m.events))
		for i, d := range m.events {
			e, err := schemas.DecodeOwnEvent(d) // Encode validated it
			if err != nil {
				// Never: this store encoded it. The stream's read
				// says what is wrong with it.
				return next, nil
			}
			evs[i] = e
		}
		if err := ctx.Err(); err != nil {
			return next, err
		}
		for i, e := range evs {
			if m.seq == from.Seq && i < from.Index {
				continue
			}
			if err := fn(Record{Pos: Position{Seq: m.seq, Index: i}, Event: e}); err != nil {
				return next, err
			}
		}
		next = Position{Seq: m.seq + 1}
	}
	return next, nil
}
