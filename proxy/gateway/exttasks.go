package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
)

// The tasks extension of MCP 2026-07-28 (io.modelcontextprotocol/tasks,
// SEP-2663) toward a host, bridged to the 2025-11-25 tasks of the
// servers (docs/GATEWAY-PARITY.md). Invariants:
//
//   - On stdio the layer answers the extension's requests itself; from an
//     HTTP session they reach the SDK as requests of extMethod, so that
//     each answer goes on its request's stream, and are answered by the
//     same code (extOfHTTP).
//   - Only a request that names protocol 2026-07-28 or later in its _meta,
//     while the gateway offers that protocol, is served by the extension;
//     and only a tools/call whose own _meta declares the extension
//     (clientCapabilities.extensions, read the same by every reader), to a
//     tool of a local server whose execution says taskSupport required or
//     optional, becomes a task. Every other call is served as before.
//   - Such a call is decided and recorded as every tools/call is
//     (decideCall): the intent before it reaches the server, which gets it
//     as a 2025-11-25 task-augmented call (its name, arguments and _meta
//     less the per-request members, and an empty task); the outcome (the
//     server's CreateTaskResult, or the refusal, which the host gets as a
//     plain tool result) before the host sees the answer. The host gets
//     the task as the extension's CreateTaskResult (resultType "task"),
//     under the gateway's id of it (taskids.go), never the server's.
//   - The gateway drives the server's task: it waits on tasks/result for
//     it at once, as on a call in flight (after the host has gone, until
//     the grace is over; a wait cut short is recorded as such). The server's requests during that wait that name the
//     task (related-task _meta) become the task's inputRequests, shown by
//     tasks/get while the task is input_required, and answered by the
//     host's tasks/update (each key once, recorded before the server gets
//     the answer). The result is recorded (task.result) before tasks/get
//     shows it, completed with the result inline, or failed with the
//     error; a cancelled task is cancelled.
//   - tasks/get, tasks/update and tasks/cancel reach only tasks created
//     this way; tasks/get of any other id is refused (-32602) and reaches
//     no server; tasks/update and tasks/cancel acknowledge any id, as the
//     extension requires, and act only on such tasks. tasks/cancel is
//     recorded (call.cancelled) before the server is asked.
//   - Bounded: the tasks the gateway remembers are the task map's
//     (maxTasks); at most maxExtAsks requests of a server wait in one task;
//     the finished tasks' results kept for tasks/get stay within
//     extResultBytes in all (the oldest finished tasks are forgotten
//     first; tasks/get then answers their ids as unknown).
//   - The server's notifications/tasks/status for such a task are not
//     forwarded (their shape is 2025-11-25's; the extension's host polls).
//   - A server's request is put to the host only as the capabilities of
//     the request that made the task allow; else it is refused as a host
//     without the capability refuses it.

// extTasksID is the extension's identifier.
const extTasksID = "io.modelcontextprotocol/tasks"

// maxExtAsks bounds the server's requests waiting in one task.
const maxExtAsks = 64

// extTask is a server's task that a 2026-07-28 host knows through the
// extension.
type extTask struct {
	gid   string
	e     taskEntry
	proto string
	caps  *mcp.ClientCapabilities // what the creating request declared

	mu       sync.Mutex
	task     map[string]json.RawMessage // the server's latest task object
	status   string                     // the final status, once known; "" before
	result   json.RawMessage            // completed: the tool's result
	rpcErr   *jsonrpc.Error             // failed: the error
	asks     map[string]*ask            // the server's requests waiting, by key
	n        int                        // keys given
	answered map[string]bool            // keys answered
}

// extTasks are the tasks of the extension, by the gateway's id. Under
// tasker.mu.
type extTasks map[string]*extTask

// extVersion is the protocol version (2026-07-28 or later) that request
// params name in their _meta, or "".
func extVersion(params *reading.Value) string {
	meta, why := params.Get("_meta")
	if why != "" {
		return ""
	}
	v, ok := strMember(meta, mcp.MetaKeyProtocolVersion)
	if !ok || v < newProtocol {
		return ""
	}
	return v
}

