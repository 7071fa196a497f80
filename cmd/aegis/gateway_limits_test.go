package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

var connCapRE = regexp.MustCompile(`leaves room for (\d+) HTTP connections`)

// TestHTTPGatewayOutlastsAConnectionFlood: under an open file limit of
// 320 (ulimit -n), a flood of 600 loopback connections that send their
// headers slowly, without the token, never takes aegis's descriptors: it
// lowers its connection cap to what the limit leaves beside its sessions
// and says so, answers the connections past it 503 at once, never fails
// an accept ("too many open files"), and serves a client again once the
// header timeout ended the flood.
func TestHTTPGatewayOutlastsAConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	t.Parallel() // it mostly waits on processes: beside the others
	l := newLive(t, "")
	h := l.httpGatewayUnder([]string{"sh", "-c", `ulimit -n 320 && exec "$0" "$@"`}, gatewayConfig(l.bin),
		// Longer than dialing the flood takes on a busy machine: at 4 s, a
		// full make test's load once let the first connections time out
		// (and free their places) before the client below came.
		"--max-sessions", "2", "--header-timeout", "10s")
	m := connCapRE.FindStringSubmatch(h.stderr.String())
	if m == nil {
		t.Fatalf("no word of the lowered connection cap:\n%s", h.stderr.String())
	}
	capConns, _ := strconv.Atoi(m[1])
	if capConns <= 0 || capConns >= 320 {
		t.Fatalf("a cap of %d connections under 320 descriptors", capConns)
	}
	addr := strings.TrimPrefix(strings.TrimSuffix(h.url, "/mcp"), "http://")
	var flood []net.Conn
	began := time.Now()
	for range 600 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(flood), err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
		flood = append(flood, c)
	}
	// A client with the token, during the flood, is told at once.
	start := time.Now()
	if d := time.Since(began); d >= 10*time.Second {
		t.Fatalf("dialing the flood took %v, longer than the header timeout: the test cannot tell a full gateway from one whose flood timed out", d)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}", h.token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a client during the flood had no answer in %v: %v\n%s", time.Since(start), err, h.stderr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "--max-conns") {
		t.Fatalf("a client during the flood: %d %q, want 503 naming --max-conns", resp.StatusCode, body)
	}
	// The header timeout ends the flood: a client is served again.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var cs *mcp.ClientSession
	for cs == nil {
		time.Sleep(200 * time.Millisecond)
		cl := mcp.NewClient(&mcp.Implementation{Name: "after-the-flood", Version: "1"}, nil)
		cs, err = cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(h.token)}, nil)
		if ctx.Err() != nil {
			t.Fatalf("no session after the flood: %v\n%s", err, h.stderr.String())
		}
	}
	defer cs.Close()
	if text, isErr := callText(t, cs, "example__echo", map[string]any{"message": "after the flood"}); isErr || !strings.Contains(text, "after the flood") {
		t.Fatalf("echo after the flood: %q", text)
	}
	if strings.Contains(h.stderr.String(), "too many open files") {
		t.Fatalf("aegis ran out of descriptors:\n%s", h.stderr.String())
	}
}
