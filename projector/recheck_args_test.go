package projector

import (
	"encoding/json"
	"testing"
)

// A recheck finds each call's arguments in the host's frame: by the
// frame's digest for wrap (a batch holds several calls, each taken once,
// in order), by the digest of name and arguments for the gateway; a call
// it cannot match gets none.
func TestRecheckFindsTheArgumentsOfACall(t *testing.T) {
	q := callQueue{}
	frame := []byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"a"}}},` +
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"},` +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"m":"b"}}}]`)
	q.frame("s", frame)
	fd := hexSHA(frame)
	for _, want := range []string{`{"m":"a"}`, `{"m":"b"}`} {
		got, ok := q.take("s", "echo", fd)
		if !ok || string(got) != want {
			t.Errorf("take = %s, %v; want %s", got, ok, want)
		}
	}
	if _, ok := q.take("s", "echo", fd); ok {
		t.Error("a third call took arguments from a frame of two")
	}

	q.frame("g", []byte(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"fs__read","arguments":{"path":"/a"}}}`))
	q.frame("g", []byte(`{"jsonrpc":"2.0","id":"y","method":"tools/call","params":{"name":"fs__read","arguments":{"path":"/b"}}}`))
	named, _ := json.Marshal(map[string]any{"name": "fs__read", "arguments": json.RawMessage(`{"path":"/b"}`)})
	if got, ok := q.take("g", "fs__read", hexSHA(named)); !ok || string(got) != `{"path":"/b"}` {
		t.Errorf("gateway take = %s, %v; want the second call's arguments", got, ok)
	}
	if _, ok := q.take("g", "fs__write", hexSHA(named)); ok {
		t.Error("another tool took the arguments")
	}
}
