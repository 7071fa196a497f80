package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DecodeError reports a stream message that does not hold valid events, for
// example one published by something other than aegis.
type DecodeError struct {
	Seq uint64
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("stream message %d: %v", e.Seq, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Replay calls fn for every event at or after from, in stream order, and
// returns once it has delivered the last event that was in the stream when
// Replay began. An error from fn stops the replay and is returned as is.
//
// A damaged stream never passes for a shorter history: if the store lost
// messages ([Store.Check]), or a message does not load while it is read
// (it is skipped over, or the stream stops delivering before the last
// one), Replay returns a [*DamageError] naming the sequences that are
// gone. It never waits forever for a message that is gone.
func (s *Store) Replay(ctx context.Context, from Position, fn func(Record) error) error {
	st, err := s.state(ctx)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if err := s.damage(st, ""); err != nil {
		return err
	}
	last := st.State.LastSeq
	if last == 0 || from.Seq > last {
		return nil
	}
	return s.consume(ctx, from, last, fn)
}

// ReplaySubject calls fn, in stream order, for every event of the messages
// whose subject matches subject (a NATS subject filter such as
// aegis.*.session.opened or aegis.<session>.>), and returns once it has
// delivered the last such message in the stream. A message that carries a
// group commit matches by its batch subject, aegis.<session>.batch, so
// filter on the session, not on the kind, unless the kind's events are
// always committed alone (session.opened is).
//
// Like Replay, it returns a [*DamageError] instead of a shorter history
// when messages of the stream are gone, and never waits forever.
func (s *Store) ReplaySubject(ctx context.Context, subject string, fn func(Record) error) error {
	return s.ReplaySubjectFrom(ctx, subject, Position{}, fn)
}

// ReplaySubjectFrom is [Store.ReplaySubject] for the events at or after
// from: the store reads only the blocks from from.Seq on, so a read of a
// recent part of a long session costs what that part holds.
func (s *Store) ReplaySubjectFrom(ctx context.Context, subject string, from Position, fn func(Record) error) error {
	st, err := s.state(ctx)
	if err != nil {
		return fmt.Errorf("replay %s: %w", subject, err)
	}
	if err := s.damage(st, ""); err != nil {
		return err
	}
	if st.State.LastSeq == 0 || from.Seq > st.State.LastSeq {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: []string{subject},
	}
	if from.Seq > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from.Seq
	}
	cfg.InactiveThreshold = consumerIdle
	cons, err := s.js.OrderedConsumer(ctx, StreamName, cfg)
	if err != nil {
		return fmt.Errorf("replay %s: create consumer: %w", subject, err)
	}
	defer s.dropConsumer(cons)
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay %s: consumer info: %w", subject, err)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages(s.replayWindow())
	if err != nil {
		return fmt.Errorf("replay %s: consume: %w", subject, err)
	}
	defer it.Stop()
	var w stallWatch
	after := max(from.Seq, 1) - 1 // the last sequence delivered
	gone := func(ctx context.Context) bool {
		// The next message of the subject after the last one delivered.
		_, err := s.stream.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subject))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}
	for seen := uint64(0); ; seen++ {
		m, err := s.next(ctx, it, &w, gone)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errStalled) {
				// The filtered count promises more than arrives: some
				// message of the subject does not load. A filtered read
				// cannot tell which (the read may have skipped it), so the
				// stream is read for its gaps from where this read began:
				// slow, but only on a stream that is damaged.
				detail := fmt.Sprintf("%d of %d messages of %s were delivered", seen, seen+info.NumPending, subject)
				if err := s.consume(ctx, Position{Seq: from.Seq}, st.State.LastSeq, func(Record) error { return nil }); err != nil {
					var de *DamageError
					if errors.As(err, &de) {
						de.Detail = detail + "; " + de.Detail
					}
					return err
				}
				return s.stalled(ctx, after+1, st.State.LastSeq, detail)
			}
			return fmt.Errorf("replay %s: next message: %w", subject, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("replay %s: message metadata: %w", subject, err)
		}
		after = meta.Sequence.Stream
		evs, err := decodeMessage(m.Data(), m.Headers())
		if err != nil {
			return &DecodeError{Seq: meta.Sequence.Stream, Err: err}
		}
		for i, e := range evs {
			if after == from.Seq && i < from.Index {
				continue
			}
			if err := fn(Record{Pos: Position{Seq: meta.Sequence.Stream, Index: i}, Event: e}); err != nil {
				return err
			}
		}
		if meta.NumPending == 0 {
			return nil
		}
		info.NumPending = meta.NumPending
	}
}

