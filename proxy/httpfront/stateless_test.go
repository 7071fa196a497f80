package httpfront_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/httpfront"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// Two stateless (2026-07-28) clients share the front's one stateless
// session, each sending the same request ids (every go-sdk client counts
// from 1): each gets its own answers, never the other's, and one session
// serves them both.
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
			c := mcp.NewClient(&mcp.Implementation{Name: who, Version: "1"}, nil)
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
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"Msg": msg}})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", who, err)
					return
				}
				if got := res.Content[0].(*mcp.TextContent).Text; got != msg {
					errs <- fmt.Errorf("%s got %q, want %q", who, got, msg)
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
}
