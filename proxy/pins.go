package proxy

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/schemas"
)

// Tool pins (docs/pins.md). A pinBook keeps one server's pins for a
// session: what the stream says each tool was pinned to when the session
// opened, and what the server has listed since. Invariants:
//
//   - First sight pins. A server without pins has every tool of its first
//     complete listing (all its pages, up to a result without nextCursor)
//     pinned, one tool.pinned event each. A server with pins, or one whose
//     first listing is complete, has no first sight left: a tool it adds
//     is a change, as is a pinned tool listed with another definition. A
//     complete listing that leaves a pinned tool out records its removal;
//     the pin stays, so the tool re-added with another definition is a
//     change and re-added as it was is not.
//   - Every change is an event (tool.changed) once per definition, durable
//     before the listing that shows it reaches the host (in wrap the
//     frame waits for it; in the gateway the relisting does).
//   - Under a policy, a call to a changed tool is refused (on_tool_change
//     deny or pending_approval) until a human re-pins the tool: an approve
//     of the pending approval pins the definition the approval was asked
//     for (tool.pinned, "approved <id>"), and only that one. With allow,
//     the change is recorded and the new definition pinned at once.
//     Without a policy, changes are recorded and nothing is refused.
//   - What cannot be pinned is refused, whatever on_tool_change says: a
//     definition readers could take two ways (pinread.go), and a tool a
//     listing names twice (hosts keep the first or the last). Each is a
//     tool.changed ("unreadable", "duplicated") and the tool stays refused
//     until a listing shows it once, readably, as pinned. A listing that
//     cannot be read one way at all holds every call to the server until a
//     complete listing that can (taint).
//   - Pins of scheme 1 (earlier versions digested six members) are
//     upgraded to the whole object when the tool is listed as it was
//     pinned; otherwise the tool is changed, as any other.
//   - What a server lists may depend on what the host can do (a tool that
//     asks for sampling is listed only to a host with sampling). Each pin
//     keeps the host capabilities it was first seen under (Caps, see
//     capsKey), and first sight is judged per capability set: a tool that
//     only a host with other capabilities is shown is pinned at first
//     sight under those, never recorded as added; a complete listing shows
//     a removal only of tools pinned under its own capabilities. A tool's
//     definition is one whatever the host: listed otherwise under any
//     capabilities, it is changed. Pins of earlier versions (no Caps)
//     count under every capability set, as before.
type PinBook struct {
	Kind    string // what it pins: "" tools, else a schemas.PinKind
	server  string
	mode    policy.ToolChange
	enforce bool
	sess    *projector.Session

	mu      sync.Mutex
	pinned  map[string]projector.Pin // by tool; Digest "" = to pin at first sight
	current map[string]toolSeen      // the last definition listed in this session
	listing map[string]bool          // the tools of the listing under way; nil: none
	settled bool                     // no first sight left: a complete listing under caps this session
	caps    string                   // the host's capabilities, as capsKey gives them
	changed map[string]toolSeen      // tools whose listed definition is not their pin
	removed map[string]bool          // pinned tools the last complete listing left out
	asked   map[string]pinAsk        // pending re-pin approvals, by approval id
	// unreadable is why the server's last listing could not be read one
	// way ("" = it could): every call is held while it is set. dirty is
	// set when the listing under way met such a page.
	unreadable  string
	dirty       bool
	listSettled bool                // no first sight left for the listing under way
	ids         *policy.ApprovalIDs // the session's, shared with its other approvals
	Names       []string            // the names before the tool in its approval ids
}

// toolSeen is a tool's definition as a listing showed it.
type toolSeen struct {
	digest  string
	fields  map[string]string
	scheme1 string // the scheme-1 digest, which upgrades a scheme-1 pin
	// bad says why the definition cannot be pinned ("" = it can), and
	// change how that is recorded (unreadable, duplicated).
	bad, change string
}

// pinAsk is what a pending re-pin approval would pin.
type pinAsk struct {
	tool string
	seen toolSeen
}

