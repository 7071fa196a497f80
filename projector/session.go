package projector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/schemas"
)

// SessionOpened is the payload of a session.opened event. Line is the
// session's signed open line; AuditPath and AuditOffset say where its lines
// go in the record file, so a later run can finish a projection that a crash
// cut short.
type SessionOpened struct {
	Line        string   `json:"line"`
	AuditPath   string   `json:"audit_path"`
	AuditOffset int64    `json:"audit_offset"`
	KeyID       string   `json:"key_id"`
	PID         int      `json:"pid"`
	Argv        []string `json:"argv"`
	Version     string   `json:"version"`
	// Profile is the profile a gateway session starts in (its default
	// profile); empty for a session that has no profiles (aegis wrap).
	Profile string `json:"profile,omitempty"`
	// Run names the process run that opened the session, when one process
	// runs several sessions at once (a gateway serving HTTP clients): the
	// sessions of one run share it. Empty otherwise.
	Run string `json:"run,omitempty"`
	// Principal is who the session serves, when a validated OAuth token
	// named them (gateway --listen as a resource server); it is also the
	// "principal" member of the signed open line.
	Principal *schemas.Principal `json:"principal,omitempty"`
}

// LinePayload is the part of any event payload that carries an audit line:
// events whose payload has a non-empty "line" are the audit record, in
// stream order.
type LinePayload struct {
	Line string `json:"line"`
}

// CallPayload is the payload of call.intent and call.outcome events.
type CallPayload struct {
	Line   string `json:"line"`
	CallID string `json:"call_id"`
	ToolID string `json:"tool_id"`
}

// SessionConfig opens a [Session].
type SessionConfig struct {
	Store *events.Store
	Key   PrivateKey
	// AuditPath is the record file the session's lines are projected to.
	AuditPath string
	// Run is SessionOpened.Run: set by a process that runs several sessions
	// at once, the same for each of them.
	Run string
	// Argv and Version are recorded in session.opened.
	Argv    []string
	Version string
	// Profile, for a gateway, is the profile the session starts in; it is
	// recorded in session.opened, so that projections know the active
	// profile before the first switch.
	Profile string
	// Confinement, when set, is the enforcement fact of the server's
	// confinement: it becomes the "confinement" member of the signed open
	// line and the payload of a confinement.applied event committed with
	// it, so it is durable and signed before the server runs. It must
	// marshal to JSON inside the audit value space (no null, no floats, no
	// negative numbers).
	Confinement any
	// Principal, when set, is who the session serves: it becomes the
	// "principal" member of the signed open line and of session.opened.
	Principal *schemas.Principal
	Logger    *slog.Logger
	// Index is the store's index, folded to the stream's end; nil loads it
	// ([LoadIndex]). The session takes it over: it keeps it up to date and
	// saves it (see IndexEvery), so the next start folds little.
	Index *Index
	// IndexEvery is how often the session folds the stream's new events
	// into the index and saves it, beside the relay, from one IndexEvery
	// after the start (0: once at the start, and at Close).
	IndexEvery time.Duration
	// Shared, when set, is the index the session uses instead of one of
	// its own (Index and IndexEvery are then not used): several sessions
	// of one process share it, and it folds and saves for all of them.
	Shared *SharedIndex
	// Checkpoints says how often the record file gets a signed checkpoint
	// (see [CheckpointPolicy]).
	Checkpoints CheckpointPolicy
	// Anchor, when set, is the state directory's anchor log: every record
	// checkpoint the session signs is appended to it (anchor.go). It must
	// be of the same store and key.
	Anchor *Anchor
}

// Session is one proxy run's audit chain and event writer. It is the single
// writer of its chain: every line is built, signed and enqueued on the
// stream inside the chain's critical section, so stream order is chain
// order. Lines reach the record file only after their event is durable.
type Session struct {
	store *events.Store
	chain *Chain
	id    string
	log   *slog.Logger

	mu    sync.Mutex
	calls uint64

	proj *fileProjection

	index     *Index
	shared    *SharedIndex      // the index shared with other sessions, if any
	indexTap  *events.CommitTap // what the store commits, for the index
	indexStop context.CancelFunc
	indexDone chan struct{}
	path      string      // the record file, resolved
	checked   atomic.Bool // the record file was checked whole (or needed not be)

	pins PinSet // the tool pins as the session opened (pins.go)
	seq  uint64 // the stream sequence of session.opened
}

