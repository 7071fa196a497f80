package proxy_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// refusedAsAmbiguous reports whether a is the gateway's refusal of a frame
// that JSON readers read differently.
func refusedAsAmbiguous(a map[string]any) bool {
	code, _ := dig(a, "error", "code").(float64)
	msg, _ := dig(a, "error", "message").(string)
	return code == -32600 && strings.Contains(msg, "read differently")
}

// Host frames that one JSON reader takes for one message and another for
// another (attack: a layer of the gateway reads "Method", a second "task"
// or 1e400 its own way and acts on what the SDK, the host and the server
// never see) are refused before any layer or the SDK reads them: a request
// is answered -32600, a tools/call among them is recorded as a call
// refused, every one as frame.dropped. Frames every reader reads alike
// (escapes, a value split over lines) are read as the SDK reads them.
func TestGatewayReadsEveryHostFrameOnceAsTheSDK(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	c := newCLI(t)
	seen := filepath.Join(c.dir, "server-input.log")
	gw := c.startGateway(`version: 1
servers:
  example:
    command: /bin/sh
    args: `+quoteArgs([]string{"-c", "tee -a " + seen + " | " + bin(t, "aegis-example-server")})+`
  ts:
    command: `+bin(t, "taskserver")+`
  dup:
    command: `+bin(t, "taskserver")+`
    args: ["-name", "dup", "-dup"]
profiles:
  p:
    allow: [example.echo, ts.work, dup.work]
activation:
  default_profile: p
`, gatewayEnv(t))
	h := gw.taskHost()
	h.initialize()
	if l := h.request("tools/list", map[string]any{}); toolNamed(l, "example__echo") == nil {
		t.Fatalf("tools/list: %v", l)
	}
	deep := strings.Repeat("[", 300) + strings.Repeat("]", 300)
	const (
		refused  = "refused"
		noTask   = "no task" // read as a task request: the task layer's -32602
		echoed   = "echoed"
		notified = "" // a notification: no answer
	)
	cases := []struct {
		name, line, want string
		call             bool // a tools/call, recorded as a call
	}{
		{"a task request named by Method", `{"jsonrpc":"2.0","id":%d,"Method":"tasks/get","params":{"taskId":"x"}}`, refused, false},
		{"a task request with an escaped slash is a task request", `{"jsonrpc":"2.0","id":%d,"method":"tasks\/get","params":{"taskId":"x"}}`, noTask, false},
		{"a task request with an escaped letter is a task request", `{"jsonrpc":"2.0","id":%d,"method":"task\u0073/get","params":{"taskId":"x"}}`, noTask, false},
		{"a task given twice", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"ts__work","arguments":{},"task":{"ttl":1},"task":null}}`, refused, true},
		{"a task named Task", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"ts__work","arguments":{},"Task":{"ttl":1}}}`, refused, true},
		{"a plain call named by Name", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","Name":"example__add","arguments":{"message":"x"}}}`, refused, true},
		{"a plain call with a name given twice", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"x"},"name":"example__add"}}`, refused, true},
		{"a plain call with 1e400 in its arguments", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"x","n":1e400}}}`, refused, true},
		{"a plain call nested 300 deep", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"x","n":` + deep + `}}}`, refused, true},
		{"a plain call split over two lines is one call", `{"jsonrpc":"2.0","id":%d,"method":"tools/call",` + "\n" + `"params":{"name":"example__echo","arguments":{"message":"split"}}}`, echoed, false},
		{"a task request split over two lines is a task request", `{"jsonrpc":"2.0","id":%d,` + "\n" + `"method":"tasks/get","params":{"taskId":"x"}}`, noTask, false},
	}
	dropped := 0
	calls := 0
	for i, tc := range cases {
		id := 100 + i
		a := h.rawRequest(id, fmt.Sprintf(tc.line, id))
		switch tc.want {
		case refused:
			dropped++
			if tc.call {
				calls++
			}
			if !refusedAsAmbiguous(a) {
				t.Errorf("%s: not refused: %v", tc.name, a)
			}
		case noTask:
			if code, _ := dig(a, "error", "code").(float64); code != -32602 {
				t.Errorf("%s: answer %v, want the task layer's -32602", tc.name, a)
			}
		case echoed:
			content, _ := dig(a, "result", "content").([]any)
			if len(content) == 0 || !strings.Contains(fmt.Sprint(content[0]), "split") {
				t.Errorf("%s: answer %v, want the echo", tc.name, a)
			}
		}
	}
	// Cancellations: one whose requestId is given twice is dropped; one
	// with an escaped method is a cancellation as every reader reads it.
	h.wmu.Lock()
	h.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}` + "\n"))
	h.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications\/cancelled","params":{"requestId":99}}` + "\n"))
	h.wmu.Unlock()
	dropped++
	// A server whose CreateTaskResult names its task twice: the call fails,
	// and the host never sees either id.
	a := h.request("tools/call", map[string]any{"name": "dup__work", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}})
	if msg, _ := dig(a, "error", "message").(string); !strings.Contains(msg, "read differently") || dig(a, "result") != nil {
		t.Errorf("a task result naming its task twice: %v", a)
	}
	// A plain call still runs, on the direct path.
	if a := h.rawRequest(999, `{"jsonrpc":"2.0","id":999,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"after"}}}`); dig(a, "result", "isError") == true {
		t.Errorf("a plain call after the refusals: %v", a)
	}
	gw.finish(30 * time.Second)

	for _, l := range linesWith(t, seen, `"tools/call"`) {
		if !strings.Contains(l, "split") && !strings.Contains(l, "after") {
			t.Errorf("the server was sent %s", l)
		}
	}
	evs, _ := c.events()
	hostDropped, serverDropped := 0, 0
	for _, d := range payloads(evs, "frame.dropped") {
		reason, _ := d["reason"].(string)
		switch {
		case d["direction"] == "c2s" && strings.Contains(reason, "read differently"):
			hostDropped++
		case d["direction"] == "s2c" && strings.Contains(reason, "read differently") && strings.Contains(reason, "given twice"):
			serverDropped++
		}
	}
	if hostDropped != dropped || serverDropped != 1 {
		t.Errorf("frame.dropped: %d of the host's and %d of the server's, want %d and 1", hostDropped, serverDropped, dropped)
	}
	ambiguous := 0
	for _, o := range payloads(evs, "call.outcome") {
		if strings.Contains(canon(o), "ambiguous tools/call") {
			ambiguous++
		}
	}
	if ambiguous != calls {
		t.Errorf("%d ambiguous calls recorded as refused, want %d", ambiguous, calls)
	}
}

