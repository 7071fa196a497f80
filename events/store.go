package events

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/schemas"
)

// StreamName is the JetStream stream that holds every event.
const StreamName = "AEGIS"

// Defaults for [Config].
const (
	DefaultAckTimeout     = 10 * time.Second
	DefaultMaxEventBytes  = 24 << 20 // a 16 MiB frame, base64 in its envelope, fits
	DefaultMaxBatchBytes  = 1 << 20
	DefaultMaxBatchEvents = 1024
	DefaultLazyFlush      = 25 * time.Millisecond
	DefaultMaxQueueBytes  = 32 << 20 // more than one event of MaxEventBytes
)

// startLimit bounds how long Open waits for the embedded server to
// recover the stream from its files.
const startLimit = 5 * time.Minute

// Config opens a [Store]. Only Dir is required.
type Config struct {
	// Dir is the state directory. It is created with mode 0700 if missing;
	// an existing one that is group- or other-accessible, or owned by
	// another user, is refused.
	Dir string
	// Logger receives the store's and the embedded server's log lines. Nil
	// discards them.
	Logger *slog.Logger
	// Now and Rand make event ids and times in [Store.NewEvent] and for
	// frames queued with [Store.EnqueueFrame] (whose ids are made by the
	// commit that takes them); nil means time.Now and crypto/rand. Both may
	// be called from several goroutines at once.
	Now  func() time.Time
	Rand io.Reader
	// AckTimeout bounds the wait for one durable commit. A commit that is not
	// acknowledged in time fails the store (see [ErrFailed]).
	AckTimeout time.Duration
	// MaxEventBytes is the largest encoded envelope accepted.
	MaxEventBytes int
	// LazyFlush bounds how long an event queued with [Store.EnqueueLazy]
	// waits for a commit to ride with (default 25ms). Nobody waits for such
	// an event, so a longer window only means fewer fsyncs for chatty
	// non-call traffic, not slower calls.
	LazyFlush time.Duration
	// Approvals opens the approval channel: a loopback listener through
	// which `aegis approve` and `aegis deny` reach this process (see
	// approve.go). Off, the server listens on nothing.
	Approvals bool
	// MaxBatchBytes and MaxBatchEvents bound one group commit.
	MaxBatchBytes  int
	MaxBatchEvents int
	// MaxBytes caps the event stream, nearly all of what the state
	// directory holds (0: no cap). A commit that would take the stream past
	// it is refused and fails the store like any failed commit, with an
	// error that wraps [ErrFull]: nothing is dropped or deleted, old events
	// are never discarded to make room, and every acknowledged event stays.
	// Open refuses a stream within 1 MiB of the cap. The cap is this process's:
	// each Open sets it (or lifts it) on the stream.
	MaxBytes int64
	// MaxQueueBytes bounds the events queued and not yet taken by a commit
	// (default 32 MiB): an enqueue that would take the queue past it waits,
	// committing from the head of the queue itself when no commit is in
	// flight, until the events fit. That is the backpressure that keeps a
	// relay from reading faster than the disk takes its frames. An event
	// that finds the queue empty is always queued, whatever its size.
	MaxQueueBytes int
	// Hub, when set, links the embedded server to a NATS hub as a leaf
	// node (see hub.go). Nothing waits for the hub: commits are
	// acknowledged by the local stream alone.
	Hub *HubConfig
	// ReadOnly opens the stream to read it: the lock is taken as for any
	// Open (so no writer starts meanwhile), but the stream is neither
	// created nor updated (a directory without one is refused), appends
	// fail with [ErrReadOnly], Close leaves the length mark as it is, and
	// MaxBytes, Approvals and Hub are ignored. Nothing aegis does on this
	// path needs free space, so the read commands work on a disk that is
	// full to the last byte. The index folder ([Store.IndexPut]) is still
	// written, as a cache that a failed write only leaves older.
	ReadOnly bool

	finishRoll bool // set by FinishRoll only
}