func NewPinBook(sess *projector.Session, ids *policy.ApprovalIDs, server string, set *policy.Set) *PinBook {
	if set == nil {
		return NewPinBookMode(sess, ids, server, false, 0)
	}
	return NewPinBookMode(sess, ids, server, true, set.OnToolChange())
}

// NewPinBookMode is newPinBook with on_tool_change given; enforce false
// only records. Its re-pin approvals take their ids from ids, the
// session's.
func NewPinBookMode(sess *projector.Session, ids *policy.ApprovalIDs, server string, enforce bool, mode policy.ToolChange) *PinBook {
	return NewKindBook(sess, ids, server, "", enforce, mode)
}

// NewKindBook is newPinBookMode for what kind pins (a schemas.PinKind, ""
// for tools). The approval ids of a kind other than tools name it first
// (apr-pin-prompt-…).
func NewKindBook(sess *projector.Session, ids *policy.ApprovalIDs, server, kind string, enforce bool, mode policy.ToolChange) *PinBook {
	b := &PinBook{Kind: kind, server: server, sess: sess, pinned: sess.Pins(server, kind), enforce: enforce, mode: mode, ids: ids,
		current: map[string]toolSeen{}, changed: map[string]toolSeen{}, removed: map[string]bool{}, asked: map[string]pinAsk{}}
	if kind != "" {
		b.Names = []string{strings.ReplaceAll(kind, "_", "-")}
	}
	return b
}

// Noun names what b pins, for messages.
func (b *PinBook) Noun() string {
	switch b.Kind {
	case "":
		return "tool"
	case schemas.PinKindResourceTemplate:
		return "resource template"
	}
	return b.Kind
}

// What names one thing b pins, for messages: tool "fetch", the server's
// instructions.
func (b *PinBook) What(name string) string {
	if b.Kind == schemas.PinKindInstructions {
		return "the server's instructions"
	}
	return fmt.Sprintf("%s %q", b.Noun(), name)
}

// action is what a change is recorded as doing.
func (b *PinBook) action() string {
	if !b.enforce {
		return "record"
	}
	return b.mode.String()
}

// observe takes one page of a tools/list result: its tools, whether it
// answers a request that continued a listing (params.cursor) and whether
// more pages follow (nextCursor). It records first-sight pins and changes
// (events enqueued before it returns) and updates what calls are checked
// against.
func (b *PinBook) observe(tools []listedTool, continued, more bool) (*events.Receipt, error) {
	_, rc, err := b.ObserveChanges(tools, continued, more)
	return rc, err
}

