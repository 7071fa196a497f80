package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
)

// Tasks (task-augmented tools/call, tasks/get, tasks/result, tasks/cancel,
// tasks/list, notifications/tasks/status) at the JSON-RPC level: the SDK
// has none of them, so the gateway carries them itself, beside the SDK's
// sessions on the same pipes (docs/GATEWAY-PARITY.md). Invariants:
//
//   - A task-augmented tools/call is decided and recorded as every
//     tools/call is (decideCall): intent before it reaches the server,
//     outcome (the server's CreateTaskResult, or the refusal) before the
//     host sees the answer. Its name is namespaced; its arguments, _meta
//     (but for a related task, see below) and task reach the server
//     unchanged.
//   - The host knows each task by an id of the gateway's, never by the
//     server's (taskids.go): two servers that give the same task
//     id make two tasks to the host. Wherever a server's task id would
//     reach the host (a CreateTaskResult, the answers to tasks/*, a
//     status, a related-task _meta) it is the gateway's id of that
//     server's task; a host's request names the task by the gateway's id
//     and reaches the server by the server's own.
//   - tasks/get, tasks/result and tasks/cancel reach only the server that
//     created the task, and only for a task created through this gateway;
//     any other task id is refused (-32602) and reaches no server; an
//     answer about another task than the one asked is refused too.
//     tasks/list answers the tasks created through this gateway.
//   - tasks/result's answer (the tool's real result) is recorded
//     (task.result, with the gateway's and the server's task id) before
//     the host sees it; a tasks/cancel is recorded as call.cancelled
//     naming the task both ways.
//   - Statuses and results are the server's, but for the task ids.
//   - The gateway's own requests to a server have string ids "aegis-N",
//     which the SDK never uses; their answers are taken out of the
//     server's stream before the SDK reads it.
//   - The host sees the tasks capability, and each tool's execution
//     (taskSupport), exactly as far as its servers announced them.
//   - Tasks the host runs for a server are carried too
//     (hosttasks.go).

// rawIDPrefix begins the ids of the gateway's own requests to a server.
const rawIDPrefix = "aegis-"

// taskMethods are the task requests a host sends.
var taskMethods = map[string]bool{"tasks/get": true, "tasks/result": true, "tasks/cancel": true, "tasks/list": true}

type taskEntry struct {
	server   string
	serverID string // the server's own id of the task
	callID   string
	toolID   string // wire name
}

// tasker is the gateway's task layer. Its zero value is not ready: see
// (*gateway).initTasks.
type tasker struct {
	g    *gateway
	base context.Context
	out  *hostOut

	mu       sync.Mutex
	tasks    *taskMap                              // the gateway's task id <-> the server's
	inflight map[string]context.CancelCauseFunc    // host request id -> cancel
	watch    map[string]string                     // host request id -> method whose answer is amended
	exec     map[string]map[string]json.RawMessage // server -> tool -> execution
	caps     map[string]json.RawMessage            // server -> capabilities.tasks
	creating map[string]int                        // server -> task-augmented calls in flight
	// plainCalls: the host is the stdio host, whose plain tools/calls
	// the layer may take too (see plainCall).
	plainCalls bool
	// rawDown: the host is a message connection (an HTTP session), whose
	// tools/calls the SDK reads; a call to a local server then goes to it
	// on the gateway's own channel (see gateway.rawToolCall).
	rawDown bool
	// plainHTTP: an HTTP host's plain calls on their way through the SDK
	// (plainOverHTTP), by the extra of their request; guarded by mu.
	plainHTTP map[*mcp.RequestExtra]rpcFrame
	wg        sync.WaitGroup
	closed    bool        // no more requests are taken (wg is waited for)
	ready     atomic.Bool // the servers are connected

	// A server's task-augmented requests to the host (see hosttasks.go).
	hostCaps  json.RawMessage                    // the host's capabilities.tasks; nil: none
	hostRaw   *downRaw                           // the gateway's own requests to the host
	hostTasks *taskTable[string]                 // task id the host gave -> the server that asked
	asks      map[string]context.CancelCauseFunc // server + request id -> cancel

	// ext are the tasks of 2026-07-28 hosts (exttasks.go), extOrder
	// their ids, oldest first, extBytes the bytes of their results, and
	// extLimit the bound of those (0: extResultBytes).
	ext      extTasks
	extOrder []string
	extBytes int
	extLimit int
}

