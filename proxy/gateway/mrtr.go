package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

// Protocol 2026-07-28 toward a host, 2025-11-25 toward the servers
// (docs/GATEWAY-PARITY.md, "Protocol 2026-07-28"):
//
//   - A host request that carries io.modelcontextprotocol/protocolVersion
//     2026-07-28 in its _meta is served at that version (when the gateway
//     offers it, Config.HostProtocol): the SDK answers server/discover with
//     the capabilities the gateway announces, merged from its servers, and
//     serves each request statelessly. Every server keeps the session it
//     was initialized with (2025-11-25); the per-request members of _meta
//     (protocol version, client info and capabilities, log level) are the
//     host's to the gateway and never reach a server (bridgeMeta).
//   - A tools/call of such a host is decided and recorded as every
//     tools/call is (decideCall: same policy, profiles, approvals, record
//     lines), its intent naming the protocol version. It runs on in the
//     gateway across the host's requests (an mrtrCall): a server's
//     sampling/createMessage, elicitation/create or roots/list during the
//     call, which the gateway may not put to such a host as a request,
//     becomes the call's input_required result (inputRequests, and a
//     requestState), and the host's retry with inputResponses and that
//     requestState answers the server's waiting requests: the same call,
//     the same decision and the same spent approval, never decided again.
//     Each round is recorded (a note, mrtr: input_required, then retry)
//     before the host sees it or the server gets the answer.
//   - A prompts/get or resources/read of such a host is decided and
//     recorded (its call.verdict) before it runs, then served as a call
//     is (mrtrServe): a server's request during it becomes its
//     input_required result, and the retry, tied by its requestState
//     (whose MAC covers the method too) to the request as decided (the
//     same prompt and arguments, the same URI), is never decided again.
//   - A call that waits for a human, when its request declares URL
//     elicitation and a link can be made, is a round too (mrtrApproval):
//     the approval's url-mode elicitation/create as the input request,
//     the approval id in the requestState's MAC; the accepting retry is
//     held until the human decides and the call is then decided again
//     (elicit.go). Such a call waits on no server: a server's request is
//     never admitted to it.
//   - requestState is the gateway's: a random round id and the call's
//     digest under an HMAC-SHA256 of a key made at start and never stored,
//     so the host can neither forge nor alter it; it is spent by the retry
//     that answers it. A retry whose state fails the MAC, is unknown,
//     spent or expired, comes from another host session, or names another
//     tool or other arguments than the decided call is refused (-32042,
//     MRTR_REFUSED), recorded, and answers nothing; the round stays for
//     the true retry.
//   - Bounded: at most maxRounds calls of one host session wait on the
//     host at once; a server's request beyond that is refused (as a host
//     without the capability would refuse it) and recorded. A round the
//     host does not answer within roundTTL ends the call, cancelled, with
//     its outcome recorded.
//   - Which call a server's request belongs to: the one call of that host
//     waiting on the server; with several, the server's request is refused
//     (the session protocol names no call in a server's request). A
//     sampling or elicitation request while no call waits on the server is
//     refused (-32601); a roots/list then, the host's roots being no one
//     call's, waits (at most rootsHold, and not after the host left) for
//     the host's next call to that server and is asked in it; else the
//     gateway's own (empty) list answers it.

// newProtocol is the first protocol version without sessions, in which a
// server may not send requests to the client outside of the call that
// needs them (multi-round-trip results instead).
const newProtocol = "2026-07-28"

// maxRounds bounds the calls of one host session that wait on the host.
const maxRounds = 64

// roundTTL is how long a round waits for the host's retry.
const roundTTL = 10 * time.Minute

// The members of a request's _meta that belong to the protocol between the
// host and the gateway and never reach a server.
var perRequestMeta = []string{
	mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities, mcp.MetaKeyLogLevel,
}