// declaresExtTasks reports whether request params declare the tasks
// extension in their per-request capabilities, read the same by every
// reader.
func declaresExtTasks(params *reading.Value) bool {
	v := params
	for _, name := range []string{"_meta", mcp.MetaKeyClientCapabilities, "extensions", extTasksID} {
		m, why := v.Get(name)
		if why != "" || m == nil {
			return false
		}
		v = m
	}
	return v.Kind == reading.Object
}

// extTakes reports whether the extension serves request r of a stdio
// host, which the layer then answers itself. An HTTP session's request
// (rawDown) goes to the SDK, which keeps its stream, as a request of
// extMethod (plainOverHTTP, extOfHTTP).
func (t *tasker) extTakes(r rpcRead) bool {
	return !t.rawDown && t.extServes(r)
}

// extMethod is the method under which an HTTP host's request of the
// extension reaches the SDK (see plainOverHTTP).
const extMethod = "aegis/ext-tasks"

// extOfHTTP answers a request of extMethod: the host's request kept by
// plainOverHTTP under its extra, run under ctx, the SDK's context of the
// request.
func (t *tasker) extOfHTTP(ctx context.Context, req mcp.Request) (mcp.Result, error) {
	return t.answerHTTP(ctx, req, extMethod, t.extHandle)
}

// extServes reports whether the extension serves request r (see the
// invariants above).
func (t *tasker) extServes(r rpcRead) bool {
	if t.g.cfg.HostProtocol < newProtocol || !t.ready.Load() || r.idKey == "" || extVersion(r.params) == "" {
		return false
	}
	switch r.method {
	case "tasks/get", "tasks/update", "tasks/cancel":
		return true
	case "tools/call":
	default:
		return false
	}
	if !declaresExtTasks(r.params) {
		return false
	}
	name, ok := strMember(r.params, "name")
	if !ok {
		return false
	}
	e, ok := t.g.tool(name)
	if !ok {
		return false
	}
	if d := t.g.downs[e.server]; d == nil || d.raw == nil || !t.serverCan(e.server, "requests") {
		return false
	}
	t.mu.Lock()
	x := t.exec[e.server][e.tool]
	t.mu.Unlock()
	support, _ := memberAt(x, "taskSupport")
	s, _ := support.String()
	return s == "required" || s == "optional"
}

// extHandle answers request h of the extension.
func (t *tasker) extHandle(ctx context.Context, h rpcFrame) (any, error) {
	proto := ""
	if v, ok := reading.Read(orEmptyObject(h.Params)).One(); ok {
		proto = extVersion(v)
	}
	if h.Method == "tools/call" {
		res, err := t.extCall(context.WithValue(ctx, protocolKey{}, proto), h, proto)
		if r, ok := res.(*mcp.CallToolResult); ok {
			// The gateway's own result (a refusal), as to any 2026-07-28
			// host: resultType complete.
			return typedResult{r}, err
		}
		return res, err
	}
	id := taskIDOf(h.Params)
	t.mu.Lock()
	x := t.ext[id]
	t.mu.Unlock()
	switch h.Method {
	case "tasks/update":
		if x != nil {
			if err := t.extUpdate(ctx, x, h.Params); err != nil {
				return nil, err
			}
		}
		return map[string]any{"resultType": "complete"}, nil
	case "tasks/cancel":
		if x != nil {
			if err := t.extCancel(ctx, x); err != nil {
				return nil, err
			}
		}
		return map[string]any{"resultType": "complete"}, nil
	}
	if x == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("aegis: unknown task %q: no task of that id was created through this gateway", id)}
	}
	return t.extGet(ctx, x)
}

