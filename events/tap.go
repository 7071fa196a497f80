package events

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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
	// last is the latest message committed, whole, while it is small
	// (tapWhole): what [CommitTap.Digest] digests.
	last tapWhole
	// digest is the digest of the last message Replay handed out, when
	// it could be made from last.
	digest    string
	digestSeq uint64
}

// tapWhole is a committed message as the stream holds it.
type tapWhole struct {
	seq     uint64
	subject string
	header  nats.Header
	events  [][]byte
}

// tapWholeLimit bounds the message a tap keeps whole.
const tapWholeLimit = 64 << 10

// tapMsg is one committed message: its sequence and its events' data.
type tapMsg struct {
	seq    uint64
	events [][]byte
	acked  time.Time // when the store had its acknowledgement
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

// tapCommit is what the taps keep of one commit.
type tapCommit struct {
	events [][]byte // each event's data, a frame event's without its frame
	whole  [][]byte // each event's data, while the message is small; else nil
}

// tapData returns what a tap keeps of a batch about to be published (nil
// without a tap). It runs before publish lets go of the items' data; the
// data is not copied (nothing changes it after Encode), only a frame's
// envelope is.
func (s *Store) tapData(batch []*item) *tapCommit {
	if len(s.taps.Load().list()) == 0 {
		return nil
	}
	c := &tapCommit{events: make([][]byte, len(batch))}
	size := 0
	for i, it := range batch {
		c.events[i] = it.data
		size += len(it.data) + 1
		if it.kind == schemas.KindFrameC2S || it.kind == schemas.KindFrameS2C || it.kind == schemas.KindFrameRefusal {
			if env, ok := schemas.FrameEnvelope(it.data); ok {
				c.events[i] = env
			}
		}
	}
	if size <= tapWholeLimit {
		c.whole = make([][]byte, len(batch))
		for i, it := range batch {
			c.whole[i] = it.data
		}
	}
	return c
}

// tapped hands every tap the events of the message committed at seq under
// subject.
func (s *Store) tapped(seq uint64, subject string, c *tapCommit) {
	n := 0
	for _, d := range c.events {
		n += len(d)
	}
	last := tapWhole{seq: seq}
	if c.whole != nil {
		last = tapWhole{seq: seq, subject: subject, events: c.whole}
		if len(c.whole) > 1 {
			last.header = nats.Header{batchHeader: []string{strconv.Itoa(len(c.whole))}}
		}
	}
	acked := time.Now()
	for _, t := range s.taps.Load().list() {
		t.mu.Lock()
		if t.bytes+n > tapLimit {
			// The reader reads these back from the stream instead.
			t.msgs, t.bytes = nil, 0
		}
		t.msgs = append(t.msgs, tapMsg{seq: seq, events: c.events, acked: acked})
		t.bytes += n
		t.last = last
		t.mu.Unlock()
	}
}

// Replay calls fn, in stream order, for the events at or after from that
// the tap holds, as long as they follow from without a gap: the message at
// from.Seq, then the one after it, and so on, as [Store.Replay] would hand
// them out, except that a frame event comes without its frame (its payload
// is {"bytes":""}), and each record says when its commit was
// acknowledged (Record.Acked). It returns the position after the last message it
// handed out (from, if none): the caller reads on from there with
// [Store.Replay], which finds whatever the tap did not have. The tap lets
// go of everything it held. An error from fn is returned as it is.
func (t *CommitTap) Replay(ctx context.Context, from Position, fn func(Record) error) (next Position, err error) {
	t.mu.Lock()
	msgs, last := t.msgs, t.last
	t.msgs, t.bytes = nil, 0
	t.mu.Unlock()
	defer func() {
		// The last message handed out, digested from its whole bytes
		// if the tap kept them (it is then the latest commit).
		if next != from && last.events != nil && last.seq+1 == next.Seq {
			d := last.digest()
			t.mu.Lock()
			t.digestSeq, t.digest = last.seq, d
			t.mu.Unlock()
		}
	}()
	next = from
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
			if err := fn(Record{Pos: Position{Seq: m.seq, Index: i}, Event: e, Acked: m.acked}); err != nil {
				return next, err
			}
		}
		next = Position{Seq: m.seq + 1}
	}
	return next, nil
}

// digest is [Store.MessageDigest] of the message.
func (w tapWhole) digest() string {
	data := w.events[0]
	if len(w.events) > 1 {
		data = bytes.Join(w.events, []byte{'\n'})
	}
	return messageDigest(w.subject, w.header, data)
}

// Digest returns [Store.MessageDigest] of the message at seq, if that is
// the last message the tap handed out and the tap kept it whole; ok is
// false otherwise. A reader that saves where it stands asks it instead of
// reading the message back: any read of the block the store is writing
// makes the embedded server keep that block's cache only weakly from then
// on, and load the whole block from disk again for the next write after
// every garbage collection.
func (t *CommitTap) Digest(seq uint64) (digest string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.digest == "" || t.digestSeq != seq {
		return "", false
	}
	return t.digest, true
}

// Rest reports whether the stream holds messages at or after from that
// the tap will not hand out: a message another process published, or
// one committed before the tap started. Without them, everything from
// from on is the tap's, and the reader need not read the stream (which
// would load the block being written, see [CommitTap.Digest]). It fails
// as [Store.Replay] does on a damaged stream.
func (t *CommitTap) Rest(ctx context.Context, from Position) (bool, error) {
	st, err := t.s.state(ctx)
	if err != nil {
		return false, fmt.Errorf("replay: %w", err)
	}
	if err := t.s.damage(st, ""); err != nil {
		return false, err
	}
	last := st.State.LastSeq
	if last == 0 || from.Seq > last {
		return false, nil
	}
	if !t.holds(from, last) {
		// The stream may already hold the message of the commit in
		// flight, which the tap gets only once its ack is read: wait
		// for that commit (one at a time, so it is the only message
		// this store stored and the tap lacks) rather than read the
		// block being written for it, which happened at every few saves
		// under a steady stream of calls and kept the embedded server's
		// write cache growing (see [CommitTap.Digest]).
		if err := t.s.waitCommit(ctx); err != nil {
			return false, err
		}
	}
	return !t.holds(from, last), nil
}

// holds reports whether the tap holds every message from from.Seq through
// last, without a gap. Those the store commits from now on take sequences
// after last.
func (t *CommitTap) holds(from Position, last uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := from.Seq
	for _, m := range t.msgs {
		if m.seq < want {
			continue
		}
		if m.seq > want || want > last {
			break
		}
		want++
	}
	return want > last
}
