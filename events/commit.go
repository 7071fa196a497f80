package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aegis-dev/aegis/schemas"
)

// batchHeader marks a message that carries several events, newline
// separated, committed together. Its value is their count.
const batchHeader = "Aegis-Events"

// item is one queued event. The committer fills pos or err, then closes
// done (nil for a deferred frame, which has no receipt).
//
// A deferred frame (see [Store.EnqueueFrame]) holds the frame, its kind and
// its time instead of data and subject; the commit that takes it builds
// them. size is len(data), or for a deferred frame an upper bound of it.
type item struct {
	store   *Store
	lazy    bool
	session string
	subject string
	data    []byte
	size    int
	done    chan struct{}
	pos     Position
	err     error

	// alone: the event is committed in a message of its own, under its
	// own subject (see committedAlone).
	alone    bool
	deferred bool
	kind     schemas.Kind
	at       time.Time
	frame    []byte
}

// committedAlone reports whether events of kind k are committed each in a
// message of its own, under the subject aegis.<session>.<kind>, so that a
// reader (a catch-up, a hub reading a mirror) finds the last one by its
// subject without reading the stream: a session's start and a record's
// checkpoints, and the witnesses' cosignatures of the anchor log.
func committedAlone(k schemas.Kind) bool {
	return k == schemas.KindSessionOpened || k == schemas.KindRecordCheckpoint || k == schemas.KindAnchorCosigned
}

// Receipt is the promise of an enqueued event. Wait blocks until the event
// is durable (or its commit failed).
type Receipt struct{ it *item }

// Wait returns the event's position once JetStream has acknowledged the
// commit that holds it, with the write on disk. An error means the event was
// not acknowledged; if it is ctx's error the event may still be committed.
//
// If no commit is in flight, Wait commits in the calling goroutine (batch
// after batch from the head of the queue, until one holds this event)
// instead of handing the work to the committer goroutine and waiting to be
// woken: on
// a small machine each such hand-off costs tens of microseconds. If a commit
// is in flight, Wait waits for it and then, if its event is still queued,
// commits the next batch itself.
func (r *Receipt) Wait(ctx context.Context) (Position, error) {
	it := r.it
	s := it.store
	for {
		select {
		case <-it.done:
			return it.pos, it.err
		default:
		}
		s.mu.Lock()
		if s.committing {
			end := s.commitEnd
			s.mu.Unlock()
			select {
			case <-it.done:
				return it.pos, it.err
			case <-end:
				continue
			case <-ctx.Done():
				return Position{}, ctx.Err()
			}
		}
		select {
		case <-it.done:
			// Resolved by the commit that ended since the check above.
			s.mu.Unlock()
			return it.pos, it.err
		default:
		}
		// Nobody commits and the event is not resolved, so it is queued
		// (receipts are resolved before a commit ends): commit from the
		// head of the queue, which reaches it.
		batch, err := s.takeLocked()
		s.mu.Unlock()
		s.commit(batch, err)
	}
}

// Done is closed when the event's commit has finished, either way.
func (r *Receipt) Done() <-chan struct{} { return r.it.done }

// Append adds e to the stream and returns its position once it is durable:
// acknowledged by JetStream with the write fsynced. An event that does not
// validate is refused before it reaches the stream.
//
// Concurrent Appends share commits: events that arrive while a commit is in
// flight go to disk together in the next one, with one fsync.
func (s *Store) Append(ctx context.Context, e schemas.Event) (Position, error) {
	r, err := s.Enqueue(e)
	if err != nil {
		return Position{}, err
	}
	return r.Wait(ctx)
}

