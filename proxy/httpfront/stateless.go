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
//     back on the POST that carried it with the client's id, as JSON. A
//     POST whose client goes away cancels its request
//     (notifications/cancelled). What the session sends that answers no
//     waiting request (a notification, a request of its own) is dropped:
//     a 2026-07-28 server puts its questions in its results.
//   - subscriptions/listen, which answers only when it ends, is refused
//     (400) over stateless HTTP.

// metaProtocol is the per-request _meta member that names the protocol.
const metaProtocol = "io.modelcontextprotocol/protocolVersion"

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
	if req.Method == "subscriptions/listen" {
		writeRPCError(w, http.StatusBadRequest, req.ID, jsonrpc.CodeInvalidRequest, "aegis: subscriptions/listen is not served over stateless HTTP")
		return
	}
	c, err := f.statelessFor(r, principal)
	if err != nil {
		writeRPCError(w, http.StatusServiceUnavailable, req.ID, jsonrpc.CodeInternalError, "aegis: "+err.Error())
		return
	}
	ans, err := c.call(r.Context(), req)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		writeRPCError(w, http.StatusServiceUnavailable, req.ID, jsonrpc.CodeInternalError, "aegis: "+err.Error())
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
	c := &statelessConn{in: make(chan jsonrpc.Message, 64), closed: make(chan struct{}), waiting: map[string]chan *jsonrpc.Response{}}
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
	waiting map[string]chan *jsonrpc.Response // the front's id -> the POST waiting
}

func (c *statelessConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// call hands req to the session under an id of the front's and waits for
// its answer, which it returns under req's id; ctx ending (the client
// went away) cancels it.
func (c *statelessConn) call(ctx context.Context, req *jsonrpc.Request) (*jsonrpc.Response, error) {
	c.mu.Lock()
	c.n++
	fid := fmt.Sprintf("aegis-%d", c.n)
	ch := make(chan *jsonrpc.Response, 1)
	c.waiting[fid] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, fid)
		c.mu.Unlock()
	}()
	id, _ := jsonrpc.MakeID(fid)
	fwd := &jsonrpc.Request{ID: id, Method: req.Method, Params: req.Params}
	select {
	case c.in <- fwd:
	case <-c.closed:
		return nil, errors.New("the stateless session ended")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case ans := <-ch:
		return &jsonrpc.Response{ID: req.ID, Result: ans.Result, Error: ans.Error}, nil
	case <-c.closed:
		return nil, errors.New("the stateless session ended")
	case <-ctx.Done():
		params, _ := json.Marshal(map[string]any{"requestId": fid, "reason": "the client went away"})
		select {
		case c.in <- &jsonrpc.Request{Method: "notifications/cancelled", Params: params}:
		case <-c.closed:
		}
		return nil, ctx.Err()
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

// Write delivers an answer to the POST waiting on it; anything else (a
// notification, a request of the session's own) has no POST to go on
// and is dropped.
func (c *statelessConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	r, ok := msg.(*jsonrpc.Response)
	if !ok {
		return nil
	}
	fid, _ := r.ID.Raw().(string)
	c.mu.Lock()
	ch := c.waiting[fid]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- r:
		default:
		}
	}
	return nil
}

func (c *statelessConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *statelessConn) SessionID() string { return "" }

var _ mcp.Connection = (*statelessConn)(nil)

// readStateless reads r's body, a POST without a session id, and returns
// it with the request it holds when that is a stateless request (nil
// otherwise); the body is left to be read again.
func readStateless(r *http.Request) (*jsonrpc.Request, string, error) {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	msg, err := jsonrpc.DecodeMessage(bytes.TrimSpace(body))
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !req.IsCall() {
		return nil, "", nil
	}
	v := statelessVersion(req)
	if v == "" {
		return nil, "", nil
	}
	return req, v, nil
}
