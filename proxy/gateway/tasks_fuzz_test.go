package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/aegis-dev/aegis/proxy/reading"
)

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// lockedBuffer is a buffer that frames are written to from goroutines, as
// a server's stdin is.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Whatever a host or a server sends, the task layer neither panics nor
// writes anything but whole JSON frames, and it amends only the answers
// it waits for.
func FuzzTaskLines(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"s__t"}]}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}` + "\n" + `{"jsonrpc":"2.0","id":"a","result":{"capabilities":{}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"s__t","task":{}}}` + "\n" + `{"jsonrpc":"2.0","id":"aegis-1","result":{}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"g","method":"sampling/createMessage","params":{"task":{}}}` + "\n" + `{"jsonrpc":"2.0","id":"aegis-1","result":{"task":{"taskId":"h"}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"x"}}` + "\n" + `{"jsonrpc":"2.0","id":3,"result":{"capabilities":{"tasks":{"requests":{"tools":{"call":{}}}}},"protocolVersion":"2025-11-25","tools":[{"name":"t","execution":{"taskSupport":"required"}}]}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"s1","method":"elicitation/create","params":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"}}}}` + "\n" + `{"jsonrpc":"2.0","id":"aegis-1","result":{"task":{"taskId":"t1"},"_meta":{"io.modelcontextprotocol/related-task":{"TaskId":"t1"}}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"t1","TASKID":"t2","_META":{"io.modelcontextprotocol/related\u002dtask":{"taskId":"t1"}}}}` + "\n" + `{"jsonrpc":"2.0","id":4,"result":{"_meta":{"io.modelcontextprotocol/related-task":"x"}}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		first, second, _ := bytes.Cut(in, []byte("\n"))
		g := &gateway{tools: map[string]toolEntry{"s__t": {server: "s", tool: "t", name: "t"}}, log: slog.New(slog.DiscardHandler)}
		g.initTasks(context.Background())
		var out bytes.Buffer
		g.tk.out = &hostOut{w: nopWriteCloser{&out}, t: g.tk}
		g.tk.hostRaw = newDownRaw("", g.tk.out)
		g.tk.hostCaps = json.RawMessage(`{"list":{},"requests":{"sampling":{"createMessage":{}}}}`)
		var toServer lockedBuffer
		d := newDownRaw("s", &toServer)
		g.tk.creating["s"] = 1 // statuses of tasks not created yet pass too
		for _, line := range [][]byte{first, second} {
			g.tk.hostLine(readRPC(line)) // not ready: a task request is refused at once
			g.tk.serverLine(d, line, readRPC(line))
			if e := g.tk.relatedToHost("s", line); !bytes.Equal(e, line) && !json.Valid(e) {
				t.Fatalf("mapped %q into %q", line, e)
			}
		}
		g.tk.close() // not ready: what was taken is refused at once
		if v, ok := reading.Read(second).One(); ok {
			g.tk.observe("s", v)
		}
		amended := g.tk.amend(second)
		if !bytes.Equal(amended, second) && !json.Valid(amended) {
			t.Fatalf("amended %q into %q", second, amended)
		}
		for _, frame := range bytes.Split(bytes.TrimSpace(append(out.Bytes(), toServer.b.Bytes()...)), []byte("\n")) {
			if len(frame) > 0 && !json.Valid(frame) {
				t.Fatalf("wrote %q", frame)
			}
		}
	})
}

// A session that creates tasks without end holds at most maxTasks of them:
// the oldest is forgotten (and then refused as unknown), the newest kept.
func TestTaskTableForgetsTheOldest(t *testing.T) {
	tt := newTaskTable[int](maxTasks)
	for i := range maxTasks + 1 {
		tt.put(strconv.Itoa(i), i)
	}
	tt.put("5", 55) // an update is not a new task
	if _, ok := tt.m["0"]; ok || len(tt.m) != maxTasks || len(tt.order) != maxTasks || tt.m["5"] != 55 || tt.m[strconv.Itoa(maxTasks)] != maxTasks {
		t.Fatalf("after %d tasks: %d held, %d in order, 0 held %v", maxTasks+1, len(tt.m), len(tt.order), tt.m["0"])
	}
}

