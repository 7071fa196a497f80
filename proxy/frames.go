package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// frameFilter reads a newline-delimited JSON-RPC stream and lets take
// remove whole frames from it before the reader above (the SDK) sees them.
// Invariants:
//
//   - Bytes it does not take pass unchanged and in order.
//   - take sees a line only if the bytes passed before it end a sequence of
//     complete JSON values (at = true), as a continuous JSON decoder above
//     it would read them: a line that is the middle of a value split over
//     lines is never taken, since the reader above would take it as part of
//     that value. Lines not at a boundary are still shown to take (at =
//     false) so that it can follow them, but passed whatever it says.
//   - A line longer than MaxFrame is passed as it comes, without being
//     held whole or shown to take.
//   - A complete JSON object or array without its newline (a peer that
//     does not end its last frame) is handled as a line once it is
//     complete, so nothing waits for a newline that never comes.
type frameFilter struct {
	r    io.Reader
	take func(line []byte, at bool) bool

	tmp  []byte
	in   []byte // an incomplete line
	out  []byte // passed, not yet read
	mid  bool   // passing the rest of an overlong line
	pend []byte // passed since the last boundary (nil: at a boundary)
	err  error
}

func (f *frameFilter) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if f.tmp == nil {
			f.tmp = make([]byte, 64<<10)
		}
		n, err := f.r.Read(f.tmp)
		f.feed(f.tmp[:n])
		if err != nil {
			if len(f.in) > 0 {
				f.pass(f.in, false)
				f.in = nil
			}
			f.err = err
		}
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

func (f *frameFilter) Close() error {
	if c, ok := f.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (f *frameFilter) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if f.mid {
			if i < 0 {
				f.pass(b, false)
				return
			}
			f.pass(b[:i+1], false)
			f.mid, f.pend = false, nil // as if the long line was one frame
			b = b[i+1:]
			continue
		}
		if i < 0 {
			f.in = append(f.in, b...)
			switch {
			case len(f.in) > MaxFrame:
				f.pass(f.in, false)
				f.in, f.mid, f.pend = nil, true, nil
			case endsValue(f.in) && json.Valid(f.in):
				line := f.in
				f.in = nil
				f.line(line)
			}
			return
		}
		line := b[:i+1]
		if len(f.in) > 0 {
			line = append(f.in, line...)
			f.in = nil
		}
		if len(line) > MaxFrame {
			f.pass(line, false)
			f.pend = nil // as if the long line was one frame
		} else {
			f.line(line)
		}
		b = b[i+1:]
	}
}

// endsValue reports whether b's last byte other than space closes an
// object or an array.
func endsValue(b []byte) bool {
	b = bytes.TrimRight(b, " \t\r\n")
	return len(b) > 0 && (b[len(b)-1] == '}' || b[len(b)-1] == ']')
}

func (f *frameFilter) line(line []byte) {
	at := f.pend == nil
	if f.take(line, at) && at {
		return
	}
	f.pass(line, true)
}

// pass hands b to the reader above; whole says it ends a line.
func (f *frameFilter) pass(b []byte, whole bool) {
	f.out = append(f.out, b...)
	if !whole {
		return
	}
	if f.pend == nil {
		if complete(b) {
			return
		}
		f.pend = append([]byte{}, b...)
		return
	}
	f.pend = append(f.pend, b...)
	if complete(f.pend) || len(f.pend) > MaxFrame {
		f.pend = nil
	}
}

// complete reports whether b is a sequence of whole JSON values (or
// nothing but space). Bytes that are not JSON at all count as complete: a
// decoder above rejects them and starts again.
func complete(b []byte) bool {
	if json.Valid(b) || len(bytes.TrimSpace(b)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var v json.RawMessage
		err := dec.Decode(&v)
		switch {
		case err == io.EOF:
			return true
		case errors.Is(err, io.ErrUnexpectedEOF):
			return false
		case err != nil:
			return true
		}
	}
}
