package rpc

import (
	"bytes"
	"cmp"
	"encoding/json"
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
	// TraceParent is params._meta.traceparent (MCP SEP-414) when it is one
	// unambiguous string of a traceparent's length; the relay checks its
	// form (schemas.ParseTraceParent) before it records it.
	TraceParent string
	// Reused is set by the relay, with Malformed, when the call's id is
	// already in flight (or given twice in its frame) under the exact or
	// the loose reading: its answer could not be told from the other's,
	// so the relay refuses it.
	Reused bool
	// valueAmbiguous is set, with Ambiguous, when what readers take
	// differently is the method's or the tool name's string itself (a lone
	// surrogate, invalid UTF-8), not a member.
	valueAmbiguous bool
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
	// capabilities it declares that shape a server's listings (CapsKey).
	Init bool
	Caps string
	// URLElicitation is set for an initialize that declares
	// capabilities.elicitation.url as an object, read the same by every
	// reader (hostURLElicitation).
	URLElicitation bool
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
	// Elems counts the elements read, numbering Answer.Elem.
	Elems int
	// Reused is set by the relay: a request reuses a call's id in flight.
	Reused bool
}

// UnknownTool is the tool_id recorded for a tools/call without a usable
// params.name.
const UnknownTool = "<unknown>"

// Classify reads one frame (without its line terminator). It never fails:
// anything it cannot read is Opaque. It is pure and safe on any input.
func Classify(frame []byte) Classification {
	return classify(frame, true)
}

// classify is Classify, with the quick reading of plain envelopes
// (quickEnvelope) when quick is set; FuzzClassify holds the two to the
// same result. Everything else is read once, by the one reading of frames
// ([reading.Read]), and decided on that reading alone.
func classify(frame []byte, quick bool) Classification {
	t := bytes.TrimSpace(frame)
	if len(t) == 0 {
		return Classification{Shape: Opaque}
	}
	if quick {
		if e, ok := quickEnvelope(t); ok {
			return e.Classification()
		}
	}
	// The calls, answers and requests hold parts of the frame beyond the
	// relay's use of its buffer; one copy serves them all.
	t = bytes.Clone(t)
	if bytes.HasPrefix(t, []byte("\xef\xbb\xbf")) {
		// A byte order mark: JSON.parse, Python's json and Go refuse the
		// text, a lenient reader skips it. No value of it is followable.
		return classifyOpaque(t, reading.Reading{})
	}
	r := reading.Read(t)
	v, ok := r.One()
	if !ok {
		return classifyOpaque(t, r)
	}
	switch v.Kind {
	case reading.Object:
		c := Classification{Shape: Single}
		classifyObject(v, &c)
		return c
	case reading.Array:
		c := Classification{Shape: Batch}
		for _, e := range v.Elems {
			if e.Kind == reading.Object {
				classifyObject(e, &c)
			} else if MentionsToolsCall(e.Raw) {
				c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "batch element is not an object but mentions tools/call", Unreadable: true})
			}
		}
		return c
	}
	// A bare scalar. A string could still name tools/call to a lenient peer.
	c := Classification{Shape: Opaque}
	if MentionsToolsCall(t) {
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "frame is not a JSON-RPC object but mentions tools/call", Unreadable: true})
	}
	return c
}

// classifyOpaque handles a frame that is not one JSON value. A stream
// decoder in the server may still read JSON values out of it (several
// objects on one line, or one object spread over several lines), so every
// complete value is classified, and a frame that mentions tools/call in any
// spelling is recorded as a malformed call.
func classifyOpaque(t []byte, r reading.Reading) Classification {
	c := Classification{Shape: Opaque}
	for _, v := range r.Values {
		if v.Kind == reading.Object {
			classifyObject(v, &c)
		}
	}
	// Calls read from complete values stay followable: a stream-decoding
	// server answers them. Anything else that names tools/call, also after
	// the last value that could be read (a reader that skips what it
	// cannot parse may find a call there), is recorded as a malformed call.
	tail := t
	if len(c.Calls) > 0 {
		tail = t[r.End:]
	}
	if MentionsToolsCall(tail) {
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "frame is not one JSON value but mentions tools/call", Unreadable: true})
	}
	return c
}