// The host's status of a task it runs for a server reaches that server,
// and only for a task the host created for it.
func TestHostTaskStatusReachesItsServer(t *testing.T) {
	var toServer lockedBuffer
	g := &gateway{downs: map[string]*downstream{}, log: slog.New(slog.DiscardHandler)}
	g.initTasks(context.Background())
	g.downs["s"] = &downstream{raw: newDownRaw("s", &toServer)}
	g.tk.hostTasks.put("h1", "s")
	g.tk.ready.Store(true)
	status := func(id string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"` + id + `","status":"working"}}`)
	}
	if !g.tk.hostLine(readRPC(status("h1"))) || !bytes.Contains(toServer.b.Bytes(), []byte(`"taskId":"h1"`)) {
		t.Fatalf("the status of h1 did not reach its server: %q", toServer.b.Bytes())
	}
	if g.tk.hostLine(readRPC(status("other"))) || bytes.Contains(toServer.b.Bytes(), []byte(`"other"`)) {
		t.Fatalf("the status of another task reached the server: %q", toServer.b.Bytes())
	}
}

// A line the gateway's own layer takes as a plain tools/call is one that
// the SDK's reader takes as the same call: a request for tools/call whose
// params name the same tool; and the layer's own decoding of it, which
// decides the call, finds that name too. A line the readers could take
// for different calls never leaves the SDK's path.
func FuzzPlainCallShape(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s__t","arguments":{"a":1}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"_meta":{"progressToken":1},"name":"s__t"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s__t","Name":"s__u"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"Method":"tools/call","method":"tools/call","params":{"name":"s__t"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s__t","name":"s__u"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"s__t"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		name, ok := plainCallName(readRPC(line))
		if !ok {
			return
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			t.Fatalf("taken as a plain call of %q, but the SDK's reader refuses it: %v", name, err)
		}
		req, isReq := msg.(*jsonrpc.Request)
		if !isReq || req.Method != "tools/call" || !req.ID.IsValid() {
			t.Fatalf("taken as a plain call of %q, but the SDK reads %#v", name, msg)
		}
		var params map[string]json.RawMessage
		var sdkName string
		if json.Unmarshal(req.Params, &params) != nil || json.Unmarshal(params["name"], &sdkName) != nil || sdkName != name {
			t.Fatalf("taken as a plain call of %q, but the SDK's params name %q", name, sdkName)
		}
		var h rpcFrame
		var p struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(line, &h) != nil || h.Method != "tools/call" || json.Unmarshal(h.Params, &p) != nil || p.Name != name {
			t.Fatalf("taken as a plain call of %q, but decided as %q (%q)", name, p.Name, h.Method)
		}
	})
}

// The gateway's task ids at their limits: a session that creates tasks
// without end, on two servers that give the same ids, holds maxTasks of
// them and the way back to each, no more; the oldest gateway id is then
// unknown, refused with -32602, and reaches no server. Statuses of tasks
// not created yet hold at most maxEarlyTasks early ids.
func TestTaskIDMapAtItsLimit(t *testing.T) {
	var toA, toB, out lockedBuffer
	g := &gateway{downs: map[string]*downstream{}, log: slog.New(slog.DiscardHandler)}
	g.initTasks(context.Background())
	g.tk.out = &hostOut{w: nopWriteCloser{&out}, t: g.tk}
	g.downs["a"] = &downstream{raw: newDownRaw("a", &toA)}
	g.downs["b"] = &downstream{raw: newDownRaw("b", &toB)}
	g.tk.ready.Store(true)
	m := g.tk.tasks
	var ids []string
	for i := range maxTasks + 1 {
		server := []string{"a", "b"}[i%2]
		ids = append(ids, m.create(taskEntry{server: server, serverID: "t" + strconv.Itoa(i/2)}))
	}
	if len(m.created.m) != maxTasks || len(m.created.order) != maxTasks || len(m.back) != maxTasks {
		t.Fatalf("after %d tasks: %d held, %d in order, %d ways back", maxTasks+1, len(m.created.m), len(m.created.order), len(m.back))
	}
	if e := m.created.m[ids[1]]; e.server != "b" || e.serverID != "t0" {
		t.Errorf("b's t0 is %v", e)
	}
	if id, _ := m.hostID("a", "t0", false); id != "" {
		t.Errorf("a's forgotten t0 is still %s", id)
	}
	last := ids[maxTasks]
	if e := m.created.m[last]; e.server != "a" || e.serverID != "t"+strconv.Itoa(maxTasks/2) {
		t.Errorf("the newest task is %v", e)
	}
	g.tk.hostLine(readRPC([]byte(`{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"` + ids[0] + `"}}`)))
	g.tk.close()
	if !bytes.Contains(out.b.Bytes(), []byte(`"code":-32602`)) || toA.b.Len()+toB.b.Len() != 0 {
		t.Errorf("the forgotten task: host got %q, servers %q %q", out.b.Bytes(), toA.b.Bytes(), toB.b.Bytes())
	}

	g.tk.creating["a"] = 1
	for i := range maxEarlyTasks + 1 {
		line := `{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"e` + strconv.Itoa(i) + `","status":"working"}}`
		g.tk.serverLine(g.downs["a"].raw, []byte(line), readRPC([]byte(line)))
	}
	if len(m.early.m) != maxEarlyTasks || len(m.early.order) != maxEarlyTasks || len(m.back) != maxTasks+maxEarlyTasks {
		t.Fatalf("after %d early statuses: %d held, %d in order, %d ways back", maxEarlyTasks+1, len(m.early.m), len(m.early.order), len(m.back))
	}
	if n := bytes.Count(out.b.Bytes(), []byte(`notifications/tasks/status`)); n != maxEarlyTasks+1 {
		t.Errorf("%d statuses reached the host, want %d", n, maxEarlyTasks+1)
	}
	// An early id is the task's once it is created; a forgotten one is not.
	early, _ := m.hostID("a", "e1", false)
	if id := m.create(taskEntry{server: "a", serverID: "e1"}); id != early || early == "" {
		t.Errorf("a's e1 was %s early, %s created", early, id)
	}
	if id := m.create(taskEntry{server: "a", serverID: "e0"}); id == "" || m.early.m[id].serverID != "" {
		t.Errorf("a's forgotten early e0 was created as %s", id)
	}
}

// Whatever object a server sends, once its task ids are mapped every
// reader finds only mapped ids in it: the taskId member, read exactly or
// case-insensitively, and the related-task _meta are the mapped id or
// absent; an id that cannot be mapped makes the answer refused, never
// passed.
func FuzzTaskIDMapping(f *testing.F) {
	f.Add([]byte(`{"taskId":"k1","status":"working"}`))
	f.Add([]byte(`{"taskId":"k1","TaskId":"x9"}`))
	f.Add([]byte(`{"taskid":"x9","taskId":"k1","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"x9"}}}`))
	f.Add([]byte(`{"_META":{"IO.modelcontextprotocol/related-task":{"TASKID":"k2"}},"task":{"taskId":"k3"}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		to := func(id string) (string, bool) {
			if strings.HasPrefix(id, "k") {
				return "G" + id, true
			}
			return "", false
		}
		check := func(what string, out json.RawMessage, taskID bool) {
			var exact map[string]json.RawMessage
			if json.Unmarshal(out, &exact) != nil {
				return
			}
			var folded struct {
				TaskID *string         `json:"taskId"`
				Meta   json.RawMessage `json:"_meta"`
			}
			json.Unmarshal(out, &folded)
			var id string
			if !taskID {
				exact["taskId"], folded.TaskID = nil, nil
			}
			if exact["taskId"] != nil && json.Unmarshal(exact["taskId"], &id) != nil || id != "" && !strings.HasPrefix(id, "G") {
				t.Fatalf("%s: %q has taskId %s", what, out, exact["taskId"])
			}
			if folded.TaskID != nil && *folded.TaskID != id {
				t.Fatalf("%s: %q reads as task %q case-insensitively, %q exactly", what, out, *folded.TaskID, id)
			}
			var meta map[string]json.RawMessage
			if json.Unmarshal(exact["_meta"], &meta) == nil {
				if rel := meta[relatedTaskKey]; rel != nil && !strings.HasPrefix(taskIDOf(rel), "G") {
					t.Fatalf("%s: %q keeps the related task %s", what, out, rel)
				}
			}
		}
		if out, ok := mapTask(in, to); ok && !bytes.Equal(out, in) {
			check("task", out, true)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(in, &m) == nil && m != nil && mapRelated(m, to) {
			b, _ := json.Marshal(m)
			check("related", b, false)
		}
	})
}
