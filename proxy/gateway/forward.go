package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the gateway forwards besides tools/call, resources/read and
// prompts/get, and how (docs/GATEWAY-PARITY.md has the table):
//
//   - Protocol. Toward every local server the gateway speaks the session
//     protocol (the newest before [newProtocol]): each feature below is
//     then the same message on both sides, and a server's request
//     (sampling, elicitation, roots) is a request the gateway can put to a
//     host of the session protocol as it is. Toward the host it offers the
//     session protocol, and 2026-07-28 too when Config.HostProtocol says
//     so; a 2026-07-28 host's calls carry the server's requests as
//     multi-round-trip input requests (mrtr.go). With Config.HostProtocol
//     2026-07-28 a remote server over streamable HTTP is asked for
//     2026-07-28 first (remoteSession): the SDK's client answers the
//     server's input_required results through the gateway's handlers of
//     a server's requests, so they reach the host as a session server's
//     requests do, the call decided and recorded once.
//   - Capabilities to the host are what the gateway can serve given its
//     servers: logging, completions and resources.subscribe only when some
//     server announced them; list_changed for tools, prompts and resources
//     always, since a profile switch changes the lists too.
//   - Capabilities to a server are the host's sampling, elicitation and
//     roots (roots always with listChanged), read from the host's
//     initialize before the servers are initialized (hello.go);
//     without one, all three. A request that the host did not announce
//     the capability for is refused at the gateway with -32601, as a client
//     without the capability would refuse it, and never reaches the host.
//   - Whose host. A server's request or notification goes to the host
//     session that the call it belongs to came from: the one named by the
//     context (the call's own context, when the SDK runs the request inside
//     the call), else the one session with calls in flight to that server,
//     else the only host session. Progress is routed by its token, a url
//     elicitation's completion by its elicitation id.
//   - Progress tokens and request ids are the host's, unchanged: the
//     host's _meta reaches the server as it was sent, and a server's
//     notifications/progress reach the host with the same token.
//   - Cancellation. A host's notifications/cancelled cancels the call's
//     context, so the SDK sends notifications/cancelled for the downstream
//     call; the gateway's own answer to the cancelled id, which the SDK
//     would still write, is dropped ([cancelGuard]) and recorded as
//     frame.dropped.
//   - Logging: logging/setLevel is applied to the host session and sent on
//     to every server that announced logging; a server's notifications/message
//     reaches every host session, filtered by that session's level, with
//     logger "<server>" or "<server>/<logger>".
//   - Roots: roots/list from a server is answered by the host, live; the
//     host's notifications/roots/list_changed (and the host's arrival, when
//     it has roots) reaches every server.
//   - Resource subscriptions go to the server that owns the URI (a listed
//     resource, else the first template that matches it), under the active
//     profile's URI patterns like a read; notifications/resources/updated
//     reach the host sessions subscribed to the URI.
//   - Completion: a ref/prompt names the namespaced prompt and reaches its
//     server with the server's prompt name; a ref/resource goes to the
//     server owning the URI or URI template. A prompt or resource the
//     active profile hides is unknown to completion as to the lists.

// sessionProtocolVersions are the protocol versions the gateway speaks,
// newest first.
func sessionProtocolVersions() []string {
	var vs []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < newProtocol {
			vs = append(vs, v)
		}
	}
	return vs
}

// hostProtocolVersions are the protocol versions the gateway offers its
// host, newest first: the session protocol's, and newProtocol when the
// configuration offers it.
func (g *gateway) hostProtocolVersions() []string {
	vs := sessionProtocolVersions()
	if g.cfg.HostProtocol >= newProtocol {
		vs = append([]string{newProtocol}, vs...)
	}
	return vs
}

// downstreamSession asks every server for the newest session protocol.
var downstreamSession = &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocolVersions()[0]}