// classifyObject classifies one JSON-RPC object of a frame.
func classifyObject(obj *reading.Value, c *Classification) {
	elem := c.Elems
	c.Elems++
	id, whyID := obj.Lookup("id")
	method, whyMethod := obj.Lookup("method")
	params, whyParams := obj.Lookup("params")
	result, whyResult := obj.Lookup("result")
	errv, whyErr := obj.Lookup("error")
	if why := cmp.Or(whyID, whyMethod, whyParams, whyResult, whyErr); why != "" {
		classifyAmbiguous(obj, why, elem, c)
		return
	}
	if method == nil {
		if result != nil || errv != nil {
			// An id that does not key (null, an object) still answers a
			// host that reads ids loosely, so it is kept with an empty key.
			key, _, _ := idKeyOf(id)
			c.Answers = append(c.Answers, Answer{Key: key, ID: rawOf(id), Elem: elem})
		}
		return
	}
	name, isString := method.String()
	switch {
	case !isString:
		if MentionsToolsCall(method.Raw) {
			c.Calls = append(c.Calls, Call{Tool: UnknownTool, Malformed: "method is not a string", Unreadable: true})
		}
		return
	case method.Ambiguous != "" && MentionsToolsCall(method.Raw):
		// A method that readers decode differently (a lone surrogate,
		// invalid UTF-8) and that names tools/call to some of them.
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, ID: rawOf(id), Malformed: "ambiguous tools/call: method: " + method.Ambiguous, Ambiguous: true, valueAmbiguous: true})
		return
	case name != "tools/call":
		if key, ok, _ := idKeyOf(id); ok {
			q := Request{Key: key, ID: rawOf(id)}
			switch _, list := ListShapes[name]; {
			case list:
				q.List, q.Cursor = name, listCursor(params)
			case name == "initialize":
				q.Init, q.Caps, q.URLElicitation = true, initCaps(params), hostURLElicitation(params)
			}
			c.Requests = append(c.Requests, q)
		}
		if name == "notifications/cancelled" {
			c.Cancels = append(c.Cancels, requestIDs(params)...)
		}
		return
	}
	toolV, whyName := params.Lookup("name")
	argsV, whyArgs := params.Lookup("arguments")
	if why := cmp.Or(whyName, whyArgs); why != "" {
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, ID: rawOf(id), Malformed: "ambiguous tools/call: params has " + why, Ambiguous: true})
		return
	}
	tool, named := toolV.String()
	if named && toolV.Ambiguous != "" {
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, ID: rawOf(id), Malformed: "ambiguous tools/call: params.name: " + toolV.Ambiguous, Ambiguous: true, valueAmbiguous: true})
		return
	}
	call := Call{Tool: UnknownTool, ID: rawOf(id), Args: rawOf(argsV)}
	key, idOK, idWhy := idKeyOf(id)
	switch {
	case !idOK:
		call.Malformed = idWhy
	case !named:
		call.Malformed = "tools/call without a string params.name"
	default:
		call.Key = key
	}
	if named {
		call.Tool, call.Named = tool, true
	}
	call.TraceParent = traceParent(params)
	c.Calls = append(c.Calls, call)
}

// traceParentLen is the length of a version-00 W3C traceparent.
const traceParentLen = 55

// traceParent returns params._meta.traceparent when every reader reads it
// as the same string of a traceparent's length, else "".
func traceParent(params *reading.Value) string {
	meta, why := params.Get("_meta")
	if why != "" {
		return ""
	}
	tp, why := meta.Get("traceparent")
	if why != "" {
		return ""
	}
	if s, ok := tp.String(); ok && len(s) == traceParentLen {
		return s
	}
	return ""
}

// SelfRefusalHint is what to do about a call the relay refuses for itself
// (see Call): the hint of its refusal.
func SelfRefusalHint(c Call) string {
	switch {
	case c.Reused:
		return "give each request an id of its own until it is answered"
	case c.Ambiguous && c.valueAmbiguous:
		return "send the method and the tool's name as UTF-8 strings without lone surrogate escapes"
	case c.Ambiguous:
		return "send each member once, with its name in lower case"
	}
	return "send it as one JSON-RPC object on one line"
}

// classifyAmbiguous classifies obj, a JSON-RPC object whose deciding
// members (id, method, params, result, error) readers may take
// differently (why says how). One reader may see an answer where another
// sees a request, or another id. Every call that any reading answers is
// closed before the frame is relayed; one that names tools/call is an
// ambiguous call, refused since aegis cannot know which call the server
// would run; otherwise every id that any reading requests with is tracked,
// and every cancellation any reading sees is followed.
func classifyAmbiguous(obj *reading.Value, why string, elem int, c *Classification) {
	rs := envelopeReadings(obj)
	for _, r := range rs {
		if r.method == nil && (r.result != nil || r.err != nil) {
			key, _, _ := idKeyOf(r.id)
			a := Answer{Key: key, ID: rawOf(r.id), Elem: elem}
			if !slices.ContainsFunc(c.Answers, func(b Answer) bool { return b.Elem == elem && b.Key == a.Key && bytes.Equal(b.ID, a.ID) }) {
				c.Answers = append(c.Answers, a)
			}
		}
	}
	hasMethod := slices.ContainsFunc(rs, func(r envelopeReading) bool { return r.method != nil })
	if hasMethod && MentionsToolsCall(obj.Raw) {
		// The id to answer with: the id as sent when obj names it once
		// and exactly, null when the id itself is ambiguous (JSON-RPC
		// answers a request whose id cannot be told with a null id).
		id, whyID := obj.Lookup("id")
		raw := rawOf(id)
		if whyID != "" {
			raw = json.RawMessage("null")
		}
		c.Calls = append(c.Calls, Call{Tool: UnknownTool, ID: raw, Malformed: "ambiguous tools/call: " + why, Ambiguous: true})
		return
	}
	var out []Request
	for _, r := range rs {
		if r.method == nil {
			continue
		}
		key, ok, _ := idKeyOf(r.id)
		if ok {
			i := slices.IndexFunc(out, func(q Request) bool { return q.Key == key })
			if i < 0 {
				out = append(out, Request{Key: key, ID: rawOf(r.id)})
				i = len(out) - 1
			}
			// A reading that sees tools/list makes it one: its answer is
			// read for pins whichever reading the host took.
			if s, _ := r.method.String(); ListShapes[s] != (ListShape{}) && out[i].List == "" {
				out[i].List = s
				out[i].Cursor = out[i].Cursor || listCursor(r.params)
			}
		}
		if s, _ := r.method.String(); s == "notifications/cancelled" {
			for _, id := range requestIDs(r.params) {
				if !slices.ContainsFunc(c.Cancels, func(x json.RawMessage) bool { return bytes.Equal(x, id) }) {
					c.Cancels = append(c.Cancels, id)
				}
			}
		}
	}
	c.Requests = append(c.Requests, out...)
}

