package events

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aegis-dev/aegis/schemas"
)

// batchHeader marks a message that carries several events, newline
// separated, committed together. Its value is their count.
const batchHeader = "Aegis-Events"

// item is one queued event. The committer fills pos or err, then closes done.
type item struct {
	store   *Store
	lazy    bool
	session string
	subject string
	data    []byte
	done    chan struct{}
	pos     Position
	err     error
}

// Receipt is the promise of an enqueued event. Wait blocks until the event
// is durable (or its commit failed).
type Receipt struct{ it *item }

// Wait returns the event's position once JetStream has acknowledged the
// commit that holds it, with the write on disk. An error means the event was
// not acknowledged; if it is ctx's error the event may still be committed.
func (r *Receipt) Wait(ctx context.Context) (Position, error) {
	select {
	case <-r.it.done:
		return r.it.pos, r.it.err
	default:
	}
	if r.it.lazy {
		// Someone waits for a lazy event: commit now.
		r.it.store.kick()
	}
	select {
	case <-r.it.done:
		return r.it.pos, r.it.err
	case <-ctx.Done():
		return Position{}, ctx.Err()
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
// Events are committed in the order they were enqueued, so an event is
// durable no later than any event enqueued after it: waiting on a later
// receipt covers every earlier one.
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

// EnqueueLazy queues events that nobody waits for now (frames that carry no
// call or answer). They do not start a commit of their own: they go to disk
// with the next commit that someone waits for, or after Config.LazyFlush at
// the latest, so that they cost no extra fsync on a busy path. Waiting on
// their receipt commits them at once.
func (s *Store) EnqueueLazy(evs ...schemas.Event) ([]*Receipt, error) {
	return s.enqueue(true, evs)
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
		items[i] = &item{store: s, lazy: lazy, session: e.Session, subject: e.Subject(), data: data, done: make(chan struct{})}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return nil, s.failed
	}
	if s.closing {
		return nil, ErrClosed
	}
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
	rs := make([]*Receipt, len(items))
	for i, it := range items {
		rs[i] = &Receipt{it: it}
	}
	return rs, nil
}

// commitLoop is the single committer. It takes everything queued (up to the
// batch limits, and never across a session boundary, so each message belongs
// to one session), publishes it as one message, and waits for the durable
// ack before resolving the receipts. While one commit is in flight the next
// batch accumulates: that is the group commit.
func (s *Store) commitLoop() {
	defer close(s.done)
	var buf bytes.Buffer
	for {
		s.mu.Lock()
		for !s.closing && (len(s.queue) == 0 || (s.eager == 0 && !s.flushDue)) {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		if s.failed != nil {
			rest := s.queue
			s.queue = nil
			s.eager = 0
			err := s.failed
			s.mu.Unlock()
			resolve(rest, 0, err)
			continue
		}
		n, size := 0, 0
		for n < len(s.queue) && n < s.cfg.MaxBatchEvents {
			it := s.queue[n]
			if n > 0 && (it.session != s.queue[0].session || size+len(it.data)+1 > s.cfg.MaxBatchBytes) {
				break
			}
			size += len(it.data) + 1
			n++
		}
		batch := s.queue[:n:n]
		s.queue = s.queue[n:]
		for _, it := range batch {
			if !it.lazy {
				s.eager--
			}
		}
		if len(s.queue) == 0 {
			s.flushDue = false
		}
		s.mu.Unlock()

		seq, err := s.publish(batch, &buf)
		if err != nil {
			err = fmt.Errorf("%w: %v (restart aegis; acknowledged events are safe on disk)", ErrFailed, err)
			s.mu.Lock()
			if s.failed == nil {
				s.failed = err
			}
			s.mu.Unlock()
			s.log.Error("event commit failed; refusing further appends", "err", err)
		}
		resolve(batch, seq, err)
	}
}

func resolve(batch []*item, seq uint64, err error) {
	for i, it := range batch {
		if err != nil {
			it.err = err
		} else {
			it.pos = Position{Seq: seq, Index: i}
		}
		close(it.done)
	}
}

func (s *Store) publish(batch []*item, buf *bytes.Buffer) (uint64, error) {
	msg := &nats.Msg{Subject: batch[0].subject, Data: batch[0].data}
	if len(batch) > 1 {
		buf.Reset()
		for i, it := range batch {
			if i > 0 {
				buf.WriteByte('\n')
			}
			buf.Write(it.data)
		}
		msg.Subject = "aegis." + batch[0].session + ".batch"
		msg.Data = buf.Bytes()
		msg.Header = nats.Header{batchHeader: []string{strconv.Itoa(len(batch))}}
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AckTimeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, err
	}
	if ack.Stream != StreamName {
		return 0, fmt.Errorf("acknowledged by stream %q, not %q", ack.Stream, StreamName)
	}
	return ack.Sequence, nil
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
