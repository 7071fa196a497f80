package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// MaxFrame is the largest frame the relay carries, in bytes, without its
// line terminator.
const MaxFrame = rpc.MaxFrame

// DefaultGrace is how long the server may go on answering after the host
// closed its stdin; every server frame re-arms it.
const DefaultGrace = 5 * time.Second

// WrapConfig runs one recorded relay between a host and a server process.
type WrapConfig struct {
	// Open opens the audit session. Wrap calls it before the server can
	// run, with the confinement fact when Confine is set (nil otherwise);
	// an error stops Wrap before the server runs.
	Open func(confinement *sandbox.Fact) (*projector.Session, error)
	// Confine, when set, runs the server through the confine helper (Self
	// is the aegis binary, usually /proc/self/exe): the helper applies the
	// profile and reports what it enforced; the fact is signed into the
	// session's open line before the helper may exec the server.
	Confine *sandbox.Profile
	Self    string
	// Stdin and Stdout are the host's side of MCP.
	Stdin  io.Reader
	Stdout io.Writer
	// Stderr receives the server's stderr byte for byte.
	Stderr io.Writer
	// Argv is the server command; Env its environment (nil: aegis's).
	Argv []string
	Env  []string
	// Signals are forwarded to the server's process tree; a second SIGINT
	// or SIGTERM kills the tree.
	Signals <-chan os.Signal
	// Grace is the shutdown grace after the host closes stdin (default 5s),
	// and how long what the server leaves running has between SIGTERM and
	// SIGKILL once it exited.
	Grace  time.Duration
	Now    func() time.Time
	Logger *slog.Logger

	// Policy, when set, decides every tools/call before it may reach the
	// server; refused calls are answered with the -32042 refusal frame.
	Policy *policy.Set
	// ApprovalTTL bounds how long a pending approval can be acted on
	// (default 10 minutes).
	ApprovalTTL time.Duration
	// Approvals, when set with a Policy, starts serving approval requests
	// for the session (aegis approve/deny/approvals) with handle; Wrap calls
	// the returned stop when it ends.
	Approvals func(session string, handle func(ApprovalOp) ApprovalReply) (stop func(), err error)
	// Approvers, when set, are the only ones who can approve: an approve
	// must carry a signature by one of them over the approval id, the
	// session, the tool and the arguments' digest, and the decision line
	// names the approver's key id. A deny needs none (it fails closed).
	// Nil keeps approvals as they were: any process that can reach the
	// approval channel can approve.
	Approvers *schemas.Approvers
	// Prompt receives approval prompts (aegis's stderr).
	Prompt io.Writer
}

// WrapResult is how a relay ended.
type WrapResult struct {
	// ExitCode is the server's exit status: its code, or 128+signal.
	ExitCode int
	// ServerExitedFirst is set when the server ended on its own while the
	// host was still connected: not when aegis stopped it, or passed a
	// signal on to it.
	ServerExitedFirst bool
	// Calls counts the tools/call requests recorded.
	Calls int
	// Session is the audit session Wrap opened (nil if it never got that
	// far); the caller closes it.
	Session *projector.Session
	// Confinement is the enforcement fact, when the server was confined.
	Confinement *sandbox.Fact
}

type pendingCall struct {
	call  schemas.WrapCall
	start time.Time
	axes  schemas.DecisionAxes // matched rule and approval, under a policy
	id    reqID
	// cancelled is how long after start the host cancelled the call
	// (notifications/cancelled); 0 while it has not.
	cancelled time.Duration
}

// reqID is a host request's id, under the exact reading and the loose one
// hosts match answers by (see LooseID).
type reqID struct {
	key     string
	loose   float64
	looseOK bool
}

func newReqID(key string, raw json.RawMessage) reqID {
	l, ok := rpc.LooseID(raw)
	return reqID{key: key, loose: l, looseOK: ok}
}

// same reports whether a and b name one request to some reader.
func (a reqID) same(b reqID) bool {
	return a.key != "" && a.key == b.key || a.looseOK && b.looseOK && a.loose == b.loose
}

// otherRequest is a host request of another method than tools/call that
// the server has not answered yet; n counts requests that reuse its id.
type otherRequest struct {
	id reqID
	n  int
}

type outFrame struct {
	data []byte
	wait *events.Receipt
}

type relay struct {
	cfg  WrapConfig
	sess *projector.Session
	log  *slog.Logger
	ctx  context.Context // bounds waits for commits

	mu         sync.Mutex
	pending    map[string]*pendingCall  // tools/calls in flight, by exact id key
	others     map[string]*otherRequest // other host requests in flight
	stopped    bool                     // no more calls are registered or relayed
	hostClosed bool
	failed     error
	calls      int
	end        serverEnd // what aegis did to end the server, if anything

	rearm chan struct{}
	kill  func()

	gate   *gate    // nil without a policy
	toHost *outPath // where refusal frames go

	pins *pinBook // the server's tool pins (pins.go)
	// books are the server's pins by the method whose answer they read:
	// tools, prompts, resource templates and (initialize) instructions.
	books map[string]*pinBook
	lists *listWatch // the host's tools/list requests in flight

	s2cFrames atomic.Int64 // server frames read so far
	s2cBusy   atomic.Bool  // the server reader is handling a frame

	hs rpc.Stream // the host's bytes as relayed; the host reader's alone
	ss rpc.Stream // the server's bytes as relayed; the server reader's alone

	// unread is a host line relayed before its requests were read (see
	// onHostFrame), on mu; nil when there is none. Whichever reader comes
	// first reads and registers them: the host reader once the line is
	// written (readLater is its own note of the line), or the server
	// reader when it matches an answer.
	unread    []byte
	readLater []byte
}