// remoteSession is what the gateway asks a remote server over streamable
// HTTP for: the session protocol, or, when the gateway offers its hosts
// 2026-07-28 (Config.HostProtocol), that version first (server/discover,
// each request with its own _meta, the standard headers, a server's
// input_required results answered through the host), falling back to the
// session protocol's initialize with a server that does not speak it.
func (g *gateway) remoteSession() *mcp.ClientSessionOptions {
	if g.cfg.HostProtocol >= newProtocol {
		return &mcp.ClientSessionOptions{ProtocolVersion: newProtocol}
	}
	return downstreamSession
}

// hostKey is the context key of the host session a request came from.
type hostKey struct{}

// progressGrace is how long a call's progress token still routes after the
// call returned: the SDK may hand the client a notification that the server
// sent before its answer after it has handed over the answer.
const progressGrace = 2 * time.Second

// progressDrain bounds how long a call's answer waits for the progress
// notifications that its server sent before it (read, and not yet
// handed to the host): the SDK hands its client the answer at once, and
// the notifications on a queue of their own, so that the answer would
// otherwise overtake them, and a host whose stream ends with the answer
// (a stateless host over HTTP) would never get them.
const progressDrain = time.Second

// relistTimeout bounds the listing that a server's list_changed asks for.
const relistTimeout = 30 * time.Second

type promptRef struct{ server, name string }

type routeKey struct{ server, token string }

type hostRoute struct {
	host *mcp.ServerSession
	gen  uint64
	ctx  context.Context // the host call's, for its values only
}

// hostCall is a call in flight from a host: its session and the context
// the SDK handed the call, kept for its values only.
type hostCall struct {
	host *mcp.ServerSession
	ctx  context.Context
}

// relatedCtx is a server's request or notification's context with the
// values of the host call it belongs to: an HTTP host's session sends
// what the gateway passes on with it on that call's stream (the SDK reads
// the request it belongs to from the context), not on the session's
// stream of unrelated messages. Cancellation stays the server's.
type relatedCtx struct {
	context.Context
	call context.Context
}

func (c relatedCtx) Value(k any) any {
	if v := c.call.Value(k); v != nil {
		return v
	}
	return c.Context.Value(k)
}

// related returns ctx with the values of the call in flight from host to
// server, when there is exactly one: then whatever the server sends
// belongs to it. Otherwise ctx as it is.
func (f *forwarder) related(ctx context.Context, server string, host *mcp.ServerSession) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	var one *hostCall
	for _, c := range f.callCtx[server] {
		if one != nil {
			return ctx
		}
		c := c
		one = &c
	}
	if one == nil || one.host != host || one.ctx == nil {
		return ctx
	}
	return relatedCtx{ctx, one.ctx}
}

// forwarder holds what routing the forwarded features needs. Its zero value
// is ready to use.
type forwarder struct {
	// tmu guards the gateway's tools, res and resDefs, and prompts and
	// templates below, against a relisting changing them while a request
	// reads them. Writers also hold the gateway's pmu.
	tmu       sync.RWMutex
	prompts   map[string]promptRef // wire prompt name -> server prompt
	templates map[string]string    // URI template -> server
	tmplOrder []string             // templates in the order they were first seen

	// relistMu serializes relistings.
	relistMu sync.Mutex
	// rootsMu serializes root syncs; roots is the root URIs last synced to
	// every server's client.
	rootsMu sync.Mutex
	roots   []string

	guard cancelGuard

	mu         sync.Mutex
	srv        *mcp.Server
	ready      bool                                  // a host session has initialized
	pending    map[string]listKind                   // list changes that came before that
	calls      map[string]map[*mcp.ServerSession]int // server -> host session -> calls in flight
	callCtx    map[string]map[uint64]hostCall        // server -> gen -> a call in flight
	progress   map[routeKey]hostRoute                // (server, token) -> host session of the call
	unsent     map[routeKey]int                      // progress read from a local server and not yet handed on
	sent       chan struct{}                         // closed (and replaced) when an unsent count falls
	upProgress map[string]upRoute                    // token -> server whose request to the host carries it
	elicits    map[string]*mcp.ServerSession         // url elicitation id -> host session asked
	clients    map[string]*mcp.Client                // server -> the gateway's client of it
	gen        uint64
}

