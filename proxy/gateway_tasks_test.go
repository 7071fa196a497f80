package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// taskHost is a host that speaks JSON-RPC lines, as the TypeScript SDK's
// client does for tasks (which the Go SDK has none of). It answers the
// server's elicitations with elicit, and keeps every notification.
type taskHost struct {
	t      *testing.T
	in     io.WriteCloser
	mu     sync.Mutex
	notes  []map[string]any
	answer map[string]chan map[string]any
	asked  []string // methods of the server's requests
	elicit map[string]any
	before func(req map[string]any) bool // called before a server's request is answered; false: leave it unanswered
	wmu    sync.Mutex
	next   int
}

func newTaskHost(t *testing.T, in io.WriteCloser, out io.Reader) *taskHost {
	h := &taskHost{t: t, in: in, answer: map[string]chan map[string]any{}}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			method, _ := m["method"].(string)
			id, hasID := m["id"]
			switch {
			case method != "" && hasID:
				h.mu.Lock()
				h.asked = append(h.asked, method)
				h.mu.Unlock()
				if h.before != nil && !h.before(m) {
					continue
				}
				res := map[string]any{}
				switch method {
				case "elicitation/create":
					res = h.elicit
				case "roots/list":
					res = map[string]any{"roots": []any{}}
				}
				h.write(map[string]any{"jsonrpc": "2.0", "id": id, "result": res})
			case method != "":
				h.mu.Lock()
				h.notes = append(h.notes, m)
				h.mu.Unlock()
			default:
				h.mu.Lock()
				ch := h.answer[fmt.Sprint(id)]
				h.mu.Unlock()
				if ch != nil {
					ch <- m
				}
			}
		}
	}()
	return h
}

func (h *taskHost) write(v any) {
	b, _ := json.Marshal(v)
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.in.Write(append(b, '\n'))
}

// request sends a request and returns its answer (result or error).
func (h *taskHost) request(method string, params any) map[string]any {
	h.t.Helper()
	h.mu.Lock()
	h.next++
	id := h.next
	h.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return h.rawRequest(id, string(b))
}

// rawRequest sends line, a request with id, as the host wrote it, and
// returns its answer.
func (h *taskHost) rawRequest(id int, line string) map[string]any {
	h.t.Helper()
	ch := make(chan map[string]any, 1)
	h.mu.Lock()
	h.answer[fmt.Sprint(id)] = ch
	h.mu.Unlock()
	h.wmu.Lock()
	h.in.Write([]byte(line + "\n"))
	h.wmu.Unlock()
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		h.t.Fatalf("no answer to %.200s", line)
		return nil
	}
}

