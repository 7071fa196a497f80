package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// A host of MCP 2026-07-28 over HTTP (gateway --listen, which offers it
// by default) is served without a session: server/discover, stateless
// calls decided and recorded as any, and server-everything's sampling
// during a call carried as the call's input_required result, which the
// go-sdk host answers by retrying; a call's progress reaches the host on
// its POST (an SSE stream), and so does a list change on the host's
// subscriptions/listen stream. A POST whose standard headers say
// another method, tool or version than its body is refused with 400
// before anything of it is served or recorded. A call that declares the
// tasks extension is its task, polled with tasks/get. A call the host
// gives up on is cancelled, and the host goes on.
func TestHTTPGatewayServesAStatelessHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen with server-everything")
	}
	l := newLive(t, "")
	every := mcptest.EverythingServer(t)
	args, _ := json.Marshal(every[1:])
	h := l.httpGateway(fmt.Sprintf("version: 1\nservers:\n  everything:\n    command: %q\n    args: %s\nprofiles:\n  all:\n    allow: [\"everything.*\"]\n    allowed_transitions: [narrow]\n  narrow:\n    allow: [everything.echo]\nactivation:\n  default_profile: all\n",
		every[0], args)) // 2026-07-28 is offered by default

	post := func(headers map[string]string, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+h.token)
		for k, v := range headers {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"everything__get-env",` + meta + `}}`
	good := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "everything__get-env"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for _, a := range []struct {
		name    string
		headers map[string]string
	}{
		{"a header naming a harmless tool over a body calling another", with("Mcp-Name", "everything__echo")},
		{"a header naming another method than the body", with("Mcp-Method", "tools/list")},
		{"no Mcp-Method", with("Mcp-Method", "")},
		{"no Mcp-Name for a tools/call", with("Mcp-Name", "")},
		{"a header naming another protocol version than _meta", with("Mcp-Protocol-Version", "2025-11-25")},
		{"no Mcp-Protocol-Version", with("Mcp-Protocol-Version", "")},
	} {
		code, body := post(a.headers, call)
		if code != http.StatusBadRequest || !strings.Contains(body, `"id":7`) {
			t.Errorf("%s: %d %s, want 400 with the request's id", a.name, code, body)
		}
		if a.headers["Mcp-Protocol-Version"] == "2026-07-28" && !strings.Contains(body, "-32020") {
			t.Errorf("%s: %s, want the header mismatch error -32020", a.name, body)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var sampled int
	progress := make(chan any, 16)
	changed := make(chan struct{}, 4)
	c := mcp.NewClient(&mcp.Implementation{Name: "stateless-host", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}},
		CreateMessageWithToolsHandler: func(context.Context, *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
			sampled++
			return &mcp.CreateMessageWithToolsResult{Model: "m", Role: "assistant", Content: []mcp.Content{&mcp.TextContent{Text: "sampled over http"}}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params.ProgressToken },
		// Makes the host open subscriptions/listen for the tools' list.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	within := func(ch any, what string) {
		t.Helper()
		var ok bool
		switch ch := ch.(type) {
		case chan any:
			select {
			case v := <-ch:
				ok = v == "http-progress"
			case <-ctx.Done():
			}
		case chan struct{}:
			select {
			case <-ch:
				ok = true
			case <-ctx.Done():
			}
		}
		if !ok {
			t.Fatalf("no %s reached the host\n%s", what, h.stderr)
		}
	}
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(h.token)}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, h.stderr)
	}
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("protocol %s, want 2026-07-28", v)
	}
	if text, _ := callText(t, cs, "everything__echo", map[string]any{"message": "stateless"}); !strings.Contains(text, "stateless") {
		t.Fatalf("echo: %s", text)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: map[string]any{"prompt": "hi", "maxTokens": 10}})
	if err != nil || sampled != 1 {
		t.Fatalf("sampling through a stateless call: %v (sampled %d)\n%s", err, sampled, h.stderr)
	}
	if b, _ := json.Marshal(res); !strings.Contains(string(b), "sampled over http") {
		t.Fatalf("sampling result: %s", b)
	}
	// The call's progress, under the host's own token, on its POST: every
	// notification, though the server writes them back to back with its
	// answer (the SDK hands the gateway the answer ahead of them; the
	// POST's stream ends with the answer).
	p := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 0, "steps": 12}}
	p.SetProgressToken("http-progress")
	if _, err := cs.CallTool(ctx, p); err != nil {
		t.Fatalf("a call with progress: %v", err)
	}
	for i := range 12 {
		within(progress, fmt.Sprintf("progress %d of 12 of the call", i+1))
	}
	// The tasks extension: a call that declares it, of a tool that runs
	// as a task, is the extension's task; tasks/get (its Mcp-Name the
	// task id) shows the result inline once the server has given it.
	const extMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`
	code, body := post(map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "everything__simulate-research-query"},
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"everything__simulate-research-query","arguments":{"topic":"go"},`+extMeta+`}}`)
	var created struct {
		Result struct{ ResultType, TaskID, Status string }
	}
	if json.Unmarshal([]byte(sseData(body)), &created); code != http.StatusOK || created.Result.ResultType != "task" || created.Result.TaskID == "" || created.Result.Status != "working" {
		t.Fatalf("a call of the tasks extension over HTTP: %d %s", code, body)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, body = post(map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get", "Mcp-Name": created.Result.TaskID},
			`{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":{"taskId":"`+created.Result.TaskID+`",`+extMeta+`}}`)
		var got struct {
			Result struct {
				ResultType, TaskID, Status string
				Result                     json.RawMessage
			}
		}
		json.Unmarshal([]byte(sseData(body)), &got)
		if code != http.StatusOK || got.Result.ResultType != "complete" || got.Result.TaskID != created.Result.TaskID {
			t.Fatalf("tasks/get over HTTP: %d %s", code, body)
		}
		if got.Result.Status == "completed" {
			if !strings.Contains(string(got.Result.Result), "Research Report: go") {
				t.Fatalf("the task's result: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not complete: %s", body)
		}
	}
	// A call the host gives up on: it closes the call's POST (the
	// cancellation at 2026-07-28) and, being the go-sdk's client, POSTs
	// notifications/cancelled too, which is accepted: the call is
	// cancelled at the server and recorded as the host's, and the host's
	// next call is served.
	cctx, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = cs.CallTool(cctx, &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 30, "steps": 3}})
	stop()
	if err == nil {
		t.Fatal("a cancelled call was answered")
	}
	if text, _ := callText(t, cs, "everything__echo", map[string]any{"message": "after the cancel"}); !strings.Contains(text, "after the cancel") {
		t.Fatalf("echo after the cancellation: %s\n%s", text, h.stderr)
	}
	// A profile switch changes the tools' list: the host is told on its
	// listen stream.
	if text, _ := callText(t, cs, "aegis__set_profile", map[string]any{"name": "narrow"}); text != "code=OK active=narrow approval=" {
		t.Fatalf("set_profile: %s", text)
	}
	within(changed, "notifications/tools/list_changed on the listen stream")
	cs.Close()
	h.stop()

	intents, rounds := 0, map[string]int{}
	var cancels []map[string]any
	for _, e := range l.streamEvents() {
		var p map[string]any
		json.Unmarshal(e.Payload, &p)
		switch e.Kind {
		case "call.cancelled":
			if p["tool_id"] != nil { // not the listen, which the host's Close ends
				cancels = append(cancels, p)
			}
		case "call.intent":
			intents++
			if line, _ := p["line"].(string); !strings.Contains(line, `"protocol_version":"2026-07-28"`) {
				t.Errorf("an intent without the protocol version: %s", e.Payload)
			}
		case "note":
			if s, ok := p["mrtr"].(string); ok {
				rounds[s]++
			}
		}
	}
	// Only the seven calls of the host: the refused POSTs reached nothing.
	if intents != 7 || rounds["input_required"] != 1 || rounds["retry"] != 1 {
		t.Errorf("recorded %d intents and rounds %v, want 7 intents and one round answered once", intents, rounds)
	}
	if len(cancels) != 1 || cancels[0]["by"] != nil || cancels[0]["notified"] != true {
		t.Errorf("call.cancelled events of calls %v, want one of the host's, the server notified", cancels)
	}
}

// sseData is the data of the last event of an SSE body, or body itself
// when it is JSON.
func sseData(body string) string {
	last := body
	for line := range strings.Lines(body) {
		if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			last = d
		}
	}
	return last
}
