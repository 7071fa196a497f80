package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// MaxFrame is the largest frame the relay carries, in bytes, without its
// line terminator.
const MaxFrame = 16 << 20

// DefaultGrace is how long the server may go on answering after the host
// closed its stdin; every server frame re-arms it.
const DefaultGrace = 5 * time.Second

// ErrFrameTooLarge ends a session whose host or server sent a frame longer
// than [MaxFrame]: it could not be recorded as one event, and relaying it
// unrecorded could carry a tools/call past the record.
var ErrFrameTooLarge = errors.New("frame larger than 16 MiB")

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
	// Signals are forwarded to the server; a second SIGINT or SIGTERM
	// kills it.
	Signals <-chan os.Signal
	// Grace is the shutdown grace after the host closes stdin (default 5s).
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
	// Prompt receives approval prompts (aegis's stderr).
	Prompt io.Writer
}

// WrapResult is how a relay ended.
type WrapResult struct {
	// ExitCode is the server's exit status: its code, or 128+signal.
	ExitCode int
	// ServerExitedFirst is set when the server ended while the host was
	// still connected.
	ServerExitedFirst bool
	// Calls counts the tools/call requests recorded.
	Calls int
	// Session is the audit session Wrap opened (nil if it never got that
	// far); the caller closes it.
	Session *projector.Session
	// Confinement is the enforcement fact, when the server was confined.
	Confinement *sandbox.Fact
}

// ConfineError reports a confinement the helper refused to apply (the
// server never ran; nothing was enforced) or could not set up.
type ConfineError struct{ Err error }

func (e *ConfineError) Error() string { return "confine server: " + e.Err.Error() }
func (e *ConfineError) Unwrap() error { return e.Err }

// OpenError reports an audit session that could not be opened; the server
// never ran.
type OpenError struct{ Err error }

