package relay

import (
	"errors"
	"fmt"

	"github.com/aegis-dev/aegis/proxy"
)

// ErrFrameTooLarge ends a session whose host or server sent a frame longer
// than [MaxFrame]: it could not be recorded as one event, and relaying it
// unrecorded could carry a tools/call past the record. Wrap returns it in
// a [*StoppedError].
var ErrFrameTooLarge = errors.New("frame larger than 16 MiB")

// FrameSizeError is an oversized frame: Size bytes of it were read (the
// whole frame when Whole, else the frame is at least that long).
type FrameSizeError struct {
	Size  int
	Whole bool
}

func (e *FrameSizeError) Error() string {
	return fmt.Sprintf("frame of %s, larger than the 16 MiB frame limit (%d bytes)", e.Bytes(), proxy.MaxFrame)
}

// Bytes says how long the frame is, as far as it was read.
func (e *FrameSizeError) Bytes() string {
	if e.Whole {
		return fmt.Sprintf("%d bytes", e.Size)
	}
	return fmt.Sprintf("at least %d bytes", e.Size)
}

func (e *FrameSizeError) Unwrap() error { return ErrFrameTooLarge }

// StoppedError reports a session that aegis ended by stopping the server
// for a reason other than a failure to record (a frame larger than
// [MaxFrame]). The record is whole: the calls left unanswered have
// outcomes that say why, and child.exited says what aegis did; the caller
// closes the session as after a normal end.
type StoppedError struct {
	// Reason is what child.exited's "reason" says.
	Reason string
	Err    error
}

func (e *StoppedError) Error() string { return e.Reason }

func (e *StoppedError) Unwrap() error { return e.Err }

// ConfineError reports a confinement the helper refused to apply (the
// server never ran; nothing was enforced) or could not set up.
type ConfineError struct{ Err error }

func (e *ConfineError) Error() string { return "confine server: " + e.Err.Error() }

func (e *ConfineError) Unwrap() error { return e.Err }