func (g *gateway) initTasks(ctx context.Context) {
	g.tk = &tasker{g: g, base: ctx, tasks: newTaskMap(), inflight: map[string]context.CancelCauseFunc{},
		watch: map[string]string{}, creating: map[string]int{}, hostTasks: newTaskTable[string](maxTasks), asks: map[string]context.CancelCauseFunc{}, exec: map[string]map[string]json.RawMessage{}, caps: map[string]json.RawMessage{}}
}

type rpcFrame struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// hostLine follows one frame from the host, read once (r, not
// ambiguous: see [gateway.hostTake]), and takes it (returns true) when it
// is a task request or a plain call (see plainCall), which it then answers
// itself, or the host's answer to one of the gateway's own requests.
func (t *tasker) hostLine(r rpcRead) bool {
	if !r.message || r.ambiguous != "" {
		return false
	}
	if !r.hasMethod {
		// The host's answer to one of the gateway's own requests.
		id, _ := r.id.String()
		if !strings.HasPrefix(r.idKey, "s:"+rawIDPrefix) || t.hostRaw == nil {
			return false
		}
		f := r.frame()
		t.hostRaw.deliver(id, f.Result, f.Error)
		return true
	}
	k := r.idKey
	switch {
	case r.method == "notifications/tasks/status":
		// The host's status of a task it runs for a server.
		t.mu.Lock()
		server, ok := t.hostTasks.m[taskIDIn(r.params)]
		t.mu.Unlock()
		if !ok || !t.ready.Load() {
			return false
		}
		if d := t.g.downs[server]; d != nil && d.raw != nil {
			d.raw.send(rpcFrame{JSONRPC: "2.0", Method: r.method, Params: raw(r.params)})
		}
		return true
	case r.method == "notifications/cancelled":
		t.cancelIn(t.inflight, cancelledKey(r.params), context.Canceled)
		return false
	case k == "":
		return false
	case t.extTakes(r):
		// The tasks extension of a 2026-07-28 host (exttasks.go).
		h := r.frame()
		if why := t.spawn(t.inflight, k, func(ctx context.Context) {
			res, err := t.extHandle(ctx, h)
			t.out.frame(reply(h.ID, res, err))
		}); why != "" {
			t.out.frame(reply(h.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "aegis: " + why}))
		}
		return true
	case t.rawDown && t.extServes(r):
		// An HTTP session's request of the extension: the SDK keeps its
		// stream (plainOverHTTP).
		return false
	case r.method == "initialize" || r.method == "tools/list" || r.method == "server/discover":
		t.mu.Lock()
		if len(t.watch) < maxWatched {
			t.watch[k] = r.method
		}
		t.mu.Unlock()
		return false
	case r.method == "tools/call":
		// A plain call the layer takes (see plainCall), else one with a
		// task.
		if task, _ := r.params.Get("task"); !t.plainCall(r) && (task == nil || task.Kind == reading.Null) {
			return false
		}
	case !taskMethods[r.method]:
		return false
	}
	h := r.frame()
	if !t.ready.Load() {
		t.out.frame(reply(h.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "aegis: " + h.Method + " before the session was initialized"}))
		return true
	}
	if why := t.spawn(t.inflight, k, func(ctx context.Context) {
		res, err := t.handle(ctx, h)
		t.out.frame(reply(h.ID, res, err))
	}); why != "" {
		t.out.frame(reply(h.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "aegis: " + why}))
	}
	return true
}

// spawn runs work in a goroutine of its own, under a context that the
// cancel function kept in table under key ends. It returns why it did not
// (the layer is closing, or key is in flight already), or "".
func (t *tasker) spawn(table map[string]context.CancelCauseFunc, key string, work func(ctx context.Context)) string {
	ctx, cancel := context.WithCancelCause(t.base)
	t.mu.Lock()
	_, dup := table[key]
	if dup || t.closed {
		t.mu.Unlock()
		cancel(nil)
		if dup {
			return "a request with this id is already in flight"
		}
		return "the gateway is shutting down"
	}
	table[key] = cancel
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		defer func() {
			t.mu.Lock()
			delete(table, key)
			t.mu.Unlock()
			cancel(nil)
		}()
		work(ctx)
	}()
	return ""
}

