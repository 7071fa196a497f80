package relay

import (
	"fmt"
	"os"
	"syscall"

	"github.com/aegis-dev/aegis/proxy"
)

// serverEnd is what aegis did to end the server, when it did: by says how
// (child.exited's ended_by), reason why (child.exited's reason), outcome
// is the execution reason of the calls it left unanswered, and err, for a
// stop that is not a recording failure, what Wrap returns.
type serverEnd struct {
	by         string
	reason     string
	outcome    string
	frameBytes int // the bytes read of an oversized frame
	err        error
}

// stopServer kills the server for the reason end gives, unless aegis
// already stopped it (the first reason is the one recorded); nothing
// further is relayed.
func (r *relay) stopServer(end serverEnd) {
	r.mu.Lock()
	first := r.end.outcome == ""
	if first {
		end.by = proxy.EndedBySIGKILL
		r.end = end
	}
	r.stopped = true
	r.mu.Unlock()
	if first {
		r.log.Error("stopping the server: " + end.reason)
		if r.kill != nil {
			r.kill()
		}
	}
}

// ended notes how aegis ended the server when it did not stop it for a
// reason of its own ([relay.stopServer]): a signal passed on to it, or
// SIGTERM and SIGKILL once the grace after the host left ran out. A stop
// keeps what it recorded.
func (r *relay) ended(by, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.end.outcome == "" {
		r.end.by, r.end.reason = by, reason
	}
}

// signalName names a signal as kill -l does.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return s.String()
}

// StartError reports a server that could not be started.
type StartError struct {
	Argv []string
	Err  error
}

func (e *StartError) Error() string { return fmt.Sprintf("start server %q: %v", e.Argv[0], e.Err) }

func (e *StartError) Unwrap() error { return e.Err }