// Errors callers branch on.
var (
	// ErrClosed is returned by appends after Close has begun.
	ErrClosed = errors.New("event store is closed")
	// ErrFailed is wrapped by every append after a commit failed. The store
	// then refuses all further appends: an event that may or may not have
	// landed breaks the guarantee that stream order is append order, so the
	// only safe course is to stop and let a restart rebuild state.
	ErrFailed = errors.New("event store stopped acknowledging writes")
	// ErrTooLarge is returned for an event larger than MaxEventBytes.
	ErrTooLarge = errors.New("event too large")
	// ErrFull is wrapped (by a [*FullError]) when the stream has reached
	// Config.MaxBytes.
	ErrFull = errors.New("state directory reached its size cap")
	// ErrReadOnly is returned by appends to a store opened with
	// Config.ReadOnly.
	ErrReadOnly = errors.New("the event store was opened read-only")
)

// openRoom is the least room under Config.MaxBytes that Open accepts. A
// stream that stopped at its cap usually has some room left, less than the
// event it refused; a session started in it would stop again at its first
// sizeable frame, so Open says at once that the directory is full.
const openRoom = 1 << 20

// FullError says that the event stream reached the state directory's cap
// (Config.MaxBytes) and what it holds: every acknowledged event, nothing
// dropped or deleted.
type FullError struct {
	Dir   string
	Cap   int64  // Config.MaxBytes
	Bytes uint64 // the stream's bytes when the cap was hit (0: unknown)
	Msgs  uint64 // its messages
}

func (e *FullError) Error() string {
	held := ""
	if e.Bytes > 0 {
		held = fmt.Sprintf(" (it holds %s of events)", FormatBytes(int64(e.Bytes)))
	}
	return fmt.Sprintf("the state directory %s reached its size cap of %s%s; every acknowledged event is kept, nothing was dropped or deleted", e.Dir, FormatBytes(e.Cap), held)
}

func (e *FullError) Is(target error) bool { return target == ErrFull }

// FormatBytes writes n as a power-of-1024 size, such as 10 GiB or 1.5 MiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
}

// Position is where an event sits in the stream: the JetStream message
// sequence and the event's index inside that message (always 0 unless the
// message is a group commit of several events). Positions order events.
type Position struct {
	Seq   uint64 `json:"seq"`
	Index int    `json:"index"`
}

// Less reports whether p comes before q in the stream.
func (p Position) Less(q Position) bool {
	return p.Seq < q.Seq || (p.Seq == q.Seq && p.Index < q.Index)
}

func (p Position) String() string { return fmt.Sprintf("%d.%d", p.Seq, p.Index) }

// Record is an event read back from the stream with its position.
type Record struct {
	Pos   Position
	Event schemas.Event
	// Acked is when this store had the durable acknowledgement of the
	// event's commit, where the reader knows it (a [CommitTap]); zero
	// otherwise.
	Acked time.Time
}

// Store is the event stream of one state directory: an embedded NATS server
// with JetStream, reached over an in-process connection. It is safe for
// concurrent use.
type Store struct {
	cfg    Config
	log    *slog.Logger
	dir    string
	lock   *dirLock
	ns     *server.Server
	nc     *nats.Conn
	cc     *commitConn // the committer's connection; only commitLoop uses it
	js     jetstream.JetStream
	stream jetstream.Stream
	acct   *server.Account // the embedded server's account, for readers' interest ([Store.stored])

	mu    sync.Mutex
	cond  *sync.Cond
	queue []*item
	// queued is the bytes of the events in queue (their size, see item),
	// held under Config.MaxQueueBytes.
	queued int
	eager  int // queued items someone waits for: they start a commit
	// flushDue is set when lazy items must be committed (their timer fired
	// or someone waits for one); flushArmed while their timer runs.
	flushDue   bool
	flushArmed bool
	// committing is set while one commit is in flight (by the committer or
	// by a waiter, see Receipt.Wait); commitEnd is closed when it ends.
	committing bool
	commitEnd  chan struct{}
	batchBuf   bytes.Buffer // the message of a batch commit
	closing    bool
	failed     error
	done       chan struct{} // closed when the committer has exited

	approvals *ApprovalConfig // nil unless Config.Approvals
	mirror    *mirrorLink     // nil unless Config.Hub (hublink.go)
	mark      uint64          // the stream's last sequence at the last clean close (markFile)
	base      uint64          // the stream's first sequence (baseFile): 1 unless a rotation began it later
	roll      *RollPlan       // the rotation FinishRoll is finishing
	archive   *RollPlan       // set when the directory is a rotation's archive
	archived  bool            // appends are refused (ErrArchived)
	readOnly  bool            // Config.ReadOnly: appends are refused (ErrReadOnly)

	// taps are the readers of what the store commits (tap.go); tapMu
	// orders their changes.
	taps  atomic.Pointer[tapList]
	tapMu sync.Mutex
}

