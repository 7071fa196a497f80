package httpfront_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/httpfront"
)

// rawSession begins a session at url with raw requests (initialize, then
// notifications/initialized) and returns its id.
func rawSession(t *testing.T, url string) string {
	t.Helper()
	resp := rawPost(t, url, "", "2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize at %s: %d, session %q", url, resp.StatusCode, sid)
	}
	resp = rawPost(t, url, sid, "2025-11-25", `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	return sid
}

// rawDelete ends session sid with a DELETE, which must be answered 204.
func rawDelete(t *testing.T, url, sid string) {
	t.Helper()
	req, _ := http.NewRequest("DELETE", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", resp.StatusCode)
	}
}

func rawPost(t *testing.T, url, sid, version, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestFrontChecksAsTheSDKHandlerDoes: each request goes to the front and
// to the go-sdk's own StreamableHTTPHandler (an mcp.Server with the same
// tool), each in a session of its own, and gets the same status from
// both.
func TestFrontChecksAsTheSDKHandlerDoes(t *testing.T) {
	_, front := newFront(t, httpfront.Config{Token: token, Loopback: true})
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{ Msg string }) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Msg}}}, nil, nil
	})
	sdk := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(sdk.Close)

	const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"Msg":"hi"}}}`
	for _, tc := range []struct {
		name    string
		method  string
		session bool   // in the session begun for the case
		version string // MCP-Protocol-Version
		accept  string
		ctype   string
		body    string
		status  int
	}{
		{"a batch under 2025-06-18, which has none", "POST", true, "2025-06-18", "", "", "[" + call + "]", 400},
		{"a batch under 2025-11-25", "POST", true, "2025-11-25", "", "", "[" + call + "]", 400},
		{"a batch behind white space", "POST", true, "2025-11-25", "", "", " \r\n\t[" + call + "]", 400},
		{"a batch under 2025-03-26, which has them", "POST", true, "2025-03-26", "", "", "[" + call + "]", 200},
		{"a batch with no version, which means 2025-03-26", "POST", true, "", "", "", "[" + call + "]", 200},
		{"one call under 2025-11-25", "POST", true, "2025-11-25", "", "", call, 200},
		{"a stream asked for as JSON only", "GET", true, "2025-11-25", "application/json", "", "", 400},
		{"a stream asked for with no Accept", "GET", true, "2025-11-25", "-", "", "", 400},
		{"a stream asked for as text/*", "GET", true, "2025-11-25", "text/*", "", "", 200},
		{"a stream of no session", "GET", false, "2025-11-25", "text/event-stream", "", "", 400},
		{"a stream of no session, asked for as JSON", "GET", false, "2025-11-25", "application/json", "", "", 400},
		{"a body of another type to an unknown session", "POST", false, "2025-11-25", "", "text/plain", call, 415},
		{"a client that cannot take a stream, to an unknown session", "POST", false, "2025-11-25", "application/json", "", call, 400},
		{"a delete of no session", "DELETE", false, "2025-11-25", "", "", "", 400},
		{"another method", "PATCH", true, "2025-11-25", "", "", call, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]int
			for i, url := range []string{front.URL, sdk.URL} {
				sid := ""
				if tc.session {
					sid = rawSession(t, url)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				req, _ := http.NewRequestWithContext(ctx, tc.method, url, strings.NewReader(tc.body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				switch {
				case tc.accept == "-":
				case tc.accept != "":
					req.Header.Set("Accept", tc.accept)
				case tc.method == "GET":
					req.Header.Set("Accept", "text/event-stream")
				default:
					req.Header.Set("Accept", "application/json, text/event-stream")
				}
				if tc.ctype != "" {
					req.Header.Set("Content-Type", tc.ctype)
				}
				if tc.version != "" {
					req.Header.Set("Mcp-Protocol-Version", tc.version)
				}
				if sid != "" {
					req.Header.Set("Mcp-Session-Id", sid)
				} else if tc.method != "DELETE" && tc.method != "GET" {
					req.Header.Set("Mcp-Session-Id", "nosuchsession")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					cancel()
					t.Fatalf("%s: %v", url, err)
				}
				got[i] = resp.StatusCode
				if resp.StatusCode != http.StatusOK {
					io.ReadAll(resp.Body) // a refusal is short; a stream would not end
				}
				resp.Body.Close()
				cancel()
			}
			if got[0] != tc.status || got[1] != tc.status {
				t.Fatalf("front %d, go-sdk handler %d; want %d from both", got[0], got[1], tc.status)
			}
		})
	}
}

// TestFrontDeleteFreesTheSlotBeforeItAnswers: at the cap, a client that
// deleted its session (and got the 204) begins another at once: the 204
// comes after the deleted session's slot is free. The go-sdk client
// holds its standalone stream open, so its session is never idle and
// could not be made room for.
func TestFrontDeleteFreesTheSlotBeforeItAnswers(t *testing.T) {
	f, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, MaxSessions: 1})
	for i := range 20 {
		cs, err := connect(t, ts.URL, token, true)
		if err != nil {
			t.Fatalf("session %d, right after the delete of the one before: %v", i, err)
		}
		if _, err := cs.ListTools(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if err := cs.Close(); err != nil { // DELETE, and its 204
			t.Fatal(err)
		}
	}
	if n := f.Sessions(); n > 1 {
		t.Fatalf("%d sessions at a cap of 1", n)
	}
	// A raw DELETE: 204, then the id is unknown.
	rawDelete(t, ts.URL, rawSession(t, ts.URL))
	if resp := rawPost(t, ts.URL, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`); resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("initialize right after a DELETE at the cap: %d %s", resp.StatusCode, b)
	} else {
		resp.Body.Close()
	}
}

// A client with the token that begins and deletes sessions in a loop
// cannot pile up sessions whose servers are still stopping: at most
// MaxSessions wind down at once; the next initialize waits for one of
// them, and is refused with 503 when none ends in time.
func TestFrontBoundsDeletedSessionsStillStopping(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	stopping := 0 // Serves whose connection closed and that have not returned
	most := 0
	serve := echoServe(nil)
	f, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, MaxSessions: 2, Serve: func(ctx context.Context, s *httpfront.Session) error {
		err := serve(ctx, s) // returns when the session's connection closes
		mu.Lock()
		stopping++
		most = max(most, stopping)
		mu.Unlock()
		<-release // its servers take their time to stop
		mu.Lock()
		stopping--
		mu.Unlock()
		return err
	}})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // before the front's Close, which waits for every Serve
	del := func(sid string) { t.Helper(); rawDelete(t, ts.URL, sid) }
	del(rawSession(t, ts.URL))
	del(rawSession(t, ts.URL))
	start := time.Now()
	resp := rawPost(t, ts.URL, "", "2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "still stopping their servers") {
		t.Fatalf("a third initialize with two deleted sessions still stopping: %d %s", resp.StatusCode, b)
	}
	if waited := time.Since(start); waited < 4*time.Second {
		t.Errorf("refused after %v: it should wait for one to end first", waited)
	}
	if n := f.Sessions(); n != 0 {
		t.Errorf("%d sessions listed", n)
	}

	// One of them ends while the next initialize waits: it is served.
	go func() {
		time.Sleep(300 * time.Millisecond)
		release <- struct{}{}
	}()
	sid := rawSession(t, ts.URL)
	mu.Lock()
	if most > 2 {
		t.Errorf("%d sessions were stopping at once, past the cap of 2", most)
	}
	mu.Unlock()
	del(sid)
	releaseAll()
}