// ObserveChanges is observe that also returns the tools it newly found
// changed and left refused, and the receipt of the last event it
// recorded (nil if none): once it is durable, so is every pin event of
// the listing.
func (b *PinBook) ObserveChanges(tools []listedTool, continued, more bool) (fresh []string, last *events.Receipt, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !continued || b.listing == nil {
		// Whether first sight is left is judged once per listing: the
		// pins its first page makes do not settle its later pages.
		b.listing, b.dirty = map[string]bool{}, false
		b.listSettled = b.settled || b.pinnedUnderLocked(b.caps)
	}
	settled := b.listSettled
	var evs []func() (*events.Receipt, error)
	for _, t := range tools {
		name, seen := t.name, t.seen
		if b.listing[name] {
			seen = toolSeen{bad: "the listing names the tool twice, and hosts keep the first or the last", change: schemas.ToolChangeDuplicated}
		}
		b.listing[name] = true
		b.current[name] = seen
		delete(b.removed, name)
		pin, ok := b.pinned[name]
		if seen.bad != "" {
			if was, ok := b.changed[name]; ok && was.bad == seen.bad {
				continue // recorded already
			}
			evs = append(evs, b.fact(schemas.KindToolChanged, schemas.ToolChanged{Kind: b.Kind, Server: b.server, Tool: name, Change: seen.change, Pinned: pin.Digest, Reason: seen.bad, Action: b.badAction()}))
			b.changed[name] = seen
			fresh = append(fresh, name)
			continue
		}
		if ok && pin.Digest != "" && pin.Scheme < schemas.ToolPinScheme && pin.Digest == seen.scheme1 {
			evs = append(evs, b.pinLocked(name, seen, "scheme 2: listed as pinned"))
			delete(b.changed, name)
			continue
		}
		dg := seen.digest
		switch {
		case (!ok && !settled) || (ok && pin.Digest == ""):
			evs = append(evs, b.pinLocked(name, seen, "first sight"))
		case ok && pin.Digest == dg:
			delete(b.changed, name) // as pinned (again)
		default:
			if was, ok := b.changed[name]; ok && was.digest == dg && was.bad == "" {
				continue // recorded already
			}
			ch := schemas.ToolChanged{Kind: b.Kind, Server: b.server, Tool: name, Change: schemas.ToolChangeAdded, Digest: dg, Action: b.action()}
			if ok {
				ch.Change, ch.Pinned, ch.Fields = schemas.ToolChangeChanged, pin.Digest, changedFields(pin, seen)
			}
			evs = append(evs, b.fact(schemas.KindToolChanged, ch))
			if b.enforce && b.mode == policy.ToolChangeAllow {
				evs = append(evs, b.pinLocked(name, seen, "on_tool_change: allow"))
				delete(b.changed, name)
			} else {
				b.changed[name] = seen
				fresh = append(fresh, name)
			}
		}
	}
	if !more {
		for name, pin := range b.pinned {
			if pin.Digest == "" || b.listing[name] || b.removed[name] || !pin.Under(b.caps) {
				continue
			}
			b.removed[name] = true
			delete(b.current, name)
			delete(b.changed, name)
			evs = append(evs, b.fact(schemas.KindToolChanged, schemas.ToolChanged{Kind: b.Kind, Server: b.server, Tool: name, Change: schemas.ToolChangeRemoved, Pinned: pin.Digest, Action: b.action()}))
		}
		if !b.dirty {
			b.unreadable = ""
		}
		b.listing = nil
		b.settled = true
	}
	for _, ev := range evs {
		if last, err = ev(); err != nil {
			return nil, nil, err
		}
	}
	return fresh, last, nil
}

// taint records that a listing of the server could not be read one way,
// and why: every call to the server is held (under enforcement) until a
// complete listing that can be. It returns the receipt of its event (nil
// when the same reason is in force already).
func (b *PinBook) taint(why string) (*events.Receipt, error) {
	b.mu.Lock()
	if b.listing != nil {
		b.dirty = true
	}
	if b.unreadable == why {
		b.mu.Unlock()
		return nil, nil
	}
	b.unreadable = why
	rec := b.fact(schemas.KindToolChanged, schemas.ToolChanged{Kind: b.Kind, Server: b.server, Change: schemas.ToolChangeUnreadable, Reason: why, Action: b.badAction()})
	b.mu.Unlock()
	return rec()
}

// badAction is what a definition or listing that cannot be pinned is
// recorded as doing: refused under enforcement, whatever on_tool_change
// says.
func (b *PinBook) badAction() string {
	if !b.enforce {
		return "record"
	}
	return policy.ToolChangeDeny.String()
}

// changedFields names the members that differ between pin and seen; of a
// scheme-1 pin, only the members that scheme covered.
func changedFields(pin projector.Pin, seen toolSeen) []string {
	now := seen.fields
	if pin.Scheme < schemas.ToolPinScheme {
		now = map[string]string{}
		for _, f := range schemas.ToolPinFields {
			if d, ok := seen.fields[f]; ok {
				now[f] = d
			}
		}
	}
	return schemas.ChangedFields(pin.Fields, now)
}

// pinLocked pins tool to seen and returns the recording of it; b.mu is held.
// A re-pin keeps the capabilities the tool was first pinned under.
func (b *PinBook) pinLocked(tool string, seen toolSeen, reason string) func() (*events.Receipt, error) {
	caps, known := b.caps, true
	if old, ok := b.pinned[tool]; ok && old.Digest != "" {
		caps, known = old.Caps, old.CapsKnown
	}
	b.pinned[tool] = projector.Pin{Kind: b.Kind, Server: b.server, Tool: tool, Digest: seen.digest, Fields: seen.fields, Session: b.sess.ID(), Reason: reason,
		Scheme: schemas.ToolPinScheme, Caps: caps, CapsKnown: known}
	ev := schemas.ToolPinned{Kind: b.Kind, Server: b.server, Tool: tool, Digest: seen.digest, Fields: seen.fields, Reason: reason, Scheme: schemas.ToolPinScheme}
	if known {
		ev.Caps = &caps
	}
	return b.fact(schemas.KindToolPinned, ev)
}

