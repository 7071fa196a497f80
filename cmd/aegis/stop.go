package main

import (
	"os"
	"time"
)

// stopWithin is how long aegis gateway takes at most, from the first
// SIGINT or SIGTERM, to end: under the 10 s that supervisors commonly give
// (Docker; Kubernetes gives 30, systemd 90) before they SIGKILL.
const stopWithin = 9 * time.Second

// watchStop makes the first signal of sigs stop the gateway (stop), which
// then closes its sessions, servers and records in order; a second
// signal, or stopWithin after the first, ends the process at once (m.Exit
// with 128+N), saying so. What was recorded stays: every event is
// acknowledged on disk before it counts, and a session not closed reads
// as one that ended with the process. It watches until done is closed.
func (m *Main) watchStop(sigs <-chan os.Signal, stop func(), done <-chan struct{}) {
	go func() {
		var first os.Signal
		select {
		case first = <-sigs:
		case <-done:
			return
		}
		stop()
		t := time.NewTimer(stopWithin)
		defer t.Stop()
		cause := &interruptError{sig: first}
		select {
		case <-done:
			return
		case sig := <-sigs:
			cause = &interruptError{sig: sig}
			m.errorf("%s again while stopping: ended at once; the sessions still open were not closed in their records", cause.name())
		case <-t.C:
			m.errorf("not stopped within %v of %s: ended at once; the sessions still open were not closed in their records", stopWithin, cause.name())
		}
		if m.Exit != nil {
			m.Exit(cause.exitCode())
		}
	}()
}
