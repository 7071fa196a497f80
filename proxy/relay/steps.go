package relay

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// The steps of [Wrap], in the order it takes them: a relay with its
// defaults, the pipes to the server, the server started (confined or not)
// with the session opened in between, the pins, then the relay's loops,
// the signals passed on, the grace after the host leaves, the drain of
// what the server wrote last, and the exit recorded.

// newRelay is the relay for cfg, with cfg's defaults filled in.
func newRelay(ctx context.Context, cfg Config) *relay {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &relay{cfg: cfg, log: cfg.Logger, ctx: ctx, pending: map[string]*pendingCall{}, others: map[string]*otherRequest{}, rearm: make(chan struct{}, 1)}
	if cfg.Policy != nil {
		r.gate = proxy.NewGate(cfg.Policy, cfg.ApprovalTTL)
	}
	return r
}

// serverPipes are the server's stdin (inR its end, inW aegis's) and stdout
// (outR aegis's end, outW its).
type serverPipes struct {
	inR, inW, outR, outW *os.File
}

func newServerPipes() (serverPipes, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return serverPipes{}, fmt.Errorf("wrap: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return serverPipes{}, fmt.Errorf("wrap: pipe: %w", err)
	}
	return serverPipes{inR, inW, outR, outW}, nil
}

func (p serverPipes) close() {
	p.inR.Close()
	p.inW.Close()
	p.outR.Close()
	p.outW.Close()
}

// startServer opens the session and starts the server on p: confined, the
// helper starts first and runs nothing of the server's until the
// confinement fact is signed into the open line and durable; otherwise
// the session opens before the server starts. On an error, res says the
// exit code to give and p is the caller's to close.
func (r *relay) startServer(p serverPipes) (cmd *exec.Cmd, tree *sandbox.Tree, res Result, err error) {
	cfg := r.cfg
	if cfg.Confine != nil {
		child, err := sandbox.Command(r.ctx, cfg.Self, *cfg.Confine, cfg.Argv)
		if err != nil {
			return nil, nil, Result{ExitCode: 1}, &ConfineError{Err: err}
		}
		cmd = child.Cmd
		cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = p.inR, p.outW, cfg.Stderr, cfg.Env
		fact, err := child.Start()
		if err != nil {
			return nil, nil, Result{ExitCode: 1}, &ConfineError{Err: err}
		}
		res.Confinement = &fact
		sess, err := cfg.Open(&fact)
		if err != nil {
			child.Abort()
			return nil, nil, Result{ExitCode: 1}, &proxy.OpenError{Err: err}
		}
		r.sess, res.Session = sess, sess
		if err := child.Go(); err != nil {
			cmd.Wait()
			res.ExitCode = 127
			return nil, nil, res, &StartError{Argv: cfg.Argv, Err: err}
		}
		return cmd, child.Tree(), res, nil
	}
	sess, err := cfg.Open(nil)
	if err != nil {
		return nil, nil, Result{ExitCode: 1}, &proxy.OpenError{Err: err}
	}
	r.sess, res.Session = sess, sess
	cmd = exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = p.inR, p.outW, cfg.Stderr, cfg.Env
	if tree, err = sandbox.StartTree(cmd); err != nil {
		res.ExitCode = 127
		return nil, nil, res, &StartError{Argv: cfg.Argv, Err: err}
	}
	return cmd, tree, res, nil
}

// openPins sets up the server's pin books (tools, prompts, resource
// templates, instructions) and numbers the gate's approvals.
func (r *relay) openPins() {
	cfg := r.cfg
	ids := policy.NewApprovalIDs(r.sess.Seq())
	key := schemas.WrapServerKey(cfg.Argv)
	r.pins, r.lists = proxy.NewPinBook(r.sess, ids, key, cfg.Policy), &proxy.ListWatch{}
	r.books = map[string]*proxy.PinBook{"tools/list": r.pins}
	for method, kind := range map[string]string{"prompts/list": schemas.PinKindPrompt, "resources/templates/list": schemas.PinKindResourceTemplate, "initialize": schemas.PinKindInstructions} {
		// Wrap refuses only tools/call: changed prompts and templates are
		// recorded; changed instructions hold every call (checkPin).
		enforce := cfg.Policy != nil && kind == schemas.PinKindInstructions
		mode := policy.ToolChangePendingApproval
		if cfg.Policy != nil {
			mode = cfg.Policy.OnToolChange()
		}
		r.books[method] = proxy.NewKindBook(r.sess, ids, key, kind, enforce, mode)
	}
	if r.gate != nil {
		r.gate.Pins = proxy.PinBooks{r.pins, r.books["initialize"]}
		r.gate.Number(ids)
	}
}