// OpenSession opens the record file (creating it) and locks it against
// every other writer, finishes the file's projection of the last session
// that wrote to it (a crash can leave acknowledged lines out of the file),
// then opens a new session linked to the file's tail and waits until its
// open line is durable. It refuses a record file that another process holds
// ([*RecordLockedError]) or that does not hold what the stream says was
// written to it; a record file that cannot be opened or locked is refused
// before any event of the session is written. The lock is held until
// [Session.Close] or [Session.Abandon].
func OpenSession(ctx context.Context, cfg SessionConfig) (_ *Session, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	path, err := resolveRecordPath(cfg.AuditPath)
	if err != nil {
		return nil, fmt.Errorf("audit path: %w", err)
	}
	chain, err := NewChain(cfg.Key)
	if err != nil {
		return nil, err
	}
	f, created, err := openRecordFile(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if created {
				// Still locked, so no other writer has used it.
				os.Remove(path)
			}
			f.Close()
		}
	}()
	if !cfg.Checkpoints.Off {
		// Created at the first checkpoint; one that is there already is
		// refused now, before the session writes anything.
		if err := checkPrivateFile(path+CheckpointsSuffix, sidecarWhat, sidecarInto); err != nil {
			return nil, err
		}
	}
	ix := cfg.Index
	switch {
	case cfg.Shared != nil:
		// The shared index is held until the session has begun on it.
		if ix, err = cfg.Shared.lockFolded(ctx); err != nil {
			return nil, fmt.Errorf("read audit record from stream: %w", err)
		}
		unlock := sync.OnceFunc(cfg.Shared.mu.Unlock)
		defer unlock()
	case ix == nil:
		if ix, err = LoadIndex(ctx, cfg.Store, cfg.Logger, nil); err != nil {
			return nil, fmt.Errorf("read audit record from stream: %w", err)
		}
	}
	tail, offset, err := ix.CatchUp(ctx, cfg.Store, path)
	if err != nil {
		return nil, err
	}
	id, err := cfg.Store.NewSession()
	if err != nil {
		return nil, err
	}
	var tap *events.CommitTap
	if cfg.IndexEvery > 0 && cfg.Shared == nil {
		// From the session's first event on: the index folds the
		// session's own commits from the tap, and reads back from the
		// stream only what the tap lacks.
		tap = cfg.Store.TapCommits()
		defer func() {
			if err != nil {
				tap.Close()
			}
		}()
	}
	s := &Session{store: cfg.Store, chain: chain, id: id, log: cfg.Logger, pins: ix.pins.clone()}
	var extra map[string]any
	var with []schemas.Event
	if cfg.Confinement != nil {
		raw, err := json.Marshal(cfg.Confinement)
		if err != nil {
			return nil, fmt.Errorf("confinement fact: %w", err)
		}
		v, err := schemas.DecodeValue(raw)
		if err != nil {
			return nil, fmt.Errorf("confinement fact is outside the audit value space: %w", err)
		}
		extra = map[string]any{"confinement": v}
		ev, err := cfg.Store.NewEvent(id, schemas.KindConfinementApplied, json.RawMessage(raw))
		if err != nil {
			return nil, err
		}
		with = append(with, ev)
	}
	if cfg.Principal != nil {
		if extra == nil {
			extra = map[string]any{}
		}
		extra[schemas.FieldPrincipal] = cfg.Principal.Value()
	}
	var rcpt *events.Receipt
	entry, err := chain.OpenExtraFunc(tail, extra, func(e Entry) error {
		ev, err := cfg.Store.NewEvent(id, schemas.KindSessionOpened, SessionOpened{
			Line: string(e.Bytes), AuditPath: path, AuditOffset: offset,
			KeyID: chain.KeyID(), PID: os.Getpid(), Argv: cfg.Argv, Version: cfg.Version, Profile: cfg.Profile, Run: cfg.Run,
			Principal: cfg.Principal,
		})
		if err != nil {
			return err
		}
		// session.opened is the session's first event and is committed
		// alone, so it keeps its own subject (aegis.<session>.session.opened)
		// and CatchUp finds sessions without reading the whole stream.
		rcpt, err = cfg.Store.Enqueue(ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open audit session: %w", err)
	}
	opened, err := rcpt.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("open audit session: %w", err)
	}
	s.seq = opened.Seq
	if len(with) > 0 {
		rs, err := cfg.Store.EnqueueMany(with...)
		if err == nil {
			_, err = rs[len(rs)-1].Wait(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("open audit session: record confinement: %w", err)
		}
	}
	s.proj = newFileProjection(f, cfg.Logger)
	if !cfg.Checkpoints.Off {
		tree, bytes, tail, err := resumeCheckpoints(path, ix.treeFor(path, offset), offset)
		if err != nil {
			return nil, fmt.Errorf("resume the record's checkpoint tree: %w", err)
		}
		s.proj.cp = &liveCheckpoints{
			store: cfg.Store, session: id, key: cfg.Key, path: path, origin: CheckpointOrigin(cfg.Key, path),
			policy: cfg.Checkpoints, tree: tree, bytes: bytes, tail: tail, signed: tree.Size(), anchor: cfg.Anchor,
		}
	}
	s.proj.push(entry.Bytes, rcpt)
	s.path = path
	s.indexTap = tap
	if cfg.Shared != nil {
		s.shared = cfg.Shared
		s.startShared(ix, path)
		return s, nil
	}
	s.startIndexer(ix, path, cfg.IndexEvery)
	return s, nil
}

// startIndexer runs the session's index beside the relay: it saves what
// the start folded, checks a record file too large for CatchUp to check
// whole before the session began, then folds and saves the index every
// `every`.
func (s *Session) startIndexer(ix *Index, path string, every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	s.index, s.indexStop, s.indexDone = ix, cancel, make(chan struct{})
	go func() {
		defer close(s.indexDone)
		// What the start folded is saved, for the next start and for
		// readers while this session holds the state directory, at the
		// first tick rather than at once: a save is four fsyncs and a
		// read of the stream, which at once would contend for the disk
		// with the commits that the server's first answers wait for. The
		// index is a cache checked against the stream, so a save later
		// (or never, if the process dies first) costs the next start
		// time, nothing else. Without ticks it is saved at once.
		if every <= 0 {
			s.saveIndex(ctx, indexBudget)
		}
		if !ix.needsCheck(path) {
			s.checked.Store(true) // by CatchUp, or unchanged since it was
		} else if err := ix.CheckFile(ctx, path); err == nil {
			s.checked.Store(true)
		} else if ctx.Err() == nil {
			s.log.Error("the record file does not hold what the event stream says was written to it; this session appends to it all the same, so 'aegis verify' will not pass it: rebuild it with 'aegis export'", "file", path, "err", err)
		}
		if every <= 0 {
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		var grown uint64 // the stream's size at the last tick
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A flood (the stream grew by more than indexPause in a tick)
			// is not read back while it lasts: reading large frames back
			// beside the relay that writes them costs it memory and half
			// its throughput. The index catches up once it ebbs.
			n, err := s.store.StoredBytes(ctx)
			flood := err == nil && grown > 0 && n-grown > indexPause
			grown = n
			if !flood {
				s.saveIndex(ctx, indexBudget)
			}
		}
	}()
}

// startShared is startIndexer for a session on a shared index, locked
// by the caller: it checks a record file too large for CatchUp to check
// whole before the session began, under the index's lock; the shared
// index folds and saves.
func (s *Session) startShared(ix *Index, path string) {
	check := ix.needsCheck(path)
	if !check {
		s.checked.Store(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.indexStop, s.indexDone = cancel, make(chan struct{})
	go func() {
		defer close(s.indexDone)
		if !check {
			return
		}
		s.shared.mu.Lock()
		err := s.shared.ix.CheckFile(ctx, path)
		s.shared.mu.Unlock()
		if err == nil {
			s.checked.Store(true)
		} else if ctx.Err() == nil {
			s.log.Error("the record file does not hold what the event stream says was written to it; this session appends to it all the same, so 'aegis verify' will not pass it: rebuild it with 'aegis export'", "file", path, "err", err)
		}
	}()
}

// indexBudget is about how many bytes of events a session folds into its
// index per tick (and indexCloseBudget at Close): a flood is read back at
// a bounded pace, and what is left when the session ends, the next start
// folds.
const (
	indexBudget      = 16 << 20
	indexCloseBudget = 64 << 20
	// indexPause is how much the stream may grow in a tick for the
	// session still to fold it then: a recorded call costs about 2.2 KiB,
	// so thousands of calls a second fold as they come.
	indexPause = 32 << 20
)

// saveIndex folds up to budget bytes of the stream's new events into the
// session's index and saves it. A failure costs the next start time,
// nothing else.
func (s *Session) saveIndex(ctx context.Context, budget int64) {
	if _, err := s.index.updateTapped(ctx, s.store, s.indexTap, budget); err != nil {
		if ctx.Err() == nil {
			s.log.Debug("index not updated", "err", err)
		}
		return
	}
	if err := s.index.saveTapped(ctx, s.store, s.indexTap); err != nil && ctx.Err() == nil {
		s.log.Debug("index not saved", "err", err)
	}
}

// indexCloseLimit bounds the last fold and save of the index at Close; what
// it does not fold, the next start does.
const indexCloseLimit = 5 * time.Second

// stopIndexer stops the indexer and, if save, folds the session's last
// events into the index and saves it.
func (s *Session) stopIndexer(save bool) {
	if s.indexStop == nil {
		return
	}
	s.indexStop()
	<-s.indexDone
	s.indexStop = nil
	if s.shared != nil {
		if save && s.checked.Load() {
			// Stamped on the index folded past the session's close, which
			// the shared index saves at its next tick.
			ctx, cancel := context.WithTimeout(context.Background(), indexCloseLimit)
			defer cancel()
			if ix, err := s.shared.lockFolded(ctx); err == nil {
				ix.stampFile(s.path)
				s.shared.mu.Unlock()
			}
		}
		return
	}
	if s.indexTap != nil {
		defer func() {
			s.indexTap.Close()
			s.indexTap = nil
		}()
	}
	if !save {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), indexCloseLimit)
	defer cancel()
	if s.checked.Load() {
		// The file was checked whole and holds since only what this
		// session wrote: the next start need not read it again.
		s.index.stampFile(s.path)
	}
	s.saveIndex(ctx, indexCloseBudget)
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Seq returns the session's number in its state directory: the stream
// sequence of its session.opened event. No other session of the directory
// has it: session.opened is committed in a message of its own, and the
// stream's sequence only grows (the stream denies delete and purge, and a
// rotation starts the new stream after the old one's last sequence).
func (s *Session) Seq() uint64 { return s.seq }

// KeyID returns the key_id of the session's signing key.
func (s *Session) KeyID() string { return s.chain.KeyID() }

// NextCallID returns a new call_id ("call-<n>", from 1).
func (s *Session) NextCallID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return schemas.CallID(s.calls)
}

// FrameEvent builds the event of one frame holding b exactly. It does not
// enqueue it: pass it to [Session.Enqueue], or along with a line to
// [Session.Intent] or [Session.Outcome] so both share a commit.
func (s *Session) FrameEvent(kind schemas.Kind, b []byte) (schemas.Event, error) {
	return s.store.NewEvent(s.id, kind, schemas.AppendFramePayload(nil, b))
}

// Enqueue queues events of the session that nobody waits for (frames that
// carry no call or answer): they ride with the next commit, or are
// committed within the store's LazyFlush, and waiting on any later receipt
// covers them.
func (s *Session) Enqueue(evs ...schemas.Event) (*events.Receipt, error) {
	rs, err := s.store.EnqueueLazy(evs...)
	if err != nil {
		return nil, err
	}
	return rs[len(rs)-1], nil
}

// LazyFrame queues a frame event holding b exactly that nobody waits for
// (a frame that carries no call or answer). The store builds its envelope
// in the commit that takes it (see [events.Store.EnqueueFrame]), so b must
// not change afterwards.
func (s *Session) LazyFrame(kind schemas.Kind, b []byte) error {
	return s.store.EnqueueFrame(s.id, kind, b)
}

// Frame enqueues a frame event holding b exactly, without waiting.
func (s *Session) Frame(kind schemas.Kind, b []byte) (*events.Receipt, error) {
	ev, err := s.FrameEvent(kind, b)
	if err != nil {
		return nil, err
	}
	return s.Enqueue(ev)
}

// Fact enqueues a non-audit event of the session (child.started,
// child.exited, …).
func (s *Session) Fact(kind schemas.Kind, payload any) (*events.Receipt, error) {
	ev, err := s.store.NewEvent(s.id, kind, payload)
	if err != nil {
		return nil, err
	}
	return s.store.Enqueue(ev)
}

// Intent appends an intent line. Events in with (the frame that carried the
// call) are enqueued just before the line, in the same step, so they share
// its commit. The caller must wait on the receipt before the call may reach
// a server.
func (s *Session) Intent(in schemas.Intent, with ...schemas.Event) (*events.Receipt, error) {
	l, err := in.Line()
	if err != nil {
		return nil, err
	}
	return s.appendLine(l, schemas.KindCallIntent, in.CallID, in.ToolID, with)
}

// Outcome appends a signed outcome line, with events in with enqueued just
// before it (see [Session.Intent]). The caller must wait on the receipt
// before the answer may reach the host.
func (s *Session) Outcome(o schemas.Outcome, with ...schemas.Event) (*events.Receipt, error) {
	l, err := o.Line()
	if err != nil {
		return nil, err
	}
	return s.appendLine(l, schemas.KindCallOutcome, o.CallID, o.ToolID, with)
}

func (s *Session) appendLine(l schemas.Line, kind schemas.Kind, callID, toolID string, with []schemas.Event) (*events.Receipt, error) {
	return s.commitLine(l, kind, func(line string) any {
		return CallPayload{Line: line, CallID: callID, ToolID: toolID}
	}, with)
}

// commitLine appends l to the chain. Its commit step builds the event that
// carries the finished line (kind, with payload(line) as payload), queues
// the events in with and then it for the caller to wait on (they share a
// commit, which the waiter runs), and hands the line to the file
// projection.
func (s *Session) commitLine(l schemas.Line, kind schemas.Kind, payload func(line string) any, with []schemas.Event) (*events.Receipt, error) {
	var rcpt *events.Receipt
	_, err := s.chain.AppendFunc(l, func(e Entry) error {
		ev, err := s.store.NewEvent(s.id, kind, payload(string(e.Bytes)))
		if err != nil {
			return err
		}
		rs, err := s.store.EnqueueAwaited(append(with[:len(with):len(with)], ev)...)
		if err != nil {
			return err
		}
		rcpt = rs[len(rs)-1]
		s.proj.push(e.Bytes, rcpt)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("append %s line: %w", l.Type(), err)
	}
	return rcpt, nil
}

// Decision appends a signed decision line (a human's verdict on an
// approval) together with an approval.resolved event whose payload is
// resolved plus the line. The caller waits on the receipt before acting on
// the decision.
func (s *Session) Decision(d schemas.Decision, resolved map[string]string) (*events.Receipt, error) {
	payload := make(map[string]any, len(resolved))
	for k, v := range resolved {
		payload[k] = v
	}
	return s.DecisionWith(d, payload)
}

// DecisionWith is [Session.Decision] with any JSON values in the payload
// (the gateway adds the profile event the decision resolves). One decision
// is one approval.resolved event: the projections read a second one for the
// same approval as a duplicate.
func (s *Session) DecisionWith(d schemas.Decision, resolved map[string]any) (*events.Receipt, error) {
	l, err := d.Line()
	if err != nil {
		return nil, err
	}
	return s.commitLine(l, schemas.KindApprovalResolved, func(line string) any {
		payload := map[string]any{"line": line}
		for k, v := range resolved {
			if k != "line" {
				payload[k] = v
			}
		}
		return payload
	}, nil)
}

// SessionClosedPayload is the payload of a session.closed event: the
// close line and, for an HTTP client's session, why it ended.
type SessionClosedPayload struct {
	Line string `json:"line"`
	// Ended is why the gateway's HTTP side ended the session: deleted
	// (by its client), evicted (to make room), idle, shutdown, or ""
	// when it ended on its own. It is not in the signed line.
	Ended string `json:"ended,omitempty"`
}

// Close appends the signed close line, waits until it is durable, lets the
// file projection write everything and fsyncs the record file.
func (s *Session) Close(ctx context.Context) error { return s.CloseEnded(ctx, "") }

// CloseEnded is Close, and says in the session.closed event why the
// session ended ([SessionClosedPayload]).
func (s *Session) CloseEnded(ctx context.Context, ended string) error {
	rcpt, err := s.commitLine(schemas.CloseLine(), schemas.KindSessionClosed, func(line string) any {
		return SessionClosedPayload{Line: line, Ended: ended}
	}, nil)
	var werr error
	if err == nil {
		_, werr = rcpt.Wait(ctx)
	}
	perr := s.proj.close()
	s.stopIndexer(err == nil && werr == nil)
	return errors.Join(err, werr, perr)
}

// Abandon stops the file projection without a close line, as a crash
// would; the lines already acknowledged are still written. For tests and
// for a store that stopped acknowledging.
func (s *Session) Abandon() error {
	s.stopIndexer(false)
	return s.proj.close()
}

// fileProjection writes acknowledged lines to the record file in chain
// order. It runs off the hot path: nothing waits for it but Close, and
// pushing a line wakes nobody. A timer, armed when the first line is
// pushed, writes every line whose event is durable by then, in order, and
// re-arms itself while lines remain, so the file trails the stream by about
// projectDelay and the projection costs a few wake-ups per second instead of
// two per commit. It does not fsync per line; the stream is the durable copy
// and a restart finishes the file from it (see [CatchUp]).
type fileProjection struct {
	f   *os.File
	log *slog.Logger

	wmu    sync.Mutex // held while writing; orders concurrent flushes
	w      *bufio.Writer
	failed error

	mu     sync.Mutex
	q      []projItem
	armed  bool
	closed bool

	// cp signs the file's live checkpoints; nil when they are off. Its
	// state is guarded by wmu.
	cp      *liveCheckpoints
	cpArmed bool
	done    bool // closed, under wmu
}

// projectDelay is how long a pushed line may wait before the projection
// looks at it.
const projectDelay = 5 * time.Millisecond

type projItem struct {
	line []byte
	rcpt *events.Receipt
}

func newFileProjection(f *os.File, log *slog.Logger) *fileProjection {
	return &fileProjection{f: f, log: log, w: bufio.NewWriterSize(f, 64<<10)}
}

func (p *fileProjection) push(line []byte, r *events.Receipt) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.q = append(p.q, projItem{line, r})
	if !p.armed {
		p.armed = true
		time.AfterFunc(projectDelay, p.flush)
	}
}

// flush writes the lines at the head of the queue whose events are
// durable, and re-arms the timer if any line is left.
func (p *fileProjection) flush() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	n := 0
	for n < len(p.q) && isDone(p.q[n].rcpt) {
		n++
	}
	ready := p.q[:n:n]
	p.q = p.q[n:]
	p.armed = len(p.q) > 0 && !p.closed
	if p.armed {
		time.AfterFunc(projectDelay, p.flush)
	}
	p.mu.Unlock()
	p.write(ready)
}

func isDone(r *events.Receipt) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// write appends items to the file in order; p.wmu is held. After a line
// whose event failed nothing more is written: the file stops where the
// acknowledged record stops.
func (p *fileProjection) write(items []projItem) {
	for _, it := range items {
		if p.failed != nil {
			return
		}
		// Wait without a deadline: the store resolves every receipt, with
		// an error if it fails or closes.
		if _, err := it.rcpt.Wait(context.Background()); err != nil {
			p.failed = fmt.Errorf("audit line not acknowledged; record file stops here: %w", err)
			return
		}
		p.w.Write(it.line)
		if err := p.w.WriteByte('\n'); err != nil {
			p.writeFailed(err)
			return
		}
		if p.cp != nil {
			p.cp.add(it.line, time.Now())
		}
	}
	if len(items) > 0 && p.failed == nil {
		if err := p.w.Flush(); err != nil {
			p.writeFailed(err)
			return
		}
		p.checkpointIfDue()
	}
}

// checkpointIfDue signs a checkpoint when one is due, and otherwise arms
// the timer that signs one when the interval is up; p.wmu is held and the
// file holds every line written.
func (p *fileProjection) checkpointIfDue() {
	if p.cp == nil || p.failed != nil {
		return
	}
	now := time.Now()
	if p.cp.due(now) {
		p.cp.checkpoint(context.Background())
		return
	}
	if p.cp.tree.Size() > p.cp.signed && !p.cpArmed && p.cp.failed == nil {
		p.cpArmed = true
		p.cp.timer = time.AfterFunc(p.cp.policy.interval()-now.Sub(p.cp.pending), p.checkpointTick)
	}
}

// checkpointTick is the checkpoint timer.
func (p *fileProjection) checkpointTick() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.cpArmed = false
	if p.done {
		return
	}
	p.checkpointIfDue()
}