// pinnedUnderLocked reports whether a tool is pinned under caps (or by an
// earlier version, under every capability set); b.mu is held.
func (b *PinBook) pinnedUnderLocked(caps string) bool {
	for _, p := range b.pinned {
		if p.Digest != "" && p.Under(caps) {
			return true
		}
	}
	return false
}

// SetCaps sets the host capabilities the server's listings are judged
// under (capsKey); a listing read before it is judged under none.
func (b *PinBook) SetCaps(caps string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if caps != b.caps {
		b.caps, b.settled = caps, false
	}
}

func (b *PinBook) fact(kind schemas.Kind, payload any) func() (*events.Receipt, error) {
	return func() (*events.Receipt, error) { return b.sess.Fact(kind, payload) }
}

// PinOf returns the digest tool is pinned to ("" for none): the outcome's
// decision_axes.tool_pin.
func (b *PinBook) PinOf(tool string) string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pinned[tool].Digest
}

// pinRefusal is why a call to a changed tool is refused, and how.
type pinRefusal struct {
	Decision policy.Decision
	Hint     string
	digest   string // the definition an approval would pin
	// Final is set when no approval or reset can accept the tool as it
	// is listed: hint says what will.
	Final bool
}

// PinRule is the matched_rule of a call refused for a changed tool.
const PinRule = "on_tool_change"

// Check decides a call to tool against its pin: nil when the tool is as
// pinned (or not enforced). Under pending_approval it asks for the re-pin
// approval the refusal names.
func (b *PinBook) Check(tool string) *pinRefusal {
	if b == nil || !b.enforce {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unreadable != "" {
		return &pinRefusal{
			Decision: policy.Decision{Verdict: policy.Deny, MatchedRule: PinRule,
				Reason: "the server's last tools listing cannot be read one way (" + b.unreadable + "), so aegis cannot tell which definitions the host holds"},
			Hint:  "every call to this server is held until it lists its tools in a form every JSON reader reads alike; the host lists them again when it reconnects; report the listing to the server's maintainer",
			Final: true,
		}
	}
	seen, ok := b.changed[tool]
	if !ok {
		return nil
	}
	if seen.bad != "" {
		return &pinRefusal{
			Decision: policy.Decision{Verdict: policy.Deny, MatchedRule: PinRule,
				Reason: fmt.Sprintf("%s cannot be pinned: %s", b.What(tool), seen.bad)},
			Hint:  "aegis refuses it whatever on_tool_change says; it can be called again once the server lists it once, in a form every JSON reader reads alike, as pinned",
			Final: true,
		}
	}
	pin, pinned := b.pinned[tool]
	what := "was added after the server's tools were pinned"
	if pinned && pin.Digest != "" {
		what = "changed since it was pinned"
		if f := changedFields(pin, seen); len(f) > 0 {
			what += " (" + strings.Join(f, ", ") + ")"
		}
	}
	reason := fmt.Sprintf("%s %s; its new definition is %s", b.What(tool), what, Short(seen.digest))
	if b.mode == policy.ToolChangeDeny {
		return &pinRefusal{
			Decision: policy.Decision{Verdict: policy.Deny, Reason: reason, MatchedRule: PinRule},
			Hint:     "review the server's new definition; to accept it, end this session and run: aegis pins reset --server " + QuoteArg(b.server) + " --tool " + QuoteArg(tool),
			digest:   seen.digest,
		}
	}
	id := b.askLocked(tool, seen)
	return &pinRefusal{
		Decision: policy.Decision{Verdict: policy.PendingApproval, Reason: reason, MatchedRule: PinRule, ApprovalID: id},
		Hint:     "review the server's new definition, then run: aegis approve " + QuoteArg(id) + " to pin it (or: aegis deny " + QuoteArg(id) + "), and send the call again",
		digest:   seen.digest,
	}
}

// Approved re-pins the tool of a re-pin approval to the definition it was
// asked for; it reports false for an approval that is not one.
func (b *PinBook) Approved(id string) (bool, error) {
	if b == nil {
		return false, nil
	}
	b.mu.Lock()
	a, ok := b.asked[id]
	if !ok {
		b.mu.Unlock()
		return false, nil
	}
	delete(b.asked, id)
	rec := b.pinLocked(a.tool, a.seen, "approved "+id)
	if b.changed[a.tool].digest == a.seen.digest {
		delete(b.changed, a.tool)
	}
	b.mu.Unlock()
	rc, err := rec()
	if err == nil {
		_, err = rc.Wait(context.Background())
	}
	return true, err
}

func Short(d string) string {
	if len(d) > 12 {
		return "sha256:" + d[:12] + "…"
	}
	return "sha256:" + d
}

// QuoteArg quotes s for a POSIX shell, so that a hint's command can be
// pasted as printed: as it is when it is made only of characters no shell
// treats specially, else in single quotes.
func QuoteArg(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !shellPlain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellPlain reports whether r stands for itself in a shell word.
func shellPlain(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,/:@%+=", r)
}

// ListWatch follows the host's tools/list requests in aegis wrap, so that
// their answers are read for pins. The relay registers them as it
// registers every host request (its reading of the host frame, Request.List),
// and an answer is matched to one as hosts match it: by its exact id or its
// loose reading (LooseID).
type ListWatch struct {
	mu   sync.Mutex
	reqs []listReq
}

type listReq struct {
	id        ReqID
	method    string // tools/list, prompts/list, resources/templates/list or initialize
	continued bool   // params.cursor was given
}

// maxListWatch bounds the tools/list requests followed at once; the oldest
// is forgotten first.
const maxListWatch = 256

// Add registers a request in flight whose answer the pins read: a list
// request (listShapes) or an initialize (for the instructions).
func (w *ListWatch) Add(id ReqID, method string, continued bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.reqs) >= maxListWatch {
		w.reqs = w.reqs[1:]
	}
	w.reqs = append(w.reqs, listReq{id: id, method: method, continued: continued})
}

// InFlight reports whether a tools/list request is in flight.
func (w *ListWatch) InFlight() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reqs) > 0
}

