package gateway

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/schemas"
)

// The gateway's one reading of a frame (rpcRead): every layer of the
// gateway that looks at a host's or a server's frame (the cancel guard,
// the task layer, the plain-call path, the host's capabilities) looks at
// this reading of it, made once per frame from [reading.Read], never at
// the bytes. Invariants:
//
//   - Members are read by their exact names, as the go-sdk reads them
//     (case-sensitive), and ids are keyed as the SDK keys them
//     (jsonrpc.MakeID: a number by its integer value, a string as it is).
//   - A frame is ambiguous when some reader could take it differently
//     from another: anything [reading] marks anywhere in it (a member
//     given twice, nesting deeper than reading.MaxDepth, a number beyond
//     the double range or an integer beyond 2^53, NaN, lone surrogates,
//     invalid UTF-8, a byte order mark, more than one value), a text that
//     stops being JSON after a value, or a member that decides something
//     (jsonrpc, id, method, params, result, error; in params name,
//     arguments, task, taskId, requestId, _meta, capabilities; in _meta
//     progressToken and the related task; in capabilities roots, sampling,
//     elicitation, tasks) that a reader folding case finds in another
//     spelling ("Method", "Task").
//   - An ambiguous host frame is refused before any layer acts on it and
//     never reaches the SDK (see [gateway.hostTake]).
type rpcRead struct {
	// notJSON: the text holds no JSON value at all (nor the start of a
	// deep one); no layer takes it, the SDK answers it as it does.
	notJSON bool
	// batch holds a batch's messages; nil for one message.
	batch []rpcRead
	// isBatch: the text is a JSON array (a batch).
	isBatch bool

	v         *reading.Value // the message object; nil for anything else
	message   bool           // read as a JSON-RPC message by the SDK (jsonrpc.DecodeMessage)
	method    string
	hasMethod bool
	id        *reading.Value // nil when absent
	idKey     string         // "s:…" or "n:…"; "" when there is no valid id
	params    *reading.Value
	result    *reading.Value
	err       *reading.Value
	// ambiguous says why readers could take the frame differently; "" when
	// none could.
	ambiguous string
	// isCall: some reading of the frame names tools/call as its method.
	isCall bool
}

// topMembers are the members of a JSON-RPC message the SDK reads.
var topMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// paramMembers are the members of params that the gateway or the SDK
// decide on.
var paramMembers = []string{"name", "arguments", "task", "taskId", "requestId", "_meta", "capabilities", "cursor"}

// metaMembers are the members of _meta that the gateway routes by.
var metaMembers = []string{"progressToken", relatedTaskKey}

// capMembers are the capabilities of a host the gateway carries.
var capMembers = []string{"roots", "sampling", "elicitation", "tasks"}

// readRPC reads text, one frame, once.
func readRPC(text []byte) rpcRead {
	return readRPCOf(reading.Read(text))
}

// readRPCOf is the reading of a frame that rd is the reading of.
func readRPCOf(rd reading.Reading) rpcRead {
	if len(rd.Values) == 0 {
		if rd.Ambiguous != "" {
			return rpcRead{ambiguous: rd.Ambiguous}
		}
		return rpcRead{notJSON: true}
	}
	v := rd.Values[0]
	var r rpcRead
	if v.Kind == reading.Array {
		r.isBatch = true
		for _, e := range v.Elems {
			m := readMessage(e)
			if r.ambiguous == "" {
				r.ambiguous = m.ambiguous
			}
			r.isCall = r.isCall || m.isCall
			r.batch = append(r.batch, m)
		}
	} else {
		r = readMessage(v)
	}
	switch {
	case rd.Ambiguous != "":
		r.ambiguous = rd.Ambiguous
	case rd.Err != "" && r.ambiguous == "":
		r.ambiguous = "the text stops being JSON after its first value (" + rd.Err + ")"
	}
	return r
}

