package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/schemas"
)

// Mirror reads one host's mirror on a hub: the events of that host's
// stream as the hub holds them, off the host. Positions are the mirror's
// sequences, which are the host stream's.
type Mirror struct {
	nc     *nats.Conn
	stream jetstream.Stream
	js     jetstream.JetStream
	host   string
}

// ErrNotEnrolled is returned by [OpenMirror] when the hub has no mirror of
// the host.
var ErrNotEnrolled = errors.New("the hub has no mirror of that host")

// OpenMirror opens the hub's mirror of host.
func OpenMirror(ctx context.Context, admin HubAdmin, host string) (*Mirror, error) {
	if !ValidHost(host) {
		return nil, fmt.Errorf("host name %q: use letters, digits, - and _ (at most 63)", host)
	}
	nc, js, err := admin.connect("aegis reader")
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, MirrorName(host))
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%s: %w", MirrorName(host), ErrNotEnrolled)
		}
		return nil, fmt.Errorf("open the mirror %s: %w", MirrorName(host), err)
	}
	return &Mirror{nc: nc, js: js, stream: stream, host: host}, nil
}

// Close closes the connection to the hub.
func (m *Mirror) Close() { m.nc.Close() }

// last returns the mirror's last sequence now.
func (m *Mirror) last(ctx context.Context) (uint64, error) {
	info, err := m.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the mirror %s: %w", MirrorName(m.host), err)
	}
	return info.State.LastSeq, nil
}

// Replay calls fn, in order, for every event at or after from that the
// mirror holds when it is called, holding one message at a time: a read
// from a later position costs what follows it, not the mirror's whole
// history. A gap in the mirror's sequences from from on is a
// [*DamageError].
func (m *Mirror) Replay(ctx context.Context, from Position, fn func(Record) error) error {
	last, err := m.last(ctx)
	if err != nil || last == 0 || from.Seq > last {
		return err
	}
	return m.read(ctx, from, last, "", fn)
}

// MessageDigest returns the digest of the mirror's message at seq, the
// same as [Store.MessageDigest] gives of the host's message at seq: an
// index folded from the mirror is checked by it, as one folded on the
// host is by the host's.
func (m *Mirror) MessageDigest(ctx context.Context, seq uint64) (string, error) {
	msg, err := m.stream.GetMsg(ctx, seq)
	if err != nil {
		return "", fmt.Errorf("mirror message %d: %w", seq, err)
	}
	return messageDigest(msg.Subject, msg.Header, msg.Data), nil
}

// ReplaySession calls fn, in order, for every event of one session the
// mirror holds when it is called: only that session's messages are read.
func (m *Mirror) ReplaySession(ctx context.Context, session string, fn func(Record) error) error {
	if !schemas.ValidID(session) {
		return fmt.Errorf("bad session id %q", session)
	}
	subject := "aegis." + session + ".>"
	msg, err := m.stream.GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read the mirror: %w", err)
	}
	return m.read(ctx, Position{}, msg.Sequence, subject, fn)
}

// LastSession returns the id of the last session the mirror holds the
// start of (session.opened is committed alone, under its own subject).
func (m *Mirror) LastSession(ctx context.Context) (string, bool, error) {
	msg, err := m.stream.GetLastMsgForSubject(ctx, "aegis.*."+string(schemas.KindSessionOpened))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read the mirror: %w", err)
	}
	evs, err := decodeMessage(msg.Data, msg.Header)
	if err != nil || len(evs) != 1 {
		return "", false, &DecodeError{Seq: msg.Sequence, Err: fmt.Errorf("not one session.opened event: %v", err)}
	}
	return evs[0].Session, true, nil
}

// read delivers the events at or after from of the messages up to last
// (those whose subject matches filter, "" for all), in order.
func (m *Mirror) read(ctx context.Context, from Position, last uint64, filter string, fn func(Record) error) error {
	start := max(from.Seq, 1)
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: consumerIdle}
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	cons, err := m.js.OrderedConsumer(ctx, MirrorName(m.host), cfg)
	if err != nil {
		return fmt.Errorf("read the mirror: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read the mirror: %w", err)
	}
	defer it.Stop()
	for want := start; want <= last; {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read the mirror at %d of %d: %w", want, last, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("read the mirror: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq != want && filter == "" {
			return &DamageError{Dir: "hub:" + MirrorName(m.host), First: 1, Last: last, Missing: []SeqRange{{want, seq - 1}},
				Detail: "the hub's mirror does not hold them"}
		}
		want = seq + 1
		evs, err := decodeMessage(msg.Data(), msg.Headers())
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
	}
	return nil
}

// LastCheckpoint returns the mirror's last record.checkpoint event that
// match accepts. Checkpoints are committed alone, under their own subject:
// the last of all is read by that subject; when match refuses it (it is
// of another record file), the checkpoints alone are read, not the rest
// of the mirror.
func (m *Mirror) LastCheckpoint(ctx context.Context, match func(schemas.Event) bool) (Record, bool, error) {
	subject := "aegis.*." + string(schemas.KindRecordCheckpoint)
	msg, err := m.stream.GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, fmt.Errorf("read the mirror's last checkpoint: %w", err)
	}
	evs, err := decodeMessage(msg.Data, msg.Header)
	if err != nil {
		return Record{}, false, &DecodeError{Seq: msg.Sequence, Err: err}
	}
	if len(evs) == 1 && match(evs[0]) {
		return Record{Pos: Position{Seq: msg.Sequence}, Event: evs[0]}, true, nil
	}
	var found Record
	ok := false
	err = m.read(ctx, Position{}, msg.Sequence, subject, func(r Record) error {
		if match(r.Event) {
			found, ok = r, true
		}
		return nil
	})
	return found, ok, err
}
