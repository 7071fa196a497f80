package httpfront

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// A long session (thousands of requests, each its own stream) keeps what
// the front holds for resumption bounded: the SDK's memory store kept an
// entry per stream until the session ended, so a steady client grew the
// process without end.
func TestReplayStoreStaysBoundedOverALongSession(t *testing.T) {
	const tok = "test-token-0123456789abcdef"
	f, err := New(Config{Token: tok, Serve: func(ctx context.Context, s *Session) error {
		srv := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{ Msg string }) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Msg}}}, nil, nil
		})
		return srv.Run(ctx, connT{s.Conn})
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(f)
	defer ts.Close()
	defer f.Close(context.Background())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: mcptest.BearerClient(tok)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	msg := strings.Repeat("x", 2000) // 400 answers of 2 kB pass ReplayBytes three times
	for i := range 400 {
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"Msg": msg}}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	f.store.mu.Lock()
	if len(f.store.sessions) != 1 {
		t.Fatalf("%d sessions in the replay store, want 1", len(f.store.sessions))
	}
	for _, s := range f.store.sessions {
		if len(s.streams) > ReplayAnswered+2 || len(s.answered) > ReplayAnswered {
			t.Errorf("the session keeps %d streams (%d answered) after 400 calls; want at most %d answered and the standalone one",
				len(s.streams), len(s.answered), ReplayAnswered)
		}
		if s.bytes > ReplayBytes {
			t.Errorf("the session keeps %d bytes, over ReplayBytes (%d)", s.bytes, ReplayBytes)
		}
		// The latest answer can still be had again; the first cannot.
		last := s.answered[len(s.answered)-1]
		f.store.mu.Unlock()
		n := 0
		for _, err := range f.store.After(context.Background(), cs.ID(), last, -1) {
			if err != nil {
				t.Errorf("the last answered stream is not kept: %v", err)
			}
			n++
		}
		if n == 0 {
			t.Error("the last answered stream replays nothing")
		}
		f.store.mu.Lock()
	}
	f.store.mu.Unlock()
	cs.Close()
	// Ending the session lets all of it go.
	for deadline := time.Now().Add(10 * time.Second); f.Sessions() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := f.store.bytes(); n != 0 || f.Sessions() != 0 {
		t.Errorf("after the session ended: %d sessions, %d bytes kept", f.Sessions(), n)
	}
}

// A resume of a stream the store no longer keeps is refused as purged.
func TestReplayOfAForgottenStreamIsRefused(t *testing.T) {
	r := newReplayStore()
	ctx := context.Background()
	answer := context.WithValue(ctx, answerKey{}, true)
	for i := range ReplayAnswered + 1 {
		id := string(rune('a' + i))
		r.Open(ctx, "S", id)
		r.Append(ctx, "S", id, nil)
		r.Append(answer, "S", id, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	}
	for _, err := range r.After(ctx, "S", "a", 0) {
		if !errors.Is(err, mcp.ErrEventsPurged) {
			t.Fatalf("resume of the oldest answered stream: %v, want ErrEventsPurged", err)
		}
	}
	// An unanswered stream outlives answered ones opened after it.
	r.Open(ctx, "S", "open")
	r.Append(ctx, "S", "open", []byte(`{"jsonrpc":"2.0","method":"notifications/progress"}`))
	for i := range 3 * ReplayAnswered {
		id := "later" + string(rune('a'+i))
		r.Open(ctx, "S", id)
		r.Append(answer, "S", id, []byte(`{}`))
	}
	n := 0
	for d, err := range r.After(ctx, "S", "open", -1) {
		if err != nil {
			t.Fatal(err)
		}
		n += len(d)
	}
	if n == 0 {
		t.Error("the unanswered stream was forgotten")
	}
	r.SessionClosed(ctx, "S")
	if r.bytes() != 0 || len(r.sessions) != 0 {
		t.Errorf("a closed session left %d bytes", r.bytes())
	}
}

type connT struct{ c mcp.Connection }

func (t connT) Connect(context.Context) (mcp.Connection, error) { return t.c, nil }
