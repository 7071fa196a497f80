package proxy_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// linesWith returns the lines of the file at path that hold every one of
// parts.
func linesWith(t *testing.T, path string, parts ...string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		all := l != ""
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

var gatewayTaskID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Two servers that both call their task "t1" (attack: the second server
// receives the first's tasks/result and tasks/cancel, and its forged
// result reaches the host as the first's). Through the gateway the host
// sees two tasks under two ids of the gateway's own: each request about
// one reaches only the server that created it, under that server's id;
// each answer, status and related-task _meta names the task by the
// gateway's id; each result is recorded with both ids; and "t1" itself is
// no task the host can name.
func TestTaskIDCollisionAcrossServersCannotCrossDeliver(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	dir := t.TempDir()
	alog, blog := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	c := newCLI(t)
	gw := c.startGateway(`version: 1
servers:
  a:
    command: `+bin(t, "taskserver")+`
    args: ["-name", "a", "-log", "`+alog+`"]
  b:
    command: `+bin(t, "taskserver")+`
    args: ["-name", "b", "-log", "`+blog+`"]
profiles:
  p:
    allow: [a.work, b.work]
activation:
  default_profile: p
`, gatewayEnv(t))
	h := gw.taskHost()
	var mu sync.Mutex
	var elicitMeta []any // the related-task of each elicitation the host was asked
	h.before = func(req map[string]any) bool {
		mu.Lock()
		defer mu.Unlock()
		elicitMeta = append(elicitMeta, dig(req, "params", "_meta", "io.modelcontextprotocol/related-task", "taskId"))
		return true
	}
	h.elicit = map[string]any{"action": "accept", "content": map[string]any{}}
	init := h.initialize()
	if dig(init, "result", "capabilities", "tasks", "requests", "tools", "call") == nil {
		t.Fatalf("the tasks capability is not announced: %v", init)
	}
	create := func(tool string) string {
		a := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}})
		id, _ := dig(a, "result", "task", "taskId").(string)
		if !gatewayTaskID.MatchString(id) {
			t.Fatalf("%s as a task: %v, want a task id of the gateway's", tool, a)
		}
		return id
	}
	ta, tb := create("a__work"), create("b__work")
	if ta == tb {
		t.Fatalf("both servers' task t1 is %s to the host", ta)
	}
	text := func(res map[string]any) string {
		content, _ := dig(res, "result", "content").([]any)
		if len(content) == 0 {
			return ""
		}
		s, _ := content[0].(map[string]any)["text"].(string)
		return s
	}

	// A's task: its result, then its cancel, reach A only.
	ra := h.request("tasks/result", map[string]any{"taskId": ta})
	if text(ra) != "result of a" || dig(ra, "result", "_meta", "io.modelcontextprotocol/related-task", "taskId") != ta {
		t.Errorf("tasks/result of A's task %s: %v", ta, ra)
	}
	ca := h.request("tasks/cancel", map[string]any{"taskId": ta})
	if dig(ca, "result", "status") != "cancelled" || dig(ca, "result", "taskId") != ta {
		t.Errorf("tasks/cancel of A's task: %v", ca)
	}
	if got := linesWith(t, blog, `"tasks/`); len(got) != 0 {
		t.Errorf("server b was sent requests about a's task: %q", got)
	}
	for _, m := range []string{"tasks/result", "tasks/cancel"} {
		if got := linesWith(t, alog, `"method":"`+m+`"`, `"taskId":"t1"`); len(got) != 1 {
			t.Errorf("server a got %d %s of its own task t1, want 1", len(got), m)
		}
	}
	// B's task is B's: not cancelled, its own result.
	gb := h.request("tasks/get", map[string]any{"taskId": tb})
	if dig(gb, "result", "status") != "completed" || dig(gb, "result", "taskId") != tb {
		t.Errorf("tasks/get of B's task after A's was cancelled: %v", gb)
	}
	if rb := h.request("tasks/result", map[string]any{"taskId": tb}); text(rb) != "result of b" {
		t.Errorf("tasks/result of B's task: %v", rb)
	}
	// The servers' own id names no task of the host's, and reaches no
	// server.
	before := len(linesWith(t, alog, `"tasks/get"`)) + len(linesWith(t, blog, `"tasks/get"`))
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		u := h.request(m, map[string]any{"taskId": "t1"})
		if dig(u, "error", "code") != -32602.0 {
			t.Errorf("%s of t1: %v, want -32602", m, u)
		}
	}
	if got := append(linesWith(t, alog, `"tasks/get"`), linesWith(t, blog, `"tasks/get"`)...); len(got) != before {
		t.Errorf("a tasks/get of t1 reached a server: %q", got)
	}
	// A host's related-task _meta reaches the task's server as its own id,
	// and no other server, on the gateway's own path (a plain call) and
	// through the SDK (a call with a null task) alike.
	for i, extra := range []map[string]any{{}, {"task": nil}} {
		for _, server := range []string{"a", "b"} {
			params := map[string]any{"name": server + "__work", "arguments": map[string]any{"n": i},
				"_meta": map[string]any{"io.modelcontextprotocol/related-task": map[string]any{"taskId": ta}}}
			maps.Copy(params, extra)
			h.request("tools/call", params)
		}
		a := linesWith(t, alog, `"tools/call"`, `"n":`+fmt.Sprint(i))
		b := linesWith(t, blog, `"tools/call"`, `"n":`+fmt.Sprint(i))
		if len(a) != 1 || !strings.Contains(a[0], `"io.modelcontextprotocol/related-task":{"taskId":"t1"}`) || len(b) != 1 || strings.Contains(b[0], "related-task") {
			t.Errorf("the host's related task %s reached a as %q and b as %q", ta, a, b)
		}
	}
	ls := h.request("tasks/list", map[string]any{})
	listed := map[any]any{}
	for _, x := range dig(ls, "result", "tasks").([]any) {
		listed[dig(x.(map[string]any), "taskId")] = dig(x.(map[string]any), "status")
	}
	if len(listed) != 2 || listed[ta] != "cancelled" || listed[tb] != "completed" {
		t.Errorf("tasks/list = %v, want %s cancelled and %s completed", ls, ta, tb)
	}

	time.Sleep(200 * time.Millisecond) // the last statuses
	for id, server := range map[string]string{ta: "a", tb: "b"} {
		var msgs []string
		for _, n := range h.notesOf("notifications/tasks/status") {
			if dig(n, "params", "taskId") == id {
				msgs = append(msgs, dig(n, "params", "statusMessage").(string))
			}
		}
		if strings.Join(msgs, ", ") != server+" started, "+server+" done" {
			t.Errorf("statuses of %s's task %s: %q", server, id, msgs)
		}
	}
	for _, n := range h.notesOf("notifications/tasks/status") {
		if id := dig(n, "params", "taskId"); id != ta && id != tb {
			t.Errorf("a status under the server's id reached the host: %v", n)
		}
	}
	mu.Lock()
	if len(elicitMeta) != 2 || elicitMeta[0] != ta || elicitMeta[1] != tb {
		t.Errorf("the elicitations' related tasks = %v, want [%s %s]", elicitMeta, ta, tb)
	}
	mu.Unlock()
	gw.finish(30 * time.Second)

	evs, _ := c.events()
	results := map[string]map[string]any{}
	for _, p := range payloads(evs, "task.result") {
		results[p["server"].(string)] = p
	}
	for server, id := range map[string]string{"a": ta, "b": tb} {
		if p := results[server]; p == nil || p["task_id"] != id || p["server_task_id"] != "t1" || p["result_digest"] == nil {
			t.Errorf("task.result of %s = %v, want task_id %s and server_task_id t1", server, p, id)
		}
	}
	var cancels []map[string]any
	for _, p := range payloads(evs, "call.cancelled") {
		if p["task_id"] != nil {
			cancels = append(cancels, p)
		}
	}
	if len(cancels) != 1 || cancels[0]["task_id"] != ta || cancels[0]["server_task_id"] != "t1" || cancels[0]["server"] != "a" {
		t.Errorf("call.cancelled of tasks: %v, want one for a's %s", cancels, ta)
	}
}

