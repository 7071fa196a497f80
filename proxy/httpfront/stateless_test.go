package httpfront_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/httpfront"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// Two stateless (2026-07-28) clients share the front's one stateless
// session, each sending the same request ids (every go-sdk client counts
// from 1) and the same progress token: each gets its own answers and its
// own progress, never the other's, and one session serves them both. A
// subscriptions/listen is served as an SSE stream, acknowledged under the
// client's id, one at a time: a second while one is open is refused
// (409).
func TestStatelessClientsWithEqualIDsGetTheirOwnAnswers(t *testing.T) {
	var started sync.WaitGroup
	started.Add(1)
	f, ts := newFront(t, httpfront.Config{Token: token, Stateless: true, Serve: echoServe(&started)})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, who := range []string{"alice", "bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			progress := make(chan string, 4)
			c := mcp.NewClient(&mcp.Implementation{Name: who, Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					if r.Params.ProgressToken != "same-token" {
						progress <- fmt.Sprintf("the token %v", r.Params.ProgressToken)
						return
					}
					progress <- r.Params.Message
				},
			})
			cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: mcptest.BearerClient(token)}, nil)
			if err != nil {
				errs <- fmt.Errorf("%s: connect: %w", who, err)
				return
			}
			defer cs.Close()
			if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
				errs <- fmt.Errorf("%s: protocol %s", who, v)
				return
			}
			for i := range 20 {
				msg := fmt.Sprintf("%s-%d", who, i)
				p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"Msg": msg}}
				p.SetProgressToken("same-token")
				res, err := cs.CallTool(context.Background(), p)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", who, err)
					return
				}
				if got := res.Content[0].(*mcp.TextContent).Text; got != msg {
					errs <- fmt.Errorf("%s got %q, want %q", who, got, msg)
					return
				}
				select {
				case got := <-progress:
					if got != msg {
						errs <- fmt.Errorf("%s got the progress %q, want %q", who, got, msg)
						return
					}
				case <-time.After(30 * time.Second):
					errs <- fmt.Errorf("%s: no progress for %s", who, msg)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	started.Wait() // one Serve for both (a second would panic on Done)
	if n := f.Sessions(); n != 0 {
		t.Errorf("%d sessions with an id: stateless clients begin none", n)
	}

	listen := func(ctx context.Context, id int, accept string) *http.Response {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "subscriptions/listen")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first := listen(ctx, 7, "application/json, text/event-stream")
	defer first.Body.Close()
	rd := bufio.NewReader(first.Body)
	ack, _ := rd.ReadString('\n')
	for ack == "event: message\n" || ack == "\n" {
		ack, _ = rd.ReadString('\n')
	}
	if first.StatusCode != http.StatusOK || first.Header.Get("Content-Type") != "text/event-stream" ||
		!strings.Contains(ack, "notifications/subscriptions/acknowledged") || !strings.Contains(ack, `"io.modelcontextprotocol/subscriptionId":7`) {
		t.Fatalf("listen: %d %s %q, want an SSE stream acknowledged under the client's id", first.StatusCode, first.Header.Get("Content-Type"), ack)
	}
	for _, tc := range []struct {
		attack, accept string
		code           int
	}{
		{"a second listen while one is open", "application/json, text/event-stream", http.StatusConflict},
	} {
		res := listen(t.Context(), 8, tc.accept)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.code || !strings.Contains(string(b), `"id":8`) {
			t.Errorf("%s: %d %s, want %d", tc.attack, res.StatusCode, b, tc.code)
		}
	}
}

// A stateless client whose call's context ends closes that POST's stream
// (the cancellation, at 2026-07-28) and also POSTs notifications/cancelled,
// as the go-sdk's client does: the notification is accepted (a refusal
// would end the client's connection), the call is cancelled in the
// session, and the client's next call is served. A notification whose
// requestId names another client's request (equal ids: every go-sdk client
// counts from 1) cancels nothing, and one whose Mcp-Method header names
// another method is refused.
func TestStatelessClientThatCancelsACallGoesOn(t *testing.T) {
	cancelled := make(chan struct{}, 4)
	hold := make(chan struct{})
	defer close(hold)
	_, ts := newFront(t, httpfront.Config{Token: token, Stateless: true, Serve: func(ctx context.Context, s *httpfront.Session) error {
		srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
				cancelled <- struct{}{}
				return nil, nil, ctx.Err()
			case <-hold:
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil, nil
		})
		mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct{ Msg string }) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Msg}}}, nil, nil
		})
		return srv.Run(ctx, connTransport{s.Conn})
	}})
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: mcptest.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("protocol %s", v)
	}
	post := func(method, body string) int {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	// Another client's call in flight, under the id 1 too.
	other := make(chan string, 1)
	go func() {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "slow")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			other <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		other <- string(b)
	}()
	time.Sleep(300 * time.Millisecond) // the other call reaches the server
	if code := post("notifications/cancelled", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`); code != http.StatusAccepted {
		t.Errorf("a stateless notifications/cancelled: %d, want 202", code)
	}
	if code := post("tools/call", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`); code != http.StatusBadRequest {
		t.Errorf("a notification under another method's Mcp-Method: %d, want 400", code)
	}
	select {
	case <-cancelled:
		t.Fatal("a notification naming an id cancelled another client's call")
	case <-time.After(300 * time.Millisecond):
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a cancelled call was answered")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the call whose client went away was not cancelled in the session")
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"Msg": "still here"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "still here" {
		t.Fatalf("the call after the cancellation: %v %+v", err, res)
	}
	hold <- struct{}{} // the other client's call ends as it would
	if got := <-other; !strings.Contains(got, "slept") {
		t.Errorf("the other client's call: %s", got)
	}
}