// envelopeReading is one reader's take on an object's deciding members.
type envelopeReading struct {
	id, method, params, result, err *reading.Value
}

// envelopeReadings returns the ways readers take obj's deciding members:
// by case-folded name keeping the last (encoding/json matches a struct's
// fields in any case), by exact name keeping the first or the last of a
// duplicate (JSON.parse keeps the last, some readers the first), and by
// case-folded name keeping the first.
func envelopeReadings(obj *reading.Value) []envelopeReading {
	names := [...]string{"id", "method", "params", "result", "error"}
	var folded [len(names)]string
	for i, n := range names {
		folded[i] = reading.Fold(n)
	}
	read := func(fold, last bool) envelopeReading {
		var r envelopeReading
		dsts := [...]**reading.Value{&r.id, &r.method, &r.params, &r.result, &r.err}
		for _, m := range obj.Members {
			for i, n := range names {
				if m.Name == n || fold && reading.Fold(m.Name) == folded[i] {
					if last || *dsts[i] == nil {
						*dsts[i] = m.Value
					}
					break
				}
			}
		}
		return r
	}
	// encoding/json's first: what Go hosts and servers read.
	return []envelopeReading{read(true, true), read(false, false), read(false, true), read(true, false)}
}

// requestIDs returns params.requestId of a notifications/cancelled as
// sent: every member that some reader takes for it (another case, a
// duplicate), since a server that cancels on any of them stops that call.
func requestIDs(params *reading.Value) []json.RawMessage {
	if params == nil || params.Kind != reading.Object {
		return nil
	}
	want := reading.Fold("requestId")
	var out []json.RawMessage
	for _, m := range params.Members {
		if m.Name == "requestId" || reading.Fold(m.Name) == want {
			out = append(out, m.Value.Raw)
		}
	}
	return out
}

// initCaps returns the capabilities an initialize's params declare that
// shape a server's listings, as CapsKey names them. A capability named in
// another case counts: some server reads it.
func initCaps(params *reading.Value) string {
	caps, _ := params.Lookup("capabilities")
	var names []string
	for _, n := range []string{"elicitation", "roots", "sampling"} {
		if v, why := caps.Lookup(n); why != "" || v != nil && v.Kind != reading.Null {
			names = append(names, n)
		}
	}
	return CapsKey(names...)
}

// hostURLElicitation reports whether an initialize's params declare
// capabilities.elicitation.url as an object. A declaration that readers
// may take differently (a member given twice or in another case on the
// way) counts as none: the host then gets the refusal every host gets.
func hostURLElicitation(params *reading.Value) bool {
	v := params
	for _, name := range []string{"capabilities", "elicitation", "url"} {
		m, why := v.Get(name)
		if why != "" || m == nil {
			return false
		}
		v = m
	}
	return v.Kind == reading.Object
}

// listCursor reports whether the params of a list request give a cursor.
func listCursor(params *reading.Value) bool {
	cur, _ := params.Lookup("cursor")
	return cur != nil
}

// rawOf is v's bytes as sent, or nil when v is absent.
func rawOf(v *reading.Value) json.RawMessage {
	if v == nil {
		return nil
	}
	return v.Raw
}

// idKeyOf is IDKey of an id member as read (nil: none).
func idKeyOf(id *reading.Value) (key string, ok bool, why string) {
	return IDKey(rawOf(id))
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

// compactRaw returns raw without surrounding whitespace, or nil.
func compactRaw(raw json.RawMessage) json.RawMessage {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 {
		return nil
	}
	return r
}

// MentionsToolsCall reports whether b names tools/call in any spelling a
// JSON or JavaScript parser would read as that string: literally, with an
// escaped solidus, or with \u escapes.
func MentionsToolsCall(b []byte) bool {
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
