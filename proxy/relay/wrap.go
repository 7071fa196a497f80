package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// DefaultGrace is how long the server may go on answering after the host
// closed its stdin; every server frame re-arms it.
const DefaultGrace = 5 * time.Second

// Config runs one recorded relay between a host and a server process.
type Config struct {
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
	Approvals func(session string, handle func(proxy.ApprovalOp) proxy.ApprovalReply) (stop func(), err error)
	// Approvers, when set, are the only ones who can approve: an approve
	// must carry a signature by one of them over the approval id, the
	// session, the tool and the arguments' digest, and the decision line
	// names the approver's key id. A deny needs none (it fails closed).
	// Nil keeps approvals as they were: any process that can reach the
	// approval channel can approve.
	Approvers *schemas.Approvers
	// Prompt receives approval prompts (aegis's stderr).
	Prompt io.Writer
	// ApprovalLink, when set, makes the link that opens a pending
	// approval in aegis console, or says why there is none (no console
	// runs): a host that declared URL elicitation is shown the approval
	// through it (approvals.go). Nil: every host gets the plain refusal.
	ApprovalLink func(proxy.PendingApproval) (link, whyNot string)
}

// Result is how a relay ended.
type Result struct {
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
	id    proxy.ReqID
	// cancelled is how long after start the host cancelled the call
	// (notifications/cancelled); 0 while it has not.
	cancelled time.Duration
}

// otherRequest is a host request of another method than tools/call that
// the server has not answered yet; n counts requests that reuse its id.
type otherRequest struct {
	id proxy.ReqID
	n  int
}

type outFrame struct {
	data []byte
	wait *events.Receipt
}

type relay struct {
	cfg  Config
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

	gate   *proxy.Gate // nil without a policy
	toHost *outPath    // where refusal frames go
	// hostURL is set, on mu, while the host's latest initialize declared
	// capabilities.elicitation.url; el are the approvals shown to it so.
	hostURL bool
	el      proxy.Elicits

	pins *proxy.PinBook // the server's tool pins (pins.go)
	// books are the server's pins by the method whose answer they read:
	// tools, prompts, resource templates and (initialize) instructions.
	books map[string]*proxy.PinBook
	lists *proxy.ListWatch // the host's tools/list requests in flight

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
func Wrap(ctx context.Context, cfg Config) (Result, error) {
	if len(cfg.Argv) == 0 {
		return Result{}, errors.New("wrap: no server command")
	}
	r := newRelay(ctx, cfg)
	cfg = r.cfg
	p, err := newServerPipes()
	if err != nil {
		return Result{}, err
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
		if n+len(chunk) > proxy.MaxFrame+2 {
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
		if l := len(buf); l > 0 && buf[l-1] == '\n' && l-1 > proxy.MaxFrame {
			return nil, &FrameSizeError{Size: l - 1, Whole: true}
		}
		return buf, err
	}
}
