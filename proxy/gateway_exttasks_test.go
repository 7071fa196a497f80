package proxy_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// meta2026 is the per-request _meta of a 2026-07-28 host that declares
// form elicitation, and the tasks extension when tasks is set.
func meta2026(tasks bool) map[string]any {
	caps := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
	if tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	return map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps,
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "ext-tasks-test", "version": "1"}}
}

// A host of MCP 2026-07-28 that declares the tasks extension gets the
// 2025-11-25 task of a server as the extension's task: the gateway
// announces the extension in server/discover, a call of a tool that runs
// as a task answers resultType "task" under the gateway's id, the
// server's elicitation while the task works is the task's inputRequests
// in tasks/get and the host's tasks/update answers it, and tasks/get
// shows the result inline once it is recorded. tasks/cancel reaches the
// server, an unknown task is refused, and a host that does not declare
// the extension gets no task. A task still working when the host leaves
// is waited for as a call in flight is, for the grace, then recorded as
// cut short. Each step is recorded.
func TestGatewayTasksExtensionForA2026Host(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	c, gw := everythingGateway(t, every, "everything.simulate-research-query, everything.echo", "", "--protocol", "2026-07-28")
	h := gw.taskHost()
	h.elicit = map[string]any{"action": "accept", "content": map[string]any{"interpretation": "snake"}}
	req := func(method string, params map[string]any, tasks bool) map[string]any {
		t.Helper()
		params["_meta"] = meta2026(tasks)
		return h.request(method, params)
	}
	d := req("server/discover", map[string]any{}, true)
	if dig(d, "result", "capabilities", "extensions", "io.modelcontextprotocol/tasks") == nil {
		t.Fatalf("server/discover does not announce the tasks extension: %v", d)
	}
	def := toolNamed(req("tools/list", map[string]any{}, true), "everything__simulate-research-query")
	if fmt.Sprint(dig(def, "execution", "taskSupport")) != "required" {
		t.Fatalf("the research tool's execution: %v", def)
	}

	research := func(topic string, ambiguous bool) string {
		t.Helper()
		a := req("tools/call", map[string]any{"name": "everything__simulate-research-query", "arguments": map[string]any{"topic": topic, "ambiguous": ambiguous}}, true)
		id, _ := dig(a, "result", "taskId").(string)
		if dig(a, "result", "resultType") != "task" || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) || dig(a, "result", "status") != "working" ||
			dig(a, "result", "createdAt") == nil || dig(a, "result", "task") != nil {
			t.Fatalf("the extension's CreateTaskResult: %v", a)
		}
		return id
	}
	until := func(id string, want func(map[string]any) bool) map[string]any {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			g := req("tasks/get", map[string]any{"taskId": id}, true)
			if dig(g, "result", "resultType") != "complete" || dig(g, "result", "taskId") != id {
				t.Fatalf("tasks/get: %v", g)
			}
			if want(g) {
				return g
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s: the last tasks/get %v", id, g)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	id := research("python", true)
	g := until(id, func(g map[string]any) bool { return dig(g, "result", "status") == "input_required" })
	reqs, _ := dig(g, "result", "inputRequests").(map[string]any)
	if len(reqs) != 1 {
		t.Fatalf("input_required without one input request: %v", g)
	}
	var key string
	for k, v := range reqs {
		key = k
		if dig(v.(map[string]any), "method") != "elicitation/create" {
			t.Fatalf("the input request: %v", v)
		}
	}
	u := req("tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{key: h.elicit}}, true)
	if dig(u, "result", "resultType") != "complete" {
		t.Fatalf("tasks/update: %v", u)
	}
	g = until(id, func(g map[string]any) bool { return dig(g, "result", "status") == "completed" })
	content, _ := dig(g, "result", "result", "content").([]any)
	if len(content) == 0 || !strings.Contains(fmt.Sprint(content[0]), "Research Report: python (snake)") {
		t.Fatalf("the completed task's result: %v", g)
	}
	// Asked once through the extension: never put to the host as a
	// request of the session protocol.
	h.mu.Lock()
	asked := fmt.Sprint(h.asked)
	h.mu.Unlock()
	if asked != "[]" {
		t.Errorf("the server's requests reached the host as requests: %s", asked)
	}

	// An unknown task, and an update of it (acknowledged, as the
	// extension says, and nothing else).
	if u := req("tasks/get", map[string]any{"taskId": "no-such-task"}, true); dig(u, "error", "code") != -32602.0 {
		t.Errorf("tasks/get of an unknown task: %v", u)
	}
	if u := req("tasks/update", map[string]any{"taskId": "no-such-task", "inputResponses": map[string]any{key: h.elicit}}, true); dig(u, "result", "resultType") != "complete" {
		t.Errorf("tasks/update of an unknown task: %v", u)
	}
	// A cancelled task.
	cid := research("go", false)
	if a := req("tasks/cancel", map[string]any{"taskId": cid}, true); dig(a, "result", "resultType") != "complete" {
		t.Fatalf("tasks/cancel: %v", a)
	}
	until(cid, func(g map[string]any) bool { return dig(g, "result", "status") == "cancelled" })
	// Without the extension declared: no task.
	if a := req("tools/call", map[string]any{"name": "everything__echo", "arguments": map[string]any{"message": "hi"}}, false); dig(a, "result", "resultType") == "task" {
		t.Errorf("a task for a host that did not declare the extension: %v", a)
	}
	// A task still working when the host leaves: the gateway's wait for
	// it has the grace of a call in flight, then is cut, recorded so, and
	// the gateway ends.
	lid := research("rust", false)
	gw.finish(30 * time.Second)

	evs, _ := c.events()
	cut := false
	for _, r := range payloads(evs, "task.result") {
		cut = cut || r["task_id"] == lid && r["result_digest"] == nil && strings.Contains(fmt.Sprint(r["error"]), "cut short")
	}
	if !cut {
		t.Errorf("task.result of the task in flight when the host left: %v", payloads(evs, "task.result"))
	}
	results := payloads(evs, "task.result")
	var got []string
	for _, r := range results {
		if r["task_id"] == id && r["result_digest"] != nil {
			got = append(got, id)
		}
	}
	if len(got) != 1 {
		t.Errorf("task.result events %v, want one with a result for %s", results, id)
	}
	steps := map[string]int{}
	for _, n := range payloads(evs, "note") {
		if s, ok := n["tasks"].(string); ok && n["task_id"] == id {
			steps[s]++
		}
	}
	if steps["input_required"] != 1 || steps["update"] != 1 {
		t.Errorf("the task's rounds recorded: %v", steps)
	}
	cancels := 0
	for _, p := range payloads(evs, "call.cancelled") {
		if p["task_id"] == cid {
			cancels++
		}
	}
	if cancels != 1 {
		t.Errorf("call.cancelled events for %s: %d", cid, cancels)
	}
	for _, in := range payloads(evs, "call.intent") {
		if line, _ := in["line"].(string); !strings.Contains(line, `"protocol_version":"2026-07-28"`) {
			t.Errorf("an intent without the protocol version: %v", in)
		}
	}
}