func (e *OpenError) Error() string { return e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

type pendingCall struct {
	call  schemas.WrapCall
	start time.Time
	axes  schemas.DecisionAxes // matched rule and approval, under a policy
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
	pending    map[string]*pendingCall
	stopped    bool // no more calls are registered or relayed
	hostClosed bool
	failed     error
	calls      int

	rearm chan struct{}
	kill  func()

	gate   *gate    // nil without a policy
	toHost *outPath // where refusal frames go

	s2cFrames atomic.Int64 // server frames read so far
	s2cBusy   atomic.Bool  // the server reader is handling a frame
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
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &relay{cfg: cfg, log: cfg.Logger, ctx: ctx, pending: map[string]*pendingCall{}, rearm: make(chan struct{}, 1)}
	if cfg.Policy != nil {
		r.gate = newGate(cfg.Policy, cfg.ApprovalTTL)
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		return WrapResult{}, fmt.Errorf("wrap: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return WrapResult{}, fmt.Errorf("wrap: pipe: %w", err)
	}
	closePipes := func() {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
	}
	var cmd *exec.Cmd
	var res WrapResult
	if cfg.Confine != nil {
		// The helper starts now but runs nothing of the server's until the
		// fact is signed into the open line and durable.
		child, err := sandbox.Command(ctx, cfg.Self, *cfg.Confine, cfg.Argv)
		if err != nil {
			closePipes()
			return WrapResult{ExitCode: 1}, &ConfineError{Err: err}
		}
		cmd = child.Cmd
		cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = inR, outW, cfg.Stderr, cfg.Env
		fact, err := child.Start()
		if err != nil {
			closePipes()
			return WrapResult{ExitCode: 1}, &ConfineError{Err: err}
		}
		res.Confinement = &fact
		sess, err := cfg.Open(&fact)
		if err != nil {
			child.Abort()
			closePipes()
			return WrapResult{ExitCode: 1}, &OpenError{Err: err}
		}
		r.sess, res.Session = sess, sess
		if err := child.Go(); err != nil {
			cmd.Wait()
			closePipes()
			res.ExitCode = 127
			return res, &StartError{Argv: cfg.Argv, Err: err}
		}
	} else {
		sess, err := cfg.Open(nil)
		if err != nil {
			closePipes()
			return WrapResult{ExitCode: 1}, &OpenError{Err: err}
		}
		r.sess, res.Session = sess, sess
		cmd = exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = inR, outW, cfg.Stderr, cfg.Env
		if err := cmd.Start(); err != nil {
			closePipes()
			res.ExitCode = 127
			return res, &StartError{Argv: cfg.Argv, Err: err}
		}
	}
	inR.Close()
	outW.Close()
	r.kill = func() { cmd.Process.Kill() }
	if _, err := r.sess.Fact(schemas.KindChildStarted, map[string]any{"pid": cmd.Process.Pid, "argv": cfg.Argv}); err != nil {
		r.fail(err)
	}

	s2c := newOutPath(cfg.Stdout, false)
	r.toHost = s2c
	if r.gate != nil && cfg.Approvals != nil {
		stop, err := cfg.Approvals(r.sess.ID(), r.handleApproval)
		if err != nil {
			r.fail(fmt.Errorf("serve approvals: %w", err))
		} else {
			defer stop()
		}
	}

	// Host -> server.
	c2s := newOutPath(inW, true)
	hostDone := make(chan struct{})
	go func() {
		r.readFrames(cfg.Stdin, schemas.KindFrameC2S, r.onHostFrame, c2s)
		close(c2s.ch)
	}()
	go func() {
		defer close(hostDone)
		r.writeFrames(ctx, c2s)
		// Marked before the server can see EOF and exit, so that its
		// exit is never taken for one that came first.
		r.mu.Lock()
		r.hostClosed = true
		r.mu.Unlock()
		inW.Close()
	}()

	// Server -> host.
	serverOutDone := make(chan struct{})
	go func() {
		r.readFrames(outR, schemas.KindFrameS2C, r.onServerFrame, s2c)
		close(s2c.ch)
	}()
	go func() {
		defer close(serverOutDone)
		r.writeFrames(ctx, s2c)
	}()

	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()

	// Forward signals; the second SIGINT/SIGTERM kills.
	sigDone := make(chan struct{})
	defer close(sigDone)
	go func() {
		n := 0
		for {
			select {
			case <-sigDone:
				return
			case sig, ok := <-cfg.Signals:
				if !ok {
					return
				}
				n++
				if n > 1 {
					cmd.Process.Kill()
				} else {
					cmd.Process.Signal(sig)
				}
			}
		}
	}()

	// Shutdown grace: once the host has closed stdin, the server has Grace
	// (re-armed by each of its frames) to finish; then it is terminated.
	graceDone := make(chan struct{})
	go func() {
		defer close(graceDone)
		select {
		case <-hostDone:
		case <-exited:
			return
		}
		t := time.NewTimer(cfg.Grace)
		defer t.Stop()
		for {
			select {
			case <-exited:
				return
			case <-r.rearm:
				t.Reset(cfg.Grace)
			case <-t.C:
				r.settlePending(schemas.WrapCall.ClientClosed)
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(2 * time.Second):
					cmd.Process.Kill()
				}
				return
			}
		}
	}()

	<-exited
	// The server is gone. Read what it wrote until EOF; a grandchild may
	// hold the pipe open, so stop once the reader has been idle (blocked,
	// with no new frame) for two seconds. A reader busy recording a large
	// frame is not idle.
	last := r.s2cFrames.Load()
	for done := false; !done; {
		select {
		case <-serverOutDone:
			done = true
		case <-time.After(2 * time.Second):
			if n := r.s2cFrames.Load(); n == last && !r.s2cBusy.Load() {
				outR.Close()
				<-serverOutDone
				done = true
			} else {
				last = n
			}
		}
	}
	outR.Close()
	<-graceDone

	r.mu.Lock()
	hostWasOpen := !r.hostClosed
	r.stopped = true
	r.mu.Unlock()
	r.settlePending(schemas.WrapCall.ChildExited)

	res.ExitCode, res.ServerExitedFirst = exitCode(cmd.ProcessState), hostWasOpen
	r.mu.Lock()
	res.Calls = r.calls
	failed := r.failed
	r.mu.Unlock()
	exit := map[string]any{"code": res.ExitCode, "server_exited_first": hostWasOpen}
	// Once recording failed, the store refuses the exit fact with the same
	// failure: it is said once.
	if rc, err := r.sess.Fact(schemas.KindChildExited, exit); err != nil {
		failed = cmp.Or(failed, err)
	} else if _, err := rc.Wait(ctx); err != nil {
		failed = cmp.Or(failed, err)
	}
	if failed != nil {
		return res, fmt.Errorf("recording failed; the server was stopped: %w", failed)
	}
	return res, nil
}

// StartError reports a server that could not be started.
type StartError struct {
	Argv []string
	Err  error
}

func (e *StartError) Error() string { return fmt.Sprintf("start server %q: %v", e.Argv[0], e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
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
		r.log.Error("recording failed; stopping the server", "err", err)
		if r.kill != nil {
			r.kill()
		}
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
		if errors.Is(err, ErrFrameTooLarge) {
			dir := "host"
			if kind == schemas.KindFrameS2C {
				dir = "server"
			}
			r.fail(fmt.Errorf("the %s sent a frame larger than 16 MiB; it cannot be recorded, so the session ends: %w", dir, ErrFrameTooLarge))
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
			return nil, ErrFrameTooLarge
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
			return nil, ErrFrameTooLarge
		}
		return buf, err
	}
}

// frameOf strips the line terminator: the frame is the bytes before '\n'
// ('\r' included), as digested and recorded.
func frameOf(line []byte) []byte {
	return bytes.TrimSuffix(line, []byte{'\n'})
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
	if p.queued == 0 && (f.wait == nil || !more) {
		if f.wait != nil {
			// With no commit in flight, Wait commits in this goroutine.
			// p.mu is held, so nothing overtakes the frame meanwhile.
			if _, err := f.wait.Wait(r.ctx); err != nil {
				r.fail(fmt.Errorf("event not acknowledged: %w", err))
			}
		}
		r.write(p, f.data)
		p.mu.Unlock()
		return
	}
	for p.queued > 0 && p.bytes+len(f.data) > maxQueuedBytes {
		p.room.Wait()
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
// relay it. Without a policy every call is allowed: well-formed calls
// become pending and the frame waits for their intents; malformed calls
// get an intent and an outcome at once. With a policy every call is
// decided first (pass 1, nothing recorded); if any is refused the whole
// frame is refused (pass 2 records every call as refused, and the host gets
// the refusal frame once the outcomes are durable), else it is relayed as
// without a policy but with the real policy set hash and matched rule.
func (r *relay) onHostFrame(line []byte) (*events.Receipt, bool, bool) {
	frame := frameOf(line)
	// A frame that does not name tools/call in any spelling carries no
	// call (FuzzClassify holds Classify to that), so most frames skip the
	// JSON decoding.
	var cls Classification
	if mentionsToolsCall(frame) {
		cls = Classify(frame)
	}
	if len(cls.Calls) == 0 {
		// Not a call: durable with the next commit, relayed without
		// waiting. The line is this frame's own copy, so the store may keep
		// it until that commit.
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	fev, err := r.sess.FrameEvent(schemas.KindFrameC2S, frame)
	if err != nil {
		r.fail(err)
		return nil, false, false
	}
	now := r.cfg.Now()
	policyHash := schemas.WrapPassthroughPolicySetHash
	var verdicts []gated
	refused := false
	if r.gate != nil {
		policyHash = r.gate.hash
		verdicts = make([]gated, len(cls.Calls))
		for i, c := range cls.Calls {
			// A call without a usable name cannot be asked about; one sent
			// as a notification (no id) is evaluated like any other.
			if !c.Named {
				verdicts[i].decision.Verdict = policy.Allow
				continue
			}
			verdicts[i] = r.gate.decide(c.Tool, c.Args, now)
			if verdicts[i].decision.Verdict != policy.Allow {
				refused = true
			}
		}
	}
	for _, c := range cls.Calls {
		if r.refusesItself(c) {
			hint := "send it as one JSON-RPC object on one line"
			if c.Ambiguous {
				hint = "send each member once, with its name in lower case"
			}
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
			axes.ApprovalRef = verdicts[i].approval
			r.gate.take(c.Tool, verdicts[i])
		}
		if last, err = r.sess.Intent(wc.Intent(), with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
		r.mu.Lock()
		r.calls++
		var superseded *pendingCall
		if c.Malformed == "" {
			superseded = r.pending[c.Key]
			r.pending[c.Key] = &pendingCall{call: wc, start: now, axes: axes}
		}
		r.mu.Unlock()
		if superseded != nil {
			o := superseded.call.Seed()
			o.Execution = schemas.ExecutionHostDenied("superseded: a later tools/call reused this id before an answer came")
			if last, err = r.sess.Outcome(o); err != nil {
				r.fail(err)
				return nil, false, false
			}
		}
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
	return last, true, true
}

// refusesItself reports whether c is refused for what it is, not for what
// a policy says of it: an ambiguous call in every mode, since aegis cannot
// tell which call the server would run and so could neither decide it nor
// record truthfully what ran; an unreadable one under a policy, since no
// rule can decide it and a lenient server might still run it.
func (r *relay) refusesItself(c Call) bool {
	return c.Ambiguous || r.gate != nil && c.Unreadable
}

// refuseFrame records every call of a refused frame (intent and outcome
// back to back), registers pending approvals, and answers the host with
// the refusal frame once the outcomes are durable. The frame never reaches
// the server.
func (r *relay) refuseFrame(cls Classification, frame []byte, fev schemas.Event, verdicts []gated, policyHash string, now time.Time) (*events.Receipt, bool, bool) {
	with := []schemas.Event{fev}
	var last *events.Receipt
	var err error
	dg := digest(frame)
	type answer struct {
		id   json.RawMessage
		code string
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
		}
		if last, err = r.sess.Intent(wc.Intent(), with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
		if d.Verdict == policy.PendingApproval {
			p := PendingApproval{ApprovalID: d.ApprovalID, ToolID: c.Tool, RequestDigest: dg, ArgsDigest: verdicts[i].argsDigest,
				Session: r.sess.ID(), RequestedAt: now.UTC(), ExpiresAt: now.Add(r.gate.ttl).UTC()}
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
			code := policy.RefusalCode(d)
			if !c.Named {
				code = policy.CodeHostDenied
			}
			answers = append(answers, answer{id, code})
		}
	}
	var reply []byte
	switch {
	case len(answers) == 0:
		// Notifications only: nothing to answer.
	case cls.Shape == Batch:
		reply = append(reply, '[')
		for i, a := range answers {
			if i > 0 {
				reply = append(reply, ',')
			}
			reply = append(reply, refusalFrame(a.id, a.code)...)
		}
		reply = append(reply, ']')
	default:
		reply = refusalFrame(answers[0].id, answers[0].code)
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

// prompt tells the operator how to act on a pending approval.
func (r *relay) prompt(p PendingApproval) {
	if r.cfg.Prompt == nil {
		return
	}
	fmt.Fprintf(r.cfg.Prompt, "aegis: approval needed: tools/call %q was refused pending approval %s (expires %s)\naegis: hint: to let it through once, run: aegis approve %s   (or: aegis deny %s)\n",
		p.ToolID, p.ApprovalID, p.ExpiresAt.Local().Format(time.Kitchen), p.ApprovalID, p.ApprovalID)
}

// armExpiry records the approval's expiry when its time runs out.
func (r *relay) armExpiry(p PendingApproval) {
	time.AfterFunc(p.ExpiresAt.Sub(r.cfg.Now()), func() {
		if _, ok := r.gate.expire(p.ApprovalID); !ok || r.isStopped() {
			return
		}
		if _, err := r.sess.Fact(schemas.KindApprovalExpired, map[string]string{"approval_id": p.ApprovalID}); err != nil {
			r.log.Warn("record approval expiry", "err", err)
		}
	})
}

// onServerFrame records a server frame and the outcomes of the calls it
// answers; the frame waits for those outcomes.
func (r *relay) onServerFrame(line []byte) (*events.Receipt, bool, bool) {
	select {
	case r.rearm <- struct{}{}:
	default:
	}
	frame := frameOf(line)
	// Only an answer to a pending call changes what is recorded; with
	// none pending (a call is pending before it reaches the server) there
	// is nothing to look for.
	r.mu.Lock()
	waiting := len(r.pending) > 0
	r.mu.Unlock()
	var cls Classification
	if waiting {
		cls = Classify(frame)
	}
	// The frame event rides with the first outcome; a frame that answers
	// no pending call (a ping's answer, a notification, a request to the
	// host) is relayed without waiting for its own commit.
	var with []schemas.Event
	var last *events.Receipt
	var dg string
	now := r.cfg.Now()
	for _, a := range cls.Answers {
		r.mu.Lock()
		pc := r.pending[a.Key]
		delete(r.pending, a.Key)
		r.mu.Unlock()
		if pc == nil {
			continue
		}
		if dg == "" {
			fev, err := r.sess.FrameEvent(schemas.KindFrameS2C, frame)
			if err != nil {
				r.fail(err)
				return nil, false, false
			}
			with = []schemas.Event{fev}
			dg = digest(frame)
		}
		wall := uint64(now.Sub(pc.start).Milliseconds())
		o := pc.call.Answered(dg, wall)
		o.DecisionAxes = pc.axes
		var err error
		if last, err = r.sess.Outcome(o, with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
	}
	if dg == "" {
		if err := r.sess.LazyFrame(schemas.KindFrameS2C, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
	}
	return last, true, true
}

// settlePending records an outcome for every call still pending and waits
// until those outcomes are durable.
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
	for _, pc := range calls {
		rc, err := r.sess.Outcome(outcome(pc.call))
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

// handleApproval acts on a request from aegis approve, deny or approvals.
// Every decision is a signed decision line, durable before the reply; a
// request that cannot be honoured (unknown, already decided, expired) is
// refused with the reason and recorded as approval.refused.
func (r *relay) handleApproval(op ApprovalOp) ApprovalReply {
	if op.Op != "list" && r.isStopped() {
		return ApprovalReply{Error: "the session is ending"}
	}
	return decideApproval(r.sess, r.gate, op, r.cfg.Now(), r.fail)
}

// decideApproval acts on an approval request against a gate: list, or
// approve/deny a pending approval with a signed decision line durable before
// the reply. A request that cannot be honoured is refused with the reason
// and recorded as approval.refused. fail is called if recording fails.
func decideApproval(sess *projector.Session, g *gate, op ApprovalOp, now time.Time, fail func(error)) ApprovalReply {
	switch op.Op {
	case "list":
		return ApprovalReply{OK: true, Pending: g.list(now)}
	case "approve", "deny":
	default:
		return ApprovalReply{Error: fmt.Sprintf("unknown request %q", op.Op)}
	}
	p, why := g.resolve(op.ApprovalID, now)
	if p == nil {
		if _, err := sess.Fact(schemas.KindApprovalRefused, map[string]string{"approval_id": op.ApprovalID, "op": op.Op, "by": op.By, "reason": why}); err != nil {
			fail(err)
		}
		return ApprovalReply{Error: why}
	}
	d := schemas.Decision{ApprovalID: p.ApprovalID}
	msg := ""
	if op.Op == "approve" {
		d.Verdict = schemas.Approved(schemas.ApprovalScope{ToolID: p.ToolID})
		msg = fmt.Sprintf("approved %s: the next tools/call %q with the same arguments goes through once", p.ApprovalID, p.ToolID)
	} else {
		reason := op.Reason
		if reason == "" {
			reason = "denied by operator"
		}
		d.Verdict = schemas.Rejected(reason)
		msg = fmt.Sprintf("denied %s (%s)", p.ApprovalID, reason)
	}
	rc, err := sess.Decision(d, map[string]string{"approval_id": p.ApprovalID, "op": op.Op, "by": op.By})
	if err == nil {
		_, err = rc.Wait(context.Background())
	}
	if err != nil {
		fail(err)
		return ApprovalReply{Error: "could not record the decision: " + err.Error()}
	}
	if op.Op == "approve" {
		g.grant(p)
	} else {
		g.denied(p.ApprovalID)
	}
	return ApprovalReply{OK: true, Message: msg}
}