func (f *forwarder) init() {
	if f.calls == nil {
		f.calls = map[string]map[*mcp.ServerSession]int{}
		f.callCtx = map[string]map[uint64]hostCall{}
		f.progress = map[routeKey]hostRoute{}
		f.unsent = map[routeKey]int{}
		f.sent = make(chan struct{})
		f.upProgress = map[string]upRoute{}
		f.elicits = map[string]*mcp.ServerSession{}
		f.clients = map[string]*mcp.Client{}
		f.pending = map[string]listKind{}
	}
}

// tokenKey is a progress token (a string or a number) as a map key.
func tokenKey(t any) string {
	switch v := t.(type) {
	case nil:
		return ""
	case string:
		return "s:" + v
	case float64:
		return "n:" + strconv.FormatFloat(v, 'g', -1, 64)
	case int:
		return "n:" + strconv.Itoa(v)
	case int64:
		return "n:" + strconv.FormatInt(v, 10)
	case json.Number:
		return "n:" + v.String()
	}
	return fmt.Sprintf("%T:%v", t, t)
}

// begin records a call in flight from host to server, with its progress
// token if it has one; the function it returns ends it.
func (f *forwarder) begin(ctx context.Context, server string, host *mcp.ServerSession, token any) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	if f.calls[server] == nil {
		f.calls[server] = map[*mcp.ServerSession]int{}
		f.callCtx[server] = map[uint64]hostCall{}
	}
	f.calls[server][host]++
	key := routeKey{server, tokenKey(token)}
	f.gen++
	gen := f.gen
	vals := context.WithoutCancel(ctx)
	f.callCtx[server][gen] = hostCall{host, vals}
	if token != nil {
		f.progress[key] = hostRoute{host, gen, vals}
	}
	return func() {
		if token != nil {
			f.drainProgress(key)
		}
		f.mu.Lock()
		if f.calls[server][host]--; f.calls[server][host] <= 0 {
			delete(f.calls[server], host)
		}
		delete(f.callCtx[server], gen)
		f.mu.Unlock()
		if token != nil {
			time.AfterFunc(progressGrace, func() {
				f.mu.Lock()
				if f.progress[key].gen == gen {
					delete(f.progress, key)
				}
				f.mu.Unlock()
			})
		}
	}
}

// progressRead counts a progress notification of server as read, in the
// order the server wrote it (the gateway's reading of its frames, ahead of
// the SDK), when a call in flight carries its token: that call's answer
// waits until the notification was handed on (drainProgress).
func (f *forwarder) progressRead(server string, token *reading.Value) {
	var t any
	switch {
	case token == nil:
		return
	case token.Kind == reading.String:
		t = token.Str
	case token.Kind == reading.Number:
		t = token.Num
	default:
		return
	}
	key := routeKey{server, tokenKey(t)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	if r, ok := f.progress[key]; ok {
		if _, live := f.callCtx[server][r.gen]; live { // not a call in its grace
			f.unsent[key]++
		}
	}
}

// progressSent counts one progress notification of key as handed on (or
// dropped).
func (f *forwarder) progressSent(key routeKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unsent[key] > 0 {
		if f.unsent[key]--; f.unsent[key] == 0 {
			delete(f.unsent, key)
		}
		close(f.sent)
		f.sent = make(chan struct{})
	}
}

// drainProgress waits, at most progressDrain, until every progress
// notification of key that was read has been handed on; what is still
// unsent then is forgotten (a notification the SDK refused never reaches
// its handler).
func (f *forwarder) drainProgress(key routeKey) {
	deadline := time.NewTimer(progressDrain)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		if f.unsent[key] == 0 {
			f.mu.Unlock()
			return
		}
		sent := f.sent
		f.mu.Unlock()
		select {
		case <-sent:
		case <-deadline.C:
			f.mu.Lock()
			delete(f.unsent, key)
			f.mu.Unlock()
			return
		}
	}
}

