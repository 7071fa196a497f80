package proxy

import (
	"bytes"
	"io"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// frameFilter reads a JSON-RPC stream (one JSON value per line, as hosts
// and servers write it) and hands each complete value, with its one
// reading, to take, which may remove it from the stream before the reader
// above (the SDK's continuous JSON decoder) sees it. Invariants:
//
//   - Bytes it does not take pass unchanged and in order.
//   - take is shown whole lines that hold complete JSON values, each text
//     once, with its reading ([reading.Read]), which is what every layer
//     above decides on: a value split over lines is held until its last
//     line and shown whole, as the reader above reads it, so no layer
//     reads a part of a value, or a line that the reader above reads as
//     part of another value. Lines are held only while the reading says
//     the text ends inside a value ([reading.Reading.More]), and passed
//     as they are if the stream ends there.
//   - A text that is no JSON at all is shown too (its reading says so);
//     not taken, it passes, and the reader above answers it as it does.
//   - A value longer than MaxFrame is passed as it comes, without being
//     held whole or shown to take, up to the end of the line where it
//     passes the limit; the reader above refuses a frame that long (the
//     SDK's limit is the same 16 MiB) and reads nothing after it.
//   - A complete JSON object or array without its newline (a peer that
//     does not end its last frame) is handled as a line once it is
//     complete, so nothing waits for a newline that never comes.
type frameFilter struct {
	r    io.Reader
	take func(text []byte, rd reading.Reading) bool

	tmp []byte
	in  []byte // an incomplete line
	acc []byte // whole lines of a value not yet complete
	out []byte // passed, not yet read
	mid bool   // passing the rest of an overlong value
	err error
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
			f.out = append(f.out, f.acc...)
			f.out = append(f.out, f.in...)
			f.acc, f.in = nil, nil
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
				f.out = append(f.out, b...)
				return
			}
			f.out = append(f.out, b[:i+1]...)
			f.mid = false // as if the long value ended with its line
			b = b[i+1:]
			continue
		}
		if i < 0 {
			f.in = append(f.in, b...)
			switch {
			case len(f.acc)+len(f.in) > MaxFrame:
				f.overlong()
			case endsValue(f.in):
				text := append(f.acc, f.in...)
				if rd := reading.Read(text); rd.Err == "" && len(rd.Values) > 0 {
					f.acc, f.in = nil, nil
					f.value(text, rd)
				}
			}
			return
		}
		line := b[:i+1]
		b = b[i+1:]
		// The text is the filter's own, never the read buffer: take may
		// keep parts of its reading.
		text := append(append(f.acc, f.in...), line...)
		f.in = nil
		if len(text) > MaxFrame {
			f.acc, f.in = text, nil
			f.overlong()
			f.mid = false // the value's line ended here
			continue
		}
		rd := reading.Read(text)
		if rd.More {
			f.acc = text
			continue
		}
		f.acc = nil
		f.value(text, rd)
	}
}

// overlong passes what is held of a value longer than MaxFrame, and the
// rest of its line as it comes.
func (f *frameFilter) overlong() {
	f.out = append(f.out, f.acc...)
	f.out = append(f.out, f.in...)
	f.acc, f.in, f.mid = nil, nil, true
}

// endsValue reports whether b's last byte other than space closes an
// object or an array.
func endsValue(b []byte) bool {
	b = bytes.TrimRight(b, " \t\r\n")
	return len(b) > 0 && (b[len(b)-1] == '}' || b[len(b)-1] == ']')
}

// value shows text, complete, to take, and passes it unless taken.
func (f *frameFilter) value(text []byte, rd reading.Reading) {
	if f.take(text, rd) {
		return
	}
	f.out = append(f.out, text...)
}