// extCall runs tools/call h of a 2026-07-28 host as a task of the server.
func (t *tasker) extCall(ctx context.Context, h rpcFrame, proto string) (any, error) {
	g := t.g
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      mcp.Meta        `json:"_meta"`
	}
	if err := json.Unmarshal(h.Params, &p); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "aegis: invalid tools/call params: " + err.Error()}
	}
	caps := &mcp.ClientCapabilities{}
	if b, err := json.Marshal(p.Meta[mcp.MetaKeyClientCapabilities]); err != nil || json.Unmarshal(b, caps) != nil {
		caps = &mcp.ClientCapabilities{}
	}
	return g.decideCall(withTraceParent(ctx, p.Meta), h.Method, p.Name, p.Arguments, func(cctx context.Context, wc schemas.WrapCall, e toolEntry) (any, error) {
		d := g.downs[e.server]
		if d == nil || d.raw == nil {
			return nil, g.taskless(e.server)
		}
		params := map[string]any{"name": e.tool, "task": map[string]any{}}
		if len(p.Arguments) > 0 {
			params["arguments"] = p.Arguments
		}
		if m := bridgeMeta(p.Meta); len(m) > 0 {
			params["_meta"] = t.metaToServer(e.server, m)
		}
		t.mu.Lock()
		t.creating[e.server]++
		t.mu.Unlock()
		raw, err := d.raw.call(cctx, "tools/call", params)
		t.mu.Lock()
		if t.creating[e.server]--; t.creating[e.server] <= 0 {
			delete(t.creating, e.server)
		}
		t.mu.Unlock()
		if err != nil {
			return nil, err
		}
		var created struct {
			Task map[string]json.RawMessage `json:"task"`
		}
		sid := createdTaskID(raw)
		if sid == "" {
			if _, ok := memberAt(raw, "task"); !ok {
				// The server answered at once, without a task: the host
				// takes a plain result as well.
				out := t.relatedToHost(e.server, raw)
				if b, err := withMembers(out, json.RawMessage(`"complete"`), nil); err == nil {
					out = b
				}
				return out, nil
			}
		}
		if sid == "" || json.Unmarshal(raw, &created) != nil || created.Task == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: server %s answered a task-augmented call with an unreadable task", e.server)}
		}
		x := &extTask{e: taskEntry{server: e.server, serverID: sid, callID: wc.CallID, toolID: wc.ToolID}, proto: proto, caps: caps, task: created.Task,
			asks: map[string]*ask{}, answered: map[string]bool{}}
		t.mu.Lock()
		x.gid = t.tasks.create(x.e)
		t.extAddLocked(x)
		t.mu.Unlock()
		t.extDrive(x)
		return extTaskJSON(x.gid, created.Task, "task"), nil
	})
}

// extDrive waits on the server's tasks/result for x, in a goroutine of
// its own, and keeps what it answers, recorded.
func (t *tasker) extDrive(x *extTask) {
	// As a call in flight: it runs on after the host has gone until the
	// grace is over (callContext), then the wait is cut and recorded so.
	ctx, release := t.g.callContext(t.base)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer release()
		d := t.g.downs[x.e.server]
		if host := t.host(); host != nil {
			// The server's requests during the wait come to this host.
			defer t.g.fw.begin(ctx, x.e.server, host, nil)()
		}
		raw, err := d.raw.call(ctx, "tasks/result", map[string]any{"taskId": x.e.serverID})
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("the wait for the task's result was cut short: %w", context.Cause(ctx))
		}
		if err == nil {
			raw, err = t.answerToHost(x.e, x.gid, "tasks/result", raw)
		}
		if ferr := t.recordTaskResult(ctx, x.e, x.gid, raw, err); ferr != nil {
			err = ferr
		}
		status := "completed"
		var rpcErr *jsonrpc.Error
		if err != nil {
			status = "failed"
			if !asJSONRPC(err, &rpcErr) {
				rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
			}
			// A task the server ended as cancelled answers tasks/result
			// with an error too: its status says which.
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			st, gerr := d.raw.call(gctx, "tasks/get", map[string]any{"taskId": x.e.serverID})
			cancel()
			if gerr == nil {
				if s, _ := memberAt(st, "status"); s != nil {
					if v, _ := s.String(); v == "cancelled" {
						status = "cancelled"
					}
				}
			}
		}
		t.extDone(x, status, raw, rpcErr)
	}()
}

