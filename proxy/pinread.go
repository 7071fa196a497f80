package proxy

import (
	"encoding/json"
	"strconv"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/schemas"
)

// Reading a tools/list result for pins. It decides on the one reading of
// the frame (package reading) and on nothing else, so what it pins is what
// every host reads. Invariants:
//
//   - A tool is pinned to the whole object the host receives (scheme 2 of
//     schemas.ToolObjectDigest): every member, _meta, icons and execution
//     included.
//   - A definition that readers could take two ways (a member given twice,
//     nesting past reading.MaxDepth, a number beyond the double range, a
//     lone surrogate…) is never digested: its entry is unreadable, and the
//     tool is refused and recorded as such, never as removed.
//   - A listing whose structure readers could take two ways (the result's
//     tools or nextCursor, or a tool's name, given twice or in another
//     case) cannot say which tools the host holds: the whole listing is
//     unreadable, and the server's calls are held until a listing that
//     reads one way.

// listedTool is one entry of a listing, as the reading took it.
type listedTool struct {
	name string
	seen toolSeen
}

// readListing reads the result of a list answer of shape sh. why is set
// when the listing as a whole cannot be read one way; more when a
// nextCursor says more pages follow.
func readListing(result *reading.Value, sh rpc.ListShape) (entries []listedTool, more bool, why string) {
	if result == nil || result.Kind != reading.Object {
		return nil, false, "" // an error answer, or no result a host reads as one
	}
	tools, why := result.Lookup(sh.Member)
	if why != "" {
		return nil, false, "the result's " + why
	}
	next, why := result.Get("nextCursor")
	if why != "" {
		return nil, false, "the result's " + why
	}
	if s, ok := next.String(); ok && s != "" {
		more = true
	} else if next != nil && next.Kind != reading.Null && next.Kind != reading.String {
		return nil, false, "the result's nextCursor is no string"
	}
	if tools == nil {
		return nil, more, ""
	}
	if tools.Kind != reading.Array {
		return nil, false, "the result's " + sh.Member + " is no array"
	}
	for i, e := range tools.Elems {
		if e.Kind != reading.Object {
			continue // no tool a host could call by name
		}
		nv, why := e.Lookup(sh.Key)
		if why == "" && nv != nil {
			why = nv.Ambiguous
		}
		if why != "" {
			return nil, false, "entry " + strconv.Itoa(i+1) + " of the listing: " + why
		}
		name, ok := nv.String()
		if !ok || name == "" {
			continue
		}
		entries = append(entries, listedTool{name: name, seen: seeTool(e)})
	}
	return entries, more, ""
}

// seeTool digests one tool object, or says why it cannot be pinned.
func seeTool(e *reading.Value) toolSeen {
	if e.Ambiguous != "" {
		return toolSeen{bad: e.Ambiguous, change: schemas.ToolChangeUnreadable}
	}
	dg, fields, err := schemas.ToolObjectDigest(e.Raw)
	if err != nil {
		return toolSeen{bad: err.Error(), change: schemas.ToolChangeUnreadable}
	}
	var s1 string
	if old, err := schemas.ParseToolDefinition(e.Raw); err == nil {
		s1, _ = old.Digest()
	}
	return toolSeen{digest: dg, fields: fields, scheme1: s1}
}

// readInstructions reads the instructions of an initialize result: one
// entry named "instructions", none when the server gives none.
func readInstructions(result *reading.Value) ([]listedTool, string) {
	if result == nil || result.Kind != reading.Object {
		return nil, ""
	}
	v, why := result.Lookup("instructions")
	if why != "" {
		return nil, "the result's " + why
	}
	if v == nil || v.Kind == reading.Null {
		return nil, ""
	}
	if v.Kind != reading.String || v.Ambiguous != "" {
		return []listedTool{{name: schemas.PinKindInstructions, seen: toolSeen{bad: "instructions that are no plain string: " + v.Ambiguous, change: schemas.ToolChangeUnreadable}}}, ""
	}
	obj, ok := reading.Read(append(append([]byte(`{"instructions":`), v.Raw...), '}')).One()
	if !ok {
		return []listedTool{{name: schemas.PinKindInstructions, seen: toolSeen{bad: "instructions that cannot be read", change: schemas.ToolChangeUnreadable}}}, ""
	}
	return []listedTool{{name: schemas.PinKindInstructions, seen: seeTool(obj)}}, ""
}

// ListedTool is one entry of a listing, as [ReadObjects] and
// [InstructionsOf] read it for a [PinBook].
type ListedTool = listedTool

// InstructionsOf reads a server's instructions, as the gateway's SDK
// client decoded them from its initialize result, into the one entry
// named "instructions" that wrap's reading of the result gives (the same
// digest: of {"instructions": text}); none when it gave none.
func InstructionsOf(text string) []listedTool {
	if text == "" {
		return nil
	}
	b, err := json.Marshal(map[string]string{"instructions": text})
	obj, ok := reading.Read(b).One()
	if err != nil || !ok {
		return []listedTool{{name: schemas.PinKindInstructions, seen: toolSeen{bad: "instructions that cannot be read", change: schemas.ToolChangeUnreadable}}}
	}
	return []listedTool{{name: schemas.PinKindInstructions, seen: seeTool(obj)}}
}

// ReadObjects reads objects the gateway shows its host, each named by its
// member key, into entries.
func ReadObjects(raws [][]byte, key string) []listedTool {
	out := make([]listedTool, 0, len(raws))
	for _, raw := range raws {
		v, ok := reading.Read(raw).One()
		if !ok {
			continue
		}
		nv, _ := v.Lookup(key)
		name, ok := nv.String()
		if !ok || name == "" {
			continue
		}
		out = append(out, listedTool{name: name, seen: seeTool(v)})
	}
	return out
}
