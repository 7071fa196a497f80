package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// Shape is what a frame looks like to the relay.
type Shape int

const (
	// Opaque frames are not a JSON object or array: blank lines, garbage,
	// truncated JSON. They are relayed and recorded as frames; one that
	// mentions tools/call is also recorded as a malformed call (see Call).
	Opaque Shape = iota
	// Single is one JSON object.
	Single
	// Batch is one JSON array (a JSON-RPC batch).
	Batch
)

// Call is a tools/call found in a client frame.
type Call struct {
	// Key identifies the call's id for matching the answer: ids equal as
	// JSON values (1, 1.0 and 1e0; "a" and "\u0061") have equal keys, and a
	// number never equals a string. Empty when Malformed.
	Key string
	// Tool is params.name when it is a string (also when the call is
	// Malformed for another reason), else "<unknown>".
	Tool string
	// Named is set when params.name was read as a string, so that Tool is
	// that name (even one spelled "<unknown>").
	Named bool
	// ID is the request's id exactly as sent (nil when absent); a refusal
	// echoes it with its JSON type.
	ID json.RawMessage
	// Args is params.arguments as sent (nil when absent).
	Args json.RawMessage
	// Malformed is set, with the reason, for a tools/call the relay cannot
	// follow to an answer: no id, a null or non-scalar id, no string
	// params.name, members that parsers may read differently (see
	// Ambiguous), or a frame that does not parse but mentions tools/call.
	// Such a call is recorded (intent and a denied outcome) before the
	// frame is relayed.
	Malformed string
	// Ambiguous is set, with Malformed, when parsers may read the frame as
	// different calls: a member that decides the call (id, method, params,
	// params.name, params.arguments, or result and error beside them) is
	// given twice, or spelled in another case, which encoding/json matches
	// to the lower-case name and JSON.parse and most other parsers do not.
	// aegis cannot know which call the server would run, so it cannot
	// record or decide it: the relay refuses such a frame instead of
	// relaying it.
	Ambiguous bool
	// Unreadable is set, with Malformed, when the frame names tools/call
	// but aegis could not read a call from it at all: it is not one JSON
	// value, or the element or method that would hold the call is not an
	// object or a string. A strict server rejects it, a lenient one might
	// run it; under a policy the relay refuses it, since no rule can
	// decide it.
	Unreadable bool
	// Reused is set by the relay, with Malformed, when the call's id is
	// already in flight (or given twice in its frame) under the exact or
	// the loose reading: its answer could not be told from the other's,
	// so the relay refuses it.
	Reused bool
}

// Answer is a response-shaped element of a server frame: result or error
// present and method absent. Server-to-client requests reuse ids, so only
// response-shaped elements can close a pending call.
type Answer struct {
	// Key is the id's exact key (see Call.Key).
	Key string
	// ID is the id as sent, for matching it loosely (see [LooseID]).
	ID json.RawMessage
	// Elem numbers the element of the frame the answer was read from: an
	// element that parsers read differently yields one Answer per reading,
	// all with the same Elem.
	Elem int
}

// Request is a request-shaped element of a host frame (a string method
// and an id) whose method is not tools/call: the relay tracks its id so
// that the server's answer can be told from a forged one, and so that no
// call's id is reused while it is in flight.
type Request struct {
	Key string
	ID  json.RawMessage
	// List is the method of a list request whose answer the pins read
	// (tools/list, prompts/list, resources/templates/list; to some
	// reading of it); Cursor is set when its params.cursor is given.
	List   string
	Cursor bool
	// Init is set for an initialize request, and Caps names the host
	// capabilities it declares that shape a server's listings (capsKey).
	Init bool
	Caps string
}

// Classification is the relay's reading of one frame. The frame's bytes are
// never re-encoded; this only decides what to record.
type Classification struct {
	Shape    Shape
	Calls    []Call
	Answers  []Answer
	Requests []Request
	// Cancels holds the params.requestId of each notifications/cancelled,
	// as sent.
	Cancels []json.RawMessage
	elems   int  // elements read so far, numbering Answer.Elem
	reused  bool // set by the relay: a request reuses a call's id in flight
}

