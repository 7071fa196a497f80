package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"syscall"

	"github.com/aegis-dev/aegis/proxy/rpc"
)

// MaxFrame is the largest frame the relay carries, in bytes, without its
// line terminator.
const MaxFrame = rpc.MaxFrame

func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// OpenError reports an audit session that could not be opened; the server
// never ran.
type OpenError struct{ Err error }

func (e *OpenError) Error() string { return e.Err.Error() }

func (e *OpenError) Unwrap() error { return e.Err }

func ExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Ways a server ended, as child.exited's ended_by says.
const (
	EndedByStdin   = "stdin closed"
	EndedBySIGTERM = "SIGTERM"
	EndedBySIGKILL = "SIGKILL"
	EndedByItself  = "exited before the shutdown"
)
