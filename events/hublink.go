package events

// The leaf's side of the mirror. The hub's mirror reads this stream
// through a durable consumer of the stream, MirrorConsumer, that the leaf
// makes itself (the hub's link credentials reach no JetStream API of the
// hub, and the hub reaches this one only to reset that consumer). A
// durable source is what lets the hub pull again at once after the link
// was down: while it waits to retry, it listens on the consumer's deliver
// subject, and the first heartbeat the consumer sends when the link is
// back cuts its wait short (nats-server's probe of a durable source). An
// ephemeral source would wait out the hub's backoff, up to two minutes.
//
// The consumer acknowledges what the mirror stored through flow control:
// each flow control reply says the last sequence of this stream the
// mirror holds. A mirror that holds more than this stream has ever had
// is the mirror of another stream of the same host name (a state
// directory made again, or another machine enrolled under that name); fed
// from here it would take this stream's messages once it passed its end,
// mixed after the other's. So until the first reply has shown the mirror
// to be behind this stream, the consumer has one message out at a time,
// and a mirror found ahead of it is refused: the consumer is deleted, the
// mirror pulls nothing more from this process, and the log says why.
//
// The hub pulls anew after resetting the consumer to what the mirror
// acknowledged, and takes the reset's answer as what the mirror holds.
// The embedded nats-server (2.15.3 on) answers with the reset point
// itself, so a message the consumer sends out before the mirror listens
// again is pulled again, never counted as held
// (TestHubMirrorResetIsAnsweredWithItsResetPoint).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MirrorConsumer is the name of the durable consumer of a host's stream
// that the hub's mirror reads it through.
const MirrorConsumer = "AEGIS_MIRROR"

// MirrorDeliverSubject is the subject MirrorConsumer delivers host's
// stream to: under [DeliverPrefix], where the host's link may publish.
func MirrorDeliverSubject(host string) string { return DeliverPrefix(host) + ".mirror" }

// mirrorMaxPending is how many messages MirrorConsumer has out before
// flow control answers, once the mirror is known to follow this stream.
const mirrorMaxPending = 10_000

// ErrMirrorAhead is wrapped by the error a leaf reports when the hub's
// mirror of its host holds more of the stream than the stream itself.
var ErrMirrorAhead = errors.New("the hub's mirror of this host holds more than its stream")

// MirrorAheadError says that the hub's mirror of Host holds messages up
// to MirrorSeq while this stream ends at StreamSeq: the host name was
// used with another stream. The leaf refuses to feed that mirror.
type MirrorAheadError struct {
	Host                 string
	MirrorSeq, StreamSeq uint64
	Dir                  string
}

func (e *MirrorAheadError) Error() string {
	return fmt.Sprintf("the hub's mirror %s holds this host's stream up to message %d, but the stream in %s ends at %d: "+
		"the host name %s was used with another state directory; this stream is not sent to that mirror, so as not to mix the two",
		MirrorName(e.Host), e.MirrorSeq, e.Dir, e.StreamSeq, e.Host)
}

func (e *MirrorAheadError) Unwrap() error { return ErrMirrorAhead }

// MirrorAheadHint is what to do about a [MirrorAheadError].
func MirrorAheadHint(host string) string {
	return "run aegis with the state directory that recorded " + host + ", or give this one another --host (enrolled with aegis hub enroll); " +
		"an admin can set the hub's copy aside and start a new mirror with: aegis hub enroll " + host + " --reset --hub CLIENT_URLS"
}

// mirrorLink is the leaf's watch over the hub's mirror of its stream.
type mirrorLink struct {
	s    *Store
	host string
	sub  *nats.Subscription

	mu       sync.Mutex
	last     uint64 // the stream's last sequence as last read
	verified bool   // a flow control reply showed the mirror behind the stream
	refused  error  // set once the mirror was refused
}