// forwardSignals passes the signals aegis receives on to the server's
// tree, until done; the second SIGINT/SIGTERM kills.
func (r *relay) forwardSignals(tree *sandbox.Tree, done <-chan struct{}) {
	n := 0
	for {
		select {
		case <-done:
			return
		case sig, ok := <-r.cfg.Signals:
			if !ok {
				return
			}
			n++
			if n > 1 {
				r.stopServer(serverEnd{reason: "aegis was told to stop a second time (" + signalName(sig) + ") and killed the server",
					outcome: schemas.ReasonStoppedBySignal})
			} else {
				r.ended(signalName(sig)+" (passed on by aegis)", "aegis received "+signalName(sig)+" and passed it on to the server")
				tree.Signal(sig)
			}
		}
	}
}

// shutdownGrace gives the server, once the host has closed stdin, Grace
// (re-armed by each of its frames) to finish; then it is terminated. It
// returns once the server has exited or been ended.
func (r *relay) shutdownGrace(tree *sandbox.Tree, hostDone, exited <-chan struct{}) {
	select {
	case <-hostDone:
	case <-exited:
		return
	}
	t := time.NewTimer(r.cfg.Grace)
	defer t.Stop()
	for {
		select {
		case <-exited:
			return
		case <-r.rearm:
			t.Reset(r.cfg.Grace)
		case <-t.C:
			r.settlePending(schemas.WrapCall.ClientClosed)
			const why = "the host closed stdin and the server did not exit within the shutdown grace"
			r.ended(proxy.EndedBySIGTERM, why)
			tree.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
				r.ended(proxy.EndedBySIGKILL, why)
				tree.Kill()
			}
			return
		}
	}
}

// drainServer reads what the exited server wrote until EOF; a grandchild
// may hold the pipe open, so it stops once the reader has been idle
// (blocked, with no new frame) for two seconds. A reader busy recording a
// large frame is not idle.
func (r *relay) drainServer(outR io.Closer, serverOutDone <-chan struct{}) {
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
}

// finish settles the calls left pending, records how the server exited
// (child.exited), and says what Wrap returns.
func (r *relay) finish(ctx context.Context, cmd *exec.Cmd, res Result) (Result, error) {
	r.mu.Lock()
	hostWasOpen := !r.hostClosed
	r.stopped = true
	end := r.end
	r.mu.Unlock()
	if end.outcome != "" {
		r.settlePending(func(c schemas.WrapCall) schemas.Outcome { return c.Stopped(end.outcome) })
	} else {
		r.settlePending(schemas.WrapCall.ChildExited)
	}

	// The server exited first only if it did so on its own: not when
	// aegis stopped it, or passed on a signal it may have exited of.
	first := hostWasOpen && end.by == ""
	res.ExitCode, res.ServerExitedFirst = proxy.ExitCode(cmd.ProcessState), first
	r.mu.Lock()
	res.Calls = r.calls
	failed := r.failed
	r.mu.Unlock()
	exit := map[string]any{"code": res.ExitCode, "server_exited_first": first}
	if end.by != "" {
		exit["ended_by"] = end.by
	}
	if end.reason != "" {
		exit["reason"] = end.reason
	}
	if end.frameBytes > 0 {
		exit["frame_bytes"] = end.frameBytes
	}
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
	if end.err != nil {
		return res, &StoppedError{Reason: end.reason, Err: end.err}
	}
	return res, nil
}
