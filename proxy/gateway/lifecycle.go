package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// DefaultGrace is the gateway's grace period (Config.Grace):
// how long the calls in flight when the host leaves may take to finish,
// and, when the gateway stops a server, how long the server has after its
// stdin is closed before SIGTERM, and after SIGTERM before SIGKILL.
const DefaultGrace = 2 * time.Second

// serverSettle is how long after its start a server is left running before
// its stdin may be closed. A server that just initialized commonly sends
// its first requests (server-everything asks for roots/list 350 ms after
// initialized); one sent after its stdin is closed can never be answered,
// and the server waits for the answer instead of exiting (a Node server
// keeps its request timer, 60 s, alive). Only a session shorter than this
// waits for it.
const serverSettle = time.Second

// cancelSendWait bounds how long a call that aegis cancels waits for its
// notifications/cancelled to be written to the server.
const cancelSendWait = time.Second

// The causes with which the gateway cancels a forwarded call.
var (
	errHostCancelled = errors.New("cancelled by the host (notifications/cancelled)")
	errGraceOver     = errors.New("the grace after the host left ran out")
)

// NoServerError refuses a gateway none of whose servers could be started:
// it would serve nothing but its meta-tools. Failed says which servers
// failed, at which stage (start or connect) and why, in file order.
type NoServerError struct {
	Failed []ServerFailure
}

// ServerFailure is one server that the gateway skipped.
type ServerFailure struct {
	Server string
	Stage  string // "start" or "connect"
	Err    error
}

func (e *NoServerError) Error() string {
	var b strings.Builder
	b.WriteString("no server could be started")
	for _, f := range e.Failed {
		fmt.Fprintf(&b, "; %s: %s: %v", f.Server, f.Stage, f.Err)
	}
	return b.String()
}

// lifecycle is what the gateway knows of its own ending. Invariants:
//
//   - The host leaves once: when its stdin ends (or its connection
//     fails), or when aegis is told to stop. From then on, a call in flight
//     has one grace period to finish; then the calls still in flight are
//     cancelled, each with notifications/cancelled to its server.
//   - A call runs under a context of its own, not the host request's (the
//     SDK cancels every handler the moment the host's stdin ends, which
//     would cancel calls that the server is about to answer): it is
//     cancelled when the host cancels it, or when the grace runs out.
//   - Told to stop (SIGTERM, SIGINT), aegis stops its servers at once:
//     each gets SIGTERM as its stdin is closed, without the settle or
//     the first grace, since whoever sent the signal waits for aegis to
//     exit (the TypeScript SDK's client SIGKILLs the process it started
//     to probe server/discover 1 s after SIGTERM, which would orphan the
//     servers). The calls in flight keep their grace.
//   - Every forwarded call gets exactly one outcome, recorded whatever
//     happens to the host: answered (with a note when the host had left,
//     so the answer was recorded but could not be delivered), or a trap
//     that says who cancelled it, after how long, and whether the
//     server was sent notifications/cancelled.
type lifecycle struct {
	once    sync.Once
	leaving chan struct{} // closed when the host left
	why     string        // why it left; set before leaving is closed
	// drained is cancelled one grace period after the host left.
	drained  context.Context
	endDrain context.CancelCauseFunc
	// stopped is closed when aegis is told to stop (a signal: the
	// gateway's context ends), whether or not the host left before.
	stopped <-chan struct{}
}

func (l *lifecycle) init() {
	l.leaving = make(chan struct{})
	l.drained, l.endDrain = context.WithCancelCause(context.Background())
}

// grace returns the gateway's grace period.
func (g *gateway) grace() time.Duration {
	if g.cfg.Grace > 0 {
		return g.cfg.Grace
	}
	return DefaultGrace
}

// leave records that the host left (the first call counts) and starts the
// grace of the calls in flight.
func (g *gateway) leave(why string) {
	g.life.once.Do(func() {
		g.life.why = why
		close(g.life.leaving)
		time.AfterFunc(g.grace(), func() { g.life.endDrain(errGraceOver) })
	})
}

// left reports whether the host has left.
func (g *gateway) left() bool {
	select {
	case <-g.life.leaving:
		return true
	default:
		return false
	}
}

// callContext returns the context a forwarded call runs under (see
// [lifecycle]) and the function that releases it. ctx is the host
// request's: an explicit cancellation by the host (its cause is
// context.Canceled, and the host has not left) cancels the call at once;
// any other end of ctx means the host's connection is gone, so the call
// keeps running until the grace runs out.
func (g *gateway) callContext(ctx context.Context) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stopHost := context.AfterFunc(ctx, func() {
		if g.left() {
			return
		}
		if cause := context.Cause(ctx); errors.Is(cause, context.Canceled) {
			cancel(errHostCancelled)
			return
		}
		g.leave("the host's connection failed")
	})
	stopDrain := context.AfterFunc(g.life.drained, func() { cancel(context.Cause(g.life.drained)) })
	return cctx, func() {
		stopHost()
		stopDrain()
		cancel(nil)
	}
}

