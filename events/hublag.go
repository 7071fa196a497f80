package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MirrorLag is how far the hub's mirror of this host's stream is behind
// the stream, as this process knows it: the mirror acknowledges what it
// stored through the flow control of [MirrorConsumer], so the consumer's
// acknowledgement floor is the last message the mirror is known to hold.
type MirrorLag struct {
	Host string
	// Messages is how many of the stream's messages the mirror is not
	// known to hold; Behind is how long ago the first of them was
	// stored (zero when Messages is zero).
	Messages uint64
	Behind   time.Duration
}

// MirrorLag reports the lag of the hub's mirror of this host. ok is
// false for a store not linked to a hub. A mirror this store refused to
// feed ([MirrorAheadError]), or whose consumer is gone, is behind by the
// whole stream.
func (s *Store) MirrorLag(ctx context.Context) (lag MirrorLag, ok bool, err error) {
	if s.mirror == nil {
		return MirrorLag{}, false, nil
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	lag.Host = s.mirror.host
	last, err := s.LastSeq(ctx)
	if err != nil {
		return lag, true, err
	}
	var held uint64
	if s.HubRefused() == nil {
		c, err := s.js.PushConsumer(ctx, StreamName, MirrorConsumer)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		case err != nil:
			return lag, true, fmt.Errorf("read the mirror's consumer: %w", err)
		default:
			held = c.CachedInfo().AckFloor.Stream
		}
	}
	if held >= last {
		return lag, true, nil
	}
	lag.Messages = last - held
	// The first message the mirror lacks (the next one, if it was
	// removed: the stream keeps no gaps aegis makes, but a cap can).
	for seq := held + 1; seq <= last; seq++ {
		m, err := s.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if seq-held > 16 {
				break
			}
			continue
		}
		if err != nil {
			return lag, true, fmt.Errorf("read the first message the mirror lacks: %w", err)
		}
		if d := time.Since(m.Time); d > 0 {
			lag.Behind = d
		}
		break
	}
	return lag, true, nil
}