// cancelIn cancels what runs in table under key, if anything does.
func (t *tasker) cancelIn(table map[string]context.CancelCauseFunc, key string, cause error) {
	t.mu.Lock()
	cancel := table[key]
	t.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// reply is the answer frame to request id: res, or err as a JSON-RPC
// error (never code 0).
func reply(id json.RawMessage, res any, err error) rpcFrame {
	f := rpcFrame{JSONRPC: "2.0", ID: id}
	if err != nil {
		var we *jsonrpc.Error
		if !errors.As(hostError(err), &we) {
			we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		f.Error = we
		return f
	}
	b, merr := json.Marshal(res)
	if merr != nil {
		f.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: " + merr.Error()}
		return f
	}
	f.Result = b
	return f
}

// close takes no more requests and waits for those in flight.
func (t *tasker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// plainCall reports whether the task layer takes line, a tools/call with
// no task, as well: only from a stdio host (plainCalls; over HTTP a call's
// server requests must go on that call's stream, which only the SDK's
// request knows), once the servers are ready, for a tool the gateway
// lists of a server it reaches over its own pipes, and in the plain shape
// that every reader takes the same way: members spelled exactly, none but
// JSON-RPC's and name, arguments (an object) and _meta (an object). The
// call is then decided by decideCall as any call is, and reaches the
// server as decided (its name, arguments and _meta, nothing else),
// without the SDK decoding and encoding it and its answer once more on
// each side. Any other call goes to the SDK as before.
func (t *tasker) plainCall(r rpcRead) bool {
	return t.plainCalls && t.plainTarget(r)
}

// plainTarget reports whether r is a tools/call in the plain shape (see
// plainCall) to a tool of a local server, once the servers are ready.
func (t *tasker) plainTarget(r rpcRead) bool {
	if !t.ready.Load() || t.host() == nil {
		return false
	}
	name, ok := plainCallName(r)
	if !ok {
		return false
	}
	e, ok := t.g.tool(name)
	if !ok {
		return false
	}
	d := t.g.downs[e.server]
	return d != nil && d.raw != nil
}

// plainCallName returns the tool a tools/call names when it is in the
// plain shape plainCall takes, and whether it is.
func plainCallName(r rpcRead) (string, bool) {
	if !r.message || r.ambiguous != "" || r.method != "tools/call" || r.idKey == "" || len(r.v.Members) != 4 || r.params == nil {
		return "", false
	}
	if r.id.Kind == reading.Number && r.id.Num != math.Trunc(r.id.Num) {
		return "", false // read as another id by some readers
	}
	if r.params.Kind != reading.Object {
		return "", false
	}
	var name string
	named := false
	for _, m := range r.params.Members {
		switch m.Name {
		case "name":
			s, ok := m.Value.String()
			if !ok {
				return "", false
			}
			name, named = s, true
		case "arguments", "_meta":
			if m.Value.Kind != reading.Object {
				return "", false
			}
			if m.Name == "_meta" {
				// A stateless (2026-07-28) host's call names its protocol
				// here: the SDK serves it, and mrtr.go runs it.
				if v, why := m.Value.Lookup(mcp.MetaKeyProtocolVersion); v != nil || why != "" {
					return "", false
				}
			}
		default:
			return "", false
		}
	}
	return name, named
}

// plainMethod is the method under which an HTTP host's plain tools/call
// reaches the SDK (see plainOverHTTP). A host that sends it itself is
// answered as for any method the gateway does not serve.
const plainMethod = "aegis/plain-tools-call"

// addPlainMethod lets srv take plainMethod and extMethod; the gateway's
// middleware answers them (plainOfHTTP, extOfHTTP), never the handler.
func (t *tasker) addPlainMethod(srv *mcp.Server) {
	for _, m := range []string{plainMethod, extMethod} {
		mcp.AddReceivingCustomMethod(srv, m, func(context.Context, *mcp.ServerSession, *mcp.CallToolParamsRaw) (*rawResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
		})
	}
}

// plainOverHTTP is what an HTTP host's message msg, read as r, reaches the
// SDK as: nil (msg itself) unless it is a tools/call in the plain shape to
// a tool of a local server (plainTarget). Such a call the SDK's server
// would decode again, and its client to the server once more with the
// answer, each decoding costing a fresh 32 KiB buffer; it reaches the SDK
// instead as a request of plainMethod under the host's id, without params,
// that the task layer answers as it answers a stdio host's plain call
// (plainOfHTTP): decided and recorded by decideCall, sent to the server on
// the gateway's own channel, the answer the server's as it sent it. The
// SDK still owns the request: its answer goes on the request's stream,
// what the server sends during the call follows it there (the call runs
// under the SDK's context of the request), and the host's cancellation
// cancels it. The call is kept under the request's extra (made here, so
// no host can name it) until the middleware takes it.
func (t *tasker) plainOverHTTP(msg jsonrpc.Message, r rpcRead) jsonrpc.Message {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !t.rawDown || !req.IsCall() {
		return nil
	}
	method := plainMethod
	switch {
	case t.extServes(r):
		// A request of the tasks extension (exttasks.go), answered the
		// same way by extOfHTTP.
		method = extMethod
	case !t.plainTarget(r):
		return nil
	}
	ex := &mcp.RequestExtra{}
	if orig, ok := req.Extra.(*mcp.RequestExtra); ok && orig != nil {
		*ex = *orig
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.plainHTTP) >= maxPlainHTTP {
		return nil // the SDK reads it as any call
	}
	if t.plainHTTP == nil {
		t.plainHTTP = map[*mcp.RequestExtra]rpcFrame{}
	}
	t.plainHTTP[ex] = r.frame()
	return &jsonrpc.Request{ID: req.ID, Method: method, Extra: ex}
}

// maxPlainHTTP bounds the plain calls of an HTTP host that the SDK has not
// handed the middleware yet.
const maxPlainHTTP = 4096

// plainOfHTTP answers a request of plainMethod: the host's plain call kept
// by plainOverHTTP under its extra, run under ctx, the SDK's context of
// the request.
func (t *tasker) plainOfHTTP(ctx context.Context, req mcp.Request) (mcp.Result, error) {
	return t.answerHTTP(ctx, req, plainMethod, t.handle)
}

// answerHTTP answers a request of method (plainMethod, extMethod): the
// host's request kept under its extra, handled under ctx, the SDK's
// context of the request, its answer as the handler made it.
func (t *tasker) answerHTTP(ctx context.Context, req mcp.Request, method string, handle func(context.Context, rpcFrame) (any, error)) (mcp.Result, error) {
	h, err := t.keptHTTP(req, method)
	if err != nil {
		return nil, err
	}
	res, err := handle(ctx, h)
	if err != nil {
		return nil, err
	}
	switch v := res.(type) {
	case json.RawMessage:
		return &rawResult{CallToolResult: &mcp.CallToolResult{}, raw: v}, nil
	case mcp.Result:
		return v, nil
	case map[string]any:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return &rawResult{CallToolResult: &mcp.CallToolResult{}, raw: b}, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: no answer to %s (%T)", h.Method, res)}
}

// keptHTTP takes the host's request that plainOverHTTP kept under the
// extra of req, a request of method; one no host request was kept for
// (a host that sent method itself) is answered as an unknown method.
func (t *tasker) keptHTTP(req mcp.Request, method string) (rpcFrame, error) {
	ex := req.GetExtra()
	t.mu.Lock()
	h, ok := t.plainHTTP[ex]
	delete(t.plainHTTP, ex)
	t.mu.Unlock()
	if ex == nil || !ok {
		return rpcFrame{}, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q not found", method)}
	}
	return h, nil
}

// maxWatched bounds the host requests whose answers wait to be amended.
const maxWatched = 1024

// handle answers one task request of the host.
func (t *tasker) handle(ctx context.Context, h rpcFrame) (any, error) {
	g := t.g
	if h.Method == "tools/call" {
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Meta      mcp.Meta        `json:"_meta"`
			Task      json.RawMessage `json:"task"`
		}
		if err := json.Unmarshal(h.Params, &p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "aegis: invalid tools/call params: " + err.Error()}
		}
		task := len(p.Task) > 0 && string(p.Task) != "null"
		return g.decideCall(withTraceParent(ctx, p.Meta), h.Method, p.Name, p.Arguments, func(cctx context.Context, wc schemas.WrapCall, e toolEntry) (any, error) {
			d := g.downs[e.server]
			if d == nil || d.raw == nil {
				return nil, g.taskless(e.server)
			}
			if host := t.host(); host != nil {
				var token any
				if p.Meta != nil {
					token = p.Meta["progressToken"]
				}
				defer g.fw.begin(cctx, e.server, host, token)()
			}
			params := map[string]any{"name": e.tool}
			if len(p.Arguments) > 0 {
				params["arguments"] = p.Arguments
			}
			if p.Meta != nil {
				params["_meta"] = t.metaToServer(e.server, p.Meta)
			}
			if !task {
				// A plain call (see plainCall): the server's answer is
				// the host's, as the server sent it but for a related
				// task.
				raw, err := d.raw.call(cctx, "tools/call", params)
				if err != nil {
					return nil, err
				}
				return t.relatedToHost(e.server, raw), nil
			}
			params["task"] = p.Task
			// A status the server sends before its answer names a task
			// not known yet: it goes to the host while this call is in
			// flight, as it would directly.
			t.mu.Lock()
			t.creating[e.server]++
			t.mu.Unlock()
			raw, err := d.raw.call(cctx, "tools/call", params)
			defer func() {
				t.mu.Lock()
				if t.creating[e.server]--; t.creating[e.server] <= 0 {
					delete(t.creating, e.server)
				}
				t.mu.Unlock()
			}()
			if err != nil {
				return nil, err
			}
			// The host knows the task by the gateway's id of it.
			t.mu.Lock()
			sid, gid := createdTaskID(raw), ""
			if sid != "" {
				gid = t.tasks.create(taskEntry{server: e.server, serverID: sid, callID: wc.CallID, toolID: wc.ToolID})
			}
			out, ok := mapCreated(raw, func(id string) (string, bool) {
				if id == sid && sid != "" {
					return gid, true
				}
				return t.tasks.hostID(e.server, id, false)
			})
			t.mu.Unlock()
			if !ok {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: server %s answered a task-augmented call with an unreadable task", e.server)}
			}
			return out, nil
		})
	}
	if h.Method == "tasks/list" {
		return t.list(ctx)
	}
	id := taskIDOf(h.Params)
	if id == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "aegis: " + h.Method + " needs params.taskId"}
	}
	t.mu.Lock()
	e, ok := t.tasks.created.m[id]
	t.mu.Unlock()
	d := g.downs[e.server]
	if !ok || d == nil || d.raw == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("aegis: unknown task %q: no task of that id was created through this gateway", id)}
	}
	// The server is asked about its task by its own id, and its answer
	// names the task by the gateway's.
	params, ok := mapTask(orEmptyObject(h.Params), func(gid string) (string, bool) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if o, ok := t.tasks.created.m[gid]; ok && o.server == e.server {
			return o.serverID, true
		}
		return "", false
	})
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "aegis: invalid " + h.Method + " params"}
	}
	cctx, release := g.callContext(ctx)
	defer release()
	if host := t.host(); host != nil {
		// The server's requests while it works (input_required) go to
		// this host.
		defer g.fw.begin(cctx, e.server, host, nil)()
	}
	raw, err := d.raw.call(cctx, h.Method, params)
	if err == nil {
		raw, err = t.answerToHost(e, id, h.Method, raw)
	}
	rctx := context.WithoutCancel(ctx)
	switch h.Method {
	case "tasks/cancel":
		if err == nil {
			fact := map[string]string{"task_id": id, "server_task_id": e.serverID, "call_id": e.callID, "tool_id": e.toolID, "server": e.server, "method": h.Method, "by": "host"}
			if rc, ferr := g.sess.Fact(schemas.KindCallCancelled, fact); ferr != nil {
				return nil, auditRefusal(h.Method, ferr)
			} else if _, ferr := rc.Wait(rctx); ferr != nil {
				return nil, auditRefusal(h.Method, ferr)
			}
		}
	case "tasks/result":
		if ferr := t.recordTaskResult(rctx, e, id, raw, err); ferr != nil {
			return nil, ferr
		}
	}
	if err != nil {
		return nil, err
	}
	return raw, nil
}

