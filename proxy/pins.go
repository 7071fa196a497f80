package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
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
type pinBook struct {
	server  string
	mode    policy.ToolChange
	enforce bool
	sess    *projector.Session

	mu      sync.Mutex
	pinned  map[string]projector.Pin // by tool; Digest "" = to pin at first sight
	current map[string]toolSeen      // the last definition listed in this session
	listing map[string]bool          // the tools of the listing under way; nil: none
	settled bool                     // no first sight left (pins at open, or a complete listing)
	changed map[string]toolSeen      // tools whose listed definition is not their pin
	removed map[string]bool          // pinned tools the last complete listing left out
	asked   map[string]pinAsk        // pending re-pin approvals, by approval id
	ids     *policy.ApprovalIDs      // the session's, shared with its other approvals
	names   []string                 // the names before the tool in its approval ids
}

// toolSeen is a tool's definition as a listing showed it.
type toolSeen struct {
	digest string
	fields map[string]string
}

// pinAsk is what a pending re-pin approval would pin.
type pinAsk struct {
	tool string
	seen toolSeen
}

func newPinBook(sess *projector.Session, ids *policy.ApprovalIDs, server string, set *policy.Set) *pinBook {
	if set == nil {
		return newPinBookMode(sess, ids, server, false, 0)
	}
	return newPinBookMode(sess, ids, server, true, set.OnToolChange())
}

// newPinBookMode is newPinBook with on_tool_change given; enforce false
// only records. Its re-pin approvals take their ids from ids, the
// session's.
func newPinBookMode(sess *projector.Session, ids *policy.ApprovalIDs, server string, enforce bool, mode policy.ToolChange) *pinBook {
	b := &pinBook{server: server, sess: sess, pinned: sess.Pins(server), enforce: enforce, mode: mode, ids: ids,
		current: map[string]toolSeen{}, changed: map[string]toolSeen{}, removed: map[string]bool{}, asked: map[string]pinAsk{}}
	for _, p := range b.pinned {
		if p.Digest != "" {
			b.settled = true
		}
	}
	return b
}

