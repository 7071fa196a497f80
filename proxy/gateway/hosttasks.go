package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// Tasks the host runs for a server (task-augmented sampling/createMessage
// and elicitation/create), carried at the JSON-RPC level as the host's
// tasks are (tasks.go). Invariants:
//
//   - Servers are told the host's capabilities.tasks, as the host sent it,
//     and nothing when the host has none; then no request of a server is
//     taken here, and the SDK answers as it always did.
//   - A server's task-augmented request goes to the host as sent, under an
//     id of the gateway's ("aegis-N"); the host's answer, a CreateTaskResult
//     or a plain result, goes back to the server under the server's id.
//   - A server's tasks/get, tasks/result and tasks/cancel reach the host
//     only for a task the host created for that server; tasks/list
//     answers only that server's tasks. Another server's task id is
//     refused (-32602) and never reaches the host.
//   - The host's notifications/tasks/status for such a task reaches the
//     server that asked; a server's notifications/cancelled for a request
//     taken here cancels the gateway's request to the host.
//   - The host's task ids are not mapped: one receiver, the host, makes
//     them all, so two servers cannot bring the same id, and each id is
//     bound to the server it was created for. A task id the host gives a
//     second server while the first's task is still known is refused to
//     that server (the task stays the first's).

// hostRuns reports whether the host runs requests of kind (sampling,
// elicitation) and method (createMessage, create) as tasks.
func (t *tasker) hostRuns(kind, method string) bool {
	return present(t.hostCaps, "requests", kind, method)
}

// hostHas reports whether the host has capabilities.tasks.<what>.
func (t *tasker) hostHas(what string) bool {
	return present(t.hostCaps, what)
}

// serverAsk takes a server's request that is the host's to run as a task,
// or about such a task, and has it answered; it follows the server's
// cancellations of those requests.
func (t *tasker) serverAsk(d *downRaw, r rpcRead) bool {
	if t.hostCaps == nil || !r.hasMethod {
		return false
	}
	h := r.frame()
	if h.Method == "notifications/cancelled" {
		t.cancelIn(t.asks, d.server+"\x00"+cancelledKey(r.params), errServerCancelled)
		return false // the SDK follows its own requests' cancellations
	}
	k := r.idKey
	if k == "" {
		return false
	}
	switch h.Method {
	case "sampling/createMessage", "elicitation/create":
		if task, _ := r.params.Get("task"); task == nil || task.Kind == reading.Null {
			return false
		}
		kind, method := "sampling", "createMessage"
		if h.Method == "elicitation/create" {
			kind, method = "elicitation", "create"
		}
		if !t.hostRuns(kind, method) {
			return false
		}
	case "tasks/get", "tasks/result", "tasks/cancel", "tasks/list":
	default:
		return false
	}
	if why := t.spawn(t.asks, d.server+"\x00"+k, func(ctx context.Context) {
		res, err := t.askHost(ctx, d.server, h)
		d.send(reply(h.ID, res, err))
	}); why != "" {
		d.send(reply(h.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: " + why}))
	}
	return true
}

var errServerCancelled = errors.New("the server cancelled its request")

// askHost puts a server's request to the host and returns the host's
// answer.
func (t *tasker) askHost(ctx context.Context, server string, h rpcFrame) (json.RawMessage, error) {
	if !t.ready.Load() || t.hostRaw == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: no host is connected to the gateway"}
	}
	d := t.g.downs[server]
	// A task of the server's own that the request belongs to is named by
	// the gateway's id of it.
	h.Params = t.relatedToHost(server, h.Params)
	switch h.Method {
	case "tasks/list":
		if !t.hostHas("list") {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the host behind aegis does not support tasks/list"}
		}
		return t.hostList(ctx, server, h.Params)
	case "tasks/get", "tasks/result", "tasks/cancel":
		id := taskIDOf(h.Params)
		t.mu.Lock()
		owner, ok := t.hostTasks.m[id]
		t.mu.Unlock()
		if !ok || owner != server {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("aegis: unknown task %q: the host created no task of that id for this server", id)}
		}
		if h.Method == "tasks/cancel" && !t.hostHas("cancel") {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the host behind aegis does not support tasks/cancel"}
		}
	default:
		// The host's progress on the request reaches the server.
		var p struct {
			Meta mcp.Meta `json:"_meta"`
		}
		json.Unmarshal(h.Params, &p)
		if token := p.Meta["progressToken"]; token != nil && d != nil {
			defer t.g.fw.upstream(token, d.session())()
		}
	}
	raw, err := t.hostRaw.call(ctx, h.Method, json.RawMessage(orEmptyObject(h.Params)))
	if err != nil {
		return nil, err
	}
	if h.Method == "sampling/createMessage" || h.Method == "elicitation/create" {
		if id := createdTaskID(raw); id != "" {
			t.mu.Lock()
			defer t.mu.Unlock()
			if owner, ok := t.hostTasks.m[id]; ok && owner != server {
				// The host gave another server's task id again: the
				// task stays that server's, and this one is told so.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: the host answered with task %q, which it created for another server", id)}
			}
			t.hostTasks.put(id, server)
		}
	}
	return raw, nil
}

// hostList answers a server's tasks/list with the host's tasks that the
// host created for that server.
func (t *tasker) hostList(ctx context.Context, server string, params json.RawMessage) (json.RawMessage, error) {
	raw, err := t.hostRaw.call(ctx, "tasks/list", json.RawMessage(orEmptyObject(params)))
	if err != nil {
		return nil, err
	}
	var page map[string]json.RawMessage
	var tasks []json.RawMessage
	if json.Unmarshal(raw, &page) != nil || json.Unmarshal(page["tasks"], &tasks) != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: the host's tasks/list answer is not a list of tasks"}
	}
	mine := []json.RawMessage{}
	t.mu.Lock()
	for _, task := range tasks {
		if t.hostTasks.m[taskIDOf(task)] == server {
			mine = append(mine, task)
		}
	}
	t.mu.Unlock()
	page["tasks"], _ = json.Marshal(mine)
	return json.Marshal(page)
}

// serverOut is a server's stdin as the SDK writes it: the gateway's
// initialize carries the host's capabilities.tasks, which the SDK cannot.
type serverOut struct {
	w     io.WriteCloser
	tasks json.RawMessage
}

func (o *serverOut) Write(p []byte) (int, error) {
	q := p
	if o.tasks != nil && bytes.Contains(p, []byte(`"initialize"`)) {
		q = withTasks(p, o.tasks)
	}
	if _, err := o.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (o *serverOut) Close() error { return o.w.Close() }

// withTasks returns the initialize request frame with tasks as its
// params.capabilities.tasks; any other frame as it is.
func withTasks(frame, tasks json.RawMessage) []byte {
	var f rpcFrame
	if json.Unmarshal(frame, &f) != nil || f.Method != "initialize" {
		return frame
	}
	var params, caps map[string]json.RawMessage
	if json.Unmarshal(f.Params, &params) != nil || params == nil {
		return frame
	}
	if json.Unmarshal(params["capabilities"], &caps) != nil || caps == nil {
		caps = map[string]json.RawMessage{}
	}
	caps["tasks"] = tasks
	params["capabilities"], _ = json.Marshal(caps)
	f.Params, _ = json.Marshal(params)
	b, err := json.Marshal(f)
	if err != nil {
		return frame
	}
	return append(b, '\n')
}
