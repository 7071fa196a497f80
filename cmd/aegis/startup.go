package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/projector"
)

// startGrace is how long start-up may take to wind down after a signal
// before the process is ended.
const startGrace = 2 * time.Second

// startup is the start-up of a command that runs servers (wrap, gateway):
// until its session is open, the first signal cancels ctx, and no server
// is started.
type startup struct {
	ctx  context.Context
	stop chan struct{}
	exit chan struct{} // closed when the watcher has ended
	once sync.Once
}

// watchStart watches sigs until done (or openSession) is called. If
// start-up does not end within startGrace of a signal (a read blocked in
// the kernel), it says so and ends the process with 128+N through m.Exit:
// nothing of a server's has run, so ending it loses nothing.
func (m *Main) watchStart(ctx context.Context, sigs <-chan os.Signal) *startup {
	sctx, cancel := context.WithCancelCause(ctx)
	s := &startup{ctx: sctx, stop: make(chan struct{}), exit: make(chan struct{})}
	go func() {
		defer close(s.exit)
		select {
		case sig := <-sigs:
			cause := &interruptError{sig: sig}
			cancel(cause)
			select {
			case <-s.stop:
			case <-time.After(startGrace):
				m.errorf("%v; no server was started", cause)
				if m.Exit != nil {
					m.Exit(cause.exitCode())
				}
			}
		case <-s.stop:
		}
	}()
	return s
}

// done stops watching, so that the signals that follow reach whoever reads
// sigs next, and reports whether no signal came.
func (s *startup) done() bool {
	s.once.Do(func() { close(s.stop); <-s.exit })
	return s.ctx.Err() == nil
}

// err turns err into the error of an interrupted start-up when a signal
// ended it.
func (s *startup) err(err error) error {
	var ie *interruptError
	if errors.As(context.Cause(s.ctx), &ie) {
		return &exitError{code: ie.exitCode(), err: fmt.Errorf("%w; no server was started", ie)}
	}
	return err
}

// openSession opens the audit session under the start-up's context and
// ends the start-up: a signal that came first abandons the session.
func (s *startup) openSession(cfg projector.SessionConfig) (*projector.Session, error) {
	sess, err := projector.OpenSession(s.ctx, cfg)
	if err != nil {
		return nil, s.err(err)
	}
	if !s.done() {
		sess.Abandon()
		return nil, s.err(context.Cause(s.ctx))
	}
	return sess, nil
}

// interruptError is the cause of a start-up that a signal ended.
type interruptError struct{ sig os.Signal }

func (e *interruptError) Error() string {
	return "interrupted by " + e.name() + " while starting"
}

// name is the signal's name: SIGTERM, not "terminated".
func (e *interruptError) name() string {
	if s, ok := e.sig.(syscall.Signal); ok && signalName(s) != "" {
		return signalName(s)
	}
	return e.sig.String()
}

// exitCode is the conventional exit code of a process a signal ended: 128
// plus the signal's number.
func (e *interruptError) exitCode() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// indexEvery is how often a recording session saves the store's index
// beside the relay (projector.SessionConfig.IndexEvery): the next start
// and every reader fold at most this long a stretch of events.
const indexEvery = time.Second