// extResultBytes bounds the results the extension's finished tasks keep
// for tasks/get, in all.
const extResultBytes = 64 << 20

// extAddLocked keeps task x, just created; t.mu is held.
func (t *tasker) extAddLocked(x *extTask) {
	if t.ext == nil {
		t.ext = extTasks{}
	}
	t.ext[x.gid] = x
	t.extOrder = append(t.extOrder, x.gid)
	t.extTrimLocked()
}

// extDone keeps how task x ended: its status, and its result or error;
// the server's requests still waiting in it are answered that the call
// ended.
func (t *tasker) extDone(x *extTask, status string, raw json.RawMessage, rpcErr *jsonrpc.Error) {
	x.mu.Lock()
	x.status, x.result, x.rpcErr = status, raw, rpcErr
	for k, a := range x.asks {
		a.reply <- askReply{err: errCallEnded}
		delete(x.asks, k)
	}
	x.mu.Unlock()
	t.mu.Lock()
	if t.ext[x.gid] == x {
		t.extBytes += len(raw)
	}
	t.extTrimLocked()
	t.mu.Unlock()
}

// extTrimLocked forgets the tasks the task map forgot (maxTasks), and the
// oldest finished tasks while their results pass extResultBytes (or
// t.extLimit): tasks/get then answers their ids as unknown. A task still
// working is never forgotten here. t.mu is held.
func (t *tasker) extTrimLocked() {
	limit := t.extLimit
	if limit <= 0 {
		limit = extResultBytes
	}
	kept := t.extOrder[:0]
	over := t.extBytes > limit
	for _, id := range t.extOrder {
		x := t.ext[id]
		if x == nil {
			continue
		}
		if _, ok := t.tasks.created.m[id]; !ok {
			t.extForgetLocked(x)
			continue
		}
		if over {
			x.mu.Lock()
			done := x.status != ""
			x.mu.Unlock()
			if done {
				t.extForgetLocked(x)
				over = t.extBytes > limit
				continue
			}
		}
		kept = append(kept, id)
	}
	clear(t.extOrder[len(kept):])
	t.extOrder = kept
}

// extForgetLocked forgets task x; t.mu is held.
func (t *tasker) extForgetLocked(x *extTask) {
	delete(t.ext, x.gid)
	x.mu.Lock()
	t.extBytes -= len(x.result)
	x.mu.Unlock()
}

// asJSONRPC sets *out to err's JSON-RPC error, if it is one.
func asJSONRPC(err error, out **jsonrpc.Error) bool {
	var we *jsonrpc.Error
	if !errors.As(hostError(err), &we) {
		return false
	}
	*out = we
	return true
}

// recordTaskResult records the answer to tasks/result of task e (the
// gateway's id gid), durably: the result's digest, or the error.
func (t *tasker) recordTaskResult(ctx context.Context, e taskEntry, gid string, raw json.RawMessage, err error) error {
	fact := map[string]any{"task_id": gid, "server_task_id": e.serverID, "call_id": e.callID, "tool_id": e.toolID, "server": e.server}
	if err != nil {
		fact["error"] = err.Error()
	} else {
		fact["result_digest"] = proxy.SHA(compactJSON(raw))
		isErr, ok := memberAt(raw, "isError")
		fact["is_error"] = ok && isErr.Kind == reading.Bool && isErr.Bool
	}
	rc, ferr := t.g.sess.Fact(schemas.KindTaskResult, fact)
	if ferr == nil {
		_, ferr = rc.Wait(context.WithoutCancel(ctx))
	}
	if ferr != nil {
		return auditRefusal("tasks/result", ferr)
	}
	return nil
}