// Wrap starts the server and relays between it and the host until the
// server has exited and its output is drained, recording every frame and
// every tools/call (intent durable before the call reaches the server,
// outcome durable before the answer reaches the host). It returns an error
// only when recording failed; the session is then not closed, and the
// server has been killed.
func Wrap(ctx context.Context, cfg WrapConfig) (WrapResult, error) {
	if len(cfg.Argv) == 0 {
		return WrapResult{}, errors.New("wrap: no server command")
	}
	r := newRelay(ctx, cfg)
	cfg = r.cfg
	p, err := newServerPipes()
	if err != nil {
		return WrapResult{}, err
	}
	cmd, tree, res, err := r.startServer(p)
	if err != nil {
		p.close()
		return res, err
	}
	p.inR.Close()
	p.outW.Close()
	r.kill = func() { tree.Kill() }
	r.openPins()
	if _, err := r.sess.Fact(schemas.KindChildStarted, map[string]any{"pid": cmd.Process.Pid, "argv": cfg.Argv}); err != nil {
		r.fail(err)
	}

	s2c := newOutPath(cfg.Stdout, false)
	r.toHost = s2c
	// The channel opens with or without a policy: through it aegis
	// approvals sees the session, and aegis console reads its stream.
	if cfg.Approvals != nil {
		stop, err := cfg.Approvals(r.sess.ID(), r.handleApproval)
		if err != nil {
			r.fail(fmt.Errorf("serve approvals: %w", err))
		} else {
			defer stop()
		}
	}

	// Host -> server.
	c2s := newOutPath(p.inW, true)
	hostDone := make(chan struct{})
	go func() {
		r.readFrames(cfg.Stdin, schemas.KindFrameC2S, r.onHostFrame, c2s)
		c2s.close()
	}()
	go func() {
		defer close(hostDone)
		r.writeFrames(ctx, c2s)
		// Marked before the server can see EOF and exit, so that its
		// exit is never taken for one that came first.
		r.mu.Lock()
		r.hostClosed = true
		r.mu.Unlock()
		p.inW.Close()
	}()

	// Server -> host.
	serverOutDone := make(chan struct{})
	go func() {
		r.readFrames(p.outR, schemas.KindFrameS2C, r.onServerFramePins, s2c)
		s2c.close()
	}()
	go func() {
		defer close(serverOutDone)
		r.writeFrames(ctx, s2c)
	}()

	exited := make(chan struct{})
	go func() {
		tree.Wait()
		close(exited)
	}()
	sigDone := make(chan struct{})
	defer close(sigDone)
	go r.forwardSignals(tree, sigDone)
	graceDone := make(chan struct{})
	go func() {
		defer close(graceDone)
		r.shutdownGrace(tree, hostDone, exited)
	}()

	<-exited
	// The session ends with the server: what it left running gets SIGTERM,
	// and SIGKILL after the grace.
	treeDone := make(chan struct{})
	go func() {
		defer close(treeDone)
		if err := tree.Stop(cfg.Grace); err != nil {
			r.log.Error("end the server's processes", "err", err)
		}
	}()
	r.drainServer(p.outR, serverOutDone)
	<-graceDone
	<-treeDone
	return r.finish(ctx, cmd, res)
}

// fail records that recording broke: the server is killed so that nothing
// more runs unrecorded, and no further frame is relayed.
func (r *relay) fail(err error) {
	r.mu.Lock()
	first := r.failed == nil
	if first {
		r.failed = err
	}
	r.stopped = true
	r.mu.Unlock()
	if first {
		r.stopServer(serverEnd{reason: "recording failed (" + err.Error() + "); aegis stopped the server so that nothing more runs unrecorded",
			outcome: schemas.ReasonRecordingFailed})
	}
}