// linkMirror makes (or resets) the stream's MirrorConsumer, one message
// out at a time, and watches the mirror's flow control replies.
func (s *Store) linkMirror(ctx context.Context, host string) error {
	l := &mirrorLink{s: s, host: host}
	cfg := jetstream.ConsumerConfig{
		Durable:        MirrorConsumer,
		Description:    "the hub's mirror of this host's stream (" + MirrorName(host) + ") reads it through this consumer",
		DeliverSubject: MirrorDeliverSubject(host),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second,
		MaxAckPending:  1,
	}
	// The flow control replies come to the consumer as $JS.FC.<host>.
	// <account hash>.AEGIS.AEGIS_MIRROR.<token> (HubConfig sets the form
	// that names the domain: in the older one, $JS.FC.AEGIS.AEGIS_MIRROR.
	// <token>, the hub sends every host the replies of every mirror).
	sub, err := s.nc.Subscribe("$JS.FC."+host+".*."+StreamName+"."+MirrorConsumer+".*", l.flowReply)
	if err != nil {
		return fmt.Errorf("hub: watch the mirror's flow control: %w", err)
	}
	l.sub = sub
	if _, err := s.js.CreateOrUpdatePushConsumer(ctx, StreamName, cfg); err != nil {
		// One the server will not change into this (made under another
		// host name, or by hand) is made again: the mirror resumes where
		// it stands all the same, and takes nothing twice.
		if derr := s.js.DeleteConsumer(ctx, StreamName, MirrorConsumer); derr == nil || errors.Is(derr, jetstream.ErrConsumerNotFound) {
			_, err = s.js.CreatePushConsumer(ctx, StreamName, cfg)
		}
		if err != nil {
			sub.Unsubscribe()
			return fmt.Errorf("hub: make the consumer %s that the hub's mirror reads the stream through: %w", MirrorConsumer, err)
		}
	}
	s.mirror = l
	return nil
}

// flowReply checks what a flow control reply of the mirror says it holds.
func (l *mirrorLink) flowReply(m *nats.Msg) {
	held, err := strconv.ParseUint(m.Header.Get("Nats-Last-Stream"), 10, 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused != nil || (l.verified && held <= l.last) {
		return
	}
	if held > l.last {
		// The stream may have grown since it was last read.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := l.s.stream.Info(ctx)
		cancel()
		if err != nil {
			l.s.log.Warn("hub: read the stream's end to check the mirror against", "err", err)
			return
		}
		l.last = info.State.LastSeq
	}
	if held > l.last {
		l.refused = &MirrorAheadError{Host: l.host, MirrorSeq: held, StreamSeq: l.last, Dir: l.s.dir}
		l.s.log.Error("hub: "+l.refused.Error(), "hint", MirrorAheadHint(l.host))
		// Deleted, the consumer feeds nothing more; the hub's retries
		// find none until the next run of aegis makes it again (and
		// this check refuses it again).
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := l.s.js.DeleteConsumer(ctx, StreamName, MirrorConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				l.s.log.Error("hub: delete the mirror's consumer", "err", err)
			}
		}()
		return
	}
	if !l.verified {
		l.verified = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := l.s.js.PushConsumer(ctx, StreamName, MirrorConsumer)
			if err != nil {
				return // refused or closed meanwhile
			}
			cfg := c.CachedInfo().Config
			cfg.MaxAckPending = mirrorMaxPending
			if _, err := l.s.js.UpdatePushConsumer(ctx, StreamName, cfg); err != nil {
				l.s.log.Warn("hub: open the mirror's consumer to its full pace", "err", err)
			}
		}()
	}
}

// HubRefused returns the reason this store refused to feed the hub's
// mirror of its host ([MirrorAheadError]), nil if it did not.
func (s *Store) HubRefused() error {
	if s.mirror == nil {
		return nil
	}
	s.mirror.mu.Lock()
	defer s.mirror.mu.Unlock()
	return s.mirror.refused
}