// UnknownTool is the tool_id recorded for a tools/call without a usable
// params.name.
const UnknownTool = "<unknown>"

// member is one JSON-RPC message decoded loosely, keeping the raw id.
type member struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// Classify reads one frame (without its line terminator). It never fails:
// anything it cannot read is Opaque. It is pure and safe on any input.
func Classify(frame []byte) Classification {
	return classify(frame, true)
}

// classify is Classify, with the quick reading of plain envelopes
// (quickEnvelope) when quick is set; FuzzClassify holds the two to the
// same result.
func classify(frame []byte, quick bool) Classification {
	t := bytes.TrimSpace(frame)
	if len(t) == 0 {
		return Classification{Shape: Opaque}
	}
	if quick {
		if e, ok := quickEnvelope(t); ok {
			return e.classification()
		}
	}
	// Decoding an object into member, or an array into raw elements,
	// validates the whole frame (both take any value), so a frame that
	// starts like one is not scanned twice; one that fails to decode is not
	// one JSON value. FuzzClassify holds that to json.Valid.
	switch t[0] {
	case '{':
		var m member
		if !decodeMember(t, &m) && json.Unmarshal(t, &m) != nil {
			return classifyOpaque(frame)
		}
		c := Classification{Shape: Single}
		classifyMember(t, &m, &c)
		return c
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(t, &elems); err != nil {
			return classifyOpaque(frame)
		}
		c := Classification{Shape: Batch}
		for _, e := range elems {
			e = bytes.TrimSpace(e)
			if len(e) > 0 && e[0] == '{' {
				classifyObject(e, &c)
			} else if mentionsToolsCall(e) {
				c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "batch element is not an object but mentions tools/call", Unreadable: true})
			}
		}
		return c
	}
	if !json.Valid(t) {
		return classifyOpaque(frame)
	}
	// A bare scalar. A string could still name tools/call to a lenient peer.
	c := Classification{Shape: Opaque}
	if mentionsToolsCall(t) {
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "frame is not a JSON-RPC object but mentions tools/call", Unreadable: true})
	}
	return c
}

// classifyOpaque handles a frame that is not one JSON value. A stream
// decoder in the server may still read JSON values out of it (several
// objects on one line, or one object spread over several lines), so every
// complete value is classified, and a frame that mentions tools/call in any
// spelling is recorded as a malformed call.
func classifyOpaque(frame []byte) Classification {
	c := Classification{Shape: Opaque}
	dec := json.NewDecoder(bytes.NewReader(frame))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '{' {
			classifyObject(raw, &c)
		}
	}
	// Calls decoded from complete values stay followable: a stream-decoding
	// server answers them. Anything else that names tools/call, also after
	// the last value the decoder could read (a reader that skips what it
	// cannot parse may find a call there), is recorded as a malformed call.
	tail := frame
	if off := int(dec.InputOffset()); off <= len(frame) && len(c.Calls) > 0 {
		tail = frame[off:]
	}
	if mentionsToolsCall(tail) {
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "frame is not one JSON value but mentions tools/call", Unreadable: true})
	}
	return c
}

func classifyObject(obj []byte, c *Classification) {
	var m member
	if err := json.Unmarshal(obj, &m); err != nil {
		if mentionsToolsCall(obj) {
			c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "tools/call object does not decode", Unreadable: true})
		}
		return
	}
	classifyMember(obj, &m, c)
}

