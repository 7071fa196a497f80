package httpfront_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/httpfront"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

const token = "test-token-0123456789abcdef"

// echoServe serves each session with a real go-sdk server that has one
// tool, echo, on the session's connection.
func echoServe(started *sync.WaitGroup) func(ctx context.Context, s *httpfront.Session) error {
	return func(ctx context.Context, s *httpfront.Session) error {
		if started != nil {
			started.Done()
		}
		srv := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{ Msg string }) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				// Its progress first, saying the message.
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: in.Msg})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Msg}}}, nil, nil
		})
		return srv.Run(ctx, connTransport{s.Conn})
	}
}

type connTransport struct{ c mcp.Connection }

func (t connTransport) Connect(context.Context) (mcp.Connection, error) { return t.c, nil }

func newFront(t *testing.T, cfg httpfront.Config) (*httpfront.Front, *httptest.Server) {
	t.Helper()
	if cfg.Serve == nil {
		cfg.Serve = echoServe(nil)
	}
	f, err := httpfront.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(f)
	t.Cleanup(func() {
		f.Close(context.Background())
		ts.Close()
	})
	return f, ts
}

// connect opens a session; a client without its standalone stream has
// no request open between calls (idle).
func connect(t *testing.T, url, tok string, stream ...bool) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: mcptest.BearerClient(tok),
		DisableStandaloneSSE: len(stream) > 0 && !stream[0]}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func TestNewRefusesNoTokenUnlessLoopbackAndAsked(t *testing.T) {
	for _, cfg := range []httpfront.Config{
		{Serve: echoServe(nil)},
		{Serve: echoServe(nil), NoToken: true},
		{Serve: echoServe(nil), Loopback: true},
	} {
		if _, err := httpfront.New(cfg); err == nil {
			t.Errorf("New(%+v) served without a token", cfg)
		}
	}
	if _, err := httpfront.New(httpfront.Config{Serve: echoServe(nil), NoToken: true, Loopback: true}); err != nil {
		t.Errorf("explicit loopback test mode refused: %v", err)
	}
}