// readMessage reads one JSON-RPC message, as the SDK reads it.
func readMessage(v *reading.Value) rpcRead {
	r := rpcRead{}
	if v.Kind != reading.Object {
		return r
	}
	r.v = v
	amb := func(why string) {
		if why != "" && r.ambiguous == "" {
			r.ambiguous = why
		}
	}
	amb(v.Ambiguous)
	var vals [6]*reading.Value
	for i, name := range topMembers {
		m, why := v.Lookup(name)
		amb(why)
		vals[i] = m
	}
	tag, id, method := vals[0], vals[1], vals[2]
	r.id, r.params, r.result, r.err = id, vals[3], vals[4], vals[5]
	for _, m := range v.Members {
		if strings.EqualFold(m.Name, "method") {
			if s, _ := m.Value.String(); s == "tools/call" {
				r.isCall = true
			}
		}
	}
	if r.params != nil && r.params.Kind == reading.Object {
		for _, name := range paramMembers {
			_, why := r.params.Lookup(name)
			amb(why)
		}
		if meta, _ := r.params.Lookup("_meta"); meta != nil {
			for _, name := range metaMembers {
				_, why := meta.Lookup(name)
				amb(why)
			}
		}
		if caps, _ := r.params.Lookup("capabilities"); caps != nil {
			for _, name := range capMembers {
				_, why := caps.Lookup(name)
				amb(why)
			}
		}
	}
	// What jsonrpc.DecodeMessage accepts: the version tag, an id that
	// is null, a number or a string, a method that is a string, and an
	// id when there is no method.
	if s, ok := tag.String(); !ok || s != "2.0" {
		return r
	}
	idOK := id == nil || id.Kind == reading.Null || id.Kind == reading.String || id.Kind == reading.Number
	if id != nil {
		r.idKey = idKeyOf(id)
	}
	if method != nil {
		s, ok := method.String()
		if !ok && method.Kind != reading.Null {
			return r
		}
		r.method, r.hasMethod = s, true // null: a method named ""
	}
	if !idOK || !r.hasMethod && r.idKey == "" {
		return r
	}
	if r.err != nil && r.err.Kind != reading.Null && !wireError(r.err) {
		return r
	}
	r.message = true
	return r
}

// idKeyOf is a JSON-RPC id as a map key, as the SDK keys ids
// (jsonrpc.MakeID): a string as it is, a number by its integer part; ""
// for anything else.
func idKeyOf(id *reading.Value) string {
	switch id.Kind {
	case reading.String:
		return "s:" + id.Str
	case reading.Number:
		if !math.IsNaN(id.Num) && !math.IsInf(id.Num, 0) {
			return "n:" + strconv.FormatInt(int64(id.Num), 10)
		}
	}
	return ""
}

// recordDropped records a frame the gateway took out of a stream and did
// not pass on.
func (g *gateway) recordDropped(direction string, text []byte, why string) {
	if g.sess == nil {
		return
	}
	rc, err := g.sess.Fact(schemas.KindFrameDropped, map[string]string{"direction": direction, "frame_digest": proxy.Digest(bytes.TrimSpace(text)), "reason": why})
	if err == nil {
		_, err = rc.Wait(g.tk.base)
	}
	if err != nil {
		g.log.Warn("record a dropped frame", "err", err)
	}
}

// wireError reports whether v decodes as a JSON-RPC error object, as the
// SDK decodes one (code an integer, message a string, when present).
func wireError(v *reading.Value) bool {
	if v.Kind != reading.Object {
		return false
	}
	if c, _ := v.Lookup("code"); c != nil && c.Kind != reading.Null {
		if _, err := strconv.ParseInt(string(c.Raw), 10, 64); err != nil || c.Kind != reading.Number {
			return false // an int64 in integer syntax
		}
	}
	if m, _ := v.Lookup("message"); m != nil && m.Kind != reading.String && m.Kind != reading.Null {
		return false
	}
	return true
}

// raw is the raw bytes of a member, nil when it is absent.
func raw(v *reading.Value) json.RawMessage {
	if v == nil {
		return nil
	}
	return v.Raw
}

// idRaw is the id as the gateway writes it back: a string as it was sent,
// a number as the SDK writes it (its integer part).
func (r rpcRead) idRaw() json.RawMessage {
	switch {
	case r.id == nil || r.idKey == "":
		return nil
	case r.id.Kind == reading.Number:
		return json.RawMessage(r.idKey[2:])
	}
	return r.id.Raw
}

// frame is the reading as the task layer's frame type.
func (r rpcRead) frame() rpcFrame {
	f := rpcFrame{JSONRPC: "2.0", ID: r.idRaw(), Method: r.method, Params: raw(r.params), Result: raw(r.result)}
	if r.err != nil && r.err.Kind == reading.Object {
		var e jsonrpc.Error
		if json.Unmarshal(r.err.Raw, &e) == nil {
			f.Error = &e
		}
	}
	return f
}

// strMember returns the string member name of an object value, when it is one
// that every reader reads the same: "" and false otherwise.
func strMember(v *reading.Value, name string) (string, bool) {
	m, why := v.Get(name)
	if why != "" {
		return "", false
	}
	return m.String()
}

