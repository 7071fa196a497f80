package projector

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// Pin is one tool pinned to the digest of its definition: the fold of the
// tool.pinned and pins.reset events of the stream, per server and tool.
// Pins outlive the session that made them; [Index] keeps them, so a start
// reads them from its snapshot, never from the whole stream.
type Pin struct {
	// Kind is what is pinned: "" for a tool, else a schemas.PinKind.
	Kind   string            `json:"kind,omitempty"`
	Server string            `json:"server"`
	Tool   string            `json:"tool"`
	Digest string            `json:"digest"`
	Fields map[string]string `json:"fields,omitempty"`
	// Since is when the pin was made, Session the session that made it,
	// Reason why (first sight, an approval, on_tool_change: allow).
	Since   time.Time `json:"since"`
	Session string    `json:"session"`
	Reason  string    `json:"reason,omitempty"`
	// Scheme is the digest's scheme (schemas.ToolPinScheme; 0: scheme 1).
	Scheme int `json:"scheme,omitempty"`
	// Caps are the host capabilities the tool was first pinned under
	// (schemas.ToolPinned.Caps); CapsKnown is false for pins of versions
	// that did not say.
	Caps      string `json:"caps,omitempty"`
	CapsKnown bool   `json:"caps_known,omitempty"`
}

// Under reports whether p counts for a host with capabilities caps: it was
// pinned under them, or by a version that did not say under which.
func (p Pin) Under(caps string) bool { return !p.CapsKnown || p.Caps == caps }

// PinSet is the pins of the servers, by server and PinKey. Its fold is
// pure.
type PinSet map[string]map[string]Pin

// PinKey keys a pin within its server: a tool by its name, anything else
// by its kind and name, so that a prompt never shares a tool's pin.
func PinKey(kind, name string) string {
	if kind == "" {
		return name
	}
	return kind + "\x00" + name
}

// Fold applies one event: tool.pinned sets a pin, pins.reset removes the
// server's pins (or one tool's); every other event is ignored. It reports
// whether the set changed.
func (ps PinSet) Fold(e schemas.Event) bool {
	switch e.Kind {
	case schemas.KindToolPinned:
		var p schemas.ToolPinned
		if json.Unmarshal(e.Payload, &p) != nil || p.Server == "" || p.Tool == "" || p.Digest == "" {
			return false
		}
		m := ps[p.Server]
		if m == nil {
			m = map[string]Pin{}
			ps[p.Server] = m
		}
		m[PinKey(p.Kind, p.Tool)] = Pin{Kind: p.Kind, Server: p.Server, Tool: p.Tool, Digest: p.Digest, Fields: p.Fields, Since: e.Time.UTC(), Session: e.Session, Reason: p.Reason, Scheme: p.Scheme, Caps: deref(p.Caps), CapsKnown: p.Caps != nil}
		return true
	case schemas.KindPinsReset:
		var r schemas.PinsReset
		if json.Unmarshal(e.Payload, &r) != nil || r.Server == "" {
			return false
		}
		if r.Tool == "" {
			_, had := ps[r.Server]
			delete(ps, r.Server)
			return had
		}
		m := ps[r.Server]
		key := PinKey(r.Kind, r.Tool)
		if p, had := m[key]; !had || p.Digest == "" {
			return false
		}
		// Kept without a digest: the server's next listing pins the tool
		// at first sight, not as one added after the others.
		m[key] = Pin{Kind: r.Kind, Server: r.Server, Tool: r.Tool, Since: e.Time.UTC(), Session: e.Session, Reason: "reset"}
		return true
	}
	return false
}

// Server returns a copy of server's pins of kind ("" for tools), by name.
func (ps PinSet) Server(server, kind string) map[string]Pin {
	out := make(map[string]Pin, len(ps[server]))
	for _, v := range ps[server] {
		if v.Kind == kind {
			out[v.Tool] = v
		}
	}
	return out
}

// List returns every pin, by server then tool; server, if not empty, keeps
// only that server's. A tool whose pin was reset alone is not listed.
func (ps PinSet) List(server string) []Pin { return ps.list(server, false) }

