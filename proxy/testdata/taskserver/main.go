// Command taskserver is a test fixture: an MCP server over stdio, written
// at the JSON-RPC level, that runs its one tool, work, as a task, and
// gives every task the same id (-id, "t1" by default), as two servers
// that each count their own tasks would.
//
// A task-augmented call of work is answered with a CreateTaskResult; a
// status "working" is sent before that answer and a status "completed"
// after it, each with a statusMessage naming the server (-name). tasks/get
// and tasks/cancel answer with the task as it is (a cancelled task stays
// cancelled); tasks/list lists the tasks; tasks/result first asks the
// client for a form elicitation that belongs to the task (related-task
// _meta), then answers "result of NAME" with the task in its related-task
// _meta. A task id it did not give is refused with -32602. Every line it
// receives is appended to the file named by -log, so a test can tell what
// reached the server. With -dup its CreateTaskResult names the task twice
// (taskId given twice, -id then "t2"), a frame JSON readers read
// differently. It exits at stdin EOF.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"sync"
)

const related = "io.modelcontextprotocol/related-task"

func main() {
	name := flag.String("name", "taskserver", "the name its results and statuses carry")
	taskID := flag.String("id", "t1", "the id of every task it creates")
	logPath := flag.String("log", "", "append every line received to this file")
	dup := flag.Bool("dup", false, "name the created task twice in the CreateTaskResult")
	flag.Parse()
	var logf *os.File
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			os.Exit(2)
		}
		logf = f
	}
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	send := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		out.Encode(v)
	}
	status := "" // of the task; "": none created
	task := func() map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return map[string]any{"taskId": *taskID, "status": status, "ttl": 60000, "pollInterval": 100,
			"createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"}
	}
	setStatus := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		status = s
	}
	elicited := make(chan struct{}, 1)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		if logf != nil {
			logf.Write(append(append([]byte(nil), line...), '\n'))
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string          `json:"protocolVersion"`
				Name            string          `json:"name"`
				TaskID          string          `json:"taskId"`
				Task            json.RawMessage `json:"task"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 {
			continue // a notification, or not JSON
		}
		id := append(json.RawMessage(nil), req.ID...) // the scanner reuses line
		answer := func(result any) {
			send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
		}
		fail := func(code int, msg string) {
			send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
		}
		if req.Method == "" {
			if string(req.ID) == `"ts-1"` {
				elicited <- struct{}{}
			}
			continue
		}
		mu.Lock()
		known := status != "" && req.Params.TaskID == *taskID
		mu.Unlock()
		switch req.Method {
		case "initialize":
			answer(map[string]any{"protocolVersion": req.Params.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{}, "tasks": map[string]any{
					"list": map[string]any{}, "cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}},
				"serverInfo": map[string]any{"name": "taskserver", "version": "1"}})
		case "tools/list":
			answer(map[string]any{"tools": []any{map[string]any{"name": "work", "description": "Work as a task.",
				"inputSchema": map[string]any{"type": "object"}, "execution": map[string]any{"taskSupport": "optional"}}}})
		case "tools/call":
			if req.Params.Name != "work" || len(req.Params.Task) == 0 {
				fail(-32602, "call work as a task")
				continue
			}
			setStatus("working")
			send(map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": merge(task(), "statusMessage", *name+" started")})
			if *dup {
				mu.Lock()
				os.Stdout.Write([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"task":{"taskId":"` + *taskID + `","taskId":"t2","status":"working","ttl":60000,"createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z"}}}` + "\n"))
				mu.Unlock()
			} else {
				answer(map[string]any{"task": task()})
			}
			setStatus("completed")
			send(map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": merge(task(), "statusMessage", *name+" done")})
		case "tasks/get":
			if !known {
				fail(-32602, "no task "+req.Params.TaskID)
				continue
			}
			answer(task())
		case "tasks/cancel":
			if !known {
				fail(-32602, "no task "+req.Params.TaskID)
				continue
			}
			setStatus("cancelled")
			answer(task())
		case "tasks/list":
			var tasks []any
			mu.Lock()
			created := status != ""
			mu.Unlock()
			if created {
				tasks = append(tasks, task())
			}
			answer(map[string]any{"tasks": tasks})
		case "tasks/result":
			if !known {
				fail(-32602, "no task "+req.Params.TaskID)
				continue
			}
			go func() {
				send(map[string]any{"jsonrpc": "2.0", "id": "ts-1", "method": "elicitation/create", "params": map[string]any{
					"message": *name + " asks", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{}},
					"_meta": map[string]any{related: map[string]any{"taskId": *taskID}}}})
				<-elicited
				answer(map[string]any{"content": []any{map[string]any{"type": "text", "text": "result of " + *name}},
					"_meta": map[string]any{related: map[string]any{"taskId": *taskID}}})
			}()
		case "ping":
			answer(map[string]any{})
		default:
			fail(-32601, "method not found")
		}
	}
}

func merge(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}
