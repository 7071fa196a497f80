package rpc

import "bytes"

// Envelope is what the quick reading takes of a plain JSON-RPC object
// (see [QuickLine]).
type Envelope struct {
	// ID is the id member as sent (nil: none).
	ID []byte
	// IsRequest is set when the object has a method (a request, or a
	// notification without an id); IsAnswer when it has result or error
	// and no method.
	IsRequest, IsAnswer bool
}

// Classification is e as Classify reports it.
func (e Envelope) Classification() Classification {
	c := Classification{Shape: Single, Elems: 1}
	switch {
	case e.IsRequest:
		if key, ok, _ := IDKey(e.ID); ok {
			c.Requests = []Request{{Key: key, ID: e.ID}}
		}
	case e.IsAnswer:
		key, _, _ := IDKey(e.ID)
		c.Answers = []Answer{{Key: key, ID: compactRaw(e.ID)}}
	}
	return c
}

// quickEnvelope reads the most common frame, a plain JSON-RPC object that
// is no tools/call and no cancellation (a ping, a list request, an answer,
// a notification), by one scan of its top-level members: no decoding, no
// copies, no allocation. t is the frame without surrounding white space.
// It reports false for anything else (escapes anywhere, a member name that
// is not plain ASCII, a duplicate or case-varied deciding member, a method
// that is not a plain string or names tools/call or
// notifications/cancelled), which the caller then reads the slow way.
func quickEnvelope(t []byte) (Envelope, bool) {
	if len(t) < 2 || t[0] != '{' || bytes.IndexByte(t, '\\') >= 0 || bytes.Contains(t, []byte("tools/call")) {
		return Envelope{}, false
	}
	var id, method []byte
	var n [5]int // id, method, params, result, error: how often each is named
	// One pass reads the members and checks that t is one valid JSON
	// object, as json.Valid would, taking less: no escapes (checked
	// above), member names of plain ASCII, nesting at most
	// quickMaxDepth deep. Anything else is left to the slow path.
	i := skipJSONSpace(t, 1)
	if i >= len(t) {
		return Envelope{}, false
	}
	if t[i] == '}' {
		i++
	} else {
		for {
			if t[i] != '"' {
				return Envelope{}, false
			}
			start := i + 1
			for i = start; i < len(t) && t[i] != '"'; i++ {
				if t[i] < 0x20 || t[i] >= 0x80 {
					return Envelope{}, false
				}
			}
			if i >= len(t) {
				return Envelope{}, false
			}
			key := t[start:i]
			i = skipJSONSpace(t, i+1)
			if i >= len(t) || t[i] != ':' {
				return Envelope{}, false
			}
			vstart := skipJSONSpace(t, i+1)
			vend, ok := skipPlainValue(t, vstart, 0)
			if !ok {
				return Envelope{}, false
			}
			for j, name := range [...]string{"id", "method", "params", "result", "error"} {
				if string(key) == name {
					if n[j]++; n[j] > 1 {
						return Envelope{}, false // a duplicate
					}
					switch j {
					case 0:
						id = t[vstart:vend]
					case 1:
						method = t[vstart:vend]
					}
					break
				}
				if len(key) == len(name) && bytes.EqualFold(key, []byte(name)) {
					return Envelope{}, false // another case of a deciding member
				}
			}
			i = skipJSONSpace(t, vend)
			if i >= len(t) {
				return Envelope{}, false
			}
			if t[i] == '}' {
				i++
				break
			}
			if t[i] != ',' {
				return Envelope{}, false
			}
			i = skipJSONSpace(t, i+1)
			if i >= len(t) {
				return Envelope{}, false
			}
		}
	}
	if i != len(t) {
		return Envelope{}, false
	}
	if method != nil {
		if !plainString(method) {
			return Envelope{}, false
		}
		if m := string(method[1 : len(method)-1]); m == "tools/call" || m == "notifications/cancelled" || m == "initialize" || ListShapes[m] != (ListShape{}) {
			return Envelope{}, false // read the slow way: calls, cancellations, and listings the pins follow
		}
		return Envelope{ID: id, IsRequest: true}, true
	}
	return Envelope{ID: id, IsAnswer: n[3] > 0 || n[4] > 0}, true
}

// quickMaxDepth is how deeply quickEnvelope follows nested values; deeper
// ones go the slow way.
const quickMaxDepth = 32

// skipJSONSpace returns the index of the first byte at or after i in b that
// is not JSON white space.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipPlainValue returns the end of the JSON value that starts at b[i], and
// whether it is one that json.Valid accepts, without escapes in its strings
// and nested at most quickMaxDepth deep beyond depth. It reports false for
// anything else, including valid values it does not follow.
func skipPlainValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		for i++; i < len(b); i++ {
			switch {
			case b[i] == '"':
				return i + 1, true
			case b[i] < 0x20 || b[i] == '\\':
				return i, false
			}
		}
		return i, false
	case c == '{' || c == '[':
		if depth >= quickMaxDepth {
			return i, false
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipJSONSpace(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, true
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return i, false
				}
				var ok bool
				if i, ok = skipPlainValue(b, i, depth+1); !ok {
					return i, false
				}
				i = skipJSONSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return i, false
				}
				i = skipJSONSpace(b, i+1)
			}
			var ok bool
			if i, ok = skipPlainValue(b, i, depth+1); !ok {
				return i, false
			}
			i = skipJSONSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			if b[i] == closer {
				return i + 1, true
			}
			if b[i] != ',' {
				return i, false
			}
			i = skipJSONSpace(b, i+1)
		}
	case c == '-' || c >= '0' && c <= '9':
		return skipJSONNumber(b, i)
	case c == 't':
		return i + 4, bytes.HasPrefix(b[i:], []byte("true"))
	case c == 'f':
		return i + 5, bytes.HasPrefix(b[i:], []byte("false"))
	case c == 'n':
		return i + 4, bytes.HasPrefix(b[i:], []byte("null"))
	}
	return i, false
}

// skipJSONNumber returns the end of the JSON number that starts at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipJSONNumber(b []byte, i int) (int, bool) {
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, false
		}
	}
	return i, true
}