func (h *taskHost) initialize() map[string]any {
	h.t.Helper()
	return h.initializeWith(map[string]any{"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}}})
}

func (h *taskHost) initializeWith(caps map[string]any) map[string]any {
	h.t.Helper()
	a := h.request("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": caps,
		"clientInfo": map[string]any{"name": "tasks-test", "version": "1"}})
	h.write(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return a
}

// statuses are the task statuses the host was told of, in order.
func (h *taskHost) statuses(task string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, n := range h.notes {
		if n["method"] != "notifications/tasks/status" {
			continue
		}
		p, _ := n["params"].(map[string]any)
		if p["taskId"] == task {
			if s, _ := p["status"].(string); len(out) == 0 || out[len(out)-1] != s {
				out = append(out, s)
			}
		}
	}
	return out
}

func dig(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func toolNamed(list map[string]any, name string) map[string]any {
	tools, _ := dig(list, "result", "tools").([]any)
	for _, t := range tools {
		if m, _ := t.(map[string]any); m["name"] == name {
			return m
		}
	}
	return nil
}

// taskRun is what one side saw of the scripted task session.
type taskRun struct {
	caps, execution        string
	created, status        string
	result                 string
	asked                  []string
	statuses               []string
	listed                 bool
	cancelled, afterCancel string
	unknownCode            float64
	withoutTask            string
	taskID, cancelID       string
}

// runTasks drives the task script against h; tool is the research tool's
// name as h lists it.
func runTasks(t *testing.T, h *taskHost, tool string) taskRun {
	var r taskRun
	h.elicit = map[string]any{"action": "accept", "content": map[string]any{"interpretation": "snake"}}
	init := h.initialize()
	r.caps = canon(dig(init, "result", "capabilities", "tasks"))
	list := h.request("tools/list", map[string]any{})
	def := toolNamed(list, tool)
	if def == nil {
		t.Fatalf("%s is not listed: %v", tool, list)
	}
	r.execution = canon(def["execution"])

	a := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"topic": "python", "ambiguous": true}, "task": map[string]any{"ttl": 60000}})
	r.taskID, _ = dig(a, "result", "task", "taskId").(string)
	r.created, _ = dig(a, "result", "task", "status").(string)
	if r.taskID == "" {
		t.Fatalf("task-augmented call: %v", a)
	}
	g := h.request("tasks/get", map[string]any{"taskId": r.taskID})
	r.status, _ = dig(g, "result", "status").(string)
	res := h.request("tasks/result", map[string]any{"taskId": r.taskID})
	content, _ := dig(res, "result", "content").([]any)
	if len(content) == 0 {
		t.Fatalf("tasks/result: %v", res)
	}
	r.result, _ = content[0].(map[string]any)["text"].(string)
	ls := h.request("tasks/list", map[string]any{})
	tasks, _ := dig(ls, "result", "tasks").([]any)
	for _, x := range tasks {
		if m, _ := x.(map[string]any); m["taskId"] == r.taskID && m["status"] == "completed" {
			r.listed = true
		}
	}

	a = h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"topic": "go"}, "task": map[string]any{"ttl": 60000}})
	r.cancelID, _ = dig(a, "result", "task", "taskId").(string)
	c := h.request("tasks/cancel", map[string]any{"taskId": r.cancelID})
	r.cancelled, _ = dig(c, "result", "status").(string)
	g = h.request("tasks/get", map[string]any{"taskId": r.cancelID})
	r.afterCancel, _ = dig(g, "result", "status").(string)

	u := h.request("tasks/get", map[string]any{"taskId": "no-such-task"})
	r.unknownCode, _ = dig(u, "error", "code").(float64)
	w := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"topic": "go"}})
	delete(w, "id")
	r.withoutTask = canon(w)

	time.Sleep(200 * time.Millisecond) // the last statuses
	r.statuses = h.statuses(r.taskID)
	h.mu.Lock()
	r.asked = append(r.asked, h.asked...)
	h.mu.Unlock()
	return r
}

// Tasks work through the gateway as they do directly (the Go SDK has no
// tasks; the gateway carries them at the JSON-RPC level): the capability
// and the tool's taskSupport are announced, a task-augmented call creates
// a task, tasks/get, tasks/result (with the server's elicitation while the
// task is input_required), tasks/list and tasks/cancel reach the server,
// and the host is told each status. Through the gateway, the call is
// decided and recorded, the result is recorded before the host sees it,
// a cancel is recorded, and a task id the gateway did not create reaches
// no server.
func TestGatewayParityTasks(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)

	want := runTasks(t, directHost(t, every...), "simulate-research-query")

	c, gw := everythingGateway(t, every, "everything.simulate-research-query", "")
	got := runTasks(t, gw.taskHost(), "everything__simulate-research-query")

	for _, r := range []*taskRun{&want, &got} {
		if r.caps == "null" || r.execution != `{"taskSupport":"required"}` || r.created != "working" || !r.listed ||
			r.cancelled != "cancelled" || r.afterCancel != "cancelled" || r.unknownCode != -32602 {
			t.Errorf("a task session went wrong: %+v", *r)
		}
		if !strings.Contains(r.result, "Research Report: python (snake)") {
			t.Errorf("the elicited clarification did not reach the task: %.200q", r.result)
		}
	}
	for _, d := range []struct {
		what      string
		got, want any
	}{
		{"tasks capability", got.caps, want.caps},
		{"taskSupport", got.execution, want.execution},
		{"result", got.result, want.result},
		{"server requests", fmt.Sprint(got.asked), fmt.Sprint(want.asked)},
		{"statuses", fmt.Sprint(got.statuses), fmt.Sprint(want.statuses)},
		{"call without task", got.withoutTask, want.withoutTask},
	} {
		if fmt.Sprint(d.got) != fmt.Sprint(d.want) {
			t.Errorf("%s through the gateway = %v, directly %v", d.what, d.got, d.want)
		}
	}
	gw.finish(30 * time.Second)

	evs, _ := c.events()
	outcomes := payloads(evs, "call.outcome")
	results := payloads(evs, "task.result")
	if len(results) != 1 || results[0]["task_id"] != got.taskID || results[0]["call_id"] == nil || results[0]["result_digest"] == nil {
		t.Errorf("task.result events %v, want one for %s", results, got.taskID)
	}
	var cancels []map[string]any
	for _, p := range payloads(evs, "call.cancelled") {
		if p["task_id"] == got.cancelID {
			cancels = append(cancels, p)
		}
	}
	if len(cancels) != 1 {
		t.Errorf("call.cancelled events for task %s: %v", got.cancelID, cancels)
	}
	// Three tools/call: two created tasks, one the server refused.
	if len(outcomes) != 3 {
		t.Errorf("%d call outcomes, want 3: %v", len(outcomes), outcomes)
	}
}

