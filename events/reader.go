package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Subjects of the stream reader.
const (
	// StoredPrefix is where the store says, with an empty message, that a
	// message is stored, once the server has acknowledged it:
	// aegis-stored.<session>.<kind> for a message on aegis.<session>.<kind>.
	// It is sent only while a reader listens.
	StoredPrefix = "aegis-stored"
	// ReadReplyPrefix is the inbox prefix of reader connections.
	ReadReplyPrefix = "aegis-read-reply"
)

// readBatch and readBytes bound one direct get of a [StreamReader]: the
// server stops a batch at whichever comes first (past the bytes, after the
// message that crossed them).
const (
	readBatch = 256
	readBytes = 4 << 20
)

// ErrReaderClosed is returned by a [StreamReader] whose connection has
// gone: the process that holds the stream has exited.
var ErrReaderClosed = errors.New("the aegis process that holds the stream is gone")

// StreamReader reads the stream of a running aegis process over its
// loopback listener, as the read-only identity of its credentials file
// ([Creds.Reader]): direct gets, which change nothing on the server, and
// the store's word that a message is stored ([StoredPrefix]), which
// say when there is more to read. It never polls and holds no consumer. It
// is safe for concurrent use; each [StreamReader.Watch] is a subscription
// of its own.
type StreamReader struct {
	nc       *nats.Conn
	stateDir string
	closed   chan struct{}
	once     sync.Once
}

// DialReader connects to the listener creds names as its reader identity.
// Credentials written by an aegis that had no reader identity are refused
// with a clear error.
func DialReader(ctx context.Context, creds Creds) (*StreamReader, error) {
	if creds.Reader == "" || creds.ReaderPassword == "" {
		return nil, fmt.Errorf("aegis process %d (session %s) offers no stream reader: it predates this aegis", creds.PID, creds.Session)
	}
	if !strings.HasPrefix(creds.URL, "nats://127.") {
		return nil, fmt.Errorf("credentials of session %s name %s, not a loopback address", creds.Session, creds.URL)
	}
	r := &StreamReader{stateDir: creds.StateDir, closed: make(chan struct{})}
	opts := []nats.Option{
		nats.UserInfo(creds.Reader, creds.ReaderPassword),
		nats.Name("aegis reader"),
		nats.CustomInboxPrefix(ReadReplyPrefix),
		nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { r.once.Do(func() { close(r.closed) }) }),
	}
	if d, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(d)))
	}
	nc, err := nats.Connect(creds.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to the stream of aegis process %d: %w", creds.PID, err)
	}
	r.nc = nc
	return r, nil
}

// Close closes the connection.
func (r *StreamReader) Close() { r.nc.Close() }

// Closed is closed once the connection has gone, by Close or because the
// process exited.
func (r *StreamReader) Closed() <-chan struct{} { return r.closed }