// An initialize whose capabilities are given twice, or as "Capabilities"
// (attack: the servers are told of capabilities the host's SDK never
// read), is refused; the servers are initialized from the host's first
// initialize that every reader reads alike.
func TestGatewayRefusesAnAmbiguousInitialize(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	c := newCLI(t)
	gw := c.startGateway(`version: 1
servers:
  ts:
    command: `+bin(t, "taskserver")+`
profiles:
  p:
    allow: [ts.work]
activation:
  default_profile: p
`, gatewayEnv(t))
	h := gw.taskHost()
	for i, line := range []string{
		`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"capabilities":{"sampling":{}},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-11-25","Capabilities":{"sampling":{}},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"Sampling":{}},"clientInfo":{"name":"x","version":"1"}}}`,
	} {
		id := 500 + i
		if a := h.rawRequest(id, fmt.Sprintf(line, id)); !refusedAsAmbiguous(a) {
			t.Errorf("initialize %d: not refused: %v", i, a)
		}
	}
	if init := h.initialize(); dig(init, "result", "serverInfo") == nil {
		t.Fatalf("initialize after the refusals: %v", init)
	}
	gw.finish(30 * time.Second)
	evs, _ := c.events()
	n := 0
	for _, d := range payloads(evs, "frame.dropped") {
		if r, _ := d["reason"].(string); strings.Contains(r, "read differently") {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d refused initializes recorded, want 3", n)
	}
}
