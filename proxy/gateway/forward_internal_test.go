package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// A call's answer waits for the progress notifications its server wrote
// before it, which the SDK hands on after the answer: a host whose stream
// ends with the answer (stateless, over HTTP) lost the last of them on a
// busy machine. The wait is bounded, and counts only a call's own token.
func TestAnswerDoesNotOvertakeItsProgress(t *testing.T) {
	token := func(text string) *reading.Value {
		t.Helper()
		v, why := readRPCOf(reading.Read([]byte(text))).params.Get("progressToken")
		if why != "" || v == nil {
			t.Fatalf("%s: no progress token (%s)", text, why)
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		token any
		frame string
	}{
		{"a string token", "p-1", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p-1","progress":1}}`},
		{"a number token", 7, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f forwarder
			end := f.begin(context.Background(), "s", nil, tc.token)
			f.progressRead("s", token(tc.frame))
			f.progressRead("other", token(tc.frame)) // another server's: no call of it carries the token
			ended := make(chan struct{})
			go func() { end(); close(ended) }()
			select {
			case <-ended:
				t.Fatal("the call ended before the progress it read was handed on")
			case <-time.After(100 * time.Millisecond):
			}
			f.progressSent(routeKey{"s", tokenKey(tc.token)})
			select {
			case <-ended:
			case <-time.After(progressDrain / 2):
				t.Fatal("the call did not end once its progress was handed on")
			}
		})
	}
	t.Run("a notification the SDK never hands on", func(t *testing.T) {
		var f forwarder
		end := f.begin(context.Background(), "s", nil, "p")
		f.progressRead("s", token(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p"}}`))
		start := time.Now()
		end()
		if d := time.Since(start); d < progressDrain || d > progressDrain+5*time.Second {
			t.Errorf("the call ended %v after it returned; want after progressDrain (%v), not much later", d, progressDrain)
		}
		if len(f.unsent) != 0 {
			t.Errorf("unsent counts left behind: %v", f.unsent)
		}
	})
	t.Run("no call carries the token", func(t *testing.T) {
		var f forwarder
		f.progressRead("s", token(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p"}}`))
		if len(f.unsent) != 0 {
			t.Errorf("counted a notification no call waits for: %v", f.unsent)
		}
	})
}

// A server's elicitation without a mode (server-everything's form
// elicitation) reached a 2026-07-28 host as an input request with mode ""
// which the TypeScript SDK's client refuses as neither form nor url; the
// call then waited on a round the host never answered, and every later
// request of that server was refused as ambiguous. The mode is named as
// the SDK names it for a host of the session protocol.
func TestElicitationInputRequestNamesItsMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *mcp.ElicitParams
		want string
	}{
		{"no mode, a schema: form", &mcp.ElicitParams{Message: "m", RequestedSchema: map[string]any{"type": "object"}}, "form"},
		{"no mode, a url: url", &mcp.ElicitParams{Message: "m", URL: "https://example.com"}, "url"},
		{"no mode, an elicitation id: url", &mcp.ElicitParams{Message: "m", ElicitationID: "e1"}, "url"},
		{"a mode is kept", &mcp.ElicitParams{Mode: "form", URL: "https://example.com"}, "form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.Mode
			if got := withMode(tc.in); got.Mode != tc.want {
				t.Errorf("mode %q, want %q", got.Mode, tc.want)
			}
			if tc.in.Mode != before {
				t.Error("the server's params were changed in place")
			}
		})
	}
	if withMode(nil) != nil {
		t.Error("nil params gained a mode")
	}
}