// Follow calls fn for every event at or after from, in stream order, and
// then for each new event as it is committed, until ctx ends or fn returns
// an error. It returns ctx's error, or fn's.
func (s *Store) Follow(ctx context.Context, from Position, fn func(Record) error) error {
	return s.consume(ctx, from, 0, fn)
}

// consume reads from from.Seq on; last > 0 stops after that sequence.
func (s *Store) consume(ctx context.Context, from Position, last uint64, fn func(Record) error) error {
	start := max(from.Seq, s.base)
	cons, err := s.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: consumerIdle,
	})
	if err != nil {
		return fmt.Errorf("replay: create consumer: %w", err)
	}
	defer s.dropConsumer(cons)
	it, err := cons.Messages(s.replayWindow())
	if err != nil {
		return fmt.Errorf("replay: consume: %w", err)
	}
	defer it.Stop()
	want := start // the next sequence; the stream has no gaps
	var w stallWatch
	gone := func(ctx context.Context) bool {
		_, err := s.stream.GetMsg(ctx, want)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}
	for {
		var m jetstream.Msg
		if last > 0 {
			m, err = s.next(ctx, it, &w, gone)
		} else {
			m, err = it.Next(jetstream.NextContext(ctx)) // following: waiting is the point
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errStalled) {
				return s.stalled(ctx, want, last, fmt.Sprintf("the stream stopped delivering after sequence %d of %d", want-1, last))
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return fmt.Errorf("replay: %w", err)
			}
			return fmt.Errorf("replay: next message: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("replay: message metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq > want {
			return &DamageError{Dir: s.dir, First: s.base, Last: max(last, seq), Missing: []SeqRange{{want, seq - 1}},
				Detail: "they did not load while the stream was read (the store skipped them)"}
		}
		want = seq + 1
		evs, err := decodeMessage(m.Data(), m.Headers())
		if err != nil {
			return &DecodeError{Seq: seq, Err: err}
		}
		for i, e := range evs {
			if seq == from.Seq && i < from.Index {
				continue
			}
			if err := fn(Record{Pos: Position{Seq: seq, Index: i}, Event: e}); err != nil {
				return err
			}
		}
		if last > 0 && seq >= last {
			return nil
		}
	}
}

// replayWindow bounds what a replay asks the server for at once: 500
// messages, as the client does by default, but never more bytes than one
// message of the largest size. Without the byte bound, 500 frames of up to
// MaxEventBytes overrun the subscription's 64 MiB pending limit, and the
// ordered consumer then stalls and starts over, again and again (a minute
// for 32 frames of 16 MiB). A bound by bytes alone makes every replay pay
// for it: small events, such as the session.opened events a session reads
// at start, then come in many more, smaller fetches.
func (s *Store) replayWindow() jetstream.PullMessagesOpt {
	return jetstream.PullMaxMessagesWithBytesLimit(500, max(s.cfg.MaxEventBytes, s.cfg.MaxBatchBytes)+64<<10)
}

// Reads of a damaged stream: a message that fails to load is not
// delivered, and a consumer then waits for it forever. next asks whether
// the message it waits for is gone after stallFirstProbe of waiting, then
// after twice as long each time, up to every stallProbe, and says
// errStalled at once if it is, or once the wait has lasted stallLimit in
// all; stalled then finds out which messages are gone. The first probe
// comes soon, so that a command on a damaged state directory says so in
// a second rather than many (each of its reads waited a whole stallProbe),
// and the probes thin out, so that a healthy stream that is slow to
// deliver a large message is asked for it only a few times (a probe
// fetches the message).
const (
	stallFirstProbe = 250 * time.Millisecond
	stallProbe      = 2 * time.Second
	stallLimit      = 20 * time.Second
)