// Open locks the state directory, starts the embedded server and opens (or
// creates) the stream. A second Open of the same directory, from this or
// any other process, fails at once with a [*LockedError].
func Open(ctx context.Context, cfg Config) (_ *Store, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("open event store: no state directory given")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("open event store: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.LazyFlush <= 0 {
		cfg.LazyFlush = DefaultLazyFlush
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.MaxBatchEvents <= 0 {
		cfg.MaxBatchEvents = DefaultMaxBatchEvents
	}
	if cfg.MaxQueueBytes <= 0 {
		cfg.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if cfg.ReadOnly {
		if cfg.finishRoll {
			return nil, errors.New("open event store: a rotation cannot be finished read-only")
		}
		cfg.MaxBytes, cfg.Approvals, cfg.Hub = 0, false, nil
		if _, err := os.Stat(streamDir(dir)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("open event store: no event stream in %s", dir)
			}
			return nil, fmt.Errorf("open event store: %w", err)
		}
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir, cfg.ReadOnly)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, dir: dir, lock: lock, done: make(chan struct{}), readOnly: cfg.ReadOnly}
	s.cond = sync.NewCond(&s.mu)
	defer func() {
		if err != nil {
			s.shutdown()
		}
	}()
	if err := s.prepareRoll(); err != nil {
		return nil, err
	}
	removeTemps(dir)

	// The largest message: one event, or a batch of them, plus the batch
	// header.
	maxMsg := int32(max(cfg.MaxEventBytes, cfg.MaxBatchBytes) + 4096)
	opts := &server.Options{
		ServerName: "aegis",
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "jetstream"),
		DontListen: true,
		NoSigs:     true,
		NoLog:      true,
		SyncAlways: true,
		MaxPayload: maxMsg,
		// The committer's connection reads only while it waits for an
		// acknowledgement (commitconn.go); a keep-alive PING sent while it
		// is idle would sit unread in the pipe, and after the server's
		// write deadline (10 s) the server would drop the connection and
		// the next commit would fail. In-process connections cannot go
		// stale, and the approval channel's clients are short-lived, so
		// the server sends none: not the regular ones, and not the early
		// first PING it otherwise sends every client after about 2 s.
		PingInterval:          100 * 365 * 24 * time.Hour,
		DisableShortFirstPing: true,
		// The server drops a client it cannot write to within its write
		// deadline (10 s by default) as a slow consumer. The committer
		// writes a whole batch into the pipe before it reads: a 16 MiB
		// frame through a busy machine's race-built server held it past
		// 10 s while the server had something to write to it, and the
		// store failed ("read/write on closed pipe") within the commit's
		// own AckTimeout of 2 minutes. The server waits as long as the
		// committer does.
		WriteDeadline: max(cfg.AckTimeout, 10*time.Second),
	}
	if cfg.MaxBytes > 0 {
		// The server refuses a stream whose cap exceeds what it thinks it
		// may store (by default 75% of the free disk). The cap is the
		// user's; a disk that really fills up fails a commit like any
		// I/O error.
		opts.JetStreamMaxStore = cfg.MaxBytes + 64<<20
	} else if total, _, err := diskSpace(dir); err == nil && total > 0 {
		// Left at 0, the server's limit would be 75% of the space free
		// when it starts, and it would stop there with "insufficient
		// resources" while a quarter of the disk is free. Without a cap
		// the disk itself is the limit: a commit it cannot take fails
		// with DiskFullError.
		opts.JetStreamMaxStore = int64(total)
	}
	if cfg.Approvals {
		if s.approvals, err = ApprovalOptions(""); err != nil {
			return nil, err
		}
		s.approvals.Apply(opts)
	}
	if cfg.Hub != nil {
		if err := cfg.Hub.apply(opts); err != nil {
			return nil, err
		}
		if s.approvals != nil {
			s.approvals.host = cfg.Hub.Host // approvals come over the hub too
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded NATS server: %w", err)
	}
	ns.SetLoggerV2(natsLogger{cfg.Logger}, false, false, false)
	s.ns = ns
	// Start returns once the server is ready: JetStream enabled and, with
	// the approval channel, its listener open. Waiting for it rather than
	// polling ReadyForConnections saves a start its poll period (25 ms
	// whenever the server listens). Start-up recovers the stream from its
	// files, which takes longer the more they hold after an unclean stop;
	// ctx can end the wait at any moment (a signal during start-up ends
	// aegis at once).
	startDone := make(chan struct{})
	go func() {
		defer close(startDone)
		ns.Start()
	}()
	limit := time.NewTimer(startLimit)
	defer limit.Stop()
	select {
	case <-startDone:
	case <-ctx.Done():
		return nil, fmt.Errorf("start embedded NATS server in %s: %w", opts.StoreDir, context.Cause(ctx))
	case <-limit.C:
		return nil, fmt.Errorf("start embedded NATS server in %s: not ready after %s", opts.StoreDir, startLimit)
	}
	// Start returns early, not ready, when it gives up (it logs why): on
	// JetStream, which fails on the store directory, or on the listener.
	// Otherwise the server is ready at once.
	if !ns.JetStreamEnabled() || !ns.ReadyForConnections(time.Second) {
		return nil, fmt.Errorf("start JetStream in %s: it did not start (is the directory writable and is there free space?)", opts.StoreDir)
	}
	connOpts := []nats.Option{nats.InProcessServer(ns), nats.Name("aegis-events"), nats.MaxReconnects(-1),
		// nats.go prints what it cannot hand back to a caller straight to
		// stderr, which a host shows as aegis's own; it goes to the log.
		// A slow consumer is a long replay's ordered consumer catching
		// up, which resets itself and loses nothing.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				cfg.Logger.Debug("event store: a reader fell behind and resumes", "subject", subject, "err", err)
				return
			}
			cfg.Logger.Warn("event store connection", "subject", subject, "err", err)
		})}
	var user, pass string
	if s.approvals != nil {
		if err := s.approvals.Started(ns); err != nil {
			return nil, err
		}
		connOpts = append(connOpts, s.approvals.InternalUserInfo())
		user, pass = internalUser, s.approvals.internalPassword
	}
	nc, err := nats.Connect("", connOpts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded NATS server: %w", err)
	}
	s.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	s.js = js
	maxBytes := int64(-1)
	if cfg.MaxBytes > 0 {
		maxBytes = cfg.MaxBytes
	}
	scfg := jetstream.StreamConfig{
		Name:        StreamName,
		Description: "aegis events: every frame, verdict, approval and enforcement fact",
		Subjects:    []string{"aegis.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxMsgSize:  maxMsg,
		MaxMsgs:     -1,
		MaxBytes:    maxBytes,
		// At a limit the stream refuses the new message; it never
		// discards old ones to make room (DiscardOld would, silently).
		// An existing stream is updated to this on every Open, so no
		// earlier setting survives that could delete events.
		Discard:    jetstream.DiscardNew,
		DenyDelete: true,
		DenyPurge:  true,
		// aegis sets no message ids, so the server's duplicate window
		// only costs: when it recovers the stream at start, it reads
		// back every message of the window (by default the last two
		// minutes) to rebuild a dedupe table that stays empty. The
		// least window it takes is 100 ms.
		Duplicates: 100 * time.Millisecond,
		// A reader on the loopback listener (aegis console) reads the
		// stream through direct gets, which change nothing, and learns
		// that a message is on disk from the store ([Store.stored]): it
		// never polls, and it holds no consumer. (The server's own
		// RePublish would tell it too, but it loads the subject's last
		// message for every write: with large frames, a frame's worth of
		// memory per write.)
		AllowDirect: true,
		// Only a rotation's new stream starts later than 1 (after the
		// rolled-over stream's last sequence); once it exists this is
		// left out, so no later Open can ask the server to begin the
		// stream (and drop what it holds) anywhere else.
		FirstSeq: s.createFirst(),
	}
	var stream jetstream.Stream
	if cfg.ReadOnly {
		// The stream as its files hold it: an update would rewrite its
		// metadata, which needs room on the disk.
		stream, err = js.Stream(ctx, StreamName)
	} else if _, serr := os.Stat(streamDir(dir)); errors.Is(serr, fs.ErrNotExist) {
		// A new stream: created at once, without the update that
		// CreateOrUpdateStream asks for first and that would only be
		// told there is no such stream (a round trip of the start).
		stream, err = js.CreateStream(ctx, scfg)
	}
	if stream == nil {
		// An existing stream is updated to scfg (as is one that the
		// create above did not make, whatever the reason).
		stream, err = js.CreateOrUpdateStream(ctx, scfg)
	}
	if err != nil && cfg.ReadOnly {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Its folder is there (checked above), so its files did not load.
			err = fmt.Errorf("%w (its files under %s did not load: damaged, or not a stream)", err, streamDir(dir))
		}
		return nil, fmt.Errorf("open stream %s in %s: %w", StreamName, opts.StoreDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s in %s: %w", StreamName, opts.StoreDir, err)
	}
	s.stream = stream
	s.acct = ns.GlobalAccount()
	s.mark = readMark(dir)
	if cfg.ReadOnly {
		go s.commitLoop() // it commits nothing, and ends at Close
		s.log.Debug("event store open read-only", "dir", dir)
		return s, nil
	}
	if cfg.MaxBytes > 0 {
		st := stream.CachedInfo().State
		// A stream at (or next to) the cap: say so now, not at the first
		// append.
		if st.Bytes+openRoom > uint64(cfg.MaxBytes) {
			return nil, fmt.Errorf("open event store: %w", &FullError{Dir: dir, Cap: cfg.MaxBytes, Bytes: st.Bytes, Msgs: st.Msgs})
		}
	}
	if s.cc, err = dialCommit(ns, user, pass, cfg.AckTimeout); err != nil {
		return nil, err
	}
	if cfg.Hub != nil {
		if err := s.linkMirror(ctx, cfg.Hub.Host); err != nil {
			return nil, err
		}
	}
	go s.commitLoop()
	s.log.Debug("event store open", "dir", dir)
	return s, nil
}