// cancelledOutcome returns the outcome of a forwarded call whose context
// cctx was cancelled before the server answered, after waiting (briefly)
// until the notifications/cancelled that the SDK sends for it is on the
// server's stdin, and records the call.cancelled fact. It returns false
// when cctx was not cancelled: the call failed on its own.
func (g *gateway) cancelledOutcome(cctx context.Context, wc schemas.WrapCall, d *downstream, start time.Time) (schemas.Outcome, bool) {
	cause := context.Cause(cctx)
	if cause == nil || (!errors.Is(cause, errHostCancelled) && !errors.Is(cause, errGraceOver)) {
		return schemas.Outcome{}, false
	}
	after := g.cfg.Now().Sub(start)
	sent := false
	if d != nil {
		sent = d.awaitCancelSent()
	}
	notice := "aegis sent it notifications/cancelled"
	if !sent {
		notice = "aegis could not send it notifications/cancelled"
	}
	wall := uint64(after.Milliseconds())
	var o schemas.Outcome
	fact := map[string]any{"call_id": wc.CallID, "tool_id": wc.ToolID, "after_ms": after.Milliseconds(), "notified": sent}
	if errors.Is(cause, errHostCancelled) {
		o = wc.Cancelled(after, wall)
		if !sent {
			o.Execution = schemas.ExecutionTrap(fmt.Sprintf("cancelled by the host at +%.1f s (notifications/cancelled); the server did not answer, and %s", after.Seconds(), notice))
		}
	} else {
		o = wc.Answered("", wall)
		o.ResponseDigest = ""
		o.Execution = schemas.ExecutionTrap(fmt.Sprintf("cancelled by aegis at +%.1f s: %s and the server did not answer within the %s grace; %s",
			after.Seconds(), g.life.why, g.grace(), notice))
		fact["by"] = "aegis"
		fact["reason"] = g.life.why + "; the grace ran out"
	}
	if _, err := g.sess.Fact(schemas.KindCallCancelled, fact); err != nil {
		g.log.Warn("record cancellation", "err", err)
	}
	return o, true
}

// undelivered records that the answer to a call that finished after the
// host left was recorded but could not be delivered.
func (g *gateway) undelivered(wc schemas.WrapCall) {
	if !g.left() {
		return
	}
	if _, err := g.sess.Fact(schemas.KindNote, map[string]any{"call_id": wc.CallID, "tool_id": wc.ToolID,
		"undelivered": g.life.why + "; the call finished within the grace and its outcome is recorded, but the answer could not be delivered"}); err != nil {
		g.log.Warn("record undelivered answer", "err", err)
	}
}

// serverProc is what the gateway's shutdown needs of a running server.
type serverProc struct {
	pid     int
	started time.Time
	stdin   *downWriter
	exited  chan struct{} // closed once the server (the tree's leader) exited
}

// newServerProc starts waiting for the server that cmd started as the
// leader of tree; nothing else may wait for it.
func newServerProc(cmd *exec.Cmd, tree *sandbox.Tree, stdin *downWriter) *serverProc {
	p := &serverProc{pid: cmd.Process.Pid, started: time.Now(), stdin: stdin, exited: make(chan struct{})}
	go func() {
		tree.Wait()
		close(p.exited)
	}()
	return p
}

// downWriter is the gateway's end of a server's stdin. It counts the
// notifications/cancelled frames written through it, so that a call aegis
// cancels is recorded as notified only once its notification is on the
// wire (they are counted, not matched by request id: each cancellation
// takes a ticket and waits until that many are written), and stdin is
// closed only after every one of them. Close leaves stdin open: the
// shutdown closes it, in its order, with closeStdin.
//
// It also tells when the server's requests that the gateway held for the
// host (a roots/list between calls, mrtr.go) are answered on the wire:
// once the host left, such a request is answered by the gateway itself,
// and the SDK writes that answer after the handler returns, which the
// shutdown must not overtake by closing stdin (the server would wait
// for it rather than exit).
type downWriter struct {
	f   *os.File
	wmu sync.Mutex
	*cancelTally

	amu     sync.Mutex
	held    int           // held requests whose handlers still run
	settled chan struct{} // closed, and replaced, when held or owed falls
	// owed: held requests answered, their answers not yet written;
	// changed under amu, read by Write without it (nothing to pay for
	// on the path of every frame but a load).
	owed atomic.Int64
}

func newDownWriter(f *os.File) *downWriter {
	return &downWriter{f: f, cancelTally: newCancelTally(), settled: make(chan struct{})}
}

func (w *downWriter) Write(p []byte) (int, error) {
	// The SDK's frames and the task layer's: one whole frame at a time.
	w.wmu.Lock()
	n, err := w.f.Write(p)
	w.wmu.Unlock()
	if err == nil && bytes.Contains(p, []byte("notifications/cancelled")) {
		if c := countCancelled(p); c > 0 {
			w.add(c)
		}
	}
	if err == nil && w.owed.Load() > 0 {
		if r := readRPC(p); r.message && !r.hasMethod && r.id != nil {
			w.change(0, -1)
		}
	}
	return n, err
}