// A task-augmented call is under the profile like any call: one the
// profile does not allow is refused and recorded, and never reaches the
// server (no task exists); a task id from elsewhere is refused.
func TestGatewayTaskCallUnderProfile(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	c, gw := everythingGateway(t, every, "everything.echo", "")
	h := gw.taskHost()
	h.initialize()
	a := h.request("tools/call", map[string]any{"name": "everything__simulate-research-query", "arguments": map[string]any{"topic": "x"}, "task": map[string]any{"ttl": 1000}})
	if dig(a, "result", "isError") != true || dig(a, "result", "task") != nil {
		t.Fatalf("a task-augmented call the profile does not allow: %v", a)
	}
	text, _ := dig(a, "result", "content").([]any)[0].(map[string]any)["text"].(string)
	if !strings.Contains(text, "AEGIS_CAP_DENIED") {
		t.Errorf("refusal text %q", text)
	}
	ls := h.request("tasks/list", map[string]any{})
	if tasks, _ := dig(ls, "result", "tasks").([]any); len(tasks) != 0 {
		t.Errorf("tasks/list after a refused call: %v", ls)
	}
	// An allowed call with a task reaches the server with it, and the
	// server's answer (here its error: echo is no task tool) is the host's.
	e := h.request("tools/call", map[string]any{"name": "everything__echo", "arguments": map[string]any{"message": "hi"}, "task": map[string]any{"ttl": 1000}})
	if m, _ := dig(e, "error", "message").(string); dig(e, "error", "code") != -32602.0 || !strings.Contains(m, "Invalid task creation result") {
		t.Errorf("echo with a task: %v", e)
	}
	gw.finish(30 * time.Second)
	evs, _ := c.events()
	var refused int
	for _, o := range payloads(evs, "call.outcome") {
		if strings.Contains(canon(o), "not in active profile") {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d refusals recorded, want 1", refused)
	}
}

// notes returns the notifications of method the host was sent.
func (h *taskHost) notesOf(method string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, n := range h.notes {
		if n["method"] == method {
			out = append(out, n)
		}
	}
	return out
}

// Two features no reference server exercises, side by side with a server
// written at the JSON-RPC level: the host's progress on a server's request
// (a url elicitation with a progress token) reaches the server, and the
// server's notifications/elicitation/complete reaches the host.
func TestGatewayParityElicitationCompleteAndHostProgress(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	run := func(t *testing.T, h *taskHost, tool string) (string, []map[string]any) {
		h.elicit = map[string]any{"action": "accept"}
		h.before = func(req map[string]any) bool {
			token := dig(req, "params", "_meta", "progressToken")
			h.write(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{"progressToken": token, "progress": 1, "total": 2, "message": "opening the page"}})
			return true
		}
		h.initialize()
		a := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}})
		text, _ := dig(a, "result", "content").([]any)
		time.Sleep(200 * time.Millisecond)
		if len(text) == 0 {
			t.Fatalf("ask: %v", a)
		}
		return canon(text), h.notesOf("notifications/elicitation/complete")
	}
	dir := t.TempDir()
	dlog := filepath.Join(dir, "direct.log")
	wantText, wantDone := run(t, directHost(t, bin(t, "growserver"), "-log", dlog), "ask")

	c := newCLI(t)
	glog := filepath.Join(dir, "gateway.log")
	gw := c.startGateway(`version: 1
servers:
  grow:
    command: `+bin(t, "growserver")+`
    args: ["-log", "`+glog+`"]
profiles:
  p:
    allow: [grow.ask]
activation:
  default_profile: p
`, gatewayEnv(t))
	gotText, gotDone := run(t, gw.taskHost(), "grow__ask")
	gw.finish(30 * time.Second)

	if gotText != wantText || !strings.Contains(gotText, "asked: accept") {
		t.Errorf("the call's answer through the gateway = %s, directly %s", gotText, wantText)
	}
	if len(wantDone) != 1 || canon(gotDone) != canon(wantDone) {
		t.Errorf("elicitation/complete through the gateway = %v, directly %v", gotDone, wantDone)
	}
	for _, log := range []string{dlog, glog} {
		if !fileHas(log, `"progressToken":"up-1"`)() || !fileHas(log, `opening the page`)() {
			b, _ := os.ReadFile(log)
			t.Errorf("the host's progress did not reach the server (%s):\n%s", filepath.Base(log), b)
		}
	}
}

