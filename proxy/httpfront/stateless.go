package httpfront

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stateless requests (MCP 2026-07-28 and later), with [Config.Stateless]:
//
//   - A POST without Mcp-Session-Id whose body is one JSON-RPC request
//     naming a protocol version of 2026-07-28 or later in its
//     _meta (io.modelcontextprotocol/protocolVersion), server/discover
//     among them, is a stateless request. Its standard headers are checked
//     against its body before anything of it is served, as the go-sdk's
//     stateless handler checks them: Mcp-Protocol-Version must be there
//     and name the version of _meta, Mcp-Method the method, and for
//     tools/call, prompts/get and resources/read Mcp-Name the tool or
//     prompt name or the URI (plain or =?base64?…?=); a mismatch is 400
//     with the JSON-RPC error -32020 (header mismatch) and reaches no
//     session.
//   - Every stateless request of one principal (of every client, without
//     OAuth) is served by one session that the front begins at the first
//     and keeps until it closes: one Serve, one gateway, one set of servers.
//     The request reaches it under an id of the front's (never the
//     client's, so two clients' equal ids never meet), and its answer goes
//     back on the POST that carried it with the client's id: as an SSE
//     stream when the POST accepts text/event-stream, else as JSON. A
//     POST whose client goes away cancels its request
//     (notifications/cancelled).
//   - A request's progress token (_meta.progressToken) reaches the session
//     as the front's id of the request, never the client's (so two
//     clients' equal tokens never meet); the session's
//     notifications/progress for it go back on that POST, with the
//     client's token: the POST is then answered as an SSE stream (every
//     POST accepts text/event-stream, front.go), the notifications first,
//     the answer last.
//   - subscriptions/listen is served as an SSE stream that lasts until
//     the client goes away (its request is then cancelled) or the
//     session ends: the
//     session's notifications that name the listen (_meta
//     io.modelcontextprotocol/subscriptionId, the front's id of it) go on
//     it with the client's id. One listen per stateless session (per
//     principal) is open at a time, as the SDK keeps one per session: a
//     second is refused (409) while one is open, which a listen is until
//     the session has answered its cancellation (at most listenEnd).
//   - A notification POSTed without Mcp-Session-Id under an
//     Mcp-Protocol-Version of 2026-07-28 or later (the go-sdk's client
//     sends notifications/cancelled so when a call's context ends) is
//     accepted (202) and reaches no session: on stateless HTTP the client
//     cancels a request by closing its POST's stream, which the front
//     turns into the session's notifications/cancelled (above), and its
//     requestId is the client's, which could name another client's
//     request of the same principal. A 400 instead would end the client's
//     connection: the go-sdk's client fails it on a refused notification.
//     Its Mcp-Method header, when there, must name its method (else 400),
//     as for a request.
//   - What the session sends that belongs to no waiting POST (another
//     notification, a request of its own) is dropped, as is a
//     notification for a POST whose client reads too slowly (more than
//     noteBuffer waiting): a 2026-07-28 server puts its questions in its
//     results.

// metaProtocol is the per-request _meta member that names the protocol.
const metaProtocol = "io.modelcontextprotocol/protocolVersion"

// metaSubscription is the _meta member of a notification that names the
// subscriptions/listen it belongs to.
const metaSubscription = "io.modelcontextprotocol/subscriptionId"

// noteBuffer bounds the notifications waiting for one POST's client.
const noteBuffer = 256

// listenEnd bounds how long a cancelled listen waits for the session to
// answer it.
const listenEnd = 5 * time.Second

// headerMismatch is the JSON-RPC error code of a standard header that does
// not match the body (the go-sdk's CodeHeaderMismatch).
const headerMismatch = -32020

// statelessVersion is the protocol version a stateless request's _meta
// names (2026-07-28 or later), or "" for any other request.
func statelessVersion(req *jsonrpc.Request) string {
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	if len(req.Params) == 0 || json.Unmarshal(req.Params, &p) != nil {
		return ""
	}
	v, _ := p.Meta[metaProtocol].(string)
	if v < "2026-07-28" {
		return ""
	}
	return v
}

// decodeHeader reads a header value, plain or =?base64?…?=.
func decodeHeader(v string) (string, bool) {
	if enc, ok := strings.CutPrefix(v, "=?base64?"); ok {
		if enc, ok = strings.CutSuffix(enc, "?="); ok {
			b, err := base64.StdEncoding.DecodeString(enc)
			return string(b), err == nil
		}
	}
	return v, true
}