// action is what a change is recorded as doing.
func (b *pinBook) action() string {
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
func (b *pinBook) observe(tools []json.RawMessage, continued, more bool) (*events.Receipt, error) {
	_, rc, err := b.observeChanges(tools, continued, more)
	return rc, err
}

// observeChanges is observe that also returns the tools it newly found
// changed and left refused, and the receipt of the last event it
// recorded (nil if none): once it is durable, so is every pin event of
// the listing.
func (b *pinBook) observeChanges(tools []json.RawMessage, continued, more bool) (fresh []string, last *events.Receipt, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !continued || b.listing == nil {
		b.listing = map[string]bool{}
	}
	var evs []func() (*events.Receipt, error)
	for _, raw := range tools {
		d, err := schemas.ParseToolDefinition(raw)
		if err != nil {
			continue // not a tool a host could call by name
		}
		dg, err := d.Digest()
		if err != nil {
			continue
		}
		seen := toolSeen{digest: dg, fields: d.FieldDigests()}
		name := d.Name
		b.listing[name] = true
		b.current[name] = seen
		delete(b.removed, name)
		pin, ok := b.pinned[name]
		switch {
		case (!ok && !b.settled) || (ok && pin.Digest == ""):
			evs = append(evs, b.pinLocked(name, seen, "first sight"))
		case ok && pin.Digest == dg:
			delete(b.changed, name) // as pinned (again)
		default:
			if was, ok := b.changed[name]; ok && was.digest == dg {
				continue // recorded already
			}
			ch := schemas.ToolChanged{Server: b.server, Tool: name, Change: schemas.ToolChangeAdded, Digest: dg, Action: b.action()}
			if ok {
				ch.Change, ch.Pinned, ch.Fields = schemas.ToolChangeChanged, pin.Digest, schemas.ChangedFields(pin.Fields, seen.fields)
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
			if pin.Digest == "" || b.listing[name] || b.removed[name] {
				continue
			}
			b.removed[name] = true
			delete(b.current, name)
			delete(b.changed, name)
			evs = append(evs, b.fact(schemas.KindToolChanged, schemas.ToolChanged{Server: b.server, Tool: name, Change: schemas.ToolChangeRemoved, Pinned: pin.Digest, Action: b.action()}))
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

// pinLocked pins tool to seen and returns the recording of it; b.mu is held.
func (b *pinBook) pinLocked(tool string, seen toolSeen, reason string) func() (*events.Receipt, error) {
	b.pinned[tool] = projector.Pin{Server: b.server, Tool: tool, Digest: seen.digest, Fields: seen.fields, Session: b.sess.ID(), Reason: reason}
	return b.fact(schemas.KindToolPinned, schemas.ToolPinned{Server: b.server, Tool: tool, Digest: seen.digest, Fields: seen.fields, Reason: reason})
}

func (b *pinBook) fact(kind schemas.Kind, payload any) func() (*events.Receipt, error) {
	return func() (*events.Receipt, error) { return b.sess.Fact(kind, payload) }
}

// pinOf returns the digest tool is pinned to ("" for none): the outcome's
// decision_axes.tool_pin.
func (b *pinBook) pinOf(tool string) string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pinned[tool].Digest
}

// pinRefusal is why a call to a changed tool is refused, and how.
type pinRefusal struct {
	decision policy.Decision
	hint     string
	digest   string // the definition an approval would pin
}

// pinRule is the matched_rule of a call refused for a changed tool.
const pinRule = "on_tool_change"

// check decides a call to tool against its pin: nil when the tool is as
// pinned (or not enforced). approvalPrefix names the approvals it asks
// for.
func (b *pinBook) check(tool string) *pinRefusal {
	if b == nil || !b.enforce {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	seen, ok := b.changed[tool]
	if !ok {
		return nil
	}
	pin, pinned := b.pinned[tool]
	what := "was added after the server's tools were pinned"
	if pinned && pin.Digest != "" {
		what = "changed since it was pinned"
		if f := schemas.ChangedFields(pin.Fields, seen.fields); len(f) > 0 {
			what += " (" + strings.Join(f, ", ") + ")"
		}
	}
	reason := fmt.Sprintf("tool %q %s; its new definition is %s", tool, what, short(seen.digest))
	if b.mode == policy.ToolChangeDeny {
		return &pinRefusal{
			decision: policy.Decision{Verdict: policy.Deny, Reason: reason, MatchedRule: pinRule},
			hint:     "review the server's new definition; to accept it, end this session and run: aegis pins reset --server " + quoteArg(b.server) + " --tool " + quoteArg(tool),
			digest:   seen.digest,
		}
	}
	id := b.askLocked(tool, seen)
	return &pinRefusal{
		decision: policy.Decision{Verdict: policy.PendingApproval, Reason: reason, MatchedRule: pinRule, ApprovalID: id},
		hint:     "review the server's new definition, then run: aegis approve " + quoteArg(id) + " to pin it (or: aegis deny " + quoteArg(id) + "), and send the call again",
		digest:   seen.digest,
	}
}

// approved re-pins the tool of a re-pin approval to the definition it was
// asked for; it reports false for an approval that is not one.
func (b *pinBook) approved(id string) (bool, error) {
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

func short(d string) string {
	if len(d) > 12 {
		return "sha256:" + d[:12] + "…"
	}
	return "sha256:" + d
}

// quoteArg quotes s for a POSIX shell, so that a hint's command can be
// pasted as printed: as it is when it is made only of characters no shell
// treats specially, else in single quotes.
func quoteArg(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !shellPlain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellPlain reports whether r stands for itself in a shell word.
func shellPlain(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,/:@%+=", r)
}

// listWatch follows the host's tools/list requests in aegis wrap, so that
// their answers are read for pins. An answer is matched to a request as
// hosts match it: by its exact id or its loose reading (LooseID).
type listWatch struct {
	mu   sync.Mutex
	reqs []listReq
}

type listReq struct {
	id        reqID
	continued bool // params.cursor was given
}

// maxListWatch bounds the tools/list requests followed at once; the oldest
// is forgotten first.
const maxListWatch = 256

// rpcMessage is what the pins read of a JSON-RPC message.
type rpcMessage struct {
	ID     json.RawMessage
	Method string
	Params *listParams
	Result *listResult
}

type listParams struct{ Cursor *string }

type listResult struct {
	Tools      []json.RawMessage
	NextCursor string
}

// exact reads a JSON object by the exact names of its members, as hosts
// read them (encoding/json would match a struct field in any case, and
// read "RESULT" as result); of a member given twice the last counts, as
// in JSON.parse.
func exact(raw []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

func readMessage(raw []byte) (rpcMessage, bool) {
	o, ok := exact(raw)
	if !ok {
		return rpcMessage{}, false
	}
	m := rpcMessage{ID: o["id"]}
	if string(m.ID) == "null" {
		m.ID = nil
	}
	json.Unmarshal(o["method"], &m.Method)
	if p, ok := exact(o["params"]); ok {
		m.Params = &listParams{}
		var c string
		if json.Unmarshal(p["cursor"], &c) == nil {
			m.Params.Cursor = &c
		}
	}
	if r, ok := exact(o["result"]); ok {
		m.Result = &listResult{}
		json.Unmarshal(r["tools"], &m.Result.Tools)
		json.Unmarshal(r["nextCursor"], &m.Result.NextCursor)
	}
	return m, true
}

// messages reads a frame as one JSON-RPC message or a batch of them.
func messages(frame []byte) []rpcMessage {
	t := bytes.TrimSpace(frame)
	if len(t) == 0 {
		return nil
	}
	raws := []json.RawMessage{t}
	if t[0] == '[' {
		if json.Unmarshal(t, &raws) != nil {
			return nil
		}
	}
	var out []rpcMessage
	for _, r := range raws {
		if m, ok := readMessage(r); ok {
			out = append(out, m)
		}
	}
	return out
}

// noteHost registers the tools/list requests of a host frame.
func (w *listWatch) noteHost(frame []byte) {
	if !bytes.Contains(frame, []byte("tools/list")) {
		return
	}
	for _, m := range messages(frame) {
		if m.Method != "tools/list" || len(m.ID) == 0 {
			continue
		}
		key, ok, _ := idKey(m.ID)
		if !ok {
			continue
		}
		w.mu.Lock()
		if len(w.reqs) >= maxListWatch {
			w.reqs = w.reqs[1:]
		}
		w.reqs = append(w.reqs, listReq{id: newReqID(key, m.ID), continued: m.Params != nil && m.Params.Cursor != nil})
		w.mu.Unlock()
	}
}

// noteServer reads the tools/list answers of a relayed server frame into
// book, and returns the receipt of the last pin event it recorded (nil if
// none).
func (w *listWatch) noteServer(frame []byte, book *pinBook) (last *events.Receipt, err error) {
	for _, p := range w.answers(frame) {
		rc, err := book.observe(p.tools, p.continued, p.more)
		if err != nil {
			return nil, err
		}
		if rc != nil {
			last = rc
		}
	}
	return last, nil
}

// listPage is one page of a tools/list result that answers a request in
// flight.
type listPage struct {
	tools           []json.RawMessage
	continued, more bool
}

// answers returns the pages of frame that answer tools/list requests in
// flight, and forgets those requests.
func (w *listWatch) answers(frame []byte) []listPage {
	w.mu.Lock()
	n := len(w.reqs)
	w.mu.Unlock()
	if n == 0 || !bytes.Contains(frame, []byte(`"tools"`)) {
		return nil
	}
	var out []listPage
	for _, m := range messages(frame) {
		if m.Result == nil || len(m.ID) == 0 {
			continue
		}
		key, _, _ := idKey(m.ID)
		id := newReqID(key, m.ID)
		w.mu.Lock()
		for i := range w.reqs {
			if w.reqs[i].id.same(id) {
				out = append(out, listPage{tools: m.Result.Tools, continued: w.reqs[i].continued, more: m.Result.NextCursor != ""})
				w.reqs = append(w.reqs[:i], w.reqs[i+1:]...)
				break
			}
		}
		w.mu.Unlock()
	}
	return out
}

// pinApprover re-pins the tool of an approved re-pin approval.
type pinApprover interface {
	approved(id string) (bool, error)
}

// checkPin turns an allowed or pending verdict into the pin's refusal
// when tool changed since it was pinned; a deny or a spent rate limit
// stands.
func (g *gated) checkPin(b *pinBook, tool string) {
	if v := g.decision.Verdict; v != policy.Allow && v != policy.PendingApproval {
		return
	}
	pr := b.check(tool)
	if pr == nil {
		return
	}
	g.decision, g.hint, g.pinDigest = pr.decision, pr.hint, pr.digest
}

// onServerFramePins is onServerFrame that then reads the tools/list
// answers of a frame it relays into the server's pins, before the frame
// is handed to the writer: the host never sees a listing whose changes are
// not in force, and the frame waits for its pin events to be durable
// (they follow it in the stream, so their receipt covers it too).
func (r *relay) onServerFramePins(line []byte) (*events.Receipt, bool, bool) {
	wait, relay, ok := r.onServerFrame(line)
	if ok && relay {
		rc, err := r.lists.noteServer(frameOf(line), r.pins)
		if err != nil {
			r.fail(err)
			return nil, false, false
		}
		if rc != nil {
			wait = rc
		}
	}
	return wait, relay, ok
}

// askLocked registers a re-pin approval of tool's definition seen and
// returns its id; b.mu is held.
func (b *pinBook) askLocked(tool string, seen toolSeen) string {
	id := b.ids.Next("apr-pin", append(b.names[:len(b.names):len(b.names)], tool)...)
	b.asked[id] = pinAsk{tool: tool, seen: seen}
	return id
}

// ask registers a re-pin approval of tool as it is now listed, if it is
// changed and refused; ok is false otherwise.
func (b *pinBook) ask(tool string) (id, digest string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen, changed := b.changed[tool]
	if !changed || !b.enforce || b.mode != policy.ToolChangePendingApproval {
		return "", "", false
	}
	return b.askLocked(tool, seen), seen.digest, true
}

// hidden reports whether tool is changed and refused: the gateway does not
// show it.
func (b *pinBook) hidden(tool string) bool {
	if b == nil || !b.enforce || b.mode == policy.ToolChangeAllow {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.changed[tool]
	return ok
}