// The other direction: the host runs sampling as a task for two servers
// and (wrongly) gives both the task id host-task-1. The task stays the
// first server's: the second is refused the id, so it can never poll or
// read the first's task, and the host is asked nothing for it after.
func TestHostTaskIDGivenToTwoServersStaysTheFirsts(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	caps := map[string]any{"sampling": map[string]any{}, "tasks": map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
		"requests": map[string]any{"sampling": map[string]any{"createMessage": map[string]any{}}}}}
	task := map[string]any{"taskId": "host-task-1", "status": "working", "ttl": 60000, "createdAt": "2026-01-01T00:00:00Z",
		"lastUpdatedAt": "2026-01-01T00:00:00Z", "pollInterval": 100}
	c := newCLI(t)
	gw := c.startGateway(`version: 1
servers:
  e1:
    command: `+every[0]+`
    args: `+quoteArgs(every[1:])+`
  e2:
    command: `+every[0]+`
    args: `+quoteArgs(every[1:])+`
profiles:
  p:
    allow: [e1.trigger-sampling-request-async, e2.trigger-sampling-request-async]
activation:
  default_profile: p
`, gatewayEnv(t))
	h := gw.taskHost()
	var mu sync.Mutex
	var asked []string
	h.before = func(req map[string]any) bool {
		method, _ := req["method"].(string)
		mu.Lock()
		asked = append(asked, method)
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
	text := func(tool string) string {
		a := h.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"prompt": "hello"}})
		return canon(dig(a, "result", "content"))
	}
	if got := text("e1__trigger-sampling-request-async"); !strings.Contains(got, "sampled as a task") {
		t.Fatalf("the first server's sampling task: %s", got)
	}
	if got := text("e2__trigger-sampling-request-async"); strings.Contains(got, "sampled as a task") || !strings.Contains(got, "created for another server") {
		t.Errorf("the second server given the first's task id: %s", got)
	}
	gw.finish(30 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(asked, " ") != "sampling/createMessage tasks/get tasks/result sampling/createMessage" {
		t.Errorf("the host was asked %v", asked)
	}
}
