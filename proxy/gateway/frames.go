package gateway

import (
	"bytes"
	"io"

	"github.com/aegis-dev/aegis/proxy"
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
//     part of another value. Lines are held while the text's structure
//     leaves a value unfinished (valueScan: an unclosed object, array or
//     string, with no byte in it that the reading refuses) or the reading
//     says the text ends inside a value ([reading.Reading.More]), and
//     passed as they are if the stream ends there. The text is read once
//     it may be whole, not at each of its lines: a value split over many
//     lines costs one reading. A text whose structure stays open after a
//     mistake no byte betrays (`{"a" 1`) is held with what follows until
//     it closes, as the continuous decoder above, which stops at the
//     mistake, never reads past it either.
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
	in  []byte    // an incomplete line
	acc []byte    // whole lines of a value not yet complete
	out []byte    // passed, not yet read
	mid bool      // passing the rest of an overlong value
	sc  valueScan // the structure of acc and in, followed as they grow
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
			f.sc.feed(b)
			switch {
			case len(f.acc)+len(f.in) > proxy.MaxFrame:
				f.overlong()
			case endsValue(f.in) && !f.sc.open():
				text := append(f.acc, f.in...)
				if rd := reading.Read(text); rd.Err == "" && len(rd.Values) > 0 {
					f.acc, f.in, f.sc = nil, nil, valueScan{}
					f.value(text, rd)
				}
			}
			return
		}
		line := b[:i+1]
		b = b[i+1:]
		f.sc.feed(line)
		// The text is the filter's own, never the read buffer: take may
		// keep parts of its reading.
		text := append(append(f.acc, f.in...), line...)
		f.in = nil
		if len(text) > proxy.MaxFrame {
			f.acc, f.in = text, nil
			f.overlong()
			f.mid = false // the value's line ended here
			continue
		}
		if f.sc.open() {
			// Certainly unfinished: read once it may be whole, not at
			// each of its lines (a value split over a million lines
			// would be read a million times).
			f.acc = text
			continue
		}
		rd := reading.Read(text)
		if rd.More {
			f.acc = text
			continue
		}
		f.acc, f.sc = nil, valueScan{}
		f.value(text, rd)
	}
}

// overlong passes what is held of a value longer than MaxFrame, and the
// rest of its line as it comes.
func (f *frameFilter) overlong() {
	f.out = append(f.out, f.acc...)
	f.out = append(f.out, f.in...)
	f.acc, f.in, f.mid, f.sc = nil, nil, true, valueScan{}
}

// valueScan follows the structure of the text a frameFilter holds, byte by
// byte as it arrives, so that the text is read ([reading.Read]) only when
// it may be whole. It only ever delays a reading while the text certainly
// leaves a value unfinished (open): an unclosed object, array or string,
// with nothing in it that the reading refuses. Anything else (a value that
// may be complete, a byte that makes the text no JSON) is left to the
// reading, which decides; a text it calls broken the reading ends with an
// error, never as unfinished, so no text is read again line after line.
type valueScan struct {
	depth      int
	inStr, esc bool
	broken     bool // a byte no JSON reader takes where it stands
	n          int  // bytes fed
}

// bom is the byte order mark, which the reading skips at a text's start.
const bom = "\xef\xbb\xbf"

func (s *valueScan) feed(b []byte) {
	for _, c := range b {
		if s.broken {
			return
		}
		s.n++
		if s.n <= len(bom) && c == bom[s.n-1] {
			continue
		}
		if s.inStr {
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			case c < 0x20:
				s.broken = true
			}
			continue
		}
		switch c {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth++
		case '}', ']':
			if s.depth == 0 {
				s.broken = true
			} else {
				s.depth--
			}
		case ' ', '\t', '\r', '\n', ',', ':', '-', '+', '.', 'e', 'E',
			't', 'r', 'u', 'f', 'a', 'l', 's', 'n', // true, false, null
			'N', 'I', 'i', 'y': // NaN, Infinity, which the reading takes (and marks)
		default:
			if c < '0' || c > '9' {
				s.broken = true
			}
		}
	}
}

// open reports whether the text fed so far certainly ends inside a value.
func (s *valueScan) open() bool { return !s.broken && (s.depth > 0 || s.inStr) }

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