// ListenApprovals starts answering approval requests for session with
// handle, over the loopback listener that Config.Approvals opened.
func (s *Store) ListenApprovals(session string, handle func(ApprovalRequest) ApprovalReply) (*ApprovalListener, error) {
	if s.approvals == nil {
		return nil, errors.New("listen for approvals: the event store was opened without Config.Approvals")
	}
	return s.approvals.Listen(s.ns, session, s.dir, handle)
}

// Dir returns the absolute state directory.
func (s *Store) Dir() string { return s.dir }

// NewSession returns a new session id, sortable by its start time.
func (s *Store) NewSession() (string, error) {
	return schemas.NewID(s.cfg.Now(), s.cfg.Rand)
}

// NewEvent builds an envelope of the given kind for session: a fresh id,
// the store's current time in UTC, and payload marshalled as JSON (a
// json.RawMessage or []byte is taken as it is). It is validated when it is
// enqueued.
func (s *Store) NewEvent(session string, kind schemas.Kind, payload any) (schemas.Event, error) {
	now := s.cfg.Now().UTC()
	id, err := schemas.NewID(now, s.cfg.Rand)
	if err != nil {
		return schemas.Event{}, err
	}
	var raw json.RawMessage
	switch p := payload.(type) {
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		raw, err = json.Marshal(p)
		if err != nil {
			return schemas.Event{}, fmt.Errorf("new event: payload: %w", err)
		}
	}
	// Validated when it is enqueued, not twice.
	return schemas.Event{V: schemas.EnvelopeVersion, ID: id, Session: session, Kind: kind, Time: now, Payload: raw}, nil
}

// Closing reports whether Close has begun: a reader that fails then
// failed because the store is going away, not because of what it read.
func (s *Store) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Close stops accepting appends, commits everything already queued, and
// shuts the embedded server down. If ctx ends first, the commit in flight is
// interrupted and it and every event still queued fail with [ErrFailed]
// (none of them was acknowledged). Close is idempotent.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.closing
	s.closing = true
	s.cond.Broadcast()
	s.mu.Unlock()
	if already {
		<-s.done
		return nil
	}
	var err error
	select {
	case <-s.done:
	case <-ctx.Done():
		err = fmt.Errorf("close event store: %w", ctx.Err())
		if s.cc != nil {
			s.cc.interrupt()
		}
		<-s.done
	}
	if !s.readOnly {
		s.saveMark(ctx)
	}
	s.shutdown()
	return err
}

func (s *Store) shutdown() {
	if s.cc != nil {
		s.cc.close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	if err := s.lock.release(); err != nil {
		s.log.Warn("release state directory lock", "err", err)
	}
}