// headersMatch checks the standard headers of stateless request req,
// whose _meta names version, against its body; "" when they match.
func headersMatch(h http.Header, req *jsonrpc.Request, version string) string {
	switch pv := h.Get("Mcp-Protocol-Version"); {
	case pv == "":
		return "the Mcp-Protocol-Version header is required for a request whose _meta names " + version
	case pv != version:
		return fmt.Sprintf("header mismatch: Mcp-Protocol-Version %q does not match the request's _meta %q", pv, version)
	}
	switch m := h.Get("Mcp-Method"); {
	case m == "":
		return "missing required Mcp-Method header"
	case m != req.Method:
		return fmt.Sprintf("header mismatch: Mcp-Method header value %q does not match body value %q", m, req.Method)
	}
	var member string
	switch req.Method {
	case "tools/call", "prompts/get":
		member = "name"
	case "resources/read":
		member = "uri"
	default:
		return ""
	}
	raw, ok := h["Mcp-Name"]
	if !ok || len(raw) != 1 || raw[0] == "" {
		return fmt.Sprintf("missing required Mcp-Name header for method %q", req.Method)
	}
	name, ok := decodeHeader(raw[0])
	var p map[string]json.RawMessage
	var body string
	if json.Unmarshal(req.Params, &p) != nil || json.Unmarshal(p[member], &body) != nil {
		return fmt.Sprintf("failed to extract %s from the parameters of %q", member, req.Method)
	}
	if !ok || name != body {
		return fmt.Sprintf("header mismatch: Mcp-Name header value %q does not match body value %q", raw[0], body)
	}
	return ""
}