// TestFrontRefuses: requests that must not reach a session, each refused
// with its status and a message that says what to do.
func TestFrontRefuses(t *testing.T) {
	_, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, Origins: []string{"https://app.example.com"}})
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	good := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	with := func(kv ...string) map[string]string {
		h := map[string]string{}
		for k, v := range good {
			h[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(h, kv[i])
			} else {
				h[kv[i]] = kv[i+1]
			}
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		method string
		header map[string]string
		host   string
		body   string
		status int
		says   string
	}{
		{"a caller without the token", "POST", with("Authorization", ""), "", initBody, 401, "no bearer token"},
		{"a guessed token", "POST", with("Authorization", "Bearer "+token[:len(token)-1]+"x"), "", initBody, 401, "wrong bearer token"},
		{"a page of another site (Origin)", "POST", with("Origin", "http://evil.example.com"), "", initBody, 403, "Origin"},
		{"a page served over another scheme", "POST", with("Origin", "ftp://127.0.0.1"), "", initBody, 403, "Origin"},
		{"DNS rebinding (Host)", "POST", good, "evil.example.com", initBody, 403, "DNS rebinding"},
		{"a session that was never made", "POST", with("Mcp-Session-Id", "nosuchsession"), "", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, 404, "session not found"},
		{"a session begun without initialize", "POST", good, "", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`, 400, "single initialize"},
		{"a session begun with a batch", "POST", good, "", "[" + initBody + "]", 400, "single initialize"},
		{"a body that is not JSON", "POST", good, "", "{", 400, "single initialize"},
		{"a body of another type", "POST", with("Content-Type", "text/plain"), "", initBody, 415, "application/json"},
		{"a client that cannot take a stream", "POST", with("Accept", "application/json"), "", initBody, 400, "text/event-stream"},
		{"a stream of no session", "GET", with("Accept", "text/event-stream"), "", "", 400, "Mcp-Session-Id"},
		{"an unknown protocol version", "POST", with("Mcp-Protocol-Version", "1999-01-01"), "", initBody, 400, "MCP-Protocol-Version"},
		{"another method", "PUT", good, "", initBody, 405, "not allowed"},
		{"the listener's own origin", "POST", good, "", initBody, 200, ""},
		{"an origin allowed by name", "POST", with("Origin", "https://app.example.com"), "", initBody, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL, strings.NewReader(tc.body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.says) {
				t.Fatalf("status %d %q, want %d saying %q", resp.StatusCode, b, tc.status, tc.says)
			}
			if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

// TestFrontServesSessionsApart: two clients, two sessions, each served by
// its own Serve call; a client that deletes its session ends its Serve.
func TestFrontServesSessionsApart(t *testing.T) {
	var ends sync.WaitGroup
	serve := echoServe(nil)
	f, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, Serve: func(ctx context.Context, s *httpfront.Session) error {
		ends.Add(1)
		defer ends.Done()
		return serve(ctx, s)
	}})
	a, err := connect(t, ts.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	b, err := connect(t, ts.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() == "" || a.ID() == b.ID() {
		t.Fatalf("session ids %q and %q", a.ID(), b.ID())
	}
	for _, cs := range []*mcp.ClientSession{a, b} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"Msg": cs.ID()}})
		if err != nil || res.Content[0].(*mcp.TextContent).Text != cs.ID() {
			t.Fatalf("echo in %s: %v %+v", cs.ID(), err, res)
		}
	}
	if n := f.Sessions(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	a.Close() // the go-sdk client deletes its session
	deadline := time.Now().Add(10 * time.Second)
	for f.Sessions() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := f.Sessions(); n != 1 {
		t.Fatalf("%d sessions after one was deleted, want 1", n)
	}
	b.Close()
	f.Close(context.Background())
	ends.Wait()
}

// TestFrontTellsWhyASessionFailed: a Serve that fails before it answers
// the initialize answers it with a JSON-RPC error saying why.
func TestFrontTellsWhyASessionFailed(t *testing.T) {
	_, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, Serve: func(ctx context.Context, s *httpfront.Session) error {
		return errors.New("record file calls.aarl is in use")
	}})
	_, err := connect(t, ts.URL, token)
	if err == nil || !strings.Contains(err.Error(), "record file calls.aarl is in use") {
		t.Fatalf("connect = %v, want the reason", err)
	}
}

// TestFrontEndsIdleSessionsToMakeRoom: at the cap, a new session ends the
// one idle longest, even one whose client was answered a moment ago; when
// none is idle (a client holds its stream open) it is refused, and nothing
// starts.
func TestFrontEndsIdleSessionsToMakeRoom(t *testing.T) {
	f, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, MaxSessions: 1})
	a, err := connect(t, ts.URL, token, false)
	if err != nil {
		t.Fatal(err)
	}
	// The client sees an answer a moment before its request counts as
	// closed: a session begun at once waits that moment (busyWait) rather
	// than finding a busy and being refused.
	b, err := connect(t, ts.URL, token, true)
	if err != nil {
		t.Fatalf("a second session at the cap, begun as soon as the first was answered: %v", err)
	}
	if _, err := b.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("the new session: %v", err)
	}
	if _, err := a.ListTools(context.Background(), nil); err == nil {
		t.Fatal("the session ended to make room still answers")
	}
	if n := f.Sessions(); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
	// A session whose client holds its stream open is not idle, so a
	// third is refused. (The stream opens after the session does: until
	// then the holder is idle, and a try that came too early is repeated
	// with a new holder.)
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		_, err := connect(t, ts.URL, token, false)
		if err != nil && strings.Contains(err.Error(), "Service Unavailable") {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("a session at the cap with the other one busy: %v", err)
		}
		// It ended the holder, whose stream was not open yet: a new one.
		if _, err := connect(t, ts.URL, token, true); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFrontEndsIdleSessions: a session with no request open for the idle
// timeout is ended.
func TestFrontEndsIdleSessions(t *testing.T) {
	f, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, IdleTimeout: 200 * time.Millisecond})
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL, DisableStandaloneSSE: true,
		HTTPClient: mcptest.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	deadline := time.Now().Add(10 * time.Second)
	for f.Sessions() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := f.Sessions(); n != 0 {
		t.Fatalf("%d sessions after the idle timeout, want 0", n)
	}
}

// TestFrontResumesAStream: a client whose connection drops during a call,
// after the call's first event (its progress), gets the answer by resuming
// the call's stream with Last-Event-ID in the same session
// (Mcp-Session-Id), as the transport promises.
func TestFrontResumesAStream(t *testing.T) {
	_, ts := newFront(t, httpfront.Config{Token: token, Loopback: true, Serve: func(ctx context.Context, s *httpfront.Session) error {
		srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: "started"})
			time.Sleep(300 * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done after the drop"}}}, nil, nil
		})
		return srv.Run(ctx, connTransport{s.Conn})
	}})
	post := func(sid, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	io.ReadAll(resp.Body)
	resp.Body.Close()
	io.ReadAll(post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body)

	// The call's stream: read its first event's id, then drop the connection.
	resp = post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{},"_meta":{"progressToken":"p"}}}`)
	var lastID string
	buf := make([]byte, 0, 4096)
	for lastID == "" {
		var b [512]byte
		n, err := resp.Body.Read(b[:])
		buf = append(buf, b[:n]...)
		for _, line := range strings.Split(string(buf), "\n") {
			if v, ok := strings.CutPrefix(line, "id: "); ok && lastID == "" {
				lastID = strings.TrimSpace(v)
			}
		}
		if err != nil && lastID == "" {
			t.Fatalf("no event id on the call's stream: %v %q", err, buf)
		}
	}
	if strings.Contains(string(buf), "done after the drop") {
		t.Fatalf("the answer came before the drop; the test would prove nothing: %q", buf)
	}
	resp.Body.Close()
	time.Sleep(500 * time.Millisecond) // the call finishes with nobody listening

	req, _ := http.NewRequest("GET", ts.URL, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Last-Event-ID", lastID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "done after the drop") || !strings.Contains(string(got), `"id":2`) {
		t.Fatalf("resumed stream: %d %q", resp.StatusCode, got)
	}
}