// extGet is the task as tasks/get shows it.
func (t *tasker) extGet(ctx context.Context, x *extTask) (any, error) {
	x.mu.Lock()
	done := x.status != ""
	x.mu.Unlock()
	if !done {
		// The server's latest view of its task: status and times.
		d := t.g.downs[x.e.server]
		cctx, release := t.g.callContext(ctx)
		st, err := d.raw.call(cctx, "tasks/get", map[string]any{"taskId": x.e.serverID})
		release()
		if err == nil {
			var task map[string]json.RawMessage
			if json.Unmarshal(st, &task) == nil && taskIDOf(st) == x.e.serverID {
				x.mu.Lock()
				x.task = task
				x.mu.Unlock()
			}
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := extTaskJSON(x.gid, x.task, "complete")
	switch {
	case x.status != "":
		out["status"] = x.status
		switch x.status {
		case "completed":
			out["result"] = x.result
		case "failed":
			out["error"] = x.rpcErr
		}
	case len(x.asks) > 0:
		out["status"] = "input_required"
		reqs := map[string]any{}
		for k, a := range x.asks {
			reqs[k] = map[string]any{"method": a.method, "params": a.params}
		}
		out["inputRequests"] = reqs
	default:
		if s, _ := out["status"].(string); s == "input_required" || s == "completed" || s == "failed" || s == "cancelled" {
			// The server's word, before the gateway has its requests or
			// its result: still working, as far as the host can act.
			out["status"] = "working"
		}
	}
	return out, nil
}

// extTaskJSON is the server's 2025-11-25 task object as the extension's
// Task under the gateway's id gid, with resultType rt.
func extTaskJSON(gid string, task map[string]json.RawMessage, rt string) map[string]any {
	out := map[string]any{"resultType": rt, "taskId": gid, "status": "working"}
	str := func(k string) (string, bool) {
		var s string
		ok := json.Unmarshal(task[k], &s) == nil && s != ""
		return s, ok
	}
	if s, ok := str("status"); ok {
		out["status"] = s
	}
	if s, ok := str("statusMessage"); ok {
		out["statusMessage"] = s
	}
	now := time.Now().UTC().Format(time.RFC3339)
	out["createdAt"], out["lastUpdatedAt"] = now, now
	if s, ok := str("createdAt"); ok {
		out["createdAt"], out["lastUpdatedAt"] = s, s
	}
	if s, ok := str("lastUpdatedAt"); ok {
		out["lastUpdatedAt"] = s
	}
	var ttl *float64
	if json.Unmarshal(task["ttl"], &ttl) == nil && ttl != nil && *ttl >= 0 {
		out["ttlSeconds"] = int64(math.Ceil(*ttl / 1000))
	} else {
		out["ttlSeconds"] = nil
	}
	var poll float64
	if json.Unmarshal(task["pollInterval"], &poll) == nil && poll > 0 {
		out["pollIntervalMilliseconds"] = int64(poll)
	}
	return out
}

// extAsk takes a server's request (method, params) made during the wait
// on an extension task that its related-task _meta names (the gateway's
// id, as relatedMiddleware mapped it): it becomes an input request of the
// task, and its answer the host's tasks/update. ok is false for a request
// that names no such task.
func (t *tasker) extAsk(ctx context.Context, server, method string, meta mcp.Meta, params any) (res mcp.Result, ok bool, err error) {
	rel, _ := meta[relatedTaskKey].(map[string]any)
	gid, _ := rel["taskId"].(string)
	if gid == "" {
		return nil, false, nil
	}
	t.mu.Lock()
	x := t.ext[gid]
	t.mu.Unlock()
	if x == nil || x.e.server != server {
		return nil, false, nil
	}
	if why := x.refuses(method, params); why != "" {
		// What a host without the capability answers.
		return nil, true, unsupported(why)
	}
	x.mu.Lock()
	if x.status != "" || len(x.asks) >= maxExtAsks {
		x.mu.Unlock()
		return nil, true, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: task %s takes no more requests", gid)}
	}
	x.n++
	a := &ask{key: fmt.Sprintf("aegis-%d", x.n), method: method, params: params, reply: make(chan askReply, 1)}
	x.asks[a.key] = a
	x.mu.Unlock()
	g := t.g
	if err := g.noteRound(ctx, map[string]any{"tasks": "input_required", "task_id": gid, "call_id": x.e.callID, "tool_id": x.e.toolID,
		"protocol_version": x.proto, "inputs": []string{a.key}, "method": method}); err != nil {
		x.mu.Lock()
		delete(x.asks, a.key)
		x.mu.Unlock()
		return nil, true, auditRefusal(method, err)
	}
	select {
	case r := <-a.reply:
		return r.res, true, r.err
	case <-ctx.Done():
		x.mu.Lock()
		delete(x.asks, a.key)
		x.mu.Unlock()
		return nil, true, ctx.Err()
	}
}

// refuses says what of a server's request (method, params) the host of
// x did not declare in the request that made the task, or "".
func (x *extTask) refuses(method string, params any) string {
	c := x.caps
	switch method {
	case "sampling/createMessage":
		if c.Sampling == nil {
			return "sampling"
		}
	case "elicitation/create":
		p, _ := params.(*mcp.ElicitParams)
		switch {
		case c.Elicitation == nil:
			return "elicitation"
		case p != nil && p.Mode == "url" && c.Elicitation.URL == nil:
			return "url elicitation"
		case (p == nil || p.Mode != "url") && c.Elicitation.Form == nil && c.Elicitation.URL != nil:
			return "form elicitation"
		}
	}
	return ""
}

// extUpdate answers the server's waiting requests of x with the host's
// inputResponses in params, recorded first; a key that is not waiting is
// ignored, as the extension says.
func (t *tasker) extUpdate(ctx context.Context, x *extTask, params json.RawMessage) error {
	var p struct {
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	if json.Unmarshal(params, &p) != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "aegis: invalid tasks/update params"}
	}
	x.mu.Lock()
	var keys []string
	var take []*ask
	for k := range p.InputResponses {
		if a := x.asks[k]; a != nil && !x.answered[k] {
			keys = append(keys, k)
			take = append(take, a)
		}
	}
	for _, k := range keys {
		delete(x.asks, k)
		x.answered[k] = true
	}
	x.mu.Unlock()
	if len(take) == 0 {
		return nil
	}
	sort.Strings(keys)
	resp, _ := json.Marshal(p.InputResponses)
	if err := t.g.noteRound(ctx, map[string]any{"tasks": "update", "task_id": x.gid, "call_id": x.e.callID, "tool_id": x.e.toolID,
		"protocol_version": x.proto, "inputs": keys, "responses_digest": proxy.SHA(resp)}); err != nil {
		for _, a := range take {
			a.reply <- askReply{err: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: the host's answer could not be recorded"}}
		}
		return auditRefusal("tasks/update", err)
	}
	for _, a := range take {
		a.reply <- extAnswer(a, p.InputResponses[a.key])
	}
	return nil
}

// extAnswer is the host's input response raw to a, as the server's
// request expects it.
func extAnswer(a *ask, raw json.RawMessage) askReply {
	var v mcp.Result
	switch a.method {
	case "sampling/createMessage":
		v = &mcp.CreateMessageWithToolsResult{}
	case "elicitation/create":
		v = &mcp.ElicitResult{}
	case "roots/list":
		v = &mcp.ListRootsResult{}
	}
	if v == nil || json.Unmarshal(raw, v) != nil {
		return askReply{err: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: the host gave no answer to %s", a.method)}}
	}
	return askReply{res: v}
}

// extCancel asks the server to cancel its task x, recorded first.
func (t *tasker) extCancel(ctx context.Context, x *extTask) error {
	g := t.g
	fact := map[string]string{"task_id": x.gid, "server_task_id": x.e.serverID, "call_id": x.e.callID, "tool_id": x.e.toolID, "server": x.e.server, "method": "tasks/cancel", "by": "host"}
	rc, err := g.sess.Fact(schemas.KindCallCancelled, fact)
	if err == nil {
		_, err = rc.Wait(context.WithoutCancel(ctx))
	}
	if err != nil {
		return auditRefusal("tasks/cancel", err)
	}
	d := g.downs[x.e.server]
	cctx, release := g.callContext(ctx)
	defer release()
	_, err = d.raw.call(cctx, "tasks/cancel", map[string]any{"taskId": x.e.serverID})
	return err
}