// NoteServer reads the answers in the texts of a relayed server frame (the
// frame, and what a stream reader reads where it joins lines) to the
// requests the pins follow into books (by the request's method), and
// returns the receipt of the last pin event it recorded (nil if none). A
// message that cannot be read one way taints the tools book: it holds
// every call.
func (w *ListWatch) NoteServer(texts [][]byte, books map[string]*PinBook) (last *events.Receipt, err error) {
	for _, text := range texts {
		pages, why := w.answers(text)
		if why != "" {
			rc, err := books["tools/list"].taint(why)
			if err != nil {
				return nil, err
			}
			if rc != nil {
				last = rc
			}
		}
		for _, p := range pages {
			book := books[p.method]
			if book == nil {
				continue
			}
			var rc *events.Receipt
			if p.why != "" {
				rc, err = book.taint(p.why)
			} else {
				rc, err = book.observe(p.tools, p.continued, p.more)
			}
			if err != nil {
				return nil, err
			}
			if rc != nil {
				last = rc
			}
		}
	}
	return last, nil
}

// listPage is one page of a tools/list result that answers a request in
// flight, or why it cannot be read one way.
type listPage struct {
	method          string
	tools           []listedTool
	continued, more bool
	why             string
}

// answers returns the pages of text that answer tools/list requests in
// flight, and forgets those requests. why is set when some value of text
// that readers could take two ways may answer one: whether it does, or
// what it lists, depends on the reader.
func (w *ListWatch) answers(text []byte) (out []listPage, why string) {
	if !w.InFlight() {
		return nil, ""
	}
	rd := reading.Read(text)
	for _, v := range rd.Values {
		msgs := []*reading.Value{v}
		if v.Kind == reading.Array {
			msgs = v.Elems
		}
		for _, m := range msgs {
			if m.Kind != reading.Object {
				continue
			}
			idv, idWhy := m.Get("id")
			mv, mWhy := m.Lookup("method")
			if idWhy != "" || mWhy != "" {
				if why == "" {
					why = "a message's " + cmp.Or(idWhy, mWhy)
				}
				continue
			}
			if idv == nil || mv != nil {
				continue // a notification, or a request of the server's
			}
			key, _, _ := rpc.IDKey(idv.Raw)
			req, ok := w.take(NewReqID(key, idv.Raw))
			if !ok {
				continue // answers no tools/list in flight, to any reader
			}
			res, resWhy := m.Lookup("result")
			if resWhy != "" {
				out = append(out, listPage{method: req.method, why: "the answer's " + resWhy})
				continue
			}
			if res == nil {
				continue // an error answer lists nothing, and removes nothing
			}
			p := listPage{method: req.method, continued: req.continued}
			if req.method == "initialize" {
				p.tools, p.why = readInstructions(res)
			} else {
				p.tools, p.more, p.why = readListing(res, rpc.ListShapes[req.method])
			}
			out = append(out, p)
		}
	}
	if why == "" && rd.Err != "" && rd.Ambiguous != "" {
		why = "the frame: " + rd.Ambiguous // past what aegis reads, some reader reads on
	}
	return out, why
}

