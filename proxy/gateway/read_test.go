package gateway

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// sdkIDKey is the SDK's id as the gateway keys ids.
func sdkIDKey(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case string:
		return "s:" + v
	case int64:
		return "n:" + strconv.FormatInt(v, 10)
	}
	return ""
}

// The gateway's reading of a frame is the SDK's: whenever the reading is
// not ambiguous, a frame it reads as a JSON-RPC message is one to the SDK's
// reader (jsonrpc.DecodeMessage), with the same method and the same id;
// a frame the SDK's reader refuses is no message to the gateway either,
// so no layer of the gateway takes it.
func FuzzGatewayReadsAsTheSDK(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s__t","arguments":{"a":1}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tasks/get","params":{"taskId":"t"}}`,
		`{"jsonrpc":"2.0","id":5,"Method":"tasks/get","params":{"taskId":"t"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tasks\/get","params":{"taskId":"t"}}`,
		`{"jsonrpc":"2.0","id":5,"m\u0065thod":"tasks/get","params":{"taskId":"t"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"task\u0073/get","params":{"taskId":"t"}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"x"}`,
		`{"jsonrpc":"2.0","id":1e3,"method":"x"}`,
		`{"jsonrpc":"2.0","id":-0,"method":"x"}`,
		`{"jsonrpc":"2.0","id":null,"method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":null}`,
		`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1e2,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":1,"error":"x"}`,
		`{"jsonrpc":"2.0","id":true,"method":"x"}`,
		`{"jsonrpc":2,"id":1,"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"x"} {"jsonrpc":"2.0","id":2,"method":"y"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"x"}]`,
		`{"jsonrpc":"2.0","id":"aegis-1","result":{"task":{"taskId":"a","taskId":"b"}}}`,
		`{"jsonrpc":"2.0","ID":1,"id":2,"method":"x"}`,
		`{"jsonrpc":"2.0","id":9007199254740993,"method":"x"}`,
		"\ufeff" + `{"jsonrpc":"2.0","id":1,"method":"x"}`,
		`{"jsonrpc":"2.0","id":"\ud800","method":"x"}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r := readRPC(line)
		msg, err := jsonrpc.DecodeMessage(line)
		if r.ambiguous != "" {
			return // refused before any layer or the SDK reads it
		}
		if err != nil {
			if r.message {
				t.Fatalf("the SDK refuses %q (%v), the gateway reads a message: method %q id %q", line, err, r.method, r.idKey)
			}
			return
		}
		if !r.message {
			t.Fatalf("the SDK reads %q as %#v, the gateway as no message", line, msg)
		}
		switch m := msg.(type) {
		case *jsonrpc.Request:
			if !r.hasMethod || r.method != m.Method || r.idKey != sdkIDKey(m.ID) {
				t.Fatalf("%q: the SDK reads method %q id %q, the gateway %q (%v) id %q", line, m.Method, sdkIDKey(m.ID), r.method, r.hasMethod, r.idKey)
			}
		case *jsonrpc.Response:
			if r.hasMethod || r.idKey != sdkIDKey(m.ID) {
				t.Fatalf("%q: the SDK reads an answer to %q, the gateway method %q id %q", line, sdkIDKey(m.ID), r.method, r.idKey)
			}
		}
	})
}

// BenchmarkGatewayReadFrame is the gateway's reading of a plain call from
// the host and of the server's answer, once, against the decodes the
// layers made of them before (the cancel guard's, the task layer's and the
// plain-call shape's encoding/json decodes of the call; the guard's and the
// task layer's of the answer).
func BenchmarkGatewayReadFrame(b *testing.B) {
	call := []byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"hello from the benchmark"}}}` + "\n")
	answer := []byte(`{"jsonrpc":"2.0","id":"aegis-7","result":{"content":[{"type":"text","text":"Echo: hello from the benchmark"}],"structuredContent":{"echo":"hello from the benchmark"}}}` + "\n")
	b.Run("one-reading", func(b *testing.B) {
		for b.Loop() {
			r := readRPC(call)
			if _, ok := plainCallName(r); !ok {
				b.Fatal("not a plain call")
			}
			if a := readRPC(answer); !a.message {
				b.Fatal("no answer")
			}
		}
	})
	b.Run("encoding-json-before", func(b *testing.B) {
		type head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		for b.Loop() {
			var h head
			json.Unmarshal(call, &h) // the cancel guard
			var f rpcFrame
			json.Unmarshal(call, &f) // the task layer
			var top, params map[string]json.RawMessage
			json.Unmarshal(call, &top) // the plain-call shape
			json.Unmarshal(top["params"], &params)
			var name string
			json.Unmarshal(params["name"], &name)
			var a rpcFrame
			json.Unmarshal(answer, &a) // the task layer's answer
			var ah head
			json.Unmarshal(answer, &ah) // the guard's drop
		}
	})
}

// countCancelled's fast path (a line without the method's name spelled
// out is skipped unread) holds for every frame the gateway itself writes
// to a server, through the SDK's encoder or the task layer's: it counts
// what the full reading counts.
func FuzzCountCancelledReadsTheGatewaysOwnFrames(f *testing.F) {
	f.Add("notifications/cancelled", []byte(`{"requestId":1}`))
	f.Add("notifications/cancelled\u2028", []byte(`{}`))
	f.Add("tools/call", []byte(`{"name":"notifications/cancelled"}`))
	f.Fuzz(func(t *testing.T, method string, params []byte) {
		if !json.Valid(params) {
			params = nil
		}
		sdk, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: method, Params: params})
		if err != nil {
			return
		}
		own, err := json.Marshal(rpcFrame{JSONRPC: "2.0", Method: method, Params: params})
		if err != nil {
			return
		}
		for _, line := range [][]byte{sdk, own} {
			want := 0
			if r := readRPC(line); r.message && r.method == "notifications/cancelled" {
				want = 1
			}
			if got := countCancelled(append(line, '\n')); got != want {
				t.Fatalf("%q: counted %d cancellations, the reading %d", line, got, want)
			}
		}
	})
}

// The servers are told the host's capabilities as the host's SDK and the
// go-sdk read them, by exact names (attack: "Tools" in sampling, which
// encoding/json takes for tools, tells the servers the host samples with
// tools when it never said so).
func TestServerCapsReadsCapabilitiesByExactNames(t *testing.T) {
	c, tasks := serverCaps([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"sampling":{"Tools":{}},"elicitation":{"URL":{},"form":{}},"tasks":{"list":{}}}}}`), false)
	if c.Sampling == nil || c.Sampling.Tools != nil || c.Elicitation == nil || c.Elicitation.URL != nil || c.Elicitation.Form == nil || c.RootsV2 != nil || string(tasks) != `{"list":{}}` {
		t.Fatalf("sampling %+v, elicitation %+v, roots %v, tasks %s", c.Sampling, c.Elicitation, c.RootsV2, tasks)
	}
}