// A server that cancels its own request to the host (a question it no
// longer needs answered): the host is sent notifications/cancelled for the
// request it was asked, directly and through the gateway.
func TestGatewayParityServerCancelsItsRequest(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	run := func(t *testing.T, h *taskHost, tool string) (string, bool) {
		var askedID any
		var mu sync.Mutex
		h.before = func(req map[string]any) bool {
			mu.Lock()
			askedID = req["id"]
			mu.Unlock()
			return false // the host takes its time
		}
		h.initialize()
		a := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}})
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		cancelled := false
		for _, n := range h.notesOf("notifications/cancelled") {
			if askedID != nil && fmt.Sprint(dig(n, "params", "requestId")) == fmt.Sprint(askedID) {
				cancelled = true
			}
		}
		return canon(dig(a, "result", "content")), cancelled
	}
	wantText, wantCancelled := run(t, directHost(t, bin(t, "growserver")), "withdraw")

	c := newCLI(t)
	gw := c.startGateway(`version: 1
servers:
  grow:
    command: `+bin(t, "growserver")+`
profiles:
  p:
    allow: [grow.withdraw]
activation:
  default_profile: p
`, gatewayEnv(t))
	gotText, gotCancelled := run(t, gw.taskHost(), "grow__withdraw")
	gw.finish(30 * time.Second)
	if !wantCancelled || gotCancelled != wantCancelled || gotText != wantText {
		t.Errorf("through the gateway: %s, host told of the cancellation %v; directly: %s, %v", gotText, gotCancelled, wantText, wantCancelled)
	}
}