// writeFailed records that the record file could not be written, and
// says so on stderr at once: the session goes on recording to the event
// stream, and the file is only reported at close otherwise.
func (p *fileProjection) writeFailed(err error) {
	p.failed = fmt.Errorf("write audit file: %w", err)
	why := "the record file could not be written"
	if platform.IsDiskFull(err) {
		why = "the disk under the record file is full"
	}
	p.log.Warn(why+"; no more lines go to it in this session, and the event stream still holds every one: free space, then rebuild the file with 'aegis export'", "file", p.f.Name(), "err", err)
}

// close writes every pushed line once its event is resolved, then fsyncs
// and closes the file. Lines pushed after close are not written.
func (p *fileProjection) close() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	rest := p.q
	p.q = nil
	p.mu.Unlock()
	p.write(rest)
	p.done = true
	failed := p.failed
	if err := p.w.Flush(); err != nil && failed == nil {
		failed = fmt.Errorf("write audit file: %w", err)
	}
	if err := p.f.Sync(); err != nil && failed == nil {
		failed = fmt.Errorf("sync audit file: %w", err)
	}
	if p.cp != nil {
		if failed == nil {
			p.cp.checkpoint(context.Background())
		}
		if err := p.cp.close(); err != nil {
			p.log.Warn("the record's checkpoints could not all be signed and written; the record itself is whole", "err", err)
			if failed == nil {
				failed = err
			}
		}
	}
	platform.Unlock(p.f) // before the close: see platform.Unlock
	if err := p.f.Close(); err != nil && failed == nil {
		failed = err
	}
	return failed
}

// decodeLine returns the audit line an event carries, if any. Payloads
// aegis wrote start with the line member, read by the fast line parser's
// string reader; anything else goes through encoding/json.
func decodeLine(e schemas.Event) (string, bool) {
	if l, ok := fastLine(e.Payload); ok {
		return l, l != ""
	}
	var p LinePayload
	if json.Unmarshal(e.Payload, &p) != nil || p.Line == "" {
		return "", false
	}
	return p.Line, true
}

// fastLine reads the line of a payload that starts with its "line" member,
// as every payload aegis writes does.
func fastLine(p []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(p, []byte(`{"line":`))
	if !ok {
		return "", false
	}
	l, _, err := schemas.ReadString(rest)
	return l, err == nil
}

// resolveRecordPath returns the absolute path of the record file with its
// symbolic links resolved, so that the stream knows one file by one name:
// a session recorded through a link is caught up and checked like one
// recorded through the file's own path. A file that does not exist yet is
// resolved through its directory.
//
// A link at the final component is followed only while it is this user's
// own ([followOwnLinks]); the file it leads to is then opened without
// following links.
func resolveRecordPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if err := followOwnLinks(abs); err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return abs, nil // openRecordFile says what is wrong with it
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}