// Enqueue validates e and queues it for the next commit without waiting.
// A session's events are committed in the order they were enqueued, so an
// event is durable no later than any event of its session enqueued after
// it: waiting on a later receipt of the session covers every earlier one.
func (s *Store) Enqueue(e schemas.Event) (*Receipt, error) {
	rs, err := s.EnqueueMany(e)
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// EnqueueMany validates every event and queues them together: the
// committer sees all of them or none, so events of one session enqueued
// together land in one commit (up to the batch limits). Nothing is queued if
// any event is invalid. The receipts are in the events' order; the last one
// covers them all.
func (s *Store) EnqueueMany(evs ...schemas.Event) ([]*Receipt, error) {
	return s.enqueue(false, evs)
}

// EnqueueAwaited queues events whose last receipt the caller waits on
// next (an intent, an outcome: the relay holds a frame until it is
// durable). They start no commit of their own: the goroutine that waits
// commits them itself when no commit is in flight (see [Receipt.Wait]),
// which spares a hand-off to the committer and back. Should nobody wait,
// they are committed like lazy events.
func (s *Store) EnqueueAwaited(evs ...schemas.Event) ([]*Receipt, error) {
	return s.enqueue(true, evs)
}

// EnqueueLazy queues events that nobody waits for now (frames that carry no
// call or answer). They do not start a commit of their own: they go to disk
// with the next commit that someone waits for, or after Config.LazyFlush at
// the latest, so that they cost no extra fsync on a busy path. Waiting on
// their receipt commits them at once.
func (s *Store) EnqueueLazy(evs ...schemas.Event) ([]*Receipt, error) {
	return s.enqueue(true, evs)
}

// EnqueueFrame queues a frame event of session holding frame exactly, as
// [Store.EnqueueLazy] would, but leaves building its envelope to the commit
// that takes it: the caller's path (the relay's, between reading a frame
// and writing it on) pays for a lock and an append, not for an id, base64
// and an encoding. The event's time is taken now; its id when it is built.
// The store keeps frame until then, so the caller must not change it. There
// is no receipt: the event is durable with the next commit of its session,
// and waiting on any receipt of the session enqueued after it covers it.
func (s *Store) EnqueueFrame(session string, kind schemas.Kind, frame []byte) error {
	if kind != schemas.KindFrameC2S && kind != schemas.KindFrameS2C && kind != schemas.KindFrameRefusal {
		return fmt.Errorf("append %s event: %w", kind, &schemas.ValidationError{Field: "kind", Reason: "not a frame kind"})
	}
	if !schemas.ValidID(session) {
		return fmt.Errorf("append %s event: %w", kind, &schemas.ValidationError{Field: "session", Reason: fmt.Sprintf("%q is not a 26-character id", session)})
	}
	at := s.cfg.Now().UTC()
	size := schemas.FrameEventBound(kind, len(frame))
	if size > s.cfg.MaxEventBytes || at.Year() < 0 || at.Year() > 9999 {
		// Near the limit the bound would refuse an event that fits, so
		// judge the exact envelope; an odd clock's time may outgrow it.
		ev, err := s.NewEvent(session, kind, schemas.AppendFramePayload(nil, frame))
		if err != nil {
			return err
		}
		_, err = s.EnqueueLazy(ev)
		return err
	}
	_, err := s.queueItems(true, []*item{{store: s, lazy: true, session: session, size: size, deferred: true, kind: kind, at: at, frame: frame}})
	return err
}

// build makes a deferred frame's envelope; the commit that took it calls it.
func (it *item) build(rand io.Reader) error {
	id, err := schemas.NewID(it.at, rand)
	if err != nil {
		return err
	}
	e := schemas.Event{V: schemas.EnvelopeVersion, ID: id, Session: it.session, Kind: it.kind, Time: it.at}
	data, err := schemas.EncodeFrameEvent(e, it.frame)
	if err != nil {
		return fmt.Errorf("build %s event: %w", it.kind, err)
	}
	if len(data) > it.size {
		return fmt.Errorf("build %s event: %d bytes, more than the %d accounted for", it.kind, len(data), it.size)
	}
	it.data, it.subject, it.frame, it.deferred = data, e.Subject(), nil, false
	return nil
}

func (s *Store) enqueue(lazy bool, evs []schemas.Event) ([]*Receipt, error) {
	items := make([]*item, len(evs))
	for i, e := range evs {
		data, err := e.Encode()
		if err != nil {
			return nil, fmt.Errorf("append %s event: %w", e.Kind, err)
		}
		if len(data) > s.cfg.MaxEventBytes {
			return nil, fmt.Errorf("append %s event of %d bytes: %w (limit %d)", e.Kind, len(data), ErrTooLarge, s.cfg.MaxEventBytes)
		}
		items[i] = &item{store: s, lazy: lazy, session: e.Session, subject: e.Subject(), data: data, size: len(data), done: make(chan struct{}), alone: committedAlone(e.Kind), kind: e.Kind}
	}
	return s.queueItems(lazy, items)
}

// queueItems appends items to the queue and returns their receipts (none
// for deferred frames). While the queue holds events and the items would
// take it past Config.MaxQueueBytes, it makes room first: it commits from
// the head of the queue itself when no commit is in flight, else it waits
// for the one in flight to end. The caller therefore stops (and stops
// reading whatever it records) until the disk has taken what came before.
func (s *Store) queueItems(lazy bool, items []*item) ([]*Receipt, error) {
	size := 0
	for _, it := range items {
		size += it.size
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.failed != nil {
			return nil, s.failed
		}
		if s.closing {
			return nil, ErrClosed
		}
		if s.archived {
			return nil, ErrArchived
		}
		if s.readOnly {
			return nil, ErrReadOnly
		}
		if s.queued == 0 || s.queued+size <= s.cfg.MaxQueueBytes {
			break
		}
		s.makeRoomLocked()
	}
	s.queued += size
	s.queue = append(s.queue, items...)
	if lazy {
		if !s.flushArmed {
			s.flushArmed = true
			time.AfterFunc(s.cfg.LazyFlush, s.kick)
		}
	} else {
		s.eager += len(items)
		s.cond.Signal()
	}
	if len(items) == 1 && items[0].deferred {
		return nil, nil
	}
	rs := make([]*Receipt, len(items))
	for i, it := range items {
		rs[i] = &Receipt{it: it}
	}
	return rs, nil
}

// waitCommit waits for the commit in flight, if any, to end: its message
// is then in the taps (or its receipts failed). It does not start one.
func (s *Store) waitCommit(ctx context.Context) error {
	s.mu.Lock()
	if !s.committing {
		s.mu.Unlock()
		return nil
	}
	end := s.commitEnd
	s.mu.Unlock()
	select {
	case <-end: // a commit always ends: acknowledged, failed or timed out
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// makeRoomLocked lets one commit end: it runs the next one from the head
// of the queue when none is in flight, else waits for the one in flight.
// s.mu is held on entry and on return, released in between; the queue is
// not empty.
func (s *Store) makeRoomLocked() {
	if s.committing {
		end := s.commitEnd
		s.mu.Unlock()
		<-end // a commit always ends: acknowledged, failed or timed out
		s.mu.Lock()
		return
	}
	batch, err := s.takeLocked()
	s.mu.Unlock()
	s.commit(batch, err)
	s.mu.Lock()
}

// commitLoop is the committer goroutine. It commits what nobody waits for
// in its own goroutine: eager events enqueued without a Wait, and lazy
// events whose time is up. Exactly one commit is in flight at a time,
// whether the committer or a waiter (see [Receipt.Wait]) runs it: each takes
// everything queued (up to the batch limits, and never across a session
// boundary, so each message belongs to one session), publishes it as one
// message, and waits for the durable ack before resolving the receipts.
// While one commit is in flight the next batch accumulates: that is the
// group commit.
func (s *Store) commitLoop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for s.committing || (!s.closing && (len(s.queue) == 0 || (s.eager == 0 && !s.flushDue))) {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		batch, err := s.takeLocked()
		s.mu.Unlock()
		s.commit(batch, err)
	}
}

// takeLocked takes the next batch, the queued events of the session at
// the head of the queue (see the package invariants), and marks a commit
// in flight; s.mu is held and the queue is not empty. If the store
// has failed it takes the whole queue and returns the failure, so that
// every queued receipt fails.
func (s *Store) takeLocked() ([]*item, error) {
	s.committing = true
	s.commitEnd = make(chan struct{})
	if s.failed != nil {
		rest := s.queue
		s.queue = nil
		s.queued = 0
		s.eager = 0
		s.flushDue = false
		return rest, s.failed
	}
	// The batch is the head event's session's: its events in queue order
	// from the head on, up to the batch limits, passing over the other
	// sessions' events, which keep their places. It stops at an event
	// committed alone and before one of its session it cannot take, so a
	// session's events are never reordered.
	head := s.queue[0]
	var batch []*item
	size, kept, rest := 0, 0, -1
	taking := true
	for i, it := range s.queue {
		if taking && it.session == head.session {
			if len(batch) > 0 && (it.alone || head.alone || len(batch) >= s.cfg.MaxBatchEvents || size+it.size+1 > s.cfg.MaxBatchBytes) {
				taking = false
			} else {
				batch = append(batch, it)
				size += it.size + 1
				if !it.lazy {
					s.eager--
				}
				continue
			}
		}
		if !taking && kept == 0 {
			// Nothing passed over (one session's queue, as in a flood):
			// the rest is the queue as it is, without a copy.
			rest = i
			break
		}
		s.queue[kept] = it
		kept++
	}
	if rest >= 0 {
		s.queue = s.queue[rest:]
	} else {
		clear(s.queue[kept:]) // the taken items are not kept alive by the queue's array
		s.queue = s.queue[:kept]
	}
	s.queued -= size - len(batch) // size counted a separator per event
	if len(s.queue) == 0 {
		s.flushDue = false
		s.queue = nil
		s.queued = 0
	}
	return batch, nil
}

// commit publishes a batch taken by takeLocked (or fails it with err),
// resolves its receipts and ends the commit in flight. If events remain
// that the committer should commit, it is woken.
func (s *Store) commit(batch []*item, err error) {
	var seq uint64
	if err == nil {
		var perr error
		for _, it := range batch {
			if it.deferred && perr == nil {
				perr = it.build(s.cfg.Rand)
			}
		}
		if perr == nil {
			tap := s.tapData(batch)
			var subject string
			if subject, seq, perr = s.publish(batch); perr == nil && tap != nil {
				s.tapped(seq, subject, tap)
			}
		}
		if perr != nil {
			// Only a failed commit asks the disk how full it is: a
			// statfs per commit cost every call two system calls.
			if errors.Is(perr, errStreamFull) {
				err = fmt.Errorf("%w: %w", ErrFailed, s.fullError())
			} else if de := diskFull(s.dir); de != nil {
				err = fmt.Errorf("%w: %w (the store said: %v)", ErrFailed, de, perr)
			} else {
				err = fmt.Errorf("%w: %v (restart aegis; acknowledged events are safe on disk)", ErrFailed, perr)
			}
			s.mu.Lock()
			if s.failed == nil {
				s.failed = err
			}
			s.mu.Unlock()
			s.log.Error("event commit failed; refusing further appends", "err", err)
		}
	}
	resolve(batch, seq, err)
	s.mu.Lock()
	s.committing = false
	close(s.commitEnd)
	if s.closing || (len(s.queue) > 0 && (s.eager > 0 || s.flushDue || s.failed != nil)) {
		s.cond.Signal() // the committer has work, or must see the close
	}
	s.mu.Unlock()
}

// resolve settles a batch's receipts and lets go of its bytes: a receipt
// still held, or the queue's backing array, must not keep them alive.
func resolve(batch []*item, seq uint64, err error) {
	for i, it := range batch {
		it.data, it.frame = nil, nil
		if err != nil {
			it.err = err
		} else {
			it.pos = Position{Seq: seq, Index: i}
		}
		if it.done != nil {
			close(it.done)
		}
	}
}

// publish sends a batch as one message and waits for its acknowledgement.
// The items let go of their bytes as soon as they are handed on: once the
// server has read a message it holds its own copies, and during the fsync
// this one would be a third.
func (s *Store) publish(batch []*item) (string, uint64, error) {
	subject, seq, err := s.publishBatch(batch)
	if err == nil {
		s.stored(subject)
	}
	return subject, seq, err
}

// stored tells the stream's readers ([StreamReader.Watch]) that a message
// under subject is on disk: an empty message on aegis-stored.<session>.<kind>,
// sent only while a reader listens there, so that without one it costs
// a lookup.
func (s *Store) stored(subject string) {
	if s.acct == nil {
		return
	}
	n := StoredPrefix + strings.TrimPrefix(subject, "aegis")
	if s.acct.SubscriptionInterest(n) {
		s.nc.Publish(n, nil)
	}
}

func (s *Store) publishBatch(batch []*item) (string, uint64, error) {
	if len(batch) == 1 {
		data := batch[0].data
		batch[0].data = nil
		seq, err := s.cc.publish(batch[0].subject, nil, data)
		return batch[0].subject, seq, err
	}
	buf := &s.batchBuf // only the one commit in flight uses it
	buf.Reset()
	for i, it := range batch {
		if i > 0 {
			buf.WriteByte('\n')
		}
		buf.Write(it.data)
		it.data = nil
	}
	hdr := fmt.Appendf(nil, "NATS/1.0\r\n%s: %d\r\n\r\n", batchHeader, len(batch))
	subject := "aegis." + batch[0].session + ".batch"
	seq, err := s.cc.publish(subject, hdr, buf.Bytes())
	return subject, seq, err
}

// fullError describes the stream that refused a commit at Config.MaxBytes.
func (s *Store) fullError() *FullError {
	e := &FullError{Dir: s.dir, Cap: s.cfg.MaxBytes}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if info, err := s.stream.Info(ctx); err == nil {
		e.Bytes, e.Msgs = info.State.Bytes, info.State.Msgs
	}
	return e
}

// kick makes the committer commit whatever is queued, lazy or not.
func (s *Store) kick() {
	s.mu.Lock()
	s.flushArmed = false
	if len(s.queue) > 0 {
		s.flushDue = true
		s.cond.Signal()
	}
	s.mu.Unlock()
}

// decodeMessage returns the events one stream message holds.
func decodeMessage(data []byte, hdr nats.Header) ([]schemas.Event, error) {
	n := 1
	if v := hdr.Get(batchHeader); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad %s header %q", batchHeader, v)
		}
	}
	if n == 1 {
		e, err := schemas.DecodeEvent(data)
		if err != nil {
			return nil, err
		}
		return []schemas.Event{e}, nil
	}
	parts := bytes.Split(data, []byte{'\n'})
	if len(parts) != n {
		return nil, fmt.Errorf("batch holds %d events, header says %d", len(parts), n)
	}
	out := make([]schemas.Event, 0, n)
	for i, p := range parts {
		e, err := schemas.DecodeEvent(p)
		if err != nil {
			return nil, fmt.Errorf("batch event %d: %w", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}