func (r *relay) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// readFrames splits src into lines, hands each to on (which records it and
// says what to wait for), and queues it for the writer. It ends at EOF, on a
// read error, on an oversized frame (failing the session), or when the
// relay stops.
func (r *relay) readFrames(src io.Reader, kind schemas.Kind, on func([]byte) (*events.Receipt, bool, bool), out *outPath) {
	br := bufio.NewReaderSize(src, 64<<10)
	for {
		line, err := readLine(br)
		if fe := (*FrameSizeError)(nil); errors.As(err, &fe) {
			who, outcome := "host", schemas.ReasonClientFrameTooLarge
			if kind == schemas.KindFrameS2C {
				who, outcome = "server", schemas.ReasonChildFrameTooLarge
			}
			why := fmt.Sprintf("the %s sent a frame of %s, larger than the 16 MiB frame limit; it cannot be recorded as one event, so aegis stopped the server and relayed nothing more", who, fe.Bytes())
			r.stopServer(serverEnd{reason: why, outcome: outcome, frameBytes: fe.Size, err: fe})
			return
		}
		if len(line) > 0 {
			if r.isStopped() {
				return
			}
			if kind == schemas.KindFrameS2C {
				r.s2cBusy.Store(true)
			}
			wait, relay, ok := on(line)
			if ok && relay {
				// Nothing buffered behind this frame: the reader may
				// commit and write it itself (see send).
				r.send(out, outFrame{data: line, wait: wait}, br.Buffered() > 0)
			}
			if kind == schemas.KindFrameC2S && r.readLater != nil {
				r.readDeferred() // the host reader's alone: see onHostFrame
			}
			if kind == schemas.KindFrameS2C {
				r.s2cFrames.Add(1)
				r.s2cBusy.Store(false)
			}
			if !ok {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine returns the next line including its '\n' (absent at EOF), in a
// slice of its own of exactly its length. A line longer than the reader's
// buffer is gathered in pieces and copied once into place: growing one
// slice by appending would allocate about four times the line on the way
// and hold up to a quarter more than it, for as long as the line is queued.
func readLine(br *bufio.Reader) ([]byte, error) {
	var pieces [][]byte
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if n+len(chunk) > MaxFrame+2 {
			if l := len(chunk); l > 0 && chunk[l-1] == '\n' {
				return nil, &FrameSizeError{Size: n + l - 1, Whole: true}
			}
			return nil, &FrameSizeError{Size: n + len(chunk)}
		}
		if err == bufio.ErrBufferFull {
			pieces = append(pieces, bytes.Clone(chunk))
			n += len(chunk)
			continue
		}
		buf := make([]byte, n+len(chunk))
		at := 0
		for _, p := range pieces {
			at += copy(buf[at:], p)
		}
		copy(buf[at:], chunk)
		if l := len(buf); l > 0 && buf[l-1] == '\n' && l-1 > MaxFrame {
			return nil, &FrameSizeError{Size: l - 1, Whole: true}
		}
		return buf, err
	}
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// outPath is one direction's output. Frames leave in the order they were
// sent. The sender writes a frame itself when nothing is queued ahead of
// it and either the frame waits for nothing or nothing more is waiting to
// be read behind it; otherwise frames go through ch to the writer, which
// waits for each frame's receipt before writing it. Writing in the sender
// saves goroutine hand-offs on the path of a lone call; handing off lets a
// reader with more frames buffered go on reading them while a commit is in
// flight, so that they share the next one.
//
// Backpressure: the bytes of the frames in ch, and the one the writer
// holds, stay under maxQueuedBytes (a frame that finds nothing queued is
// always taken): a sender over it waits for the writer, so its reader stops
// reading its side until the frames ahead of it are committed and written.
// The events store bounds the frames queued for a commit the same way (see
// events.Config.MaxQueueBytes), so what one direction holds in memory is
// bounded whether its frames wait for a commit or not.
type outPath struct {
	ch       chan outFrame
	dst      io.Writer
	toServer bool

	mu     sync.Mutex
	room   sync.Cond // on mu; signalled when the writer has written a frame
	queued int       // frames in ch or being written by the writer
	bytes  int       // their bytes
	broken bool      // dst failed; later frames are dropped
	closed bool      // ch is closed: its writer drains it and is done
}

// close closes the path's queue: the writer writes what it holds and
// ends, and a later send writes its frame itself. The host's path is fed
// from two readers (the server's frames and aegis's own refusals of host
// frames), so the server's end must not close it under a refusal.
func (p *outPath) close() {
	p.mu.Lock()
	p.closed = true
	close(p.ch)
	p.mu.Unlock()
}

// maxQueuedBytes bounds the bytes of the frames an outPath holds for its
// writer. It is at least one frame of MaxFrame and its terminator, so that
// a frame of any size passes.
const maxQueuedBytes = 2 * (MaxFrame + 2)

func newOutPath(dst io.Writer, toServer bool) *outPath {
	p := &outPath{ch: make(chan outFrame, 64), dst: dst, toServer: toServer}
	p.room.L = &p.mu
	return p
}

// send hands f to its direction, in order. more says that the sender has
// more frames to read at once.
func (r *relay) send(p *outPath, f outFrame, more bool) {
	p.mu.Lock()
	// direct writes f in this goroutine, p.mu held.
	direct := func() {
		for p.closed && p.queued > 0 {
			p.room.Wait() // the writer drains the queue; then this frame follows
		}
		if f.wait != nil {
			// With no commit in flight, Wait commits in this goroutine.
			// p.mu is held, so nothing overtakes the frame meanwhile.
			if _, err := f.wait.Wait(r.ctx); err != nil {
				r.fail(fmt.Errorf("event not acknowledged: %w", err))
			}
		}
		r.write(p, f.data)
		p.mu.Unlock()
	}
	if p.closed || (p.queued == 0 && (f.wait == nil || !more)) {
		direct()
		return
	}
	for p.queued > 0 && p.bytes+len(f.data) > maxQueuedBytes {
		p.room.Wait()
	}
	if p.closed { // closed while this frame waited for room
		direct()
		return
	}
	p.queued++
	p.bytes += len(f.data)
	p.mu.Unlock()
	p.ch <- f
}

// write writes one frame; p.mu is held.
func (r *relay) write(p *outPath, data []byte) {
	if p.broken || r.failedNow() {
		return
	}
	if _, err := p.dst.Write(data); err != nil {
		p.broken = true
		if !p.toServer {
			r.log.Warn("host stdout closed; dropping server output", "err", err)
		}
	}
}

// writeFrames waits for each queued frame's receipt and writes it. A
// receipt that fails stops the relay: the frame is not written.
func (r *relay) writeFrames(ctx context.Context, p *outPath) {
	for f := range p.ch {
		if f.wait != nil {
			if _, err := f.wait.Wait(ctx); err != nil {
				r.fail(fmt.Errorf("event not acknowledged: %w", err))
			}
		}
		p.mu.Lock()
		r.write(p, f.data)
		p.queued--
		p.bytes -= len(f.data)
		p.room.Broadcast()
		p.mu.Unlock()
	}
}

func (r *relay) failedNow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed != nil
}

// onHostFrame records a host frame and its tools/calls and says whether to
// relay it. The frame is read as every plausible server reads it
// (readHostFrame): line by line, and as one continuous JSON stream across
// frames. Without a policy every call is allowed: well-formed calls
// become pending and the frame waits for their intents; malformed calls
// get an intent and an outcome at once. With a policy every call is
// decided first (pass 1, nothing recorded); if any is refused the whole
// frame is refused (pass 2 records every call as refused, and the host gets
// the refusal frame once the outcomes are durable), else it is relayed as
// without a policy but with the real policy set hash and matched rule. In
// every mode a request that reuses the id of a tools/call in flight (or a
// tools/call that reuses any id in flight), under the exact reading or the
// loose one hosts match answers by, is refused: its answer could not be
// told from the other's.
func (r *relay) onHostFrame(line []byte) (*events.Receipt, bool, bool) {
	frame := rpc.FrameOf(line)
	if r.gate == nil && r.hs.Between() && len(line) <= maxUnreadLine && !rpc.MentionsToolsCall(frame) && r.deferRead(line) {
		// Not a call (FuzzClassify holds Classify to finding none in a
		// frame that names tools/call in no spelling), no value begun
		// before it, and no call in flight whose id a request of it could
		// reuse: it is relayed before it is read, and read right after
		// (readDeferred). Nothing that reading finds can change whether
		// or how it is relayed, and the record keeps its place in the
		// stream; only its requests must be known before their answers
		// are matched, which unread sees to. A relayed frame then costs
		// what it did before the relay read every frame.
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.readLater = line
		return nil, true, true
	}
	if e, ok := rpc.QuickLine(r.hs, frame); ok && r.admitPlain(e) {
		// Not a call: durable with the next commit, relayed without
		// waiting (as below).
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	cls, sc := rpc.ReadHostFrame(r.hs, line, r.gate != nil)
	now := r.cfg.Now()
	registered := r.markReuse(&cls)
	if len(cls.Calls) == 0 {
		if cls.Reused {
			fev, err := r.sess.FrameEvent(schemas.KindFrameC2S, frame)
			if err != nil {
				r.fail(err)
				return nil, false, false
			}
			return r.refuseFrame(cls, frame, fev, nil, schemas.WrapPassthroughPolicySetHash, now)
		}
		// Not a call: durable with the next commit, relayed without
		// waiting. The line is this frame's own copy, so the store may keep
		// it until that commit.
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.hs = sc.Next
		r.track(cls, now, registered)
		return nil, true, true
	}
	fev, err := r.sess.FrameEvent(schemas.KindFrameC2S, frame)
	if err != nil {
		r.fail(err)
		return nil, false, false
	}
	policyHash := schemas.WrapPassthroughPolicySetHash
	var verdicts []gated
	refused := cls.Reused
	if r.gate != nil {
		policyHash = r.gate.hash
		verdicts = make([]gated, len(cls.Calls))
		for i, c := range cls.Calls {
			// A call without a usable name cannot be asked about; one sent
			// as a notification (no id) is evaluated like any other.
			if !c.Named || c.Reused {
				verdicts[i].decision.Verdict = policy.Allow
				continue
			}
			verdicts[i] = r.gate.decideRequest(policy.Request{Tool: c.Tool, Session: r.sess.ID()}, c.Args, now)
			if err := recordLapsed(r.sess, verdicts[i].lapsed); err != nil {
				r.fail(err)
				return nil, false, false
			}
			verdicts[i].checkPin(r.pins, c.Tool)
			verdicts[i].checkPin(r.books["initialize"], schemas.PinKindInstructions)
			if verdicts[i].decision.Verdict != policy.Allow {
				refused = true
			}
		}
	}
	for _, c := range cls.Calls {
		if r.refusesItself(c) {
			hint := rpc.SelfRefusalHint(c)
			r.log.Warn("refused a tools/call that aegis cannot read as one call; "+hint, "reason", c.Malformed)
			refused = true
		}
	}
	if refused {
		if verdicts == nil {
			verdicts = make([]gated, len(cls.Calls))
			for i := range verdicts {
				verdicts[i].decision.Verdict = policy.Allow
			}
		}
		return r.refuseFrame(cls, frame, fev, verdicts, policyHash, now)
	}
	// The frame event rides with the first intent, so both share a commit.
	with := []schemas.Event{fev}
	var last *events.Receipt
	dg := digest(frame)
	for i, c := range cls.Calls {
		wc := schemas.WrapCall{CallID: r.sess.NextCallID(), ToolID: c.Tool, RequestDigest: dg, PolicySetHash: policyHash}
		var axes schemas.DecisionAxes
		if !c.Named {
			wc.PolicySetHash = schemas.WrapPassthroughPolicySetHash // no rule was asked
		} else if verdicts != nil {
			axes.MatchedRule = verdicts[i].decision.MatchedRule
			axes.ApprovalRef = verdicts[i].approval // spent by decide
		}
		if c.Named {
			axes.ToolPin = r.pins.pinOf(c.Tool)
		}
		if last, err = r.sess.Intent(wc.Intent(), with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
		r.mu.Lock()
		r.calls++
		if c.Malformed == "" {
			r.pending[c.Key] = &pendingCall{call: wc, start: now, axes: axes, id: newReqID(c.Key, c.ID)}
		}
		r.mu.Unlock()
		if c.Malformed != "" {
			o := wc.Malformed()
			if c.Malformed != schemas.ReasonMalformedCall {
				o.Policy = schemas.PolicyDenied(c.Malformed)
				o.Capability = schemas.CapabilityDenied(c.Malformed)
			}
			o.DecisionAxes = axes
			if last, err = r.sess.Outcome(o); err != nil {
				r.fail(err)
				return nil, false, false
			}
		}
	}
	r.hs = sc.Next
	r.track(cls, now, false)
	return last, true, true
}

// maxUnreadLine bounds the lines that onHostFrame relays before reading
// them: small enough that reading one later is cheap and can never
// overflow the stream reader.
const maxUnreadLine = 64 << 10

// deferRead makes line the unread line when no call is in flight, and
// reports whether it did.
func (r *relay) deferRead(line []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) > 0 {
		return false
	}
	r.unread = line
	return true
}

// readDeferred reads the line onHostFrame relayed unread, in the host
// reader once it is written, and registers its requests unless the server
// reader has.
func (r *relay) readDeferred() {
	line := r.readLater
	r.readLater = nil
	cls, sc := rpc.ReadHostFrame(r.hs, line, false)
	r.hs = sc.Next
	r.mu.Lock()
	if r.unread != nil {
		r.registerLocked(cls.Requests)
		r.unread = nil
	}
	r.mu.Unlock()
}

// readUnreadLocked reads and registers the requests of the unread line, if
// there is one, in the server reader: an answer may overtake the host
// reader's reading of the request it answers. r.mu is held.
func (r *relay) readUnreadLocked() {
	if r.unread == nil {
		return
	}
	cls, _ := rpc.ReadHostFrame(rpc.Stream{}, r.unread, false)
	r.registerLocked(cls.Requests)
	r.unread = nil
}

// admitPlain registers the request of a plain host envelope (quickLine),
// which is no tools/call and no cancellation, and reports whether it did:
// the frame is then relayed as it is. That is the common frame (a ping, a
// list request, a notification, an answer to the server), so it takes the
// lock once and allocates only what it keeps. It reports false, having
// changed nothing, when the frame needs the general reading: an id that is
// not a plain integer or string, or one that a call in flight uses under
// some reading (markReuse refuses it).
func (r *relay) admitPlain(e rpc.Envelope) bool {
	if !e.IsRequest || e.ID == nil {
		return true // nothing to answer: an answer or a notification
	}
	var buf [64]byte
	k, ok := rpc.AppendPlainIDKey(buf[:0], e.ID)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.others[string(k)]; o != nil && len(r.pending) == 0 {
		o.n++
		return true
	}
	key := string(k)
	id := newReqID(key, e.ID)
	if len(r.pending) > 0 && r.callWithLocked(id) != nil {
		return false
	}
	r.registerLocked([]rpc.Request{{Key: key, ID: e.ID}})
	return true
}

// markReuse marks every call of cls whose id is already in flight, or
// given twice in cls, under the exact or the loose reading (Call.Reused),
// and cls.Reused when a request of another method reuses a call's id. A
// frame without calls that reuses no id is relayed as it is, so its
// requests are registered at once, under the same lock (the common frame
// then takes it once); markReuse reports whether it did.
func (r *relay) markReuse(cls *rpc.Classification) (registered bool) {
	if len(cls.Calls) == 0 && len(cls.Requests) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var seen []reqID // ids of calls earlier in this frame
	for i := range cls.Calls {
		c := &cls.Calls[i]
		if c.Key == "" {
			continue
		}
		id := newReqID(c.Key, c.ID)
		why := ""
		if pc := r.callWithLocked(id); pc != nil {
			why = fmt.Sprintf("id %s is already in use by %s, which is in flight", c.ID, pc.call.CallID)
		} else if r.otherWithLocked(id) != nil {
			why = fmt.Sprintf("id %s is already in use by another request in flight", c.ID)
		} else {
			for _, s := range seen {
				if s.same(id) {
					why = fmt.Sprintf("id %s is given to more than one request in this frame", c.ID)
				}
			}
		}
		seen = append(seen, id)
		if why != "" {
			c.Reused, c.Malformed = true, "tools/call reuses an id: "+why
		}
	}
	for _, q := range cls.Requests {
		if len(r.pending) == 0 && len(seen) == 0 {
			break // no call in flight or in this frame to reuse
		}
		id := newReqID(q.Key, q.ID)
		if r.callWithLocked(id) != nil {
			cls.Reused = true
		}
		for _, s := range seen {
			if s.same(id) {
				cls.Reused = true
			}
		}
	}
	if len(cls.Calls) > 0 || cls.Reused {
		return false
	}
	r.registerLocked(cls.Requests)
	return true
}

// registerLocked registers requests as in flight; r.mu is held.
func (r *relay) registerLocked(requests []rpc.Request) {
	for _, q := range requests {
		if q.List != "" {
			r.lists.add(newReqID(q.Key, q.ID), q.List, q.Cursor)
		}
		if q.Init {
			r.lists.add(newReqID(q.Key, q.ID), "initialize", false)
			for _, b := range r.books {
				b.setCaps(q.Caps)
			}
		}
		if o := r.others[q.Key]; o != nil {
			o.n++
		} else {
			r.others[q.Key] = &otherRequest{id: newReqID(q.Key, q.ID), n: 1}
		}
	}
}

// callWithLocked returns the call in flight that id names to some reader.
func (r *relay) callWithLocked(id reqID) *pendingCall {
	if pc := r.pending[id.key]; pc != nil {
		return pc
	}
	if !id.looseOK {
		return nil
	}
	for _, pc := range r.pending {
		if pc.id.same(id) {
			return pc
		}
	}
	return nil
}

// otherWithLocked returns the other request in flight that id names.
func (r *relay) otherWithLocked(id reqID) *otherRequest {
	if o := r.others[id.key]; o != nil {
		return o
	}
	if !id.looseOK {
		return nil
	}
	for _, o := range r.others {
		if o.id.same(id) {
			return o
		}
	}
	return nil
}

// track registers the requests of a relayed host frame, unless markReuse
// has (registered), and records the host's cancellations of calls in
// flight.
func (r *relay) track(cls rpc.Classification, now time.Time, registered bool) {
	if (registered || len(cls.Requests) == 0) && len(cls.Cancels) == 0 {
		return
	}
	r.mu.Lock()
	if !registered {
		r.registerLocked(cls.Requests)
	}
	type cancel struct {
		pc    *pendingCall
		after time.Duration
		id    json.RawMessage
	}
	var cancels []cancel
	for _, raw := range cls.Cancels {
		key, _, _ := rpc.IDKey(raw)
		id := newReqID(key, raw)
		for _, pc := range r.pending {
			if pc.id.same(id) && pc.cancelled == 0 {
				pc.cancelled = max(now.Sub(pc.start), time.Nanosecond)
				cancels = append(cancels, cancel{pc, pc.cancelled, raw})
			}
		}
	}
	r.mu.Unlock()
	for _, c := range cancels {
		fact := map[string]any{"call_id": c.pc.call.CallID, "tool_id": c.pc.call.ToolID, "request_id": string(c.id), "after_ms": c.after.Milliseconds()}
		if _, err := r.sess.Fact(schemas.KindCallCancelled, fact); err != nil {
			r.fail(err)
			return
		}
	}
}

// refusesItself reports whether c is refused for what it is, not for what
// a policy says of it: an ambiguous call in every mode, since aegis cannot
// tell which call the server would run and so could neither decide it nor
// record truthfully what ran; an unreadable one under a policy, since no
// rule can decide it and a lenient server might still run it.
func (r *relay) refusesItself(c rpc.Call) bool {
	return c.Ambiguous || c.Reused || r.gate != nil && c.Unreadable
}

// refuseFrame records every call of a refused frame (intent and outcome
// back to back), registers pending approvals, and answers the host with
// the refusal frame once the outcomes are durable. The frame never reaches
// the server.
func (r *relay) refuseFrame(cls rpc.Classification, frame []byte, fev schemas.Event, verdicts []gated, policyHash string, now time.Time) (*events.Receipt, bool, bool) {
	// No call of the frame runs, so an approval a call took is not spent.
	for i, c := range cls.Calls {
		if verdicts[i].approval != "" {
			r.gate.giveBack(c.Tool, verdicts[i])
		}
	}
	with := []schemas.Event{fev}
	var last *events.Receipt
	var err error
	dg := digest(frame)
	type answer struct {
		id  json.RawMessage
		why refusal
	}
	var answers []answer
	for i, c := range cls.Calls {
		wc := schemas.WrapCall{CallID: r.sess.NextCallID(), ToolID: c.Tool, RequestDigest: dg, PolicySetHash: policyHash}
		d := verdicts[i].decision
		var o schemas.Outcome
		switch {
		case r.refusesItself(c):
			// Refused for itself, not as a sibling.
			wc.PolicySetHash = schemas.WrapPassthroughPolicySetHash
			o = wc.Malformed()
			o.Policy = schemas.PolicyDenied(c.Malformed)
			o.Capability = schemas.CapabilityDenied(c.Malformed)
		case !c.Named:
			wc.PolicySetHash = schemas.WrapPassthroughPolicySetHash
			o = wc.Malformed()
			if c.Malformed != schemas.ReasonMalformedCall {
				o.Policy = schemas.PolicyDenied(c.Malformed)
				o.Capability = schemas.CapabilityDenied(c.Malformed)
			}
			o.Execution = schemas.ExecutionHostDenied(schemas.ReasonSiblingRefused)
		case d.Verdict == policy.Allow:
			o = wc.SiblingRefused()
			o.DecisionAxes.MatchedRule = d.MatchedRule
		default:
			o = wc.Refused(d.Record(), d.MatchedRule)
			o.DecisionAxes.ToolPin = r.pins.pinOf(c.Tool)
		}
		if last, err = r.sess.Intent(wc.Intent(), with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
		if d.Verdict == policy.PendingApproval {
			p := PendingApproval{ApprovalID: d.ApprovalID, ToolID: c.Tool, RequestDigest: dg, ArgsDigest: verdicts[i].argsDigest,
				Session: r.sess.ID(), RequestedAt: now.UTC(), ExpiresAt: now.Add(r.gate.ttl).UTC(), MatchedRule: d.MatchedRule, PinDigest: verdicts[i].pinDigest}
			p.Args, p.ArgsBytes = argsPreview(canonicalArgs(c.Args))
			if _, err = r.sess.Fact(schemas.KindApprovalRequested, p); err != nil {
				r.fail(err)
				return nil, false, false
			}
			r.gate.request(p)
			r.armExpiry(p)
			r.prompt(p)
		}
		if last, err = r.sess.Outcome(o); err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.mu.Lock()
		r.calls++
		r.mu.Unlock()
		// A call refused for itself is answered even when its id, or the
		// frame it came in, cannot be read: with a null id, as JSON-RPC
		// answers a request whose id cannot be told. (An ambiguous
		// notification has no id to read, and gets no answer.)
		id := c.ID
		if len(id) == 0 && c.Unreadable && r.refusesItself(c) {
			id = json.RawMessage("null")
		}
		if len(id) > 0 && (r.refusesItself(c) || !bytes.Equal(id, []byte("null"))) {
			why := refusal{code: policy.RefusalCode(d), reason: d.Reason, hint: verdicts[i].hint}
			switch {
			case r.refusesItself(c):
				why.code, why.reason, why.hint = policy.CodeHostDenied, c.Malformed, rpc.SelfRefusalHint(c)
			case !c.Named || d.Verdict == policy.Allow:
				why.code = policy.CodeHostDenied
				why.reason = "another call in this batch was refused, and a batch is refused whole"
				why.hint = "send this call again without the refused ones"
				if verdicts[i].approval != "" {
					why.hint += "; approval " + verdicts[i].approval + " is kept for it"
				}
			case d.Verdict == policy.PendingApproval:
				why.approvalID = d.ApprovalID
				if why.reason == "" {
					why.reason = "a human must approve this call (rule " + d.MatchedRule + ")"
				}
			}
			answers = append(answers, answer{id, why})
		}
	}
	// Every other request of the frame is refused with it: it never
	// reaches the server, so only aegis can answer it.
	for _, q := range cls.Requests {
		why := refusal{code: policy.CodeHostDenied, reason: "another request in this frame was refused, and a frame is refused whole",
			hint: "send this request again without the refused ones"}
		if cls.Reused {
			why.reason, why.hint = "a request in this frame reuses the id of a tools/call in flight", "give each request an id of its own until it is answered"
		}
		answers = append(answers, answer{q.ID, why})
	}
	if cls.Reused {
		r.log.Warn("refused a request that reuses the id of a tools/call in flight; give each request an id of its own until it is answered")
	}
	var reply []byte
	switch {
	case len(answers) == 0:
		// Notifications only: nothing to answer.
	case cls.Shape == rpc.Batch:
		reply = append(reply, '[')
		for i, a := range answers {
			if i > 0 {
				reply = append(reply, ',')
			}
			reply = append(reply, refusalFrameOf(a.id, a.why)...)
		}
		reply = append(reply, ']')
	default:
		reply = refusalFrameOf(answers[0].id, answers[0].why)
	}
	if reply != nil {
		rev, err := r.sess.FrameEvent(schemas.KindFrameRefusal, reply)
		if err == nil {
			last, err = r.sess.Enqueue(rev)
		}
		if err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.send(r.toHost, outFrame{data: append(reply, '\n'), wait: last}, true)
	}
	return last, false, true
}

// onServerFrame records a server frame and the outcomes of the calls it
// answers; the frame waits for those outcomes. An answer is matched to the
// host's requests in flight the way hosts match it (exactly, or loosely:
// see LooseID), and closes every call that any reading matches. A frame
// with an answer that matches no request in flight (a forged answer, to a
// refused or unsent id, or a second answer) is recorded but not relayed.
// Answers are read line by line and as one continuous stream across
// frames (readServerFrame), as hosts read them.
func (r *relay) onServerFrame(line []byte) (*events.Receipt, bool, bool) {
	select {
	case r.rearm <- struct{}{}:
	default:
	}
	frame := rpc.FrameOf(line)
	if e, ok := rpc.QuickLine(r.ss, frame); ok && r.answerPlain(e) {
		// It answers no call in flight (as below): relayed without
		// waiting for its own commit.
		if err := r.sess.LazyFrame(schemas.KindFrameS2C, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	cls, sc := rpc.ReadServerFrame(r.ss, line)
	if sc.Overflow {
		r.log.Warn("the server left a JSON value unfinished for more than 16 MiB; aegis no longer follows it")
	}
	now := r.cfg.Now()
	var answered []*pendingCall
	if len(cls.Answers) > 0 {
		r.mu.Lock()
		r.readUnreadLocked()
		var matchedBuf [8]bool
		matched := matchedBuf[:0]
		if cls.Elems > len(matchedBuf) {
			matched = make([]bool, cls.Elems)
		} else {
			matched = matchedBuf[:cls.Elems]
		}
		var othersBuf [2]*otherRequest
		others := othersBuf[:0]
		for _, a := range cls.Answers {
			for a.Elem >= len(matched) {
				matched = append(matched, false) // never: Elem < elems
			}
			// The loose reading is parsed only when something in flight
			// is left for it to match: the common answer names a request
			// by its exact id, with no call in flight.
			var id reqID
			if len(r.pending) > 0 || r.others[a.Key] == nil {
				id = newReqID(a.Key, a.ID)
			} else {
				id = reqID{key: a.Key}
			}
			for _, pc := range r.pending {
				if pc.id.same(id) && !slices.Contains(answered, pc) {
					answered = append(answered, pc)
					matched[a.Elem] = true
				}
			}
			if o := r.otherWithLocked(id); o != nil {
				if !slices.Contains(others, o) {
					others = append(others, o)
				}
				matched[a.Elem] = true
			}
		}
		var unmatched *rpc.Answer
		for i, a := range cls.Answers {
			if !matched[a.Elem] {
				unmatched = &cls.Answers[i]
				break
			}
		}
		if unmatched != nil {
			r.mu.Unlock()
			id := string(unmatched.ID)
			if id == "" {
				id = "(none)"
			}
			return r.dropServerFrame(frame, "it answers id "+id+", which no request of the host's in flight has")
		}
		for _, pc := range answered {
			delete(r.pending, pc.id.key)
		}
		for _, o := range others {
			if o.n--; o.n <= 0 {
				delete(r.others, o.id.key)
			}
		}
		r.mu.Unlock()
	}
	// The frame event rides with the first outcome; a frame that answers
	// no pending call (a ping's answer, a notification, a request to the
	// host) is relayed without waiting for its own commit.
	r.ss = sc.Next
	if len(answered) == 0 {
		if err := r.sess.LazyFrame(schemas.KindFrameS2C, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	sortPending(answered)
	fev, err := r.sess.FrameEvent(schemas.KindFrameS2C, frame)
	if err != nil {
		r.fail(err)
		return nil, false, false
	}
	with := []schemas.Event{fev}
	dg := digest(frame)
	var last *events.Receipt
	for _, pc := range answered {
		wall := uint64(now.Sub(pc.start).Milliseconds())
		o := pc.call.Answered(dg, wall)
		o.DecisionAxes = pc.axes
		if last, err = r.sess.Outcome(o, with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
	}
	return last, true, true
}

// answerPlain closes the host request that a plain server envelope
// (quickLine) answers and reports whether the frame is then relayed
// without waiting: it is a request or notification of the server's, or
// the answer to a request of the host's other than a tools/call, named by
// its exact id while no call is in flight. That is the common frame, so it
// takes the lock once and allocates nothing. It reports false for any
// other frame, which the general reading then matches (having read the
// unread host line, if any, as that reading would).
func (r *relay) answerPlain(e rpc.Envelope) bool {
	if !e.IsAnswer {
		return true
	}
	var buf [64]byte
	k, ok := rpc.AppendPlainIDKey(buf[:0], e.ID)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readUnreadLocked()
	o := r.others[string(k)]
	if o == nil || len(r.pending) > 0 {
		return false
	}
	if o.n--; o.n <= 0 {
		delete(r.others, o.id.key)
	}
	return true
}

// dropServerFrame records a server frame that is not relayed, and why, and
// warns on stderr.
func (r *relay) dropServerFrame(frame []byte, why string) (*events.Receipt, bool, bool) {
	if _, err := r.sess.Frame(schemas.KindFrameS2C, frame); err != nil {
		r.fail(err)
		return nil, false, false
	}
	if _, err := r.sess.Fact(schemas.KindFrameDropped, map[string]string{"direction": "s2c", "frame_digest": digest(frame), "reason": why}); err != nil {
		r.fail(err)
		return nil, false, false
	}
	r.log.Warn("dropped a server frame instead of relaying it to the host: "+why+"; the host never asked for it, so the server is answering calls it was not sent (check the server, and the frame.dropped event in aegis replay)", "frame_digest", digest(frame))
	return nil, false, true
}

// settlePending records an outcome for every call still pending and waits
// until those outcomes are durable. A call the host cancelled says so.
func (r *relay) settlePending(outcome func(schemas.WrapCall) schemas.Outcome) {
	r.mu.Lock()
	calls := make([]*pendingCall, 0, len(r.pending))
	for k, pc := range r.pending {
		calls = append(calls, pc)
		delete(r.pending, k)
	}
	r.mu.Unlock()
	// Settle in call order so the record reads naturally.
	sortPending(calls)
	var last *events.Receipt
	now := r.cfg.Now()
	for _, pc := range calls {
		o := outcome(pc.call)
		if pc.cancelled > 0 {
			o = pc.call.Cancelled(pc.cancelled, uint64(now.Sub(pc.start).Milliseconds()))
			o.DecisionAxes = pc.axes
		}
		rc, err := r.sess.Outcome(o)
		if err != nil {
			r.fail(err)
			return
		}
		last = rc
	}
	if last != nil {
		if _, err := last.Wait(context.Background()); err != nil {
			r.fail(err)
		}
	}
}
