package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/schemas"
)

// onHostFrame records a host frame and its tools/calls and says whether to
// relay it. The frame is read as every plausible server reads it
// (readHostFrame): line by line, and as one continuous JSON stream across
// frames. Without a policy every call is allowed: well-formed calls
// become pending and the frame waits for their intents; malformed calls
// get an intent and an outcome at once. With a policy every call is
// decided first (pass 1, nothing recorded); if any is refused the whole
// frame is refused (pass 2 records every call as refused, and the host gets
// the refusal frame once the outcomes are durable), else it is relayed as
// without a policy but with the real policy set hash and matched rule. In
// every mode a request that reuses the id of a tools/call in flight (or a
// tools/call that reuses any id in flight), under the exact reading or the
// loose one hosts match answers by, is refused: its answer could not be
// told from the other's.
func (r *relay) onHostFrame(line []byte) (*events.Receipt, bool, bool) {
	frame := rpc.FrameOf(line)
	if r.gate == nil && r.hs.Between() && len(line) <= maxUnreadLine && !rpc.MentionsToolsCall(frame) && r.deferRead(line) {
		// Not a call (FuzzClassify holds Classify to finding none in a
		// frame that names tools/call in no spelling), no value begun
		// before it, and no call in flight whose id a request of it could
		// reuse: it is relayed before it is read, and read right after
		// (readDeferred). Nothing that reading finds can change whether
		// or how it is relayed, and the record keeps its place in the
		// stream; only its requests must be known before their answers
		// are matched, which unread sees to. A relayed frame then costs
		// what it did before the relay read every frame.
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.readLater = line
		return nil, true, true
	}
	if e, ok := rpc.QuickLine(r.hs, frame); ok && r.admitPlain(e) {
		// Not a call: durable with the next commit, relayed without
		// waiting (as below).
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	cls, sc := rpc.ReadHostFrame(r.hs, line, r.gate != nil)
	now := r.cfg.Now()
	registered := r.markReuse(&cls)
	if len(cls.Calls) == 0 {
		if cls.Reused {
			fev, err := r.sess.FrameEvent(schemas.KindFrameC2S, frame)
			if err != nil {
				r.fail(err)
				return nil, false, false
			}
			return r.refuseFrame(cls, frame, fev, nil, schemas.WrapPassthroughPolicySetHash, now)
		}
		// Not a call: durable with the next commit, relayed without
		// waiting. The line is this frame's own copy, so the store may keep
		// it until that commit.
		if err := r.sess.LazyFrame(schemas.KindFrameC2S, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.hs = sc.Next
		r.track(cls, now, registered)
		return nil, true, true
	}
	fev, err := r.sess.FrameEvent(schemas.KindFrameC2S, frame)
	if err != nil {
		r.fail(err)
		return nil, false, false
	}
	policyHash := schemas.WrapPassthroughPolicySetHash
	var verdicts []proxy.Gated
	refused := cls.Reused
	if r.gate != nil {
		policyHash = r.gate.Hash
		verdicts = make([]proxy.Gated, len(cls.Calls))
		for i, c := range cls.Calls {
			// A call without a usable name cannot be asked about; one sent
			// as a notification (no id) is evaluated like any other.
			if !c.Named || c.Reused {
				verdicts[i].Decision.Verdict = policy.Allow
				continue
			}
			verdicts[i] = r.gate.DecideRequest(policy.Request{Tool: c.Tool, Session: r.sess.ID()}, c.Args, now)
			if err := proxy.RecordLapsed(r.sess, verdicts[i].Lapsed); err != nil {
				r.fail(err)
				return nil, false, false
			}
			verdicts[i].CheckPin(r.pins, c.Tool)
			verdicts[i].CheckPin(r.books["initialize"], schemas.PinKindInstructions)
			if verdicts[i].Decision.Verdict == policy.PendingApproval {
				// The retry of a call whose elicited approval a human
				// denied: refused as denied, not asked again (approvals.go).
				if dn, ok := r.el.Denied(c.Tool, verdicts[i].ArgsDigest, now); ok {
					verdicts[i].Decision = dn.Decision(verdicts[i].Decision.MatchedRule)
				}
			}
			if verdicts[i].Decision.Verdict != policy.Allow {
				refused = true
			}
		}
	}
	for _, c := range cls.Calls {
		if r.refusesItself(c) {
			hint := rpc.SelfRefusalHint(c)
			r.log.Warn("refused a tools/call that aegis cannot read as one call; "+hint, "reason", c.Malformed)
			refused = true
		}
	}
	if refused {
		if verdicts == nil {
			verdicts = make([]proxy.Gated, len(cls.Calls))
			for i := range verdicts {
				verdicts[i].Decision.Verdict = policy.Allow
			}
		}
		return r.refuseFrame(cls, frame, fev, verdicts, policyHash, now)
	}
	// The frame event rides with the first intent, so both share a commit.
	with := []schemas.Event{fev}
	var last *events.Receipt
	dg := proxy.Digest(frame)
	for i, c := range cls.Calls {
		wc := schemas.WrapCall{CallID: r.sess.NextCallID(), ToolID: c.Tool, RequestDigest: dg, PolicySetHash: policyHash}
		var axes schemas.DecisionAxes
		if !c.Named {
			wc.PolicySetHash = schemas.WrapPassthroughPolicySetHash // no rule was asked
		} else if verdicts != nil {
			axes.MatchedRule = verdicts[i].Decision.MatchedRule
			axes.ApprovalRef = verdicts[i].Approval // spent by decide
		}
		if c.Named {
			axes.ToolPin = r.pins.PinOf(c.Tool)
		}
		if last, err = r.sess.Intent(proxy.IntentOf(wc, c.TraceParent), with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
		r.mu.Lock()
		r.calls++
		if c.Malformed == "" {
			r.pending[c.Key] = &pendingCall{call: wc, start: now, axes: axes, id: proxy.NewReqID(c.Key, c.ID)}
		}
		r.mu.Unlock()
		if c.Malformed != "" {
			o := wc.Malformed()
			if c.Malformed != schemas.ReasonMalformedCall {
				o.Policy = schemas.PolicyDenied(c.Malformed)
				o.Capability = schemas.CapabilityDenied(c.Malformed)
			}
			o.DecisionAxes = axes
			if last, err = r.sess.Outcome(o); err != nil {
				r.fail(err)
				return nil, false, false
			}
		}
	}
	r.hs = sc.Next
	r.track(cls, now, false)
	return last, true, true
}

// maxUnreadLine bounds the lines that onHostFrame relays before reading
// them: small enough that reading one later is cheap and can never
// overflow the stream reader.
const maxUnreadLine = 64 << 10

// deferRead makes line the unread line when no call is in flight, and
// reports whether it did.
func (r *relay) deferRead(line []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) > 0 {
		return false
	}
	r.unread = line
	return true
}

// readDeferred reads the line onHostFrame relayed unread, in the host
// reader once it is written, and registers its requests unless the server
// reader has.
func (r *relay) readDeferred() {
	line := r.readLater
	r.readLater = nil
	cls, sc := rpc.ReadHostFrame(r.hs, line, false)
	r.hs = sc.Next
	r.mu.Lock()
	if r.unread != nil {
		r.registerLocked(cls.Requests)
		r.unread = nil
	}
	r.mu.Unlock()
}

// readUnreadLocked reads and registers the requests of the unread line, if
// there is one, in the server reader: an answer may overtake the host
// reader's reading of the request it answers. r.mu is held.
func (r *relay) readUnreadLocked() {
	if r.unread == nil {
		return
	}
	cls, _ := rpc.ReadHostFrame(rpc.Stream{}, r.unread, false)
	r.registerLocked(cls.Requests)
	r.unread = nil
}

// admitPlain registers the request of a plain host envelope (quickLine),
// which is no tools/call and no cancellation, and reports whether it did:
// the frame is then relayed as it is. That is the common frame (a ping, a
// list request, a notification, an answer to the server), so it takes the
// lock once and allocates only what it keeps. It reports false, having
// changed nothing, when the frame needs the general reading: an id that is
// not a plain integer or string, or one that a call in flight uses under
// some reading (markReuse refuses it).
func (r *relay) admitPlain(e rpc.Envelope) bool {
	if !e.IsRequest || e.ID == nil {
		return true // nothing to answer: an answer or a notification
	}
	var buf [64]byte
	k, ok := rpc.AppendPlainIDKey(buf[:0], e.ID)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.others[string(k)]; o != nil && len(r.pending) == 0 {
		o.n++
		return true
	}
	key := string(k)
	id := proxy.NewReqID(key, e.ID)
	if len(r.pending) > 0 && r.callWithLocked(id) != nil {
		return false
	}
	r.registerLocked([]rpc.Request{{Key: key, ID: e.ID}})
	return true
}

// markReuse marks every call of cls whose id is already in flight, or
// given twice in cls, under the exact or the loose reading (Call.Reused),
// and cls.Reused when a request of another method reuses a call's id. A
// frame without calls that reuses no id is relayed as it is, so its
// requests are registered at once, under the same lock (the common frame
// then takes it once); markReuse reports whether it did.
func (r *relay) markReuse(cls *rpc.Classification) (registered bool) {
	if len(cls.Calls) == 0 && len(cls.Requests) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var seen []proxy.ReqID // ids of calls earlier in this frame
	for i := range cls.Calls {
		c := &cls.Calls[i]
		if c.Key == "" {
			continue
		}
		id := proxy.NewReqID(c.Key, c.ID)
		why := ""
		if pc := r.callWithLocked(id); pc != nil {
			why = fmt.Sprintf("id %s is already in use by %s, which is in flight", c.ID, pc.call.CallID)
		} else if r.otherWithLocked(id) != nil {
			why = fmt.Sprintf("id %s is already in use by another request in flight", c.ID)
		} else {
			for _, s := range seen {
				if s.Same(id) {
					why = fmt.Sprintf("id %s is given to more than one request in this frame", c.ID)
				}
			}
		}
		seen = append(seen, id)
		if why != "" {
			c.Reused, c.Malformed = true, "tools/call reuses an id: "+why
		}
	}
	for _, q := range cls.Requests {
		if len(r.pending) == 0 && len(seen) == 0 {
			break // no call in flight or in this frame to reuse
		}
		id := proxy.NewReqID(q.Key, q.ID)
		if r.callWithLocked(id) != nil {
			cls.Reused = true
		}
		for _, s := range seen {
			if s.Same(id) {
				cls.Reused = true
			}
		}
	}
	if len(cls.Calls) > 0 || cls.Reused {
		return false
	}
	r.registerLocked(cls.Requests)
	return true
}

// registerLocked registers requests as in flight; r.mu is held.
func (r *relay) registerLocked(requests []rpc.Request) {
	for _, q := range requests {
		if q.List != "" {
			r.lists.Add(proxy.NewReqID(q.Key, q.ID), q.List, q.Cursor)
		}
		if q.Init {
			r.hostURL = q.URLElicitation
			r.lists.Add(proxy.NewReqID(q.Key, q.ID), "initialize", false)
			for _, b := range r.books {
				b.SetCaps(q.Caps)
			}
		}
		if o := r.others[q.Key]; o != nil {
			o.n++
		} else {
			r.others[q.Key] = &otherRequest{id: proxy.NewReqID(q.Key, q.ID), n: 1}
		}
	}
}

// callWithLocked returns the call in flight that id names to some reader.
func (r *relay) callWithLocked(id proxy.ReqID) *pendingCall {
	if pc := r.pending[id.Key]; pc != nil {
		return pc
	}
	if !id.LooseOK {
		return nil
	}
	for _, pc := range r.pending {
		if pc.id.Same(id) {
			return pc
		}
	}
	return nil
}

// otherWithLocked returns the other request in flight that id names.
func (r *relay) otherWithLocked(id proxy.ReqID) *otherRequest {
	if o := r.others[id.Key]; o != nil {
		return o
	}
	if !id.LooseOK {
		return nil
	}
	for _, o := range r.others {
		if o.id.Same(id) {
			return o
		}
	}
	return nil
}

// track registers the requests of a relayed host frame, unless markReuse
// has (registered), and records the host's cancellations of calls in
// flight.
func (r *relay) track(cls rpc.Classification, now time.Time, registered bool) {
	if (registered || len(cls.Requests) == 0) && len(cls.Cancels) == 0 {
		return
	}
	r.mu.Lock()
	if !registered {
		r.registerLocked(cls.Requests)
	}
	type cancel struct {
		pc    *pendingCall
		after time.Duration
		id    json.RawMessage
	}
	var cancels []cancel
	for _, raw := range cls.Cancels {
		key, _, _ := rpc.IDKey(raw)
		id := proxy.NewReqID(key, raw)
		for _, pc := range r.pending {
			if pc.id.Same(id) && pc.cancelled == 0 {
				pc.cancelled = max(now.Sub(pc.start), time.Nanosecond)
				cancels = append(cancels, cancel{pc, pc.cancelled, raw})
			}
		}
	}
	r.mu.Unlock()
	for _, c := range cancels {
		fact := map[string]any{"call_id": c.pc.call.CallID, "tool_id": c.pc.call.ToolID, "request_id": string(c.id), "after_ms": c.after.Milliseconds()}
		if _, err := r.sess.Fact(schemas.KindCallCancelled, fact); err != nil {
			r.fail(err)
			return
		}
	}
}

// refusesItself reports whether c is refused for what it is, not for what
// a policy says of it: an ambiguous call in every mode, since aegis cannot
// tell which call the server would run and so could neither decide it nor
// record truthfully what ran; an unreadable one under a policy, since no
// rule can decide it and a lenient server might still run it.
func (r *relay) refusesItself(c rpc.Call) bool {
	return c.Ambiguous || c.Reused || r.gate != nil && c.Unreadable
}

// refuseFrame records every call of a refused frame (intent and outcome
// back to back), registers pending approvals, and answers the host with
// the refusal frame once the outcomes are durable. The frame never reaches
// the server.
func (r *relay) refuseFrame(cls rpc.Classification, frame []byte, fev schemas.Event, verdicts []proxy.Gated, policyHash string, now time.Time) (*events.Receipt, bool, bool) {
	// No call of the frame runs, so an approval a call took is not spent.
	for i, c := range cls.Calls {
		if verdicts[i].Approval != "" {
			r.gate.GiveBack(c.Tool, verdicts[i])
		}
	}
	with := []schemas.Event{fev}
	var last *events.Receipt
	var err error
	dg := proxy.Digest(frame)
	type answer struct {
		id  json.RawMessage
		why proxy.Refusal
	}
	var answers []answer
	for i, c := range cls.Calls {
		wc := schemas.WrapCall{CallID: r.sess.NextCallID(), ToolID: c.Tool, RequestDigest: dg, PolicySetHash: policyHash}
		d := verdicts[i].Decision
		var o schemas.Outcome
		switch {
		case r.refusesItself(c):
			// Refused for itself, not as a sibling.
			wc.PolicySetHash = schemas.WrapPassthroughPolicySetHash
			o = wc.Malformed()
			o.Policy = schemas.PolicyDenied(c.Malformed)
			o.Capability = schemas.CapabilityDenied(c.Malformed)
		case !c.Named:
			wc.PolicySetHash = schemas.WrapPassthroughPolicySetHash
			o = wc.Malformed()
			if c.Malformed != schemas.ReasonMalformedCall {
				o.Policy = schemas.PolicyDenied(c.Malformed)
				o.Capability = schemas.CapabilityDenied(c.Malformed)
			}
			o.Execution = schemas.ExecutionHostDenied(schemas.ReasonSiblingRefused)
		case d.Verdict == policy.Allow:
			o = wc.SiblingRefused()
			o.DecisionAxes.MatchedRule = d.MatchedRule
		default:
			o = wc.Refused(d.Record(), d.MatchedRule)
			o.DecisionAxes.ToolPin = r.pins.PinOf(c.Tool)
		}
		if last, err = r.sess.Intent(proxy.IntentOf(wc, c.TraceParent), with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
		var pending *proxy.PendingApproval
		if d.Verdict == policy.PendingApproval {
			p := proxy.PendingApproval{ApprovalID: d.ApprovalID, ToolID: c.Tool, RequestDigest: dg, ArgsDigest: verdicts[i].ArgsDigest,
				Session: r.sess.ID(), RequestedAt: now.UTC(), ExpiresAt: now.Add(r.gate.TTL).UTC(), MatchedRule: d.MatchedRule, PinDigest: verdicts[i].PinDigest}
			p.Args, p.ArgsBytes = proxy.ArgsPreview(proxy.CanonicalArgs(c.Args))
			if _, err = r.sess.Fact(schemas.KindApprovalRequested, p); err != nil {
				r.fail(err)
				return nil, false, false
			}
			r.gate.Request(p)
			r.armExpiry(p)
			r.prompt(p)
			pending = &p
		}
		if last, err = r.sess.Outcome(o); err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.mu.Lock()
		r.calls++
		r.mu.Unlock()
		// A call refused for itself is answered even when its id, or the
		// frame it came in, cannot be read: with a null id, as JSON-RPC
		// answers a request whose id cannot be told. (An ambiguous
		// notification has no id to read, and gets no answer.)
		id := c.ID
		if len(id) == 0 && c.Unreadable && r.refusesItself(c) {
			id = json.RawMessage("null")
		}
		if len(id) > 0 && (r.refusesItself(c) || !bytes.Equal(id, []byte("null"))) {
			why := proxy.Refusal{Code: policy.RefusalCode(d), Reason: d.Reason, Hint: verdicts[i].Hint}
			switch {
			case r.refusesItself(c):
				why.Code, why.Reason, why.Hint = policy.CodeHostDenied, c.Malformed, rpc.SelfRefusalHint(c)
			case !c.Named || d.Verdict == policy.Allow:
				why.Code = policy.CodeHostDenied
				why.Reason = "another call in this batch was refused, and a batch is refused whole"
				why.Hint = "send this call again without the refused ones"
				if verdicts[i].Approval != "" {
					why.Hint += "; approval " + verdicts[i].Approval + " is kept for it"
				}
			case d.Verdict == policy.PendingApproval:
				why.ApprovalID = d.ApprovalID
				if why.Reason == "" {
					why.Reason = "a human must approve this call (rule " + d.MatchedRule + ")"
				}
				if pending != nil {
					r.elicit(&why, *pending, d.Reason, now)
				}
			}
			answers = append(answers, answer{id, why})
		}
	}
	// Every other request of the frame is refused with it: it never
	// reaches the server, so only aegis can answer it.
	for _, q := range cls.Requests {
		why := proxy.Refusal{Code: policy.CodeHostDenied, Reason: "another request in this frame was refused, and a frame is refused whole",
			Hint: "send this request again without the refused ones"}
		if cls.Reused {
			why.Reason, why.Hint = "a request in this frame reuses the id of a tools/call in flight", "give each request an id of its own until it is answered"
		}
		answers = append(answers, answer{q.ID, why})
	}
	if cls.Reused {
		r.log.Warn("refused a request that reuses the id of a tools/call in flight; give each request an id of its own until it is answered")
	}
	var reply []byte
	switch {
	case len(answers) == 0:
		// Notifications only: nothing to answer.
	case cls.Shape == rpc.Batch:
		reply = append(reply, '[')
		for i, a := range answers {
			if i > 0 {
				reply = append(reply, ',')
			}
			reply = append(reply, proxy.RefusalFrameOf(a.id, a.why)...)
		}
		reply = append(reply, ']')
	default:
		reply = proxy.RefusalFrameOf(answers[0].id, answers[0].why)
	}
	if reply != nil {
		rev, err := r.sess.FrameEvent(schemas.KindFrameRefusal, reply)
		if err == nil {
			last, err = r.sess.Enqueue(rev)
		}
		if err != nil {
			r.fail(err)
			return nil, false, false
		}
		r.send(r.toHost, outFrame{data: append(reply, '\n'), wait: last}, true)
	}
	return last, false, true
}