// answerToHost returns server's answer to method about its task e (the
// gateway's id gid) as the host is to see it: naming the task by gid. An
// answer about another task is an error.
func (t *tasker) answerToHost(e taskEntry, gid, method string, raw json.RawMessage) (json.RawMessage, error) {
	to := func(id string) (string, bool) {
		if id == e.serverID {
			return gid, true
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.tasks.hostID(e.server, id, false)
	}
	var out json.RawMessage
	ok := true
	if method == "tasks/result" {
		// The task's result: only its related-task _meta names it.
		var m map[string]json.RawMessage
		if out = raw; json.Unmarshal(raw, &m) == nil && m != nil && mapRelated(m, to) {
			out, _ = json.Marshal(m)
		}
	} else {
		out, ok = mapTask(raw, func(id string) (string, bool) {
			if id != e.serverID {
				return "", false
			}
			return gid, true
		})
	}
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: server %s answered %s of its task %q about another task", e.server, method, e.serverID)}
	}
	return out, nil
}

// host is the host session that a task's server requests go to: the only
// one there is.
func (t *tasker) host() *mcp.ServerSession {
	if hs := t.g.fw.hosts(); len(hs) == 1 {
		return hs[0]
	}
	return nil
}

// serverCan reports whether server announced capabilities.tasks.<what>.
func (t *tasker) serverCan(server, what string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return present(t.caps[server], what)
}