// classifyMember classifies obj, already decoded into m.
func classifyMember(obj []byte, m *member, c *Classification) {
	dups := ambiguousMember(obj, "id", "method", "params", "result", "error")
	elem := c.elems
	c.elems++
	if dups != "" {
		// Parsers may read this object differently: one may see an answer
		// where encoding/json sees a request, or another id. Every call
		// that any reading answers is closed before the frame is relayed,
		// and every id that any reading requests with is tracked (unless
		// the object is refused as an ambiguous call).
		c.Answers = append(c.Answers, readingAnswers(obj, m, elem)...)
		defer func(n int) {
			if len(c.Calls) == n {
				c.Requests = append(c.Requests, readingRequests(obj, m)...)
			}
		}(len(c.Calls))
	}
	method, methodIsString := jsonString(m.Method)
	if m.Method != nil {
		if !methodIsString {
			if mentionsToolsCall(m.Method) {
				c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "method is not a string", Unreadable: true})
			}
			return
		}
		if dups != "" && mentionsToolsCall(obj) {
			c.Calls = append(c.Calls, Call{Tool: UnknownTool, ID: ambiguousID(obj, m.ID), Malformed: "ambiguous tools/call: " + dups, Ambiguous: true})
			return
		}
		if method != "tools/call" {
			if dups == "" {
				if key, ok, _ := idKey(m.ID); ok {
					q := Request{Key: key, ID: compactRaw(m.ID)}
					switch _, list := listShapes[method]; {
					case list:
						q.List, q.Cursor = method, listCursor(m.Params)
					case method == "initialize":
						q.Init, q.Caps = true, initCaps(m.Params)
					}
					c.Requests = append(c.Requests, q)
				}
			}
			if method == "notifications/cancelled" {
				if id := requestID(m.Params); id != nil {
					c.Cancels = append(c.Cancels, id)
				}
			}
			return
		}
		if amb := ambiguousMember(bytes.TrimSpace(m.Params), "name", "arguments"); amb != "" {
			c.Calls = append(c.Calls, Call{Tool: UnknownTool, ID: ambiguousID(obj, m.ID), Malformed: "ambiguous tools/call: params has " + amb, Ambiguous: true})
			return
		}
		call := Call{Tool: UnknownTool, ID: compactRaw(m.ID), Args: arguments(m.Params)}
		name, ok := toolName(m.Params)
		key, idOK, idWhy := idKey(m.ID)
		switch {
		case !idOK:
			call.Malformed = idWhy
		case !ok:
			call.Malformed = "tools/call without a string params.name"
		default:
			call.Key = key
			call.Tool = name
		}
		if ok {
			call.Tool, call.Named = name, true
		}
		c.Calls = append(c.Calls, call)
		return
	}
	if (m.Result != nil || m.Error != nil) && dups == "" {
		// An id that does not key (null, an object) still answers a host
		// that reads ids loosely, so it is kept with an empty key.
		key, _, _ := idKey(m.ID)
		c.Answers = append(c.Answers, Answer{Key: key, ID: compactRaw(m.ID), Elem: elem})
	}
}

// requestID returns params.requestId of a notifications/cancelled, or nil.
func requestID(params json.RawMessage) json.RawMessage {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || p[0] != '{' {
		return nil
	}
	var v struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(p, &v) != nil {
		return nil
	}
	return compactRaw(v.RequestID)
}

// readingRequests returns the ids of every reading of an ambiguous obj that
// sees a request (a method and no result or error), so that none of them
// can be used to answer a call in flight.
func readingRequests(obj []byte, m *member) []Request {
	var out []Request
	add := func(id, method, params json.RawMessage) {
		key, ok, _ := idKey(id)
		if !ok {
			return
		}
		i := slices.IndexFunc(out, func(r Request) bool { return r.Key == key })
		if i < 0 {
			out = append(out, Request{Key: key, ID: compactRaw(id)})
			i = len(out) - 1
		}
		// A reading that sees tools/list makes it one: its answer is
		// read for pins whichever reading the host took.
		if s, _ := jsonString(method); listShapes[s] != (listShape{}) && out[i].List == "" {
			out[i].List = s
			out[i].Cursor = out[i].Cursor || listCursor(params)
		}
	}
	if m.Method != nil {
		add(m.ID, m.Method, m.Params)
	}
	for _, r := range exactReadings(obj) {
		if method, ok := r["method"]; ok {
			add(r["id"], method, r["params"])
		}
	}
	return out
}

// initCaps returns the capabilities an initialize's params declare that
// shape a server's listings, as capsKey names them. A capability named in
// another case counts: some server reads it.
func initCaps(params json.RawMessage) string {
	p, _ := reading.Read(params).One()
	caps, _ := p.Lookup("capabilities")
	var names []string
	for _, n := range []string{"elicitation", "roots", "sampling"} {
		if v, why := caps.Lookup(n); why != "" || v != nil && v.Kind != reading.Null {
			names = append(names, n)
		}
	}
	return capsKey(names...)
}