// The servers are told the host's capabilities, so a server offers through
// the gateway what it offers the host directly: server-everything lists
// trigger-sampling-request, trigger-elicitation-request and get-roots-list
// only to a client that can take them.
func TestGatewayServersSeeTheHostsCapabilities(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	names := func(h *taskHost, caps map[string]any, strip string) string {
		a := h.request("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": caps,
			"clientInfo": map[string]any{"name": "caps-test", "version": "1"}})
		if dig(a, "result") == nil {
			t.Fatalf("initialize: %v", a)
		}
		h.write(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
		time.Sleep(500 * time.Millisecond) // the conditional tools come with initialized
		list := h.request("tools/list", map[string]any{})
		tools, _ := dig(list, "result", "tools").([]any)
		var out []string
		for _, x := range tools {
			n, _ := x.(map[string]any)["name"].(string)
			if strings.HasPrefix(n, "aegis__") {
				continue
			}
			out = append(out, strings.TrimPrefix(n, strip))
		}
		slices.Sort(out) // the gateway lists in name order
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		name string
		caps map[string]any
		has  []string
		not  []string
	}{
		{"a host without sampling, elicitation or roots is offered none of their tools",
			map[string]any{}, nil, []string{"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"}},
		{"a host with them is offered them",
			map[string]any{"sampling": map[string]any{}, "roots": map[string]any{"listChanged": true}, "elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}}},
			[]string{"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := names(directHost(t, every...), tc.caps, "")

			_, gw := everythingGateway(t, every, "everything.*", "")
			got := names(gw.taskHost(), tc.caps, "everything__")
			gw.finish(30 * time.Second)
			if got != want {
				t.Errorf("tools through the gateway:\n%s\ndirectly:\n%s", got, want)
			}
			for _, n := range tc.has {
				if !strings.Contains(" "+got+" ", " "+n+" ") {
					t.Errorf("%s is not offered: %s", n, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(" "+got+" ", " "+n+" ") {
					t.Errorf("%s is offered: %s", n, got)
				}
			}
		})
	}
}

// taskHost is a taskHost on g, which reads g's stdout from now on.
func (g *gwProc) taskHost() *taskHost {
	g.outTaken = true
	return newTaskHost(g.t, g.in, g.out)
}

// A tasks/result in flight when the host leaves has the grace, as a call
// does; after it the server is sent notifications/cancelled for it, and
// task.result records that it was cut short, not a result.
func TestGatewayTaskResultInFlightWhenTheHostLeaves(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	c, gw := everythingGateway(t, every, "everything.simulate-research-query", "")
	h := gw.taskHost()
	h.initialize()
	a := h.request("tools/call", map[string]any{"name": "everything__simulate-research-query", "arguments": map[string]any{"topic": "go"}, "task": map[string]any{"ttl": 60000}})
	id, _ := dig(a, "result", "task", "taskId").(string)
	if id == "" {
		t.Fatalf("no task: %v", a)
	}
	// The research takes 4 s; the grace is 2 s.
	h.write(map[string]any{"jsonrpc": "2.0", "id": 99, "method": "tasks/result", "params": map[string]any{"taskId": id}})
	time.Sleep(300 * time.Millisecond)
	gw.finish(30 * time.Second)
	evs, _ := c.events()
	rs := payloads(evs, "task.result")
	if len(rs) != 1 || rs[0]["task_id"] != id || rs[0]["result_digest"] != nil || !strings.Contains(fmt.Sprint(rs[0]["error"]), "grace") {
		t.Errorf("task.result = %v, want one saying the grace ran out", rs)
	}
}

// A host that runs sampling as a task, for a server that asks it to
// (server-everything's trigger-sampling-request-async): the server is told
// the host's tasks capability, its task-augmented sampling reaches the
// host, and its tasks/get and tasks/result polls reach the host and come
// back, directly and through the gateway alike.
func TestGatewayParityHostRunsSamplingAsATask(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	caps := map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{"form": map[string]any{}},
		"tasks": map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": map[string]any{
			"sampling": map[string]any{"createMessage": map[string]any{}}, "elicitation": map[string]any{"create": map[string]any{}}}}}
	task := map[string]any{"taskId": "host-task-1", "status": "working", "ttl": 60000, "createdAt": "2026-01-01T00:00:00Z",
		"lastUpdatedAt": "2026-01-01T00:00:00Z", "pollInterval": 100}
	run := func(t *testing.T, h *taskHost, tool string) (string, string) {
		var mu sync.Mutex
		var sampled []string // what the host was asked, with the task
		h.before = func(req map[string]any) bool {
			method, _ := req["method"].(string)
			mu.Lock()
			sampled = append(sampled, method+" task="+canon(dig(req, "params", "task")))
			mu.Unlock()
			var res any
			switch method {
			case "sampling/createMessage":
				res = map[string]any{"task": task}
			case "tasks/get":
				done := maps.Clone(task)
				done["status"] = "completed"
				res = done
			case "tasks/result":
				res = map[string]any{"role": "assistant", "content": map[string]any{"type": "text", "text": "sampled as a task"}, "model": "test-model"}
			default:
				return true
			}
			h.write(map[string]any{"jsonrpc": "2.0", "id": req["id"], "result": res})
			return false
		}
		h.initializeWith(caps)
		time.Sleep(500 * time.Millisecond) // the conditional tools come with initialized
		a := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"prompt": "hello"}})
		text, _ := dig(a, "result", "content").([]any)
		if len(text) == 0 {
			t.Fatalf("%s: %v", tool, a)
		}
		mu.Lock()
		defer mu.Unlock()
		return text[0].(map[string]any)["text"].(string), strings.Join(sampled, "; ")
	}
	wantText, wantAsked := run(t, directHost(t, every...), "trigger-sampling-request-async")

	_, gw := everythingGateway(t, every, "everything.trigger-sampling-request-async, grow.peek", "  grow:\n    command: "+bin(t, "growserver")+"\n")
	h := gw.taskHost()
	gotText, gotAsked := run(t, h, "everything__trigger-sampling-request-async")
	// Another server asking the host about that task is refused at the
	// gateway; the host is never asked.
	peek := h.request("tools/call", map[string]any{"name": "grow__peek", "arguments": map[string]any{}})
	if s := canon(dig(peek, "result", "content")); !strings.Contains(s, "-32602") || !strings.Contains(s, "unknown task") {
		t.Errorf("another server's tasks/get of the task: %v", peek)
	}
	h.mu.Lock()
	if n := len(h.asked); n != 3 {
		t.Errorf("the host was asked %d requests, want 3: %v", n, h.asked)
	}
	h.mu.Unlock()
	gw.finish(30 * time.Second)
	if !strings.Contains(wantText, "[COMPLETED]") || !strings.Contains(wantText, "sampled as a task") {
		t.Fatalf("directly, the async sampling did not complete: %s", wantText)
	}
	if gotText != wantText || gotAsked != wantAsked {
		t.Errorf("through the gateway:\n%s\nasked: %s\ndirectly:\n%s\nasked: %s", gotText, gotAsked, wantText, wantAsked)
	}
}