// capability is the tasks capability the gateway announces to the host:
// tool calls as tasks when some server runs them, list and cancel when
// some such server has them. It is nil when no server runs tools as tasks.
func (t *tasker) capability() map[string]any {
	t.mu.Lock()
	defer t.mu.Unlock()
	var calls, list, cancel bool
	for _, raw := range t.caps {
		if !present(raw, "requests", "tools", "call") {
			continue
		}
		calls, list, cancel = true, list || present(raw, "list"), cancel || present(raw, "cancel")
	}
	if !calls {
		return nil
	}
	cap := map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
	if list {
		cap["list"] = map[string]any{}
	}
	if cancel {
		cap["cancel"] = map[string]any{}
	}
	return cap
}

// serverLine follows one frame from server, read once, and takes it when
// it is the answer to one of the gateway's own requests or a task status.
// An ambiguous frame that the layer would act on by some reading of it is
// taken and refused (see serverAmbiguous); any other passes to the SDK.
func (t *tasker) serverLine(d *downRaw, text []byte, r rpcRead) bool {
	if r.notJSON || r.isBatch {
		return false
	}
	if r.ambiguous != "" {
		return t.serverAmbiguous(d, text, r)
	}
	if !r.message {
		return false
	}
	if !r.hasMethod && strings.HasPrefix(r.idKey, "s:"+rawIDPrefix) {
		f := r.frame()
		d.deliver(r.idKey[2:], f.Result, f.Error)
		return true
	}
	if t.serverAsk(d, r) {
		return true
	}
	switch {
	case r.method == "notifications/progress":
		if tok, why := r.params.Get("progressToken"); why == "" {
			t.g.fw.progressRead(d.server, tok)
		}
	case r.method == "notifications/tasks/status":
		// The status of a task of this server, under the gateway's id of
		// it; while a task-augmented call to the server is in flight, of
		// a task it has not answered yet too.
		t.mu.Lock()
		early := t.creating[d.server] > 0
		params, known := mapTask(raw(r.params), func(id string) (string, bool) { return t.tasks.hostID(d.server, id, early) })
		known = known && taskIDIn(r.params) != ""
		if gid := taskIDOf(params); t.ext[gid] != nil {
			// A task of the extension: its host polls (exttasks.go).
			known = false
		}
		t.mu.Unlock()
		if known {
			t.out.frame(rpcFrame{JSONRPC: "2.0", Method: r.method, Params: params})
		}
		return true
	case !r.hasMethod && r.result != nil:
		t.observe(d.server, r.result)
	}
	return false
}

