// Command growserver is a test fixture: an MCP server over stdio, written
// at the JSON-RPC level so that it can do what an SDK server cannot, whose
// tool list grows at run time.
//
// It starts with the tools grow and hang. A call of grow adds the tool
// fresh and a second tool named grow with another description (a shadow
// of the first), sends notifications/tools/list_changed, then answers.
// A call of fresh answers "fresh"; a call of hang is never answered. A
// call of ask asks the client for a url elicitation (elicitationId "e1",
// progress token "up-1"), and once answered sends
// notifications/elicitation/complete for it, then answers with the
// client's action. A call of withdraw asks the client for a form
// elicitation (id "g-2"), cancels that request 300 ms later with
// notifications/cancelled, and answers "withdrawn". A call of peek asks
// the client for the task host-task-1 (tasks/get) and answers with the
// client's answer as it came. Every line it receives is appended to
// the file named by -log, so a test can tell what reached the server (a
// notifications/cancelled, say). With -reads it also has the prompt ask
// (argument topic) and the resource grow://asked, whose prompts/get and
// resources/read each ask the client for a sample (sampling/createMessage)
// and answer with its text. It exits at stdin EOF.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"sync"
	"time"
)

type tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

func main() {
	logPath := flag.String("log", "", "append every line received to this file")
	reads := flag.Bool("reads", false, "serve the prompt ask and the resource grow://asked, which ask for a sample")
	flag.Parse()
	var logf *os.File
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			os.Exit(2)
		}
		logf = f
	}
	obj := map[string]any{"type": "object"}
	tools := []tool{
		{Name: "grow", Description: "Add the tool fresh, and a second grow.", InputSchema: obj},
		{Name: "hang", Description: "Never answer.", InputSchema: obj},
		{Name: "ask", Description: "Ask the client for a url elicitation.", InputSchema: obj},
		{Name: "withdraw", Description: "Ask the client, then cancel the question.", InputSchema: obj},
		{Name: "peek", Description: "Ask the client for the task host-task-1.", InputSchema: obj},
	}
	asked := make(chan json.RawMessage, 1) // the client's answer to the elicitation
	peeked := make(chan []byte, 1)         // the client's answer to tasks/get
	sampled := make(chan string, 1)        // the text of the client's sample
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	send := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		out.Encode(v)
	}
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
				URI             string          `json:"uri"`
				Arguments       json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 {
			continue // a notification, or not JSON
		}
		if req.Method == "" {
			switch string(req.ID) {
			case `"g-1"`:
				var a struct {
					Result json.RawMessage `json:"result"`
				}
				json.Unmarshal(line, &a)
				asked <- a.Result
			case `"g-3"`:
				peeked <- append([]byte(nil), line...)
			case `"g-4"`, `"g-5"`:
				var a struct {
					Result struct {
						Content struct {
							Text string `json:"text"`
						} `json:"content"`
					} `json:"result"`
				}
				json.Unmarshal(line, &a)
				sampled <- a.Result.Content.Text
			}
			continue
		}
		answer := func(result any) {
			send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
		}
		switch req.Method {
		case "initialize":
			caps := map[string]any{"tools": map[string]any{"listChanged": true}}
			if *reads {
				caps["prompts"], caps["resources"] = map[string]any{}, map[string]any{}
			}
			answer(map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": caps,
				"serverInfo": map[string]any{"name": "growserver", "version": "1"}})
		case "prompts/list":
			answer(map[string]any{"prompts": []any{map[string]any{"name": "ask", "description": "Ask the client for a sample.",
				"arguments": []any{map[string]any{"name": "topic"}}}}})
		case "resources/list":
			answer(map[string]any{"resources": []any{map[string]any{"uri": "grow://asked", "name": "asked"}}})
		case "resources/templates/list":
			answer(map[string]any{"resourceTemplates": []any{}})
		case "prompts/get", "resources/read":
			id := append(json.RawMessage(nil), req.ID...)
			var args struct {
				Topic string `json:"topic"`
			}
			json.Unmarshal(req.Params.Arguments, &args)
			method, topic := req.Method, args.Topic
			go func() {
				ask, text := "g-4", "a word on "+topic
				if method == "resources/read" {
					ask, text = "g-5", "a word to read"
				}
				send(map[string]any{"jsonrpc": "2.0", "id": ask, "method": "sampling/createMessage", "params": map[string]any{
					"maxTokens": 20, "messages": []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": text}}}}})
				got := <-sampled
				if method == "prompts/get" {
					send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"messages": []any{map[string]any{"role": "user",
						"content": map[string]any{"type": "text", "text": "on " + topic + ": " + got}}}}})
					return
				}
				send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"contents": []any{map[string]any{"uri": "grow://asked",
					"mimeType": "text/plain", "text": "read: " + got}}}})
			}()
		case "tools/list":
			mu.Lock()
			list := append([]tool(nil), tools...)
			mu.Unlock()
			answer(map[string]any{"tools": list})
		case "tools/call":
			switch req.Params.Name {
			case "hang":
			case "peek":
				id := append(json.RawMessage(nil), req.ID...)
				go func() {
					send(map[string]any{"jsonrpc": "2.0", "id": "g-3", "method": "tasks/get", "params": map[string]any{"taskId": "host-task-1"}})
					answer := <-peeked
					send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"content": []any{map[string]any{"type": "text", "text": string(answer)}}}})
				}()
			case "withdraw":
				id := append(json.RawMessage(nil), req.ID...)
				go func() {
					send(map[string]any{"jsonrpc": "2.0", "id": "g-2", "method": "elicitation/create", "params": map[string]any{
						"message": "still there?", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{}}}})
					time.Sleep(300 * time.Millisecond)
					send(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{"requestId": "g-2", "reason": "no longer needed"}})
					send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "withdrawn"}}}})
				}()
			case "ask":
				id := append(json.RawMessage(nil), req.ID...) // the scanner reuses line
				go func() {
					send(map[string]any{"jsonrpc": "2.0", "id": "g-1", "method": "elicitation/create", "params": map[string]any{
						"mode": "url", "elicitationId": "e1", "url": "https://example.com/consent", "message": "consent, please",
						"_meta": map[string]any{"progressToken": "up-1"}}})
					var r struct {
						Action string `json:"action"`
					}
					json.Unmarshal(<-asked, &r)
					send(map[string]any{"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": map[string]any{"elicitationId": "e1"}})
					send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "asked: " + r.Action}}}})
				}()
			case "fresh":
				answer(map[string]any{"content": []any{map[string]any{"type": "text", "text": "fresh"}}})
			case "grow":
				mu.Lock()
				tools = append(tools,
					tool{Name: "fresh", Description: "A tool added at run time.", InputSchema: obj},
					tool{Name: "grow", Description: "A shadow of grow.", InputSchema: obj})
				mu.Unlock()
				send(map[string]any{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
				answer(map[string]any{"content": []any{map[string]any{"type": "text", "text": "grown"}}})
			default:
				send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32602, "message": "unknown tool"}})
			}
		case "ping":
			answer(map[string]any{})
		default:
			send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		}
	}
}
