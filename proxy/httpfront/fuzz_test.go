package httpfront_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aegis-dev/aegis/proxy/httpfront"
)

// FuzzFrontRefusesWithoutTheToken: whatever the method, Host, Origin,
// Authorization, session id and body, a request that does not carry the
// token exactly is refused (4xx) and never starts or reaches a session;
// nothing panics.
func FuzzFrontRefusesWithoutTheToken(f *testing.F) {
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	f.Add("POST", "127.0.0.1:1", "", "Bearer "+token, "", init)
	f.Add("POST", "localhost", "http://localhost", "bearer "+token+" ", "", init)
	f.Add("POST", "[::1]:9", "null", "Bearer", "x", "[]")
	f.Add("GET", "evil.example.com", "http://127.0.0.1:1", "Basic "+token, "abc", "")
	f.Add("DELETE", "127.0.0.2", "", "Bearer "+token+"x", "", "{")
	f.Fuzz(func(t *testing.T, method, host, origin, auth, sid, body string) {
		var started atomic.Bool
		fr, err := httpfront.New(httpfront.Config{Token: token, Loopback: true, Serve: func(ctx context.Context, s *httpfront.Session) error {
			started.Store(true)
			return errors.New("served nothing") // the initialize is answered with this
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer fr.Close(context.Background())
		req, err := http.NewRequest(method, "http://127.0.0.1/mcp", strings.NewReader(body))
		if err != nil {
			return
		}
		req.Host = host
		for k, v := range map[string]string{"Origin": origin, "Authorization": auth, "Mcp-Session-Id": sid} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		fr.ServeHTTP(w, req)
		tokenOK := strings.HasPrefix(strings.ToLower(req.Header.Get("Authorization")), "bearer ") &&
			strings.TrimSpace(req.Header.Get("Authorization")[len("bearer "):]) == token
		if !tokenOK && (w.Code < 400 || w.Code >= 500 || started.Load() || fr.Sessions() != 0) {
			t.Fatalf("%s Host=%q Origin=%q Authorization=%q: status %d, started %v, %d sessions", method, host, origin, auth, w.Code, started.Load(), fr.Sessions())
		}
	})
}
