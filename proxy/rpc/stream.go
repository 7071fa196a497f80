package rpc

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// LooseID returns the number a host that matches answers loosely takes an
// id for, and whether it is one. The official TypeScript SDK looks up the
// request an answer belongs to by Number(id), so "1", 1, 1.0, 1e0, " 1 "
// and even null (0) name the same request to it, and ids beyond 2^53 that
// round to the same double collide. LooseID follows JavaScript's Number()
// for every JSON value: NaN (an object, "abc", [1,2]) is no number.
func LooseID(raw json.RawMessage) (float64, bool) {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 {
		return 0, false
	}
	switch r[0] {
	case 'n':
		return 0, bytes.Equal(r, []byte("null"))
	case 't':
		return 1, bytes.Equal(r, []byte("true"))
	case 'f':
		return 0, bytes.Equal(r, []byte("false"))
	case '"':
		s, ok := jsonString(r)
		if !ok {
			return 0, false
		}
		return jsStringToNumber(s)
	case '[':
		// Number([x]) is Number(String(x)); Number([]) is 0; more than one
		// element joins with commas, which is never a number.
		v, ok := reading.Read(r).One()
		if !ok || v.Kind != reading.Array || len(v.Elems) > 1 {
			return 0, false
		}
		if len(v.Elems) == 0 {
			return 0, true
		}
		e := v.Elems[0].Raw
		switch {
		case bytes.Equal(e, []byte("null")):
			return 0, true // String([null]) is ""
		case len(e) > 0 && (e[0] == 't' || e[0] == 'f' || e[0] == '{'):
			return 0, false // "true", "false", "[object Object]"
		}
		return LooseID(e)
	case '{':
		return 0, false
	}
	f, err := strconv.ParseFloat(string(r), 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// jsStringToNumber is JavaScript's StringToNumber: surrounding white space
// is ignored, an empty string is 0, and 0x, 0o and 0b prefixes, Infinity
// and decimal literals are numbers.
func jsStringToNumber(s string) (float64, bool) {
	s = strings.TrimFunc(s, isJSSpace)
	if s == "" {
		return 0, true
	}
	switch s {
	case "Infinity", "+Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			v := 0.0
			for _, c := range s[2:] {
				d, err := strconv.ParseUint(string(c), base, 8)
				if err != nil {
					return 0, false
				}
				v = v*float64(base) + float64(d)
			}
			return v, true
		}
	}
	if !isDecimalLiteral(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// isDecimalLiteral reports whether s is a StrDecimalLiteral of JavaScript:
// a sign, digits with an optional fraction (or a fraction alone), and an
// optional exponent. strconv.ParseFloat takes more (inf, nan, hex floats,
// underscores), so the shape is checked first.
func isDecimalLiteral(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(s)
}

func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0xfeff, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// Stream follows the bytes relayed in one direction the way a peer that
// decodes its stdin as one continuous JSON stream reads them (the go-sdk's
// stdio transport does): values may span lines, '\r' and '\n' are white
// space between tokens. The relay splits frames on '\n', so a value that
// one frame leaves unfinished is completed by a later one; Stream
// carries its bytes so that the completed value can be read as one. Each
// direction's reader has its own.
//
// It tracks structure only (strings, nesting), which is all that decides
// where a value ends. A byte that no JSON reader can take there (a control
// character in a string, an unmatched closing bracket) ends any value in
// progress: a strict stream reader stops there, and the relay reads the
// rest as a fresh start, so that a lenient one that skips ahead is covered
// too.
type Stream struct {
	carry []byte // the unfinished value's bytes so far, from its first byte
	depth int    // its nesting depth (0: between values)
	// mention is set when the unfinished value names tools/call (in any
	// spelling). A reader that gave up on the value where aegis did not
	// (Stream follows structure, not every rule of the grammar) and
	// started again at a later line may complete that call in a frame
	// that does not name it: ReadHostFrame reads such frames as holding
	// an unreadable call.
	mention bool
}

// StreamScan is what one line does to a Stream.
type StreamScan struct {
	// Joined is the value that began before this line and ends in it,
	// whole; Rest is what follows it in the line.
	Joined, Rest []byte
	// Inside is set when the line leaves a value unfinished.
	Inside bool
	// Overflow is set when the unfinished value grew past MaxFrame: Next
	// no longer follows it (no event could hold it whole).
	Overflow bool
	// Next is the stream after the line.
	Next Stream
}

// Between reports whether s is between values: no value is unfinished.
func (s Stream) Between() bool { return s.depth == 0 }

// Scan reads line (terminator included) after s. It does not change s: the
// relay takes Next only once the line is relayed, since the server reads
// only what reaches it.
func (s Stream) Scan(line []byte) StreamScan {
	var out StreamScan
	depth := s.depth
	start := -1 // where in line the unfinished value began; -1: in carry
	if depth == 0 {
		start = 0
	}
	inStr, esc := false, false
	reset := func() {
		depth, start, inStr, esc = 0, 0, false, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			case c < 0x20:
				reset()
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			if depth == 0 {
				start = i
			}
			depth++
		case '}', ']':
			if depth == 0 {
				reset()
				continue
			}
			depth--
			if depth == 0 && start < 0 && out.Joined == nil {
				out.Joined = append(append([]byte(nil), s.carry...), line[:i+1]...)
				out.Rest = line[i+1:]
				start = i + 1
			}
		}
	}
	if depth > 0 {
		out.Inside = true
		if start < 0 {
			// Appending in place is safe: s keeps its length, so a line
			// that is not relayed leaves s as it was, and the next scan
			// overwrites what this one appended.
			out.Next.carry = append(s.carry, line...)
			out.Next.mention = s.mention || MentionsToolsCall(line)
		} else {
			out.Next.carry = append([]byte(nil), line[start:]...)
			out.Next.mention = MentionsToolsCall(line[start:])
		}
		out.Next.depth = depth
		if len(out.Next.carry) > MaxFrame {
			out.Next, out.Overflow = Stream{}, true
		}
	}
	return out
}

// ReadHostFrame is how the relay reads one host line (terminator included)
// after the stream s: every call, request and cancellation that a server
// reading it line by line, or as one continuous stream, would find. A
// value completed by this line that began in earlier ones is read whole,
// and so is what follows it (a stream reader reads on from there, not from
// the start of the line). Readings that agree yield each call once. With
// strict set (a policy decides calls), a line that leaves a value
// unfinished yields an unreadable call, so that it is refused: no rule can
// decide a call whose end has not been sent, and nothing unfinished then
// reaches the server.
func ReadHostFrame(s Stream, line []byte, strict bool) (Classification, StreamScan) {
	frame := FrameOf(line)
	if e, ok := QuickLine(s, frame); ok {
		return e.Classification(), StreamScan{}
	}
	sc := s.Scan(line)
	var cls Classification
	// A frame that names tools/call in no spelling carries no call of its
	// own (FuzzClassify holds Classify to that), but it may still carry a
	// request whose id the relay must track, so it is read unless it can
	// hold no JSON-RPC object at all.
	if bytes.IndexByte(frame, '{') >= 0 || MentionsToolsCall(frame) {
		cls = Classify(frame)
	}
	if sc.Joined != nil {
		mergeReading(&cls, Classify(bytes.TrimSuffix(sc.Joined, []byte{'\n'})))
		mergeReading(&cls, Classify(FrameOf(sc.Rest)))
	}
	switch {
	case !strict && s.depth > 0 && s.mention && sc.Joined == nil:
		// Only without a policy: under one, no frame is relayed inside
		// a value.
		cls.Calls = append(cls.Calls, Call{Tool: UnknownTool, Unreadable: true,
			Malformed: "frame continues a JSON value that names tools/call without completing it as aegis reads it; a server that reads stdin as one stream and gave up on that value earlier may complete the call here"})
	case sc.Inside && strict:
		cls.Calls = append(cls.Calls, Call{Tool: UnknownTool, Unreadable: true,
			Malformed: "frame ends inside an unfinished JSON value, which a server that reads stdin as one stream joins with the next frame"})
	case sc.Overflow:
		cls.Calls = append(cls.Calls, Call{Tool: UnknownTool, Unreadable: true,
			Malformed: "frames left a JSON value unfinished for more than 16 MiB; aegis no longer follows it"})
	}
	return cls, sc
}

// ReadServerFrame is how the relay reads one server line after the stream
// s: every answer that a host reading it line by line, or as one continuous
// stream, would find.
func ReadServerFrame(s Stream, line []byte) (Classification, StreamScan) {
	frame := FrameOf(line)
	if e, ok := QuickLine(s, frame); ok {
		return e.Classification(), StreamScan{}
	}
	sc := s.Scan(line)
	var cls Classification
	if bytes.IndexByte(frame, '{') >= 0 {
		cls = Classify(frame)
	}
	if sc.Joined != nil {
		mergeReading(&cls, Classify(bytes.TrimSuffix(sc.Joined, []byte{'\n'})))
		mergeReading(&cls, Classify(FrameOf(sc.Rest)))
	}
	return cls, sc
}

// QuickLine reads the common line at once: one plain JSON-RPC envelope
// (quickEnvelope) after a stream that is between values. Every reading then
// agrees: the line is that one value, and the stream is between values
// after it, so there is nothing to scan or join.
func QuickLine(s Stream, frame []byte) (Envelope, bool) {
	if s.depth != 0 {
		return Envelope{}, false
	}
	t := bytes.TrimSpace(frame)
	if len(t) == 0 {
		return Envelope{}, false
	}
	return quickEnvelope(t)
}

// mergeReading adds to c what another reading found that c has not.
func mergeReading(c *Classification, other Classification) {
	for _, x := range other.Calls {
		dup := false
		for _, y := range c.Calls {
			if x.Key == y.Key && x.Tool == y.Tool && x.Named == y.Named && x.Malformed == y.Malformed && bytes.Equal(x.ID, y.ID) && bytes.Equal(x.Args, y.Args) {
				dup = true
				break
			}
		}
		if !dup {
			c.Calls = append(c.Calls, x)
		}
	}
	for _, x := range other.Requests {
		dup := false
		for _, y := range c.Requests {
			if x.Key == y.Key {
				dup = true
				break
			}
		}
		if !dup {
			c.Requests = append(c.Requests, x)
		}
	}
	c.Cancels = append(c.Cancels, other.Cancels...)
	// Answers are merged whole: closing a call twice is harmless (the
	// relay closes each once), missing one is not.
	for _, a := range other.Answers {
		a.Elem += c.Elems
		c.Answers = append(c.Answers, a)
	}
	c.Elems += other.Elems
}