var errStalled = errors.New("the event stream stopped delivering")

// stallWatch is how long a read has waited for its next message, and how
// long it waits before it next asks whether that message is gone.
type stallWatch struct{ waited, probe time.Duration }

// interval is how long to wait before the next probe: stallFirstProbe
// after a message came, then twice the last, up to stallProbe.
func (w *stallWatch) interval() time.Duration {
	if w.probe == 0 {
		w.probe = stallFirstProbe
	} else {
		w.probe = min(2*w.probe, stallProbe)
	}
	return w.probe
}

// next returns the next message. While none comes it asks, at the
// intervals of stallWatch, whether the message it waits for is gone, and
// returns errStalled at once if it is, or once it has waited stallLimit.
func (s *Store) next(ctx context.Context, it jetstream.MessagesContext, w *stallWatch, gone func(context.Context) bool) (jetstream.Msg, error) {
	for {
		d := w.interval()
		nctx, cancel := context.WithTimeout(ctx, d)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err == nil {
			w.waited, w.probe = 0, 0
			return m, nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		w.waited += d
		if w.waited >= stallLimit || gone(ctx) {
			return nil, errStalled
		}
	}
}

// stalled explains a read that stopped before the last message: it
// probes the sequences from want to last and returns a *DamageError for
// those the stream no longer holds, or, if it holds them all, an error
// saying the read stalled.
func (s *Store) stalled(ctx context.Context, want, last uint64, detail string) error {
	const maxProbes = 100000
	var gone []uint64
	for q := want; q <= last && q-want < maxProbes; q++ {
		_, err := s.stream.GetMsg(ctx, q)
		switch {
		case err == nil:
		case errors.Is(err, jetstream.ErrMsgNotFound):
			gone = append(gone, q)
		default:
			return fmt.Errorf("replay: %s, and the store could not be asked why: %w", detail, err)
		}
	}
	if len(gone) == 0 {
		return fmt.Errorf("replay: %s within %s, though the store holds every message; try again, and check the disk if it persists: %w", detail, stallLimit, errStalled)
	}
	return &DamageError{Dir: s.dir, First: s.base, Last: last, Missing: ranges(gone), Detail: detail + "; the rest do not load"}
}

// ReplaySalvage reads a damaged stream as far as it loads. It calls fn for
// every event of every message that loads, in stream order, and gap, in
// the same order, for every range of sequences that is gone: lost from
// the head, skipped or unloadable inside, or cut from the tail (the
// stream-seq mark). It never waits forever. It is for salvage only;
// every other read goes through [Store.Replay], which refuses a damaged
// stream. A message that loads but does not hold aegis events is a gap
// of its own.
func (s *Store) ReplaySalvage(ctx context.Context, fn func(Record) error, gap func(SeqRange) error) error {
	st, err := s.state(ctx)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	last := st.State.LastSeq
	end := max(last, s.mark)
	from := s.base
	for from <= last {
		err := s.consume(ctx, Position{Seq: from}, last, fn)
		if err == nil {
			break
		}
		var (
			de *DamageError
			ce *DecodeError
			r  SeqRange
		)
		switch {
		case errors.As(err, &de) && len(de.Missing) > 0 && de.Missing[0].From >= from:
			r = de.Missing[0]
		case errors.As(err, &ce) && ce.Seq >= from:
			r = SeqRange{ce.Seq, ce.Seq}
		default:
			return err
		}
		if err := gap(r); err != nil {
			return err
		}
		from = r.To + 1
	}
	if end > last {
		return gap(SeqRange{last + 1, end})
	}
	return nil
}

// consumerIdle is how long the server keeps a replay's consumer once
// nobody pulls from it. The client does not delete an ordered consumer
// when it stops, and by default the server keeps it five minutes: a
// session that folds its index every second would pile up hundreds, until
// the server refuses new ones. dropConsumer deletes it at once; this is
// for a reader that dies first.
const consumerIdle = 30 * time.Second

// dropConsumer deletes a replay's consumer once it is done with.
func (s *Store) dropConsumer(c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.stream.DeleteConsumer(ctx, info.Name)
}