// Watch subscribes to the stored-message headers of the messages whose
// subject matches filter (a stream subject filter such as aegis.> or
// aegis.<session>.>): the channel it returns gets a value, at most one
// waiting, whenever such a message has been stored since it was last
// drained. Stop ends the subscription.
func (r *StreamReader) Watch(filter string) (ch <-chan struct{}, stop func(), err error) {
	if !strings.HasPrefix(filter, "aegis.") {
		return nil, nil, fmt.Errorf("watch %q: not a subject of the stream", filter)
	}
	c := make(chan struct{}, 1)
	sub, err := r.nc.Subscribe(StoredPrefix+strings.TrimPrefix(filter, "aegis"), func(*nats.Msg) {
		select {
		case c <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watch the stream: %w", err)
	}
	// The subscription is live once the server has it: a message stored
	// after Watch returns is always signalled.
	if err := r.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, nil, fmt.Errorf("watch the stream: %w", err)
	}
	return c, func() { sub.Unsubscribe() }, nil
}

// Replay calls fn for every event at or after from, in stream order, up
// to the last message stored when it was called (or later). A gap in the
// sequences (a message the stream no longer holds) is a [*DamageError];
// the stream's first message may come after from when the stream began
// later (a rotation).
func (r *StreamReader) Replay(ctx context.Context, from Position, fn func(Record) error) error {
	return r.read(ctx, from, "", fn)
}

// ReplaySubjectFrom calls fn for every event at or after from of the
// messages whose subject matches subject, as [Store.ReplaySubjectFrom]
// does.
func (r *StreamReader) ReplaySubjectFrom(ctx context.Context, subject string, from Position, fn func(Record) error) error {
	return r.read(ctx, from, subject, fn)
}

// MessageDigest names the message at seq as [Store.MessageDigest] does.
func (r *StreamReader) MessageDigest(ctx context.Context, seq uint64) (string, error) {
	var digest string
	found := false
	err := r.get(ctx, directGet{Seq: seq}, func(m *nats.Msg, got uint64) (bool, error) {
		if got != seq {
			return false, nil
		}
		digest, found = messageDigest(m.Header.Get("Nats-Subject"), m.Header, m.Data), true
		return false, nil
	})
	if err == nil && !found {
		err = fmt.Errorf("no message %d", seq)
	}
	if err != nil {
		return "", fmt.Errorf("stream message %d: %w", seq, err)
	}
	return digest, nil
}

// IndexGet reads a value of the index folder that the holding process
// keeps, as [ReadIndex] does: a reader starts its fold from the holder's
// last snapshot, not from the beginning of the stream.
func (r *StreamReader) IndexGet(ctx context.Context, key string) ([]byte, uint64, error) {
	if r.stateDir == "" {
		return nil, 0, ErrNoIndex
	}
	return ReadIndex(r.stateDir, key)
}

// IndexPut refuses: the index folder is the holding process's, and a
// reader changes nothing.
func (r *StreamReader) IndexPut(ctx context.Context, key string, val []byte) (uint64, error) {
	return 0, errors.New("a stream reader keeps no index")
}

// directGet is the server's direct get request (JSApiMsgGetRequest).
type directGet struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// read delivers the events at or after from of the messages matching
// filter ("" for all), batch by batch, until a batch ends with nothing
// pending.
func (r *StreamReader) read(ctx context.Context, from Position, filter string, fn func(Record) error) error {
	next := max(from.Seq, 1)
	first := true
	for {
		pending := uint64(0)
		got := 0
		err := r.get(ctx, directGet{Seq: next, NextFor: filter, Batch: readBatch, MaxBytes: readBytes}, func(m *nats.Msg, seq uint64) (bool, error) {
			if filter == "" && seq != next && !(first && from.Seq <= 1) {
				return false, &DamageError{Dir: r.stateDir, First: from.Seq, Last: seq, Missing: []SeqRange{{next, seq - 1}},
					Detail: "the stream of the running aegis does not hold them"}
			}
			first = false
			got++
			next = seq + 1
			evs, err := decodeMessage(m.Data, m.Header)
			if err != nil {
				return false, &DecodeError{Seq: seq, Err: err}
			}
			for i, e := range evs {
				if seq == from.Seq && i < from.Index {
					continue
				}
				if err := fn(Record{Pos: Position{Seq: seq, Index: i}, Event: e}); err != nil {
					return false, err
				}
			}
			return true, nil
		}, &pending)
		if err != nil || got == 0 || pending == 0 {
			return err
		}
	}
}

// readTimeout bounds the wait for each message of a direct get.
const readTimeout = 10 * time.Second

// get sends one direct get and hands each message to each, with its
// sequence, until the batch ends (a 204 end-of-batch, whose pending count
// goes to pending), nothing matched (404), or each says stop.
func (r *StreamReader) get(ctx context.Context, req directGet, each func(*nats.Msg, uint64) (bool, error), pending ...*uint64) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return r.gone(err)
	}
	defer sub.Unsubscribe()
	if err := r.nc.PublishRequest("$JS.API.DIRECT.GET."+StreamName, inbox, body); err != nil {
		return r.gone(err)
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, readTimeout)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.gone(err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "404":
			return nil
		case "204":
			if len(pending) > 0 {
				*pending[0], _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			}
			return nil
		default:
			return fmt.Errorf("read the stream: the server answered %s %s", status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil || m.Header.Get("Nats-Stream") != StreamName {
			return fmt.Errorf("read the stream: an answer without the stream's name and sequence")
		}
		more, err := each(m, seq)
		if err != nil || !more || req.Batch == 0 {
			return err
		}
	}
}

// gone turns the error of a connection that has closed into
// ErrReaderClosed.
func (r *StreamReader) gone(err error) error {
	select {
	case <-r.closed:
		return fmt.Errorf("read the stream: %w", ErrReaderClosed)
	default:
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("read the stream: %w", ErrReaderClosed)
	}
	return fmt.Errorf("read the stream: %w", err)
}