// hostFor names the host session that a request or notification from
// server goes to.
func (f *forwarder) hostFor(ctx context.Context, server string) (*mcp.ServerSession, error) {
	if ss, ok := ctx.Value(hostKey{}).(*mcp.ServerSession); ok && ss != nil {
		return ss, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch len(f.calls[server]) {
	case 1:
		for ss := range f.calls[server] {
			return ss, nil
		}
	case 0:
		if f.srv != nil {
			if all := slices.Collect(f.srv.Sessions()); len(all) == 1 {
				return all[0], nil
			}
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: no host is connected to the gateway"}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: more than one host has calls in flight to this server; cannot tell whose request this is"}
}

// hosts are the host sessions that notifications not bound to a call go to.
func (f *forwarder) hosts() []*mcp.ServerSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ready || f.srv == nil {
		return nil
	}
	return slices.Collect(f.srv.Sessions())
}

func (f *forwarder) server() *mcp.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ready {
		return nil
	}
	return f.srv
}

// upstream routes the host's progress on a server's request to that server
// until progressGrace after the function it returns is called: the SDK
// may hand the gateway the host's answer before a notification the host
// sent ahead of it.
func (f *forwarder) upstream(token any, cs *mcp.ClientSession) func() {
	if token == nil {
		return func() {}
	}
	key := tokenKey(token)
	f.mu.Lock()
	f.init()
	f.gen++
	gen := f.gen
	f.upProgress[key] = upRoute{cs, gen}
	f.mu.Unlock()
	return func() {
		time.AfterFunc(progressGrace, func() {
			f.mu.Lock()
			if f.upProgress[key].gen == gen {
				delete(f.upProgress, key)
			}
			f.mu.Unlock()
		})
	}
}

type upRoute struct {
	cs  *mcp.ClientSession
	gen uint64
}

func hostCaps(ss *mcp.ServerSession) *mcp.ClientCapabilities {
	if p := ss.InitializeParams(); p != nil && p.Capabilities != nil {
		return p.Capabilities
	}
	return &mcp.ClientCapabilities{}
}

func hostHasRoots(ss *mcp.ServerSession) bool {
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil {
		return false
	}
	c := p.Capabilities
	return c.RootsV2 != nil || c.Roots.ListChanged
}

// withMode is p with its mode named, as the SDK names it before it sends
// an elicitation to a host of the session protocol: "url" for a request
// with a URL or an elicitation id, else "form". A 2026-07-28 host reads an
// input request whose mode is empty ("") as neither, and refuses it.
func withMode(p *mcp.ElicitParams) *mcp.ElicitParams {
	if p == nil || p.Mode != "" {
		return p
	}
	q := *p
	q.Mode = "form"
	if p.URL != "" || p.ElicitationID != "" {
		q.Mode = "url"
	}
	return &q
}

// unsupported is what a server gets for a request the host has no
// capability for: what a client without it would answer.
func unsupported(what string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the host behind aegis does not support " + what}
}

// newServer is the gateway's MCP server to the host, announcing what its
// servers can serve.
func (g *gateway) newServer() *mcp.Server {
	var logging, completions, subscribe bool
	for _, n := range sortedDowns(g.downs) {
		r := g.downs[n].session().InitializeResult()
		if r == nil || r.Capabilities == nil {
			continue
		}
		c := r.Capabilities
		logging = logging || c.Logging != nil
		completions = completions || c.Completions != nil
		subscribe = subscribe || c.Resources != nil && c.Resources.Subscribe
	}
	caps := &mcp.ServerCapabilities{
		Tools:     &mcp.ToolCapabilities{ListChanged: true},
		Prompts:   &mcp.PromptCapabilities{ListChanged: true},
		Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: subscribe},
	}
	opts := &mcp.ServerOptions{
		Instructions:                g.instructions(),
		Capabilities:                caps,
		SupportedProtocolVersions:   g.hostProtocolVersions(),
		InitializedHandler:          g.hostInitialized,
		RootsListChangedHandler:     func(ctx context.Context, req *mcp.RootsListChangedRequest) { go g.syncRoots(req.Session) },
		ProgressNotificationHandler: g.hostProgress,
	}
	if logging {
		caps.Logging = &mcp.LoggingCapabilities{}
	}
	if completions {
		opts.CompletionHandler = g.complete
	}
	if subscribe {
		opts.SubscribeHandler, opts.UnsubscribeHandler = g.subscribe, g.unsubscribe
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "aegis", Version: "gateway"}, opts)
	s.AddReceivingMiddleware(g.forwardMiddleware)
	g.fw.mu.Lock()
	g.fw.srv = s
	g.fw.mu.Unlock()
	return s
}