// serverAmbiguous takes a frame of server that JSON readers read
// differently when the task layer would act on it by some reading: an
// answer to one of the gateway's own requests (the request then fails), a
// task status (dropped), a request the host is to run as a task or about
// such a task (answered with -32600). It is recorded as frame.dropped.
// Any other ambiguous frame passes: the SDK and the pins read it as they
// do, and the task layer does not observe it.
func (t *tasker) serverAmbiguous(d *downRaw, text []byte, r rpcRead) bool {
	why := r.ambiguous
	var ours []string
	acts := false
	if r.v != nil {
		for _, id := range foldedStrings(r.v, "id") {
			if strings.HasPrefix(id, rawIDPrefix) {
				ours = append(ours, id)
			}
		}
		for _, m := range foldedStrings(r.v, "method") {
			switch {
			case m == "notifications/tasks/status":
				acts = true
			case t.hostCaps != nil && (taskMethods[m] || m == "sampling/createMessage" || m == "elicitation/create"):
				acts = true
			}
		}
	}
	if len(ours) == 0 && !acts {
		return false
	}
	t.g.recordDropped("s2c", text, "aegis refused a frame of server "+d.server+" that JSON readers read differently: "+why)
	for _, id := range ours {
		d.deliver(id, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: server " + d.server + " answered with a frame that JSON readers read differently: " + why})
	}
	if r.hasMethod && r.idKey != "" && r.id.Ambiguous == "" {
		d.send(reply(r.idRaw(), nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "aegis: refused a frame that JSON readers read differently: " + why}))
	}
	return true
}