// memberAt reads raw (a result, a capability) and returns the value at
// path, member by member by exact names, and whether every reader reads
// it so: false when raw is no single value, a member on the way is absent,
// given twice or in another case too, or the value is ambiguous.
func memberAt(raw json.RawMessage, path ...string) (*reading.Value, bool) {
	v, ok := reading.Read(raw).One()
	if !ok {
		return nil, false
	}
	for _, name := range path {
		m, why := v.Get(name)
		if why != "" || m == nil {
			return nil, false
		}
		v = m
	}
	return v, v.Ambiguous == ""
}

// present reports whether the value at path exists, is not null and reads
// the same to every reader.
func present(raw json.RawMessage, path ...string) bool {
	v, ok := memberAt(raw, path...)
	return ok && v.Kind != reading.Null
}

// hostTake is the gateway's take of one frame from the host (a complete
// JSON value, or a text that is none): it refuses an ambiguous frame, lets
// the cancel guard follow the frame, and hands it to the task layer. It
// returns true when the frame is taken out of the SDK's stream.
func (g *gateway) hostTake(text []byte, rd reading.Reading) bool {
	return g.hostTakeRead(text, readRPCOf(rd))
}

// hostTakeRead is hostTake of the frame text, whose reading is r.
func (g *gateway) hostTakeRead(text []byte, r rpcRead) bool {
	if r.notJSON {
		return false
	}
	if r.ambiguous != "" {
		g.refuseAmbiguous(r, text)
		return true
	}
	g.fw.guard.hostFrame(r)
	if r.isBatch {
		return false
	}
	return g.tk.hostLine(r)
}

// refuseAmbiguous refuses a host frame that readers could take
// differently: a tools/call in it is recorded as a call refused (intent
// and outcome), the frame as dropped, and a request whose id reads the
// same to every reader is answered with -32600.
func (g *gateway) refuseAmbiguous(r rpcRead, text []byte) {
	why := r.ambiguous
	dg := proxy.Digest(bytes.TrimSpace(text))
	msgs := []rpcRead{r}
	if r.isBatch {
		msgs = r.batch
	}
	for _, m := range msgs {
		if !m.isCall {
			continue
		}
		wc := schemas.WrapCall{CallID: g.sess.NextCallID(), ToolID: rpc.UnknownTool, RequestDigest: dg, PolicySetHash: schemas.WrapPassthroughPolicySetHash}
		if name, ok := strMember(m.params, "name"); ok && m.ambiguous == "" {
			wc.ToolID = name
		}
		reason := "ambiguous tools/call: " + why
		o := wc.Malformed()
		o.Policy = schemas.PolicyDenied(reason)
		o.Capability = schemas.CapabilityDenied(reason)
		in := wc.Intent()
		in.Principal = g.cfg.Principal
		if _, err := g.sess.Intent(in); err != nil {
			g.log.Warn("record a refused call", "err", err)
		} else if _, err := g.sess.Outcome(o); err != nil {
			g.log.Warn("record a refused call", "err", err)
		}
	}
	g.recordDropped("c2s", text, "aegis refused a frame that JSON readers read differently: "+why)
	g.log.Warn("refused a frame from the host that JSON readers read differently; send each member once, named in lower case, one JSON value per line", "reason", why)
	if r.isBatch || r.v == nil {
		return
	}
	idAmb := r.id != nil && r.id.Ambiguous != ""
	if _, w := r.v.Lookup("id"); w != "" {
		idAmb = true
	}
	request := false // by some reading: a member named method in any case
	for _, m := range r.v.Members {
		request = request || strings.EqualFold(m.Name, "method")
	}
	switch {
	case idAmb || r.idKey == "":
	case !request:
		// The host's answer to the gateway's own request is an error.
		if id, ok := r.id.String(); ok && strings.HasPrefix(id, rawIDPrefix) && g.tk.hostRaw != nil {
			g.tk.hostRaw.deliver(id, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "aegis: the host answered with a frame that JSON readers read differently: " + why})
		}
	default:
		if g.tk.out != nil {
			g.tk.out.frame(reply(r.idRaw(), nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: "aegis: refused a frame that JSON readers read differently: " + why}))
		}
	}
}

// foldedStrings are the string values of v's members whose names equal
// name under case folding: every value some reader could take for it.
func foldedStrings(v *reading.Value, name string) []string {
	var out []string
	for _, m := range v.Members {
		if strings.EqualFold(m.Name, name) {
			if s, ok := m.Value.String(); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