// newClient is the gateway's client of server: every request and
// notification the server sends is forwarded to the host. stdin is a
// local server's stdin (nil for a remote server).
func (g *gateway) newClient(server string, caps *mcp.ClientCapabilities, stdin *downWriter) *mcp.Client {
	f := &g.fw
	opts := &mcp.ClientOptions{
		Capabilities: caps,
		CreateMessageWithToolsHandler: func(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
			if res, ok, err := g.tk.extAsk(ctx, server, "sampling/createMessage", req.Params.Meta, req.Params); ok {
				// During a task of the tasks extension (exttasks.go).
				if err != nil {
					return nil, err
				}
				return res.(*mcp.CreateMessageWithToolsResult), nil
			}
			host, err := f.hostFor(ctx, server)
			if err != nil {
				return nil, err
			}
			c := hostCaps(host)
			if c.Sampling == nil {
				return nil, unsupported("sampling")
			}
			if len(req.Params.Tools) > 0 && c.Sampling.Tools == nil {
				return nil, unsupported("sampling with tools")
			}
			if newHost(host) {
				res, err := g.mrtrAsk(ctx, server, host, "sampling/createMessage", req.Params)
				if err != nil {
					return nil, err
				}
				return res.(*mcp.CreateMessageWithToolsResult), nil
			}
			defer f.upstream(req.Params.GetProgressToken(), req.Session)()
			res, err := host.CreateMessageWithTools(f.related(ctx, server, host), req.Params)
			return res, hostError(asSent(err))
		},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if res, ok, err := g.tk.extAsk(ctx, server, "elicitation/create", req.Params.Meta, req.Params); ok {
				// During a task of the tasks extension (exttasks.go).
				if err != nil {
					return nil, err
				}
				return res.(*mcp.ElicitResult), nil
			}
			host, err := f.hostFor(ctx, server)
			if err != nil {
				return nil, err
			}
			c := hostCaps(host).Elicitation
			switch {
			case c == nil:
				return nil, unsupported("elicitation")
			case req.Params.Mode == "url" && c.URL == nil:
				return nil, unsupported("url elicitation")
			case req.Params.Mode != "url" && c.Form == nil && c.URL != nil:
				return nil, unsupported("form elicitation")
			}
			if newHost(host) {
				res, err := g.mrtrAsk(ctx, server, host, "elicitation/create", withMode(req.Params))
				if err != nil {
					return nil, err
				}
				return res.(*mcp.ElicitResult), nil
			}
			if req.Params.Mode == "url" && req.Params.ElicitationID != "" {
				f.mu.Lock()
				f.init()
				f.elicits[req.Params.ElicitationID] = host
				f.mu.Unlock()
			}
			defer f.upstream(req.Params.GetProgressToken(), req.Session)()
			res, err := host.Elicit(f.related(ctx, server, host), req.Params)
			return res, hostError(asSent(err))
		},
		ElicitationCompleteHandler: func(ctx context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			f.mu.Lock()
			host := f.elicits[req.Params.ElicitationID]
			delete(f.elicits, req.Params.ElicitationID)
			f.mu.Unlock()
			to := []*mcp.ServerSession{host}
			if host == nil {
				to = f.hosts()
			}
			for _, h := range to {
				if err := h.NotifyElicitationComplete(ctx, req.Params); err != nil {
					g.log.Warn("forward elicitation complete", "server", server, "err", err)
				}
			}
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			key := routeKey{server, tokenKey(req.Params.ProgressToken)}
			defer f.progressSent(key)
			f.mu.Lock()
			r := f.progress[key]
			f.mu.Unlock()
			if r.host == nil {
				return // no call of a host carries this token
			}
			if r.ctx != nil {
				ctx = relatedCtx{ctx, r.ctx}
			}
			if err := r.host.NotifyProgress(ctx, req.Params); err != nil {
				g.log.Warn("forward progress", "server", server, "err", err)
			}
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			p := *req.Params
			p.Logger = server
			if req.Params.Logger != "" {
				p.Logger = server + "/" + req.Params.Logger
			}
			for _, h := range f.hosts() {
				if err := h.Log(f.related(ctx, server, h), &p); err != nil {
					g.log.Warn("forward log message", "server", server, "err", err)
				}
			}
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if s := f.server(); s != nil {
				if err := s.ResourceUpdated(ctx, req.Params); err != nil {
					g.log.Warn("forward resource update", "server", server, "err", err)
				}
			}
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			g.listChanged(server, listTools)
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			g.listChanged(server, listPrompts)
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			g.listChanged(server, listResources)
		},
	}
	// A capability the servers are not told of has no handler either: the
	// SDK would announce one for each handler it has.
	if caps.Sampling == nil {
		opts.CreateMessageWithToolsHandler = nil
	}
	if caps.Elicitation == nil {
		opts.ElicitationHandler = nil
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "aegis-gateway", Version: "1"}, opts)
	c.AddReceivingMiddleware(g.tk.relatedMiddleware(server, true), g.rootsMiddleware(server, stdin), elicitAsSent(opts.ElicitationHandler))
	c.AddSendingMiddleware(g.tk.relatedMiddleware(server, false))
	f.mu.Lock()
	f.init()
	f.clients[server] = c
	f.mu.Unlock()
	return c
}