// take forgets and returns the tools/list request in flight that id names.
func (w *ListWatch) take(id ReqID) (listReq, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.reqs {
		if w.reqs[i].id.Same(id) {
			r := w.reqs[i]
			w.reqs = append(w.reqs[:i], w.reqs[i+1:]...)
			return r, true
		}
	}
	return listReq{}, false
}

// PinApprover re-pins the tool of an approved re-pin approval.
type PinApprover interface {
	Approved(id string) (bool, error)
}

// PinBooks are the books one approver re-pins through: the first that
// asked for an approval pins it.
type PinBooks []*PinBook

func (bs PinBooks) Approved(id string) (bool, error) {
	for _, b := range bs {
		if ok, err := b.Approved(id); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// CheckPin turns an allowed or pending verdict into the pin's refusal
// when tool changed since it was pinned; a deny or a spent rate limit
// stands.
func (g *Gated) CheckPin(b *PinBook, tool string) {
	if v := g.Decision.Verdict; v != policy.Allow && v != policy.PendingApproval {
		return
	}
	pr := b.Check(tool)
	if pr == nil {
		return
	}
	g.Decision, g.Hint, g.PinDigest = pr.Decision, pr.Hint, pr.digest
}

// askLocked registers a re-pin approval of tool's definition seen and
// returns its id; b.mu is held.
func (b *PinBook) askLocked(tool string, seen toolSeen) string {
	id := b.ids.Next("apr-pin", append(b.Names[:len(b.Names):len(b.Names)], tool)...)
	b.asked[id] = pinAsk{tool: tool, seen: seen}
	return id
}

// Ask registers a re-pin approval of tool as it is now listed, if it is
// changed and refused; ok is false otherwise.
func (b *PinBook) Ask(tool string) (id, digest string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen, changed := b.changed[tool]
	if !changed || seen.bad != "" || !b.enforce || b.mode != policy.ToolChangePendingApproval {
		return "", "", false
	}
	return b.askLocked(tool, seen), seen.digest, true
}

// Unpinnable says why tool, as last listed, cannot be pinned ("" when it
// can, or is not changed).
func (b *PinBook) Unpinnable(tool string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed[tool].bad
}

// Hidden reports whether tool is changed and refused: the gateway does not
// show it.
func (b *PinBook) Hidden(tool string) bool {
	if b == nil || !b.enforce {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	seen, ok := b.changed[tool]
	return ok && (seen.bad != "" || b.mode != policy.ToolChangeAllow)
}

// ForgetAsked drops the re-pin approval id from those the book waits
// for, when another takes its place (the gateway registers the one that
// a pin's check asked for like a change's own).
func (b *PinBook) ForgetAsked(id string) {
	b.mu.Lock()
	delete(b.asked, id)
	b.mu.Unlock()
}