// listCursor reports whether the params of a tools/list request give a
// cursor, as the one reading of them says.
func listCursor(params json.RawMessage) bool {
	p, ok := reading.Read(params).One()
	if !ok {
		return false
	}
	cur, _ := p.Lookup("cursor")
	return cur != nil
}

// envelope is what quickEnvelope reads of a plain JSON-RPC object.
type envelope struct {
	// id is the id member as sent (nil: none).
	id []byte
	// request is set when the object has a method (a request, or a
	// notification without an id); answer when it has result or error and
	// no method.
	request, answer bool
}

// classification is e as Classify reports it.
func (e envelope) classification() Classification {
	c := Classification{Shape: Single, elems: 1}
	switch {
	case e.request:
		if key, ok, _ := idKey(e.id); ok {
			c.Requests = []Request{{Key: key, ID: e.id}}
		}
	case e.answer:
		key, _, _ := idKey(e.id)
		c.Answers = []Answer{{Key: key, ID: compactRaw(e.id)}}
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
func quickEnvelope(t []byte) (envelope, bool) {
	if len(t) < 2 || t[0] != '{' || bytes.IndexByte(t, '\\') >= 0 || bytes.Contains(t, []byte("tools/call")) {
		return envelope{}, false
	}
	var id, method []byte
	var n [5]int // id, method, params, result, error: how often each is named
	// One pass reads the members and checks that t is one valid JSON
	// object, as json.Valid would, taking less: no escapes (checked
	// above), member names of plain ASCII, nesting at most
	// quickMaxDepth deep. Anything else is left to the slow path.
	i := skipJSONSpace(t, 1)
	if i >= len(t) {
		return envelope{}, false
	}
	if t[i] == '}' {
		i++
	} else {
		for {
			if t[i] != '"' {
				return envelope{}, false
			}
			start := i + 1
			for i = start; i < len(t) && t[i] != '"'; i++ {
				if t[i] < 0x20 || t[i] >= 0x80 {
					return envelope{}, false
				}
			}
			if i >= len(t) {
				return envelope{}, false
			}
			key := t[start:i]
			i = skipJSONSpace(t, i+1)
			if i >= len(t) || t[i] != ':' {
				return envelope{}, false
			}
			vstart := skipJSONSpace(t, i+1)
			vend, ok := skipPlainValue(t, vstart, 0)
			if !ok {
				return envelope{}, false
			}
			for j, name := range [...]string{"id", "method", "params", "result", "error"} {
				if string(key) == name {
					if n[j]++; n[j] > 1 {
						return envelope{}, false // a duplicate
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
					return envelope{}, false // another case of a deciding member
				}
			}
			i = skipJSONSpace(t, vend)
			if i >= len(t) {
				return envelope{}, false
			}
			if t[i] == '}' {
				i++
				break
			}
			if t[i] != ',' {
				return envelope{}, false
			}
			i = skipJSONSpace(t, i+1)
			if i >= len(t) {
				return envelope{}, false
			}
		}
	}
	if i != len(t) {
		return envelope{}, false
	}
	if method != nil {
		if !plainString(method) {
			return envelope{}, false
		}
		if m := string(method[1 : len(method)-1]); m == "tools/call" || m == "notifications/cancelled" || m == "initialize" || listShapes[m] != (listShape{}) {
			return envelope{}, false // read the slow way: calls, cancellations, and listings the pins follow
		}
		return envelope{id: id, request: true}, true
	}
	return envelope{id: id, answer: n[3] > 0 || n[4] > 0}, true
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

// decodeMember fills m as json.Unmarshal(obj, m) would, for the common
// frame, without reflection: obj must be one valid JSON object whose
// top-level member names are plain ASCII without escapes, none of them a
// duplicate of a member of m or one that differs from it only in case
// (encoding/json would match those; see ambiguousMember). It reports
// false, having changed nothing, for any other obj; the caller then
// decodes it the slow way. FuzzClassify holds the two to the same result.
func decodeMember(obj []byte, m *member) bool {
	if !json.Valid(obj) {
		return false
	}
	var got member
	ok := true
	eachTopLevelMember(obj, func(key, val []byte, plain bool) bool {
		var dst *json.RawMessage
		for i, name := range [...]string{"id", "method", "params", "result", "error"} {
			if !plain || len(key) == len(name) && string(key) != name && bytes.EqualFold(key, []byte(name)) {
				ok = false
				return false
			}
			if string(key) == name {
				dst = [...]*json.RawMessage{&got.ID, &got.Method, &got.Params, &got.Result, &got.Error}[i]
			}
		}
		if dst == nil {
			// encoding/json folds "ſ" (U+017F) to "s" and "K" (U+212A)
			// to "k"; a plain ASCII name can differ from ours only in
			// ASCII case, checked above.
			return true
		}
		if *dst != nil {
			ok = false // a duplicate: encoding/json keeps the last
			return false
		}
		*dst = append(json.RawMessage{}, val...)
		return true
	})
	if !ok {
		return false
	}
	*m = got
	return true
}

// eachTopLevelMember calls f with each top-level member of obj, a valid
// JSON object: its raw name (between the quotes), its value without the
// white space around it, and whether the name is plain (ASCII, no
// escapes), until f returns false.
func eachTopLevelMember(obj []byte, f func(key, val []byte, plain bool) bool) {
	i := 1
	skipWS := func() {
		for i < len(obj) && (obj[i] == ' ' || obj[i] == '\t' || obj[i] == '\n' || obj[i] == '\r') {
			i++
		}
	}
	for {
		skipWS()
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		start := i + 1
		plain := true
		for i++; i < len(obj) && obj[i] != '"'; i++ {
			if obj[i] == '\\' || obj[i] >= 0x80 {
				plain = false
				if obj[i] == '\\' {
					i++
				}
			}
		}
		key := obj[start:min(i, len(obj))]
		i++ // the closing quote
		skipWS()
		i++ // ':'
		skipWS()
		vstart := i
		depth, inStr := 0, false
	value:
		for ; i < len(obj); i++ {
			c := obj[i]
			if inStr {
				switch c {
				case '\\':
					i++
				case '"':
					inStr = false
				}
				continue
			}
			switch c {
			case '"':
				inStr = true
			case '{', '[':
				depth++
			case '}', ']':
				if depth == 0 {
					break value
				}
				depth--
			case ',':
				if depth == 0 {
					break value
				}
			}
		}
		val := bytes.TrimRight(obj[vstart:min(i, len(obj))], " \t\n\r")
		if !f(key, val, plain) {
			return
		}
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
	}
}

// plainString reports whether r, a JSON string token, holds only printable
// ASCII without escapes, so that its contents are its value.
func plainString(r []byte) bool {
	if len(r) < 2 || r[0] != '"' || r[len(r)-1] != '"' {
		return false
	}
	for _, c := range r[1 : len(r)-1] {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// readingAnswers returns the answers found by any of three readings of an
// ambiguous obj: encoding/json's (m), and the exact-name readings that keep
// the first and the last of duplicate members (JSON.parse keeps the last).
// A reading finds an answer where it sees result or error and no method,
// with an id that keys.
func readingAnswers(obj []byte, m *member, elem int) []Answer {
	var out []Answer
	add := func(id json.RawMessage) {
		key, _, _ := idKey(id)
		if !slices.ContainsFunc(out, func(a Answer) bool { return a.Key == key && bytes.Equal(a.ID, compactRaw(id)) }) {
			out = append(out, Answer{Key: key, ID: compactRaw(id), Elem: elem})
		}
	}
	if m.Method == nil && (m.Result != nil || m.Error != nil) {
		add(m.ID)
	}
	for _, r := range exactReadings(obj) {
		_, method := r["method"]
		_, result := r["result"]
		_, errm := r["error"]
		if !method && (result || errm) {
			add(r["id"])
		}
	}
	return out
}

// exactReadings reads the top-level members of obj, a valid JSON object, by
// exact name: once keeping the first of duplicate members and once the
// last. It is the slow path, for ambiguous objects only.
func exactReadings(obj []byte) []map[string]json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	first, last := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil
		}
		if _, ok := first[k]; !ok {
			first[k] = v
		}
		last[k] = v
	}
	return []map[string]json.RawMessage{first, last}
}

// ambiguousID is the id to answer an ambiguous call with: the id as sent
// when obj names it once and exactly (id, as decoded, is then that member),
// null when the id itself is ambiguous (JSON-RPC answers a request whose id
// cannot be told with a null id), nil when there is none.
func ambiguousID(obj []byte, id json.RawMessage) json.RawMessage {
	if ambiguousMember(obj, "id") != "" {
		return json.RawMessage("null")
	}
	return compactRaw(id)
}

// compactRaw returns raw without surrounding whitespace, or nil.
func compactRaw(raw json.RawMessage) json.RawMessage {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 {
		return nil
	}
	return r
}

// arguments returns params.arguments, or nil.
func arguments(params json.RawMessage) json.RawMessage {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || p[0] != '{' {
		return nil
	}
	var v struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(p, &v) != nil {
		return nil
	}
	return compactRaw(v.Arguments)
}

// toolName returns params.name when it is a string. The caller has made
// sure that params names it once (ambiguousMember).
func toolName(params json.RawMessage) (string, bool) {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || p[0] != '{' {
		return "", false
	}
	var v struct {
		Name json.RawMessage `json:"name"`
	}
	if json.Unmarshal(p, &v) != nil {
		return "", false
	}
	return jsonString(v.Name)
}

func jsonString(raw json.RawMessage) (string, bool) {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 || r[0] != '"' {
		return "", false
	}
	if plainString(r) {
		return string(r[1 : len(r)-1]), true
	}
	var s string
	if json.Unmarshal(r, &s) != nil {
		return "", false
	}
	return s, true
}

// idKey normalizes a JSON-RPC id for matching. Strings key as "s:" plus the
// decoded string; numbers as "n:" plus the exact rational value, so that
// ids beyond 2^53 keep every digit.
func idKey(raw json.RawMessage) (key string, ok bool, why string) {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 {
		return "", false, "tools/call without an id"
	}
	switch {
	case bytes.Equal(r, []byte("null")):
		return "", false, "tools/call with a null id"
	case r[0] == '"':
		s, ok := jsonString(r)
		if !ok {
			return "", false, "tools/call with an invalid id"
		}
		return "s:" + s, true, ""
	case r[0] == '-' || (r[0] >= '0' && r[0] <= '9'):
		if isPlainInteger(r) {
			if bytes.Equal(r, []byte("-0")) {
				return "n:0", true, ""
			}
			return "n:" + string(r), true, ""
		}
		// A fraction or exponent: normalize its value, unless the exponent
		// is large enough to make that expensive (1e999999999); such an id
		// keys by its text.
		if i := bytes.IndexAny(r, "eE"); i >= 0 {
			if e, err := strconv.Atoi(string(bytes.TrimPrefix(r[i+1:], []byte("+")))); err != nil || e > 64 || e < -64 {
				return "x:" + string(r), true, ""
			}
		}
		var q big.Rat
		if _, ok := q.SetString(string(r)); !ok {
			return "", false, "tools/call with an invalid id"
		}
		return "n:" + q.RatString(), true, ""
	}
	return "", false, "tools/call with an id that is not a string or number"
}

// appendPlainIDKey appends to dst the key idKey gives raw, without
// allocating, when raw is a plain integer other than -0 or a plain string
// (see plainString); it reports false for any other id, which the caller
// then keys with idKey. raw has no white space around it.
func appendPlainIDKey(dst, raw []byte) ([]byte, bool) {
	switch {
	case isPlainInteger(raw) && !bytes.Equal(raw, []byte("-0")):
		return append(append(dst, "n:"...), raw...), true
	case plainString(raw):
		return append(append(dst, "s:"...), raw[1:len(raw)-1]...), true
	}
	return dst, false
}

func isPlainInteger(r []byte) bool {
	if len(r) > 0 && r[0] == '-' {
		r = r[1:]
	}
	if len(r) == 0 {
		return false
	}
	for _, c := range r {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ambiguousMember says why one of names may mean different things to
// aegis and to the server among obj's top-level members, or returns "" when
// none may. Two things make a member ambiguous:
//   - it occurs more than once: parsers disagree on which one wins;
//   - its name differs from the expected one only in case ("Method",
//     "PARAMS", "param\u017f"): encoding/json, which classifies the frame,
//     matches member names as strings.EqualFold does, so it reads such a
//     member as the expected one (and the later one wins), while JSON.parse
//     and most other parsers take names exactly.
//
// obj need not be an object; then nothing is ambiguous.
func ambiguousMember(obj []byte, names ...string) string {
	if len(obj) == 0 || obj[0] != '{' {
		return ""
	}
	var seen [8]string // names is short; no allocation on the common path
	n := 0
	why := ""
	eachTopLevelKey(obj, func(key []byte) bool {
		for _, name := range names {
			if string(key) != name {
				if bytes.EqualFold(key, []byte(name)) {
					why = fmt.Sprintf("member %q, which differs from %q only in case", key, name)
					return false
				}
				continue
			}
			for i := 0; i < n; i++ {
				if seen[i] == name {
					why = "duplicate member " + strconv.Quote(name)
					return false
				}
			}
			if n < len(seen) {
				seen[n] = name
				n++
			}
		}
		return true
	})
	return why
}

// topLevelKeys returns the decoded member names of a JSON object that is
// known to be valid (json.Valid), in order.
func topLevelKeys(obj []byte) []string {
	var keys []string
	eachTopLevelKey(obj, func(k []byte) bool {
		keys = append(keys, string(k))
		return true
	})
	return keys
}

// eachTopLevelKey calls f with the decoded name of each top-level member
// of a JSON object that is known to be valid (json.Valid), in order, until
// f returns false. It scans the bytes: cheaper than a token decoder on the
// hot path, and it allocates only for names with escapes or non-ASCII
// bytes, which it decodes. f must not keep the slice.
func eachTopLevelKey(obj []byte, f func([]byte) bool) {
	depth := 0
	expectKey := false
	for i := 0; i < len(obj); i++ {
		switch c := obj[i]; c {
		case '{', '[':
			depth++
			expectKey = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		case '"':
			start := i
			esc := false // an escape or a non-ASCII byte: decode the name
			for i++; i < len(obj); i++ {
				if obj[i] >= 0x80 {
					esc = true
				}
				if obj[i] == '\\' {
					i++
					esc = true
					continue
				}
				if obj[i] == '"' {
					break
				}
			}
			if depth == 1 && expectKey {
				raw := obj[start:min(i+1, len(obj))]
				expectKey = false
				if esc {
					var k string
					if json.Unmarshal(raw, &k) == nil && !f([]byte(k)) {
						return
					}
				} else if len(raw) >= 2 && !f(raw[1:len(raw)-1]) {
					return
				}
			}
		}
	}
}

// mentionsToolsCall reports whether b names tools/call in any spelling a
// JSON or JavaScript parser would read as that string: literally, with an
// escaped solidus, or with \u escapes.
func mentionsToolsCall(b []byte) bool {
	if bytes.Contains(b, []byte("tools/call")) {
		return true
	}
	if !bytes.ContainsRune(b, '\\') {
		return false
	}
	return bytes.Contains(unescapeLoose(b), []byte("tools/call"))
}

// unescapeLoose undoes JSON string escapes anywhere in b, ignoring quotes.
func unescapeLoose(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		i++
		switch b[i] {
		case 'u':
			if i+4 < len(b) {
				if v, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 32); err == nil {
					out = utf8.AppendRune(out, rune(v))
					i += 4
					continue
				}
			}
			out = append(out, 'u')
		case 'x':
			if i+2 < len(b) {
				if v, err := strconv.ParseUint(string(b[i+1:i+3]), 16, 8); err == nil {
					out = append(out, byte(v))
					i += 2
					continue
				}
			}
			out = append(out, 'x')
		default:
			out = append(out, b[i])
		}
	}
	return out
}