// elicitAsSent hands a server's elicitation/create to handle as the server
// sent it. The SDK's client would first check the requested schema
// against its own reading of the elicitation schema, which refuses some
// the specification allows (a titled multi-select, items.anyOf, SEP-1330)
// and which a host connected directly would take; checking the schema and
// the answer is the host's part.
// Without handle (the host takes no elicitation), the SDK refuses it.
func elicitAsSent(handle func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if r, ok := req.(*mcp.ElicitRequest); ok && handle != nil && method == "elicitation/create" && r.Params != nil {
				return handle(ctx, r)
			}
			return next(ctx, method, req)
		}
	}
}

// rootsMiddleware answers a server's roots/list with the host's roots, or
// with the gateway's own (empty) list while no host with roots is there.
// stdin, a local server's (nil for a remote one), counts the requests it
// holds for a host without sessions, so that the shutdown closes it only
// once they are answered.
func (g *gateway) rootsMiddleware(server string, stdin *downWriter) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "roots/list" {
				return next(ctx, method, req)
			}
			host, err := g.fw.hostFor(ctx, server)
			var p *mcp.ListRootsParams
			if r, ok := req.(*mcp.ListRootsRequest); ok {
				p = r.Params
			}
			if g.stateless.Load() && (err != nil || newHost(host)) {
				// A host without sessions is asked during a call only: the
				// server's question waits for the host's next call to it
				// (before the host's first request, for any host's); when
				// none comes, the gateway's own (empty) list answers.
				if err != nil {
					host = nil
				}
				if stdin != nil {
					defer stdin.hold()()
				}
				res, err := g.mrtrAsk(ctx, server, host, "roots/list", orEmptyRoots(p))
				if err != nil {
					return next(ctx, method, req)
				}
				return res, nil
			}
			if err != nil || !hostHasRoots(host) {
				return next(ctx, method, req)
			}
			res, err := host.ListRoots(g.fw.related(ctx, server, host), p)
			if err != nil {
				return nil, hostError(asSent(err))
			}
			return res, nil
		}
	}
}