func (ps PinSet) list(server string, resets bool) []Pin {
	var out []Pin
	for s, m := range ps {
		if server != "" && s != server {
			continue
		}
		for _, p := range m {
			if p.Digest != "" || resets {
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Server != out[j].Server {
			return out[i].Server < out[j].Server
		}
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Tool < out[j].Tool
	})
	return out
}

// foldPins keeps the index's pins; a change is saved with the next head.
func (ix *Index) foldPins(rec events.Record) {
	if rec.Event.Kind != schemas.KindToolPinned && rec.Event.Kind != schemas.KindPinsReset {
		return
	}
	if ix.pins == nil {
		ix.pins = PinSet{}
	}
	if ix.pins.Fold(rec.Event) {
		ix.filesNew = true
	}
}

// Pins returns the pins the index holds, as of the last event folded:
// every server's, or only server's.
func (ix *Index) Pins(server string) []Pin { return ix.pins.List(server) }

// ServerPins returns a copy of one server's tool pins, by tool; a tool
// whose pin was reset alone has one without a digest.
func (ix *Index) ServerPins(server string) map[string]Pin { return ix.pins.Server(server, "") }

// pinsSnap and restorePins carry the pins in the snapshot's head.
func (ix *Index) pinsSnap() []Pin { return ix.pins.list("", true) }

func (ix *Index) restorePins(ps []Pin) {
	if len(ps) == 0 {
		return
	}
	ix.pins = PinSet{}
	for _, p := range ps {
		m := ix.pins[p.Server]
		if m == nil {
			m = map[string]Pin{}
			ix.pins[p.Server] = m
		}
		m[PinKey(p.Kind, p.Tool)] = p
	}
}

func (ps PinSet) clone() PinSet {
	out := make(PinSet, len(ps))
	for s, m := range ps {
		c := make(map[string]Pin, len(m))
		for k, v := range m {
			c[k] = v
		}
		out[s] = c
	}
	return out
}

// Pins returns one server's pins of kind ("" for tools) as they stood when
// the session opened (its index was folded to the stream's end then), by
// name.
func (s *Session) Pins(server, kind string) map[string]Pin { return s.pins.Server(server, kind) }

// pinText is the transcript's line for a pin event.
func pinText(kind schemas.Kind, payload json.RawMessage) string {
	switch kind {
	case schemas.KindToolPinned:
		var p schemas.ToolPinned
		json.Unmarshal(payload, &p)
		return fmt.Sprintf("%s %s of %s to %s (%s)", pinNoun(p.Kind), Printable(p.Tool), Printable(p.Server), short(p.Digest, 16), Printable(p.Reason))
	case schemas.KindToolChanged:
		var c schemas.ToolChanged
		json.Unmarshal(payload, &c)
		what := c.Change
		switch c.Change {
		case schemas.ToolChangeChanged:
			what = "changed since it was pinned"
			if len(c.Fields) > 0 {
				what += " (" + strings.Join(c.Fields, ", ") + ")"
			}
			what += ": " + short(c.Pinned, 16) + " → " + short(c.Digest, 16)
		case schemas.ToolChangeAdded:
			what = "added after the server's tools were pinned: " + short(c.Digest, 16)
		case schemas.ToolChangeRemoved:
			what = "no longer listed (pinned " + short(c.Pinned, 16) + ")"
		case schemas.ToolChangeUnreadable:
			what = "cannot be pinned: " + Printable(c.Reason)
			if c.Tool == "" {
				return fmt.Sprintf("TOOL LISTING UNREADABLE: of %s: %s; calls are held", Printable(c.Server), Printable(c.Reason))
			}
		case schemas.ToolChangeDuplicated:
			what = "listed twice in one listing"
		}
		return fmt.Sprintf("%s CHANGED: %s of %s %s; on_tool_change: %s", strings.ToUpper(pinNoun(c.Kind)), Printable(c.Tool), Printable(c.Server), what, c.Action)
	case schemas.KindPinsReset:
		var r schemas.PinsReset
		json.Unmarshal(payload, &r)
		if r.Tool != "" {
			return fmt.Sprintf("pin of %s %s of %s reset by %s", pinNoun(r.Kind), Printable(r.Tool), Printable(r.Server), Printable(r.By))
		}
		return fmt.Sprintf("pins of %s reset by %s", Printable(r.Server), Printable(r.By))
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// pinNoun names what a pin of kind pins.
func pinNoun(kind string) string {
	switch kind {
	case "":
		return "tool"
	case schemas.PinKindResourceTemplate:
		return "resource template"
	}
	return kind
}