// hold counts a server's request held for the host; the function it
// returns is called when its handler returns the answer to the SDK.
func (w *downWriter) hold() (release func()) {
	w.amu.Lock()
	w.held++
	w.amu.Unlock()
	return func() { w.change(-1, 1) }
}

// change adds to the held handlers and to the answers owed (a handler
// that returns owes its answer; an answer written pays one).
func (w *downWriter) change(held, owed int) {
	w.amu.Lock()
	w.held += held
	if w.owed.Add(int64(owed)) < 0 {
		w.owed.Store(0)
	}
	close(w.settled)
	w.settled = make(chan struct{})
	w.amu.Unlock()
}

// awaitAnswers waits at most d until every held request is answered on
// the wire, and reports whether it is.
func (w *downWriter) awaitAnswers(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		w.amu.Lock()
		done, ch := w.held == 0 && w.owed.Load() == 0, w.settled
		w.amu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
}

// Close does nothing; see closeStdin.
func (w *downWriter) Close() error { return nil }

// closeStdin closes the server's stdin: it reads EOF.
func (w *downWriter) closeStdin() error { return w.f.Close() }

// countCancelled counts the lines of p, frames the gateway itself wrote
// (the SDK's encoder or the task layer's, which never escape a letter or
// '/'), that are notifications/cancelled messages. A line without the
// method's name spelled out is no such frame of the gateway's.
func countCancelled(p []byte) int {
	n := 0
	for line := range bytes.SplitSeq(p, []byte{'\n'}) {
		if !bytes.Contains(line, []byte("notifications/cancelled")) {
			continue
		}
		if r := readRPC(line); r.message && r.method == "notifications/cancelled" {
			n++
		}
	}
	return n
}

// shutdown ends every server once no call is in flight (the host's
// session is over): all at once, each by [gateway.stop], and records
// their exits in name order, each with the server's name and PID, its
// status and what ended it. A remote server has no process: its session
// is closed and recorded as closed ([gateway.closeRemote]).
func (g *gateway) shutdown() {
	names := sortedDowns(g.downs)
	type end struct {
		code int
		by   string
	}
	ends := make([]end, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d := g.downs[n]; d.remote != nil {
				g.closeRemote(d) // no process: its session is closed
				return
			}
			ends[i].code, ends[i].by = g.stop(g.downs[n])
		}()
	}
	wg.Wait()
	for i, n := range names {
		d := g.downs[n]
		if d.remote != nil {
			continue // recorded as server.connection closed
		}
		fact := map[string]any{"server": n, "pid": d.proc.pid, "code": ends[i].code, "ended_by": ends[i].by}
		if rc, err := g.sess.Fact(schemas.KindChildExited, fact); err == nil {
			rc.Wait(context.Background())
		}
	}
}

// stop ends one server, in this order: every notifications/cancelled
// owed to it is written; once it has run for serverSettle, its stdin is
// closed; it has the grace to exit;
// then SIGTERM and the grace again; then SIGKILL. When aegis is told to
// stop, before or meanwhile, the settle and the first grace end at once.
// Its stdout is read
// throughout, and closed only once it exited (a server that writes while
// it shuts down must not die of EPIPE). What it left running is ended as
// [sandbox.Tree.Stop] does. It returns the exit status and what ended it.
func (g *gateway) stop(d *downstream) (int, string) {
	grace := g.grace()
	d.proc.stdin.await(d.proc.stdin.pending(), cancelSendWait)
	d.proc.stdin.awaitAnswers(cancelSendWait)
	if early := serverSettle - time.Since(d.proc.started); early > 0 {
		select {
		case <-d.proc.exited:
		case <-time.After(early):
		case <-g.life.stopped:
		}
	}
	by := proxy.EndedByStdin
	select {
	case <-d.proc.exited:
		by = proxy.EndedByItself
	default:
	}
	d.proc.stdin.closeStdin()
	// wait reports whether the server exited within the grace; it gives
	// up at once when cut is closed.
	wait := func(cut <-chan struct{}) bool {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-d.proc.exited:
			return true
		default:
		}
		select {
		case <-d.proc.exited:
			return true
		case <-t.C:
			return false
		case <-cut:
			return false
		}
	}
	if !wait(g.life.stopped) {
		by = proxy.EndedBySIGTERM
		d.tree.Signal(syscall.SIGTERM)
		if !wait(nil) {
			by = proxy.EndedBySIGKILL
			d.tree.Kill()
			<-d.proc.exited
		}
	}
	if err := d.tree.Stop(grace); err != nil { // what the server left running
		g.log.Error("end the server's processes", "server", d.name, "err", err)
	}
	d.cs.Close() // closes its stdout too
	return proxy.ExitCode(d.cmd.ProcessState), by
}