// syncRoots tells every server that the host's roots changed: each
// client's own root set follows the host's, so that the SDK notifies its
// server (roots/list itself is answered by the host, live).
func (g *gateway) syncRoots(host *mcp.ServerSession) {
	f := &g.fw
	f.rootsMu.Lock()
	defer f.rootsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), relistTimeout)
	defer cancel()
	res, err := host.ListRoots(ctx, nil)
	if err != nil {
		g.log.Warn("list the host's roots", "err", err)
		return
	}
	var now []string
	for _, r := range res.Roots {
		now = append(now, r.URI)
	}
	var gone []string
	for _, u := range f.roots {
		if !slices.Contains(now, u) {
			gone = append(gone, u)
		}
	}
	f.roots = now
	f.mu.Lock()
	clients := make([]*mcp.Client, 0, len(f.clients))
	for _, c := range f.clients {
		clients = append(clients, c)
	}
	f.mu.Unlock()
	for _, c := range clients {
		if len(gone) > 0 {
			c.RemoveRoots(gone...)
		}
		if len(res.Roots) > 0 {
			c.AddRoots(res.Roots...)
		}
	}
}

// hostInitialized starts forwarding to the host: what the servers changed
// before is listed again, and the servers learn the host's roots.
func (g *gateway) hostInitialized(ctx context.Context, req *mcp.InitializedRequest) {
	g.hostReady()
	if hostHasRoots(req.Session) {
		go g.syncRoots(req.Session)
	}
}

// hostReady starts forwarding to the host once: what the servers changed
// before is listed again. A host of the session protocol is ready once
// initialized; a 2026-07-28 host, which has no initialize, at its first
// request.
func (g *gateway) hostReady() {
	f := &g.fw
	f.mu.Lock()
	f.init()
	if f.ready {
		f.mu.Unlock()
		return
	}
	f.ready = true
	pending := f.pending
	f.pending = map[string]listKind{}
	f.mu.Unlock()
	for server, k := range pending {
		go g.relist(server, k)
	}
}

// hostProgress forwards the host's progress on a server's request.
func (g *gateway) hostProgress(ctx context.Context, req *mcp.ProgressNotificationServerRequest) {
	g.fw.mu.Lock()
	cs := g.fw.upProgress[tokenKey(req.Params.ProgressToken)].cs
	g.fw.mu.Unlock()
	if cs == nil {
		return
	}
	if err := cs.NotifyProgress(ctx, req.Params); err != nil {
		g.log.Warn("forward the host's progress", "err", err)
	}
}

// forwardMiddleware names the host session in the context of every request
// from the host, and sends logging/setLevel on to the servers.
func (g *gateway) forwardMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			ctx = context.WithValue(ctx, hostKey{}, ss)
			if newHost(ss) {
				g.hostReady()
			}
		}
		res, err := next(ctx, method, req)
		if err != nil || method != "logging/setLevel" {
			return res, err
		}
		r, ok := req.(*mcp.ServerRequest[*mcp.SetLoggingLevelParams])
		if !ok || r.Params == nil {
			return res, nil
		}
		var errs []error
		for _, n := range sortedDowns(g.downs) {
			d := g.downs[n]
			if ir := d.session().InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Logging == nil {
				continue
			}
			if err := d.session().SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: r.Params.Level}); err != nil {
				errs = append(errs, fmt.Errorf("set the log level of server %s: %w", n, err))
			}
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return res, nil
	}
}

// forwardTool is the handler of a namespaced tool: the host's call reaches
// the server with the server's tool name and everything else as sent.
func (g *gateway) forwardTool(e toolEntry, d *downstream) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		defer g.fw.begin(ctx, e.server, req.Session, req.Params.GetProgressToken())()
		p := &mcp.CallToolParams{Meta: bridgeMeta(req.Params.Meta), Name: e.tool}
		if len(req.Params.Arguments) > 0 {
			p.Arguments = req.Params.Arguments
		}
		res, err := d.session().CallTool(ctx, p)
		return res, asSent(err)
	}
}

// asSent is a server's JSON-RPC error as the server sent it (code, message
// and data), so that the host gets it unchanged; the SDK would keep only
// the code of an error that wraps it. Other errors are the gateway's.
func asSent(err error) error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we
	}
	return err
}

// tool looks up a wire tool name.
func (g *gateway) tool(wire string) (toolEntry, bool) {
	g.fw.tmu.RLock()
	defer g.fw.tmu.RUnlock()
	e, ok := g.tools[wire]
	return e, ok
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