// writeRPCError answers a POST with a JSON-RPC error and an HTTP status.
func writeRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, code int64, msg string) {
	b, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// stateless serves stateless request req (body as read) of principal on
// the principal's stateless session.
func (f *Front) stateless(w http.ResponseWriter, r *http.Request, principal *Principal, req *jsonrpc.Request, version string) {
	if why := headersMatch(r.Header, req, version); why != "" {
		writeRPCError(w, http.StatusBadRequest, req.ID, headerMismatch, why)
		return
	}
	sse := acceptsSSE(r.Header)
	listen := req.Method == "subscriptions/listen"
	if listen && !sse {
		writeRPCError(w, http.StatusBadRequest, req.ID, jsonrpc.CodeInvalidRequest, "aegis: subscriptions/listen is served over stateless HTTP as a text/event-stream; send Accept: text/event-stream")
		return
	}
	c, err := f.statelessFor(r, principal)
	if err != nil {
		writeRPCError(w, http.StatusServiceUnavailable, req.ID, jsonrpc.CodeInternalError, "aegis: "+err.Error())
		return
	}
	if listen {
		if !c.beginListen() {
			writeRPCError(w, http.StatusConflict, req.ID, jsonrpc.CodeInvalidRequest, "aegis: a subscriptions/listen of this principal is open already; one is served at a time")
			return
		}
		defer c.endListen()
	}
	var stream *sseWriter
	var notes func(*jsonrpc.Request)
	if sse && (listen || hasProgressToken(req.Params)) {
		// The notifications of this request go on its POST, as an SSE
		// stream, before its answer.
		stream = &sseWriter{w: w}
		notes = func(n *jsonrpc.Request) { stream.send(n) }
		if listen {
			stream.start() // the stream is the answer: open it now
		}
	}
	ans, err := c.call(r.Context(), req, notes)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		if stream != nil && stream.started {
			stream.send(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: " + err.Error()}})
			return
		}
		writeRPCError(w, http.StatusServiceUnavailable, req.ID, jsonrpc.CodeInternalError, "aegis: "+err.Error())
		return
	}
	if stream != nil && stream.started {
		stream.send(ans)
		return
	}
	if sse {
		// A client that takes a stream gets its answer as one, as a
		// go-sdk server answers it: MCP lets the server choose.
		(&sseWriter{w: w}).send(ans)
		return
	}
	b, err := jsonrpc.EncodeMessage(ans)
	if err != nil {
		writeRPCError(w, http.StatusInternalServerError, req.ID, jsonrpc.CodeInternalError, "aegis: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// acceptsSSE reports whether a request's Accept takes text/event-stream.
func acceptsSSE(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for _, t := range strings.Split(v, ",") {
			t, _, _ = strings.Cut(t, ";")
			if t = strings.TrimSpace(t); t == "text/event-stream" || t == "*/*" || t == "text/*" {
				return true
			}
		}
	}
	return false
}

// sseWriter writes a POST's answer as an SSE stream, opened at its first
// message.
type sseWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.Header().Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
	http.NewResponseController(s.w).Flush()
}

func (s *sseWriter) send(m jsonrpc.Message) {
	b, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return
	}
	s.start()
	fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", b)
	http.NewResponseController(s.w).Flush()
}

// hasProgressToken reports whether request params carry a progress token.
func hasProgressToken(params json.RawMessage) bool {
	_, ok := progressToken(params)
	return ok
}

// progressToken is the _meta.progressToken of request params.
func progressToken(params json.RawMessage) (json.RawMessage, bool) {
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if len(params) == 0 || json.Unmarshal(params, &p) != nil || len(p.Meta.ProgressToken) == 0 || string(p.Meta.ProgressToken) == "null" {
		return nil, false
	}
	return p.Meta.ProgressToken, true
}

// setMember returns params with the member at path (an object's members
// down from params) set to v; nil when params (or a member on the path)
// are not an object.
func setMember(params json.RawMessage, path []string, v json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(params, &m) != nil || m == nil {
		return nil
	}
	if len(path) > 1 {
		inner := setMember(m[path[0]], path[1:], v)
		if inner == nil {
			return nil
		}
		m[path[0]] = inner
	} else {
		m[path[0]] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

// statelessFor is principal's stateless session, begun at its first
// request.
func (f *Front) statelessFor(r *http.Request, principal *Principal) (*statelessConn, error) {
	key := ""
	if principal != nil {
		key = principal.Issuer + "\x00" + principal.Subject
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errors.New("aegis is stopping")
	}
	if c := f.statelessSessions[key]; c != nil && !c.isClosed() {
		if principal != nil {
			c.token.set(bearer(r))
		}
		f.mu.Unlock()
		return c, nil
	}
	c := &statelessConn{in: make(chan jsonrpc.Message, 64), closed: make(chan struct{}), waiting: map[string]*waiter{}}
	if principal != nil {
		c.token = &CallerToken{tok: bearer(r)}
	}
	f.statelessSessions[key] = c
	f.wg.Add(1)
	f.mu.Unlock()
	id := "stateless-" + rand.Text()
	sess := &Session{ID: id, Remote: r.RemoteAddr, UserAgent: r.UserAgent(), Conn: c, Principal: principal, Token: c.token}
	go func() {
		defer f.wg.Done()
		err := f.cfg.Serve(f.ctx, sess)
		c.token.set("")
		if err != nil {
			f.log.Warn("the stateless HTTP session failed", "http_session_digest", Digest(id), "err", err)
		}
		c.Close()
		f.mu.Lock()
		if f.statelessSessions[key] == c {
			delete(f.statelessSessions, key)
		}
		f.mu.Unlock()
	}()
	return c, nil
}

// statelessConn is the message connection of a stateless session: the
// requests of many POSTs in, each answer out to the POST waiting on it.
type statelessConn struct {
	in     chan jsonrpc.Message
	closed chan struct{}
	once   sync.Once
	token  *CallerToken

	mu      sync.Mutex
	n       uint64
	waiting map[string]*waiter // the front's id -> the POST waiting
	listen  bool               // a subscriptions/listen is open
}

// waiter is a POST waiting for its request's answer.
type waiter struct {
	answer   chan *jsonrpc.Response
	notes    chan *jsonrpc.Request // its notifications, when it takes them
	clientID jsonrpc.ID            // the client's id of the request
	token    json.RawMessage       // the client's progress token, if any
}

func (c *statelessConn) beginListen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listen {
		return false
	}
	c.listen = true
	return true
}

func (c *statelessConn) endListen() {
	c.mu.Lock()
	c.listen = false
	c.mu.Unlock()
}

func (c *statelessConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// call hands req to the session under an id of the front's (and its
// progress token, if any, as that id) and waits for its answer, which it
// returns under req's id; ctx ending (the client went away) cancels it.
// notes, if not nil, takes the session's notifications for the request
// (its progress, or those of its listen), under the client's token and
// id, as they come.
func (c *statelessConn) call(ctx context.Context, req *jsonrpc.Request, notes func(*jsonrpc.Request)) (*jsonrpc.Response, error) {
	c.mu.Lock()
	c.n++
	fid := fmt.Sprintf("aegis-%d", c.n)
	wt := &waiter{answer: make(chan *jsonrpc.Response, 1), clientID: req.ID}
	if notes != nil {
		wt.notes = make(chan *jsonrpc.Request, noteBuffer)
	}
	c.waiting[fid] = wt
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, fid)
		c.mu.Unlock()
	}()
	id, _ := jsonrpc.MakeID(fid)
	params := req.Params
	if tok, ok := progressToken(params); ok {
		// The session knows the request's progress by the front's id:
		// two clients' equal tokens never meet.
		ftok, _ := json.Marshal(fid)
		if params = setMember(params, []string{"_meta", "progressToken"}, ftok); params == nil {
			return nil, errors.New("the request's params are not an object")
		}
		wt.token = tok
	}
	fwd := &jsonrpc.Request{ID: id, Method: req.Method, Params: params}
	select {
	case c.in <- fwd:
	case <-c.closed:
		return nil, errors.New("the stateless session ended")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		select {
		case n := <-wt.notes: // nil when not taken: never ready
			notes(n)
			continue
		case ans := <-wt.answer:
			// What came before the answer goes first.
			for len(wt.notes) > 0 {
				notes(<-wt.notes)
			}
			return &jsonrpc.Response{ID: req.ID, Result: ans.Result, Error: ans.Error}, nil
		case <-c.closed:
			return nil, errors.New("the stateless session ended")
		case <-ctx.Done():
			params, _ := json.Marshal(map[string]any{"requestId": fid, "reason": "the client went away"})
			select {
			case c.in <- &jsonrpc.Request{Method: "notifications/cancelled", Params: params}:
			case <-c.closed:
			}
			if req.Method == "subscriptions/listen" {
				// The session forgets its one listen only when it
				// answers it: a next listen must not begin before, or
				// the end of this one would end that one too.
				t := time.NewTimer(listenEnd)
				select {
				case <-wt.answer:
				case <-c.closed:
				case <-t.C:
				}
				t.Stop()
			}
			return nil, ctx.Err()
		}
	}
}

func (c *statelessConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write delivers an answer to the POST waiting on it, and a notification
// that names a waiting POST's request (its progress token, or its listen
// by subscriptionId) to that POST, if it takes them, under the client's
// token or id; anything else (another notification, a request of the
// session's own) has no POST to go on and is dropped.
func (c *statelessConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	switch r := msg.(type) {
	case *jsonrpc.Response:
		fid, _ := r.ID.Raw().(string)
		c.mu.Lock()
		wt := c.waiting[fid]
		c.mu.Unlock()
		if wt != nil {
			select {
			case wt.answer <- r:
			default:
			}
		}
	case *jsonrpc.Request:
		if !r.IsCall() {
			c.note(r)
		}
	}
	return nil
}

// note delivers notification n to the POST whose request it names.
func (c *statelessConn) note(n *jsonrpc.Request) {
	var p struct {
		Meta          map[string]json.RawMessage `json:"_meta"`
		ProgressToken json.RawMessage            `json:"progressToken"`
	}
	if len(n.Params) == 0 || json.Unmarshal(n.Params, &p) != nil {
		return
	}
	var fid string
	var path []string
	if json.Unmarshal(p.Meta[metaSubscription], &fid) == nil && fid != "" {
		path = []string{"_meta", metaSubscription}
	} else if json.Unmarshal(p.ProgressToken, &fid) == nil && fid != "" {
		path = []string{"progressToken"}
	} else {
		return
	}
	c.mu.Lock()
	wt := c.waiting[fid]
	c.mu.Unlock()
	if wt == nil || wt.notes == nil {
		return
	}
	client, _ := json.Marshal(wt.clientID.Raw())
	if path[0] == "progressToken" {
		if wt.token == nil {
			return
		}
		client = wt.token
	}
	params := setMember(n.Params, path, client)
	if params == nil {
		return
	}
	select {
	case wt.notes <- &jsonrpc.Request{Method: n.Method, Params: params}:
	default: // its client reads too slowly: dropped
	}
}

func (c *statelessConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *statelessConn) SessionID() string { return "" }

var _ mcp.Connection = (*statelessConn)(nil)

// acceptNotification answers the POST of a stateless client's
// notification: 202, and nothing reaches a session (see above).
func acceptNotification(w http.ResponseWriter, r *http.Request, note *jsonrpc.Request) {
	if m := r.Header.Get("Mcp-Method"); m != "" && m != note.Method {
		refuse(w, http.StatusBadRequest, fmt.Sprintf("header mismatch: Mcp-Method header value %q does not match body value %q", m, note.Method))
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// readStateless reads r's body, a POST without a session id, once, and
// returns what it holds for the stateless protocol: a stateless request
// (a call naming 2026-07-28 or later in its _meta) with that version, or
// a notification when the client speaks that protocol (its
// Mcp-Protocol-Version is 2026-07-28 or later), or neither (all nil);
// the body is left to be read again.
func readStateless(r *http.Request) (call *jsonrpc.Request, version string, note *jsonrpc.Request, err error) {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil, "", nil, err
	}
	msg, err := jsonrpc.DecodeMessage(bytes.TrimSpace(body))
	req, ok := msg.(*jsonrpc.Request)
	switch {
	case err != nil || !ok:
		return nil, "", nil, nil
	case !req.IsCall():
		if r.Header.Get("Mcp-Protocol-Version") >= "2026-07-28" {
			return nil, "", req, nil
		}
		return nil, "", nil, nil
	}
	v := statelessVersion(req)
	if v == "" {
		return nil, "", nil, nil
	}
	return req, v, nil, nil
}