// bridgeMeta returns meta without the per-request members of 2026-07-28:
// the servers speak the session protocol.
func bridgeMeta(meta mcp.Meta) mcp.Meta {
	if meta == nil {
		return nil
	}
	has := false
	for _, k := range perRequestMeta {
		if _, ok := meta[k]; ok {
			has = true
		}
	}
	if !has {
		return meta
	}
	m := make(mcp.Meta, len(meta))
	for k, v := range meta {
		m[k] = v
	}
	for _, k := range perRequestMeta {
		delete(m, k)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// protocolKey is the context key of the protocol version of a stateless
// (2026-07-28) host request.
type protocolKey struct{}

func protocolOf(ctx context.Context) string {
	s, _ := ctx.Value(protocolKey{}).(string)
	return s
}

// newHost reports whether host speaks the protocol without sessions.
func newHost(host *mcp.ServerSession) bool {
	p := host.InitializeParams()
	return p != nil && p.ProtocolVersion >= newProtocol
}

// requestVersion is the 2026-07-28 (or later) version a request names in
// its _meta, or "".
func requestVersion(meta mcp.Meta) string {
	if v, ok := meta[mcp.MetaKeyProtocolVersion].(string); ok && v >= newProtocol {
		return v
	}
	return ""
}

// mrtr holds the calls of 2026-07-28 hosts that are in flight across the
// hosts' requests.
type mrtr struct {
	key []byte // the requestState MAC key, random, of this process only

	mu    sync.Mutex
	calls map[string]*mrtrCall // call key -> call
	limit int                  // maxRounds; lower in tests
	began chan struct{}        // closed, and replaced, when a call is let through
}

func newMRTR() *mrtr {
	k := make([]byte, 32)
	rand.Read(k)
	return &mrtr{key: k, calls: map[string]*mrtrCall{}, limit: maxRounds, began: make(chan struct{})}
}

// mrtrCall is one tools/call, prompts/get or resources/read of a
// 2026-07-28 host.
type mrtrCall struct {
	key    string // random, names the call in its requestState
	method string // tools/call, prompts/get or resources/read
	host   *mcp.ServerSession
	server string
	name   string // the wire tool or prompt name, or the resource's URI
	args   []byte // canonical arguments, as decided
	proto  string

	callID string // a tools/call's, once decided
	tool   string // its tool_id in the record

	kick   chan struct{} // a server's request was queued
	done   chan struct{} // closed when the call ended, with res and err
	res    mcp.Result
	err    error
	cancel context.CancelFunc

	// Under mrtr.mu:
	round   int             // rounds given to the host so far
	state   string          // the requestState of the round outstanding, "" when none
	pending []*ask          // the server's requests of that round
	expiry  *time.Timer     // ends the call when the host does not answer
	waiting bool            // a host request waits on the call now
	runs    bool            // let through: the server's requests may be its
	keys    map[string]bool // input keys given, so a key is never given twice
	queue   []*ask          // server requests admitted, not yet in a round
	ended   bool            // forgotten: no more requests are queued
	// approval is the approval the call waits for, shown to the host as
	// a url-mode input request (mrtrApproval); "" once the call runs. It
	// is in the MAC of the round's requestState.
	approval string
}

// who names call c in the record: a tools/call by its call and tool ids
// (and the approval its round shows, if any), a prompts/get or
// resources/read by its method and prompt or URI. Under mrtr.mu.
func (c *mrtrCall) who() map[string]any {
	switch c.method {
	case "prompts/get":
		return map[string]any{"method": c.method, "prompt": c.name}
	case "resources/read":
		return map[string]any{"method": c.method, "uri": c.name}
	}
	w := map[string]any{"method": c.method, "call_id": c.callID, "tool_id": c.tool}
	if c.approval != "" {
		w["approval_id"] = c.approval
	}
	return w
}

// ask is one request of a server to the host during a call.
type ask struct {
	key    string
	method string
	params any
	reply  chan askReply
}

// admit finds the one call of host that waits on server and makes the
// server's request (method, params) an input request of it, or refuses
// it: no such call, several, or (c not nil) host's calls that wait on
// the host are at the limit.
func (m *mrtr) admit(host *mcp.ServerSession, server, method string, params any) (*mrtrCall, *ask, *jsonrpc.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var c *mrtrCall
	n, open := 0, 0
	for _, x := range m.calls {
		if host != nil && x.host != host {
			continue // nil: the host whose session does not exist yet, any
		}
		if x.open() {
			open++
		}
		if !x.runs {
			continue // not decided yet, refused, or waiting for a human: nothing of it runs
		}
		if x.server == server {
			c = x
			n++
		}
	}
	if n == 1 && c.ended {
		n = 0
	}
	if n != 1 {
		msg := "aegis: a host of protocol " + newProtocol + " takes a server's " + method + " only during a call"
		if n > 1 {
			msg = fmt.Sprintf("aegis: %d calls of the host are in flight to this server, and the session protocol does not say which this %s belongs to; "+
				"a host of %s is asked a server's question only while one call to that server is in flight (a call whose earlier question the host left unanswered stays in flight for %v)",
				n, method, newProtocol, roundTTL)
		}
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: msg}
	}
	if !c.open() && open >= m.limit {
		return c, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: the host has %d calls waiting on its answers, the limit", m.limit)}
	}
	a := &ask{key: fmt.Sprintf("aegis-%d", len(c.keys)+1), method: method, params: params, reply: make(chan askReply, 1)}
	c.keys[a.key] = true
	c.queue = append(c.queue, a)
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return c, a, nil
}

// rootsHold bounds how long a server's roots/list between calls waits
// for the host's next call to it.
const rootsHold = time.Minute

// admitNext admits the server's request (method, params) as admit does
// once a call of host to server begins, waiting at most rootsHold, and
// not once leaving is closed (the host left: no call will come).
func (m *mrtr) admitNext(ctx context.Context, leaving <-chan struct{}, host *mcp.ServerSession, server, method string, params any) (*mrtrCall, *ask, *jsonrpc.Error) {
	t := time.NewTimer(rootsHold)
	defer t.Stop()
	for {
		m.mu.Lock()
		began := m.began
		m.mu.Unlock()
		c, a, err := m.admit(host, server, method, params)
		if err == nil || c != nil {
			return c, a, err
		}
		select {
		case <-began:
		case <-t.C:
			return nil, nil, err
		case <-leaving:
			return nil, nil, err
		case <-ctx.Done():
			return nil, nil, err
		}
	}
}

// open reports whether c waits on the host: a round given, or a server's
// request admitted for the next one. Under mrtr.mu.
func (c *mrtrCall) open() bool { return c.state != "" || len(c.queue) > 0 }

// orEmptyRoots is p, or no params.
func orEmptyRoots(p *mcp.ListRootsParams) *mcp.ListRootsParams {
	if p == nil {
		return &mcp.ListRootsParams{}
	}
	return p
}

type askReply struct {
	res mcp.Result
	err error
}

// stateOf is the requestState of round n of call c: its key and round,
// then their MAC, over the call's tool (prompt, URI), arguments, the
// approval it waits for, if any, and its method. Under m.mu.
func (m *mrtr) stateOf(c *mrtrCall, n int) string {
	body := fmt.Sprintf("%s.%d", c.key, n)
	mac := hmac.New(sha256.New, m.key)
	mac.Write([]byte(body))
	mac.Write([]byte{0})
	mac.Write([]byte(c.name))
	mac.Write([]byte{0})
	mac.Write(c.args)
	mac.Write([]byte{0})
	mac.Write([]byte(c.approval))
	mac.Write([]byte{0})
	mac.Write([]byte(c.method))
	return base64.RawURLEncoding.EncodeToString([]byte(body)) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// parseState returns the call key and round a requestState names, when
// its MAC holds for that call's tool and arguments.
func (m *mrtr) parseState(state string) (*mrtrCall, int, string) {
	b64, _, ok := strings.Cut(state, ".")
	if !ok {
		return nil, 0, "requestState is not one of the gateway's"
	}
	body, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return nil, 0, "requestState is not one of the gateway's"
	}
	key, nstr, ok := strings.Cut(string(body), ".")
	var n int
	if _, err := fmt.Sscanf(nstr, "%d", &n); !ok || err != nil {
		return nil, 0, "requestState is not one of the gateway's"
	}
	m.mu.Lock()
	c := m.calls[key]
	ok = c != nil && hmac.Equal([]byte(m.stateOf(c, n)), []byte(state))
	m.mu.Unlock()
	if !ok {
		// An unknown call, or a state whose MAC fails: the same answer,
		// so that the host learns nothing of which.
		return nil, 0, "requestState is unknown, spent or expired"
	}
	return c, n, ""
}

// start runs tools/call r of a 2026-07-28 host: decided and recorded as
// every call, in the gateway across the host's requests; the host's
// request waits for its answer or its first round.
func (g *gateway) mrtrStart(ctx context.Context, method string, r *mcp.CallToolRequest, next mcp.MethodHandler, version string) (mcp.Result, error) {
	m := g.mr
	server := ""
	if e, ok := g.tool(r.Params.Name); ok {
		server = e.server
	}
	c := newMRTRCall(method, r.Session, server, r.Params.Name, proxy.CanonicalArgs(r.Params.Arguments), version)
	// The host's capabilities are per request: this one's say whether an
	// approval may be shown to it as a url-mode input request.
	caps := r.ClientCapabilities()
	url := caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
	return g.mrtrBegin(ctx, c, func(cctx context.Context) (any, error) {
		cctx = context.WithValue(cctx, urlHostKey{}, url)
		var res any
		var err error
		for {
			res, err = g.decideCall(withTraceParent(cctx, r.Params.Meta), method, r.Params.Name, r.Params.Arguments, func(rctx context.Context, wc schemas.WrapCall, e toolEntry) (any, error) {
				// Decided and let through: from now on the server's requests
				// are this call's.
				m.mu.Lock()
				c.callID, c.tool, c.approval, c.runs = wc.CallID, wc.ToolID, "", true
				close(m.began)
				m.began = make(chan struct{})
				m.mu.Unlock()
				if d := g.downs[e.server]; g.tk.rawDown && d != nil && d.raw != nil {
					return g.rawToolCall(rctx, r, e, d.raw)
				}
				return next(rctx, method, r)
			})
			var aw *approvalWait
			if !errors.As(err, &aw) {
				break
			}
			// Waits for a human, and the host shows URL elicitations: a
			// round of the call, then decided again once the human has.
			again, ar, aerr := g.mrtrApproval(cctx, c, aw)
			if !again {
				res, err = ar, aerr
				break
			}
		}
		return res, err
	})
}

// newMRTRCall is a request of host, to server, by method, of the tool or
// prompt name (or the URI) with canonical args, at protocol version.
func newMRTRCall(method string, host *mcp.ServerSession, server, name string, args []byte, version string) *mrtrCall {
	kb := make([]byte, 16)
	rand.Read(kb)
	return &mrtrCall{key: hex.EncodeToString(kb), method: method, host: host, server: server, name: name, args: args,
		proto: version, kick: make(chan struct{}, 1), done: make(chan struct{}), keys: map[string]bool{}}
}

// mrtrBegin runs call c, by body, in the gateway across the host's
// requests; the host's request ctx waits for its answer or its first
// round.
func (g *gateway) mrtrBegin(ctx context.Context, c *mrtrCall, body func(cctx context.Context) (any, error)) (mcp.Result, error) {
	m := g.mr
	m.mu.Lock()
	m.calls[c.key] = c
	c.waiting = true
	if c.runs {
		// Let through already (decided before it began): a server's
		// roots/list between calls may be asked in it.
		close(m.began)
		m.began = make(chan struct{})
	}
	m.mu.Unlock()
	// The call outlives the host's request: the host's later requests (its
	// retries) and its cancellation reach it through c.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	cctx = context.WithValue(cctx, protocolKey{}, c.proto)
	go func() {
		defer cancel()
		res, err := body(cctx)
		if err == nil {
			if rr, ok := res.(mcp.Result); ok && rr != nil {
				c.res = rr
			} else {
				err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: no answer to %s (%T)", c.method, res)}
			}
		}
		c.err = err
		close(c.done)
	}()
	return g.mrtrWait(ctx, c)
}

// mrtrServe runs a prompts/get or resources/read of a 2026-07-28 host,
// decided and recorded (and let through) by the caller, as a call across
// the host's requests: a server's request during it becomes its
// input_required result, as during a tools/call.
func (g *gateway) mrtrServe(ctx context.Context, method string, host *mcp.ServerSession, server, name string, args []byte, version string, run func(cctx context.Context) (mcp.Result, error)) (mcp.Result, error) {
	c := newMRTRCall(method, host, server, name, args, version)
	c.runs = true
	return g.mrtrBegin(ctx, c, func(cctx context.Context) (any, error) {
		res, err := run(cctx)
		if err != nil {
			return nil, hostError(err)
		}
		return res, nil
	})
}

// urlHostKey is the context key of whether a stateless host request
// declared URL elicitation (a bool, set by mrtrStart only): decideCall
// then answers a call that waits for a human with an approvalWait.
type urlHostKey struct{}

// approvalWait is decideCall's answer to a call of a 2026-07-28 host that
// waits for a human, the host taking URL elicitations: the call was
// refused as pending and recorded so; el shows approval p to the human.
type approvalWait struct {
	p       proxy.PendingApproval
	el      *mcp.ElicitParams
	callID  string              // the refused call's, for the round's notes
	refusal *mcp.CallToolResult // the refusal every host gets, as it would get it
}

func (a *approvalWait) Error() string {
	return "aegis: the call waits for a human's approval " + a.p.ApprovalID
}

// mrtrApproval gives the host of call c the approval the call waits for
// as a round of it: one url-mode elicitation/create input request (the
// link of aw.el), under a requestState bound to the call, its tool and
// arguments and that approval. The host's retry that accepts it is held
// until the human decides (or the approval expires, or the host cancels),
// then the call is decided again (again): approved, it runs on the
// approval, once; denied, it is refused as denied (elicit.go). A retry
// that declines or cancels, or answers nothing, gets the refusal every
// host gets; the approval still waits for aegis approve. Beyond the
// host's limit of calls waiting on it the call gets that refusal too.
func (g *gateway) mrtrApproval(ctx context.Context, c *mrtrCall, aw *approvalWait) (again bool, res mcp.Result, err error) {
	m := g.mr
	m.mu.Lock()
	open := 0
	for _, x := range m.calls {
		if x.host == c.host && x.open() {
			open++
		}
	}
	if c.ended || (!c.open() && open >= m.limit) {
		ended := c.ended
		m.mu.Unlock()
		if !ended {
			g.noteRound(ctx, map[string]any{"mrtr": "refused", "call_id": aw.callID, "tool_id": c.name, "approval_id": aw.p.ApprovalID,
				"reason": fmt.Sprintf("aegis: the host has %d calls waiting on its answers, the limit", m.limit)})
		}
		return false, aw.refusal, nil
	}
	a := &ask{key: fmt.Sprintf("aegis-%d", len(c.keys)+1), method: "elicitation/create", params: aw.el, reply: make(chan askReply, 1)}
	c.keys[a.key] = true
	c.callID, c.tool, c.approval = aw.callID, c.name, aw.p.ApprovalID
	c.queue = append(c.queue, a)
	select {
	case c.kick <- struct{}{}:
	default:
	}
	m.mu.Unlock()
	var r askReply
	select {
	case r = <-a.reply:
	case <-ctx.Done():
		return false, nil, ctx.Err()
	}
	if er, ok := r.res.(*mcp.ElicitResult); r.err != nil || !ok || er.Action != "accept" {
		// The human was not shown the link: the refusal every host
		// gets, the approval still pending.
		return false, aw.refusal, nil
	}
	if decided := g.el.Wait(aw.p.ApprovalID); decided != nil {
		fmt.Fprintf(g.cfg.Stderr, "aegis: %s waits for a human's decision on approval %s (the host showed its link); the host's retry is held until then\n",
			projector.Printable(c.name), aw.p.ApprovalID)
		t := time.NewTimer(aw.p.ExpiresAt.Sub(g.cfg.Now()))
		defer t.Stop()
		select {
		case <-decided:
		case <-t.C:
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
	}
	return true, nil, nil
}

// mrtrWait waits, for the host request ctx, until call c ends (its answer)
// or a server asks the host something (a round: input_required).
func (g *gateway) mrtrWait(ctx context.Context, c *mrtrCall) (mcp.Result, error) {
	m := g.mr
	for {
		m.mu.Lock()
		asks := c.queue
		c.queue = nil
		m.mu.Unlock()
		if len(asks) > 0 {
			return g.mrtrRound(ctx, c, asks)
		}
		select {
		case <-c.kick:
		case <-c.done:
			// What the server asked before the call ended: the roots are
			// the host's, asked still (before the answer); the rest is
			// moot.
			m.mu.Lock()
			for _, a := range c.queue {
				if a.method == "roots/list" {
					asks = append(asks, a)
				} else {
					a.reply <- askReply{err: errCallEnded}
				}
			}
			c.queue = nil
			m.mu.Unlock()
			if len(asks) > 0 {
				return g.mrtrRound(ctx, c, asks)
			}
			return g.mrtrEnd(c)
		case <-ctx.Done():
			// The host cancelled its request: the call ends with it.
			c.cancel()
			<-c.done
			g.mrtrForget(c)
			return nil, ctx.Err()
		}
	}
}

// mrtrEnd is the answer of call c, which ended.
func (g *gateway) mrtrEnd(c *mrtrCall) (mcp.Result, error) {
	g.mrtrForget(c)
	return c.res, c.err
}

// mrtrForget takes call c out of the table: its states are spent.
func (g *gateway) mrtrForget(c *mrtrCall) {
	m := g.mr
	m.mu.Lock()
	delete(m.calls, c.key)
	if c.expiry != nil {
		c.expiry.Stop()
	}
	pending := append(c.pending, c.queue...)
	c.pending, c.state, c.queue, c.ended = nil, "", nil, true
	m.mu.Unlock()
	for _, a := range pending {
		a.reply <- askReply{err: errCallEnded}
	}
}

// inputRequired is a tools/call result of round state with asks, as
// 2026-07-28 writes it.
type inputRequired struct {
	*mcp.CallToolResult
	raw json.RawMessage
}

func (r inputRequired) MarshalJSON() ([]byte, error) { return r.raw, nil }

// mrtrRound gives the host round asks of call c: recorded, then answered
// input_required.
func (g *gateway) mrtrRound(ctx context.Context, c *mrtrCall, asks []*ask) (mcp.Result, error) {
	m := g.mr
	m.mu.Lock()
	c.round++
	n := c.round
	c.state = m.stateOf(c, n)
	c.pending = asks
	c.waiting = false
	state, note, expired := c.state, c.who(), c.who()
	m.mu.Unlock()
	reqs := map[string]any{}
	var keys []string
	for _, a := range asks {
		reqs[a.key] = map[string]any{"method": a.method, "params": a.params}
		keys = append(keys, a.key)
	}
	sort.Strings(keys)
	note["mrtr"], note["protocol_version"], note["round"], note["inputs"] = "input_required", c.proto, n, keys
	if err := g.noteRound(ctx, note); err != nil {
		c.cancel()
		<-c.done
		g.mrtrForget(c)
		return nil, auditRefusal(c.method, err)
	}
	raw, err := json.Marshal(map[string]any{"resultType": "input_required", "inputRequests": reqs, "requestState": state})
	if err != nil {
		c.cancel()
		<-c.done
		g.mrtrForget(c)
		return nil, err
	}
	m.mu.Lock()
	if c.expiry != nil {
		c.expiry.Stop()
	}
	c.expiry = time.AfterFunc(roundTTL, func() {
		expired["mrtr"], expired["round"] = "expired", n
		g.noteRound(context.Background(), expired)
		c.cancel()
		<-c.done
		g.mrtrForget(c)
	})
	m.mu.Unlock()
	return inputRequiredOf(c.method, raw), nil
}

// inputRequiredOf is the input_required result raw of a request by
// method, as the SDK takes it for that method.
func inputRequiredOf(method string, raw json.RawMessage) mcp.Result {
	switch method {
	case "prompts/get":
		return inputRequiredPrompt{GetPromptResult: &mcp.GetPromptResult{}, raw: raw}
	case "resources/read":
		return inputRequiredRead{ReadResourceResult: &mcp.ReadResourceResult{}, raw: raw}
	}
	return inputRequired{CallToolResult: &mcp.CallToolResult{}, raw: raw}
}

// inputRequiredPrompt is inputRequired of a prompts/get.
type inputRequiredPrompt struct {
	*mcp.GetPromptResult
	raw json.RawMessage
}

func (r inputRequiredPrompt) MarshalJSON() ([]byte, error) { return r.raw, nil }

// inputRequiredRead is inputRequired of a resources/read.
type inputRequiredRead struct {
	*mcp.ReadResourceResult
	raw json.RawMessage
}

func (r inputRequiredRead) MarshalJSON() ([]byte, error) { return r.raw, nil }

// noteRound records one step of a multi-round-trip call, durably.
func (g *gateway) noteRound(ctx context.Context, payload map[string]any) error {
	rc, err := g.sess.Fact(schemas.KindNote, payload)
	if err == nil {
		_, err = rc.Wait(context.WithoutCancel(ctx))
	}
	return err
}

// mrtrRefused refuses a host's retry of a request by method, recorded.
func (g *gateway) mrtrRefused(ctx context.Context, method string, c *mrtrCall, why string) error {
	payload := map[string]any{"method": method}
	if c != nil {
		g.mr.mu.Lock()
		payload = c.who()
		payload["round"] = c.round
		g.mr.mu.Unlock()
	}
	payload["mrtr"], payload["reason"] = "retry_refused", why
	if err := g.noteRound(ctx, payload); err != nil {
		return auditRefusal(method, err)
	}
	what := map[string]string{"prompts/get": "prompt", "resources/read": "resource"}[method]
	if what == "" {
		what = "tool"
	}
	return gatewayRefusal(method, map[string]string{"code": "MRTR_REFUSED", "reason": why,
		"hint": "retry with the requestState of the last input_required result, the same " + what + " and the same arguments"}, why)
}

// retry is a 2026-07-28 host's retry of a request: by method, of the
// tool or prompt name (or the URI) with canonical args, its requestState
// and inputResponses.
type retry struct {
	host      *mcp.ServerSession
	method    string
	name      string
	args      []byte
	state     string
	responses mcp.InputResponseMap
}

// mrtrRetry takes a 2026-07-28 host's retry of a tools/call.
func (g *gateway) mrtrRetry(ctx context.Context, r *mcp.CallToolRequest) (mcp.Result, error) {
	return g.mrtrRetryOf(ctx, retry{host: r.Session, method: "tools/call", name: r.Params.Name, args: proxy.CanonicalArgs(r.Params.Arguments),
		state: r.Params.RequestState, responses: r.Params.InputResponses})
}

// mrtrRetryOf takes a 2026-07-28 host's retry of a request: its
// requestState names the call and round, its method, name and arguments
// must be the decided ones; its inputResponses answer the server's
// waiting requests.
func (g *gateway) mrtrRetryOf(ctx context.Context, r retry) (mcp.Result, error) {
	m := g.mr
	c, n, why := m.parseState(r.state)
	if c == nil {
		return nil, g.mrtrRefused(ctx, r.method, nil, why)
	}
	m.mu.Lock()
	switch {
	case c.host != r.host:
		why = "requestState belongs to another session"
	case c.state == "" || n != c.round || c.state != r.state:
		why = "requestState is unknown, spent or expired"
	case r.method != c.method:
		why = "the retry is a " + r.method + ", the request decided a " + c.method
	case r.name != c.name:
		why = map[string]string{"tools/call": "the retry names another tool than the call decided",
			"prompts/get":    "the retry names another prompt than the one decided",
			"resources/read": "the retry names another resource than the one decided"}[c.method]
	case !bytes.Equal(r.args, c.args):
		why = "the retry's arguments differ from the call's as decided"
	}
	if why != "" {
		m.mu.Unlock()
		return nil, g.mrtrRefused(ctx, r.method, c, why)
	}
	pending := c.pending
	c.pending, c.state, c.waiting = nil, "", true
	if c.expiry != nil {
		c.expiry.Stop()
	}
	note := c.who()
	m.mu.Unlock()
	resp, _ := json.Marshal(r.responses)
	var keys []string
	for k := range r.responses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	note["mrtr"], note["round"], note["inputs"], note["responses_digest"] = "retry", n, keys, proxy.SHA(resp)
	if err := g.noteRound(ctx, note); err != nil {
		for _, a := range pending {
			a.reply <- askReply{err: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: the host's answer could not be recorded"}}
		}
		return nil, auditRefusal(r.method, err)
	}
	for _, a := range pending {
		a.reply <- answerOf(a, r.responses[a.key])
	}
	return g.mrtrWait(ctx, c)
}

// answerOf is the host's input response v to a as the server's request
// expects it.
func answerOf(a *ask, v mcp.InputResponse) askReply {
	var ok bool
	switch a.method {
	case "sampling/createMessage":
		_, ok = v.(*mcp.CreateMessageWithToolsResult)
	case "elicitation/create":
		_, ok = v.(*mcp.ElicitResult)
	case "roots/list":
		_, ok = v.(*mcp.ListRootsResult)
	}
	if !ok {
		return askReply{err: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: the host gave no answer to %s", a.method)}}
	}
	return askReply{res: v.(mcp.Result)}
}

// mrtrAsk puts a server's request (method, params) to a 2026-07-28 host
// as an input request of the host's call that waits on server, and waits
// for the host's answer in its retry.
func (g *gateway) mrtrAsk(ctx context.Context, server string, host *mcp.ServerSession, method string, params any) (mcp.Result, error) {
	roots := method == "roots/list"
	for tries := 0; ; tries++ {
		c, a, err := g.mr.admit(host, server, method, params)
		if err != nil && c == nil && roots {
			// The roots are the host's, not a call's: a server that asks
			// for them between calls (at its start, say) is answered in
			// the host's next call to it.
			c, a, err = g.mr.admitNext(ctx, g.life.leaving, host, server, method, params)
		}
		if err != nil {
			if c != nil {
				// At the limit: recorded, as every refusal is.
				g.mr.mu.Lock()
				note := c.who()
				g.mr.mu.Unlock()
				note["mrtr"], note["reason"] = "refused", err.Message
				g.noteRound(ctx, note)
			}
			return nil, err
		}
		res, perr := g.mrtrPut(ctx, c, a)
		if errors.Is(perr, errCallEnded) && roots && tries < 10 {
			continue // the call ended before the host answered: the next one asks
		}
		return res, perr
	}
}

// errCallEnded answers a server's request whose call ended before the
// host answered it.
var errCallEnded = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: the call this request belongs to has ended"}

// mrtrPut waits for the host's answer to ask a, queued on call c, in its
// retry; every ask queued is answered (mrtrForget answers what is left).
func (g *gateway) mrtrPut(ctx context.Context, c *mrtrCall, a *ask) (mcp.Result, error) {
	select {
	case r := <-a.reply:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
