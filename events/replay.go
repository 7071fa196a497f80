package events

import (
	"context"
	"errors"
	"fmt"

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
func (s *Store) Replay(ctx context.Context, from Position, fn func(Record) error) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay: stream info: %w", err)
	}
	last := info.State.LastSeq
	if last == 0 || from.Seq > last {
		return nil
	}
	return s.consume(ctx, from, last, fn)
}

// ReplaySubject calls fn, in stream order, for every event of the messages
// whose subject matches subject (a NATS subject filter such as
// aegis.*.session.opened or aegis.<session>.>), and returns once it has
// delivered the last such message that was in the stream when it began.
// A message that carries a group commit matches by its batch subject,
// aegis.<session>.batch, so filter on the session, not on the kind, unless
// the kind's events are always committed alone (session.opened is).
func (s *Store) ReplaySubject(ctx context.Context, subject string, fn func(Record) error) error {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return fmt.Errorf("replay %s: stream info: %w", subject, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	if n == 0 {
		return nil
	}
	cons, err := s.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: []string{subject},
	})
	if err != nil {
		return fmt.Errorf("replay %s: create consumer: %w", subject, err)
	}
	it, err := cons.Messages(s.replayWindow())
	if err != nil {
		return fmt.Errorf("replay %s: consume: %w", subject, err)
	}
	defer it.Stop()
	for seen := uint64(0); seen < n; seen++ {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replay %s: next message: %w", subject, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("replay %s: message metadata: %w", subject, err)
		}
		evs, err := decodeMessage(m.Data(), m.Headers())
		if err != nil {
			return &DecodeError{Seq: meta.Sequence.Stream, Err: err}
		}
		for i, e := range evs {
			if err := fn(Record{Pos: Position{Seq: meta.Sequence.Stream, Index: i}, Event: e}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Follow calls fn for every event at or after from, in stream order, and
// then for each new event as it is committed, until ctx ends or fn returns
// an error. It returns ctx's error, or fn's.
func (s *Store) Follow(ctx context.Context, from Position, fn func(Record) error) error {
	return s.consume(ctx, from, 0, fn)
}

// consume reads from from.Seq on; last > 0 stops after that sequence.
func (s *Store) consume(ctx context.Context, from Position, last uint64, fn func(Record) error) error {
	start := from.Seq
	if start == 0 {
		start = 1
	}
	cons, err := s.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   start,
	})
	if err != nil {
		return fmt.Errorf("replay: create consumer: %w", err)
	}
	it, err := cons.Messages(s.replayWindow())
	if err != nil {
		return fmt.Errorf("replay: consume: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
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