// observe notes, from a server's answer, its tasks capability and its
// tools' execution.
func (t *tasker) observe(server string, result *reading.Value) {
	caps, why := result.Get("capabilities")
	var tasks *reading.Value
	if why == "" && caps != nil {
		if v, w := caps.Get("tasks"); w == "" && v != nil && v.Kind != reading.Null {
			tasks = v
		}
	}
	version, _ := strMember(result, "protocolVersion")
	tools, why := result.Get("tools")
	t.mu.Lock()
	defer t.mu.Unlock()
	if tasks != nil && version != "" {
		t.caps[server] = json.RawMessage(tasks.Raw)
	}
	if why != "" || tools == nil {
		return
	}
	for _, tool := range tools.Elems {
		name, ok := strMember(tool, "name")
		x, w := tool.Get("execution")
		if !ok || w != "" || x == nil || x.Kind == reading.Null {
			continue
		}
		if t.exec[server] == nil {
			t.exec[server] = map[string]json.RawMessage{}
		}
		t.exec[server][name] = json.RawMessage(x.Raw)
	}
}

// amend returns the frame that the SDK wrote to the host with what the
// SDK cannot carry added: the tasks capability to the initialize answer,
// each tool's execution to a tools/list answer.
func (t *tasker) amend(p []byte) []byte {
	t.mu.Lock()
	n := len(t.watch)
	t.mu.Unlock()
	if n == 0 {
		return p
	}
	r := readRPC(p)
	if !r.message || r.hasMethod || r.ambiguous != "" || r.isBatch {
		return p
	}
	h := r.frame()
	k := r.idKey
	t.mu.Lock()
	method, ok := t.watch[k]
	delete(t.watch, k)
	t.mu.Unlock()
	if !ok || h.Result == nil {
		return p
	}
	var res map[string]json.RawMessage
	if json.Unmarshal(h.Result, &res) != nil {
		return p
	}
	switch method {
	case "server/discover":
		// The tasks extension, where some server runs tool calls as
		// tasks and the gateway offers 2026-07-28 (exttasks.go).
		if t.capability() == nil || t.g.cfg.HostProtocol < newProtocol {
			return p
		}
		var caps map[string]json.RawMessage
		if json.Unmarshal(res["capabilities"], &caps) != nil || caps == nil {
			caps = map[string]json.RawMessage{}
		}
		var exts map[string]json.RawMessage
		if json.Unmarshal(caps["extensions"], &exts) != nil || exts == nil {
			exts = map[string]json.RawMessage{}
		}
		exts[extTasksID] = json.RawMessage(`{}`)
		caps["extensions"], _ = json.Marshal(exts)
		res["capabilities"], _ = json.Marshal(caps)
	case "initialize":
		c := t.capability()
		if c == nil {
			return p
		}
		var caps map[string]json.RawMessage
		if json.Unmarshal(res["capabilities"], &caps) != nil || caps == nil {
			caps = map[string]json.RawMessage{}
		}
		caps["tasks"], _ = json.Marshal(c)
		res["capabilities"], _ = json.Marshal(caps)
	case "tools/list":
		var tools []map[string]json.RawMessage
		if json.Unmarshal(res["tools"], &tools) != nil {
			return p
		}
		changed := false
		for _, tool := range tools {
			var name string
			json.Unmarshal(tool["name"], &name)
			e, ok := t.g.tool(name)
			if !ok {
				continue
			}
			t.mu.Lock()
			x := t.exec[e.server][e.tool]
			t.mu.Unlock()
			if x != nil {
				tool["execution"], changed = x, true
			}
		}
		if !changed {
			return p
		}
		res["tools"], _ = json.Marshal(tools)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return p
	}
	h.Result = b
	out, err := json.Marshal(h)
	if err != nil {
		return p
	}
	return append(out, '\n')
}