// The same task session through the official TypeScript SDK's client, as
// hosts built on it run it, directly and through the gateway: the client
// decides to call the tool as a task from its execution.taskSupport, and
// only when the server announced tasks for tools/call, so it checks what
// the gateway adds to what the go-sdk writes.
func TestGatewayParityTasksTypeScriptClient(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	node, sdk := mcptest.TypeScriptSDK(t)
	script, err := filepath.Abs(filepath.Join("testdata", "tsclient", "tasks.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(env []string, prefix string, server ...string) map[string]any {
		t.Helper()
		cmd := exec.Command(node, append([]string{script, prefix}, server...)...)
		cmd.Env = append(env, "MCP_SDK_DIR="+sdk)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, stderr)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s printed %q: %v\n%s", script, out, err, stderr)
		}
		return m
	}
	want := run(os.Environ(), "", every...)

	c := newCLI(t)
	config := filepath.Join(c.dir, "aegis.yaml")
	if err := os.WriteFile(config, []byte(`version: 1
servers:
  everything:
    command: `+every[0]+`
    args: `+quoteArgs(every[1:])+`
profiles:
  p:
    allow: [everything.simulate-research-query]
activation:
  default_profile: p
`), 0o600); err != nil {
		t.Fatal(err)
	}
	got := run(gatewayEnv(t), "everything__", bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)

	for _, m := range []map[string]any{want, got} {
		if m["error"] != nil || !strings.Contains(fmt.Sprint(m["result"]), "Research Report: python (snake)") || m["final"] != "completed" ||
			m["listed"] != true || m["cancelled"] != "cancelled" || m["afterCancel"] != "cancelled" ||
			!strings.Contains(fmt.Sprint(m["statuses"]), "input_required") {
			t.Errorf("a task session through the TypeScript client went wrong: %v", m)
		}
	}
	for _, k := range []string{"tasks", "execution", "result", "asked", "final", "listed", "cancelled", "afterCancel", "error"} {
		if canon(got[k]) != canon(want[k]) {
			t.Errorf("%s through the gateway = %s, directly %s", k, canon(got[k]), canon(want[k]))
		}
	}
	evs, _ := c.events()
	if rs := payloads(evs, "task.result"); len(rs) != 1 {
		t.Errorf("task.result events: %v", rs)
	}
}

// directHost starts the server argv and returns a taskHost connected to it
// directly, for the side of a comparison without aegis.
func directHost(t *testing.T, argv ...string) *taskHost {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	in, out := startPiped(t, cmd)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return newTaskHost(t, in, out)
}

// everythingGateway starts aegis gateway in front of server-everything
// (argv every) and the extra servers (YAML entries), with one profile that
// allows allow; aegis runs with flags.
func everythingGateway(t *testing.T, every []string, allow, extra string, flags ...string) (*cli, *gwProc) {
	t.Helper()
	c := newCLI(t)
	gw := c.startGateway(`version: 1
servers:
  everything:
    command: `+every[0]+`
    args: `+quoteArgs(every[1:])+`
`+extra+`profiles:
  p:
    allow: [`+allow+`]
activation:
  default_profile: p
`, gatewayEnv(t), flags...)
	return c, gw
}
