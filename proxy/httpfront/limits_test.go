package httpfront_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/httpfront"
)

// limitedFront serves a front (cfg, the echo server by default) on a
// loopback listener bounded by lim, as aegis gateway --listen does.
func limitedFront(t *testing.T, lim httpfront.Limits, cfg httpfront.Config) (*httpfront.Listener, string) {
	t.Helper()
	cfg.Token, cfg.Loopback = token, true
	if cfg.Serve == nil {
		cfg.Serve = echoServe(nil)
	}
	f, err := httpfront.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := lim.Listen(ln, nil)
	srv := lim.Server(f, nil)
	go srv.Serve(ll)
	t.Cleanup(func() {
		f.Close(context.Background())
		srv.Close()
	})
	return ll, ln.Addr().String()
}

// tokenTransport sends the token with each request, on connections of
// its own (dialed from local, when not empty), so that a test can close
// them.
type tokenTransport struct{ *http.Transport }

func (b tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return b.Transport.RoundTrip(r)
}

func tokenClient(t *testing.T, local string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tokenTransport{tr}}
}

// session opens a session with the go-sdk client over hc, without the
// standalone stream (one connection at a time), within a few seconds.
func session(hc *http.Client, addr string) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
}

// slowConns dials n connections from local ("" for any) that send the
// first line of a request and then nothing: a slow-headers flood.
func slowConns(t *testing.T, addr, local string, n int) []net.Conn {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

func waitConns(t *testing.T, ll *httpfront.Listener, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for ll.Conns() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", ll.Conns(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// turnedAway dials from local and sends a whole request: the answer must
// be a 503 at once, saying the limit met (says).
func turnedAway(t *testing.T, addr, local, says string) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}", token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("past the limit: no answer within 2 s: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), says) {
		t.Fatalf("past the limit: %d %q, want 503 saying %q", resp.StatusCode, body, says)
	}
}

// TestFloodOfSlowHeadersIsCapped: hundreds of connections that never
// finish their headers, without the token, hold at most --max-conns
// descriptors: at the limit a client is still served, one past it is
// answered 503 at once (not left hanging), and once the header timeout
// ends the flood a client is served again.
func TestFloodOfSlowHeadersIsCapped(t *testing.T) {
	const max = 300
	// The header timeout must outlast the steps at and past the limit:
	// at 2 s, a make test busy enough that the client at the limit took
	// longer saw the flood closed under it (0 connections, want 298).
	lim := httpfront.Limits{MaxConns: max, MaxConnsPerClient: max, HeaderTimeout: 8 * time.Second}
	ll, addr := limitedFront(t, lim, httpfront.Config{})
	flood := slowConns(t, addr, "", max-2)
	waitConns(t, ll, max-2, 5*time.Second)

	// At the limit: the flood and the client's connections (two while
	// the initialize's stream ends).
	hc := tokenClient(t, "")
	cs, err := session(hc, addr)
	if err != nil {
		t.Fatalf("a client at the limit: %v", err)
	}
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"Msg": "at the limit"}}); err != nil || res.IsError {
		t.Fatalf("a call at the limit: %v %+v", err, res)
	}
	if n := ll.Conns(); n > max {
		t.Fatalf("%d connections at the limit of %d", n, max)
	}
	cs.Close()
	hc.Transport.(tokenTransport).CloseIdleConnections()
	waitConns(t, ll, max-2, 5*time.Second)

	// One past the limit.
	flood = append(flood, slowConns(t, addr, "", 2)...)
	waitConns(t, ll, max, 5*time.Second)
	start := time.Now()
	turnedAway(t, addr, "", "--max-conns")
	if _, err := session(tokenClient(t, ""), addr); err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Fatalf("a client past the limit: %v, want 503", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the clients past the limit waited %v", d)
	}
	if n := ll.Conns(); n != max {
		t.Fatalf("%d connections past the limit, want %d", n, max)
	}

	// The header timeout closes the flood.
	for _, c := range flood {
		c.SetReadDeadline(time.Now().Add(12 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			t.Fatalf("a connection that never sent its headers is still open: %v", err)
		}
	}
	waitConns(t, ll, 0, 2*time.Second)
	cs, err = session(tokenClient(t, ""), addr)
	if err != nil {
		t.Fatalf("a client after the flood: %v", err)
	}
	cs.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestOneAddressCannotTakeEveryConnection: one client address holds at
// most --max-conns-per-client connections; past that it is answered 503,
// while a client from another address is served.
func TestOneAddressCannotTakeEveryConnection(t *testing.T) {
	lim := httpfront.Limits{MaxConns: 200, MaxConnsPerClient: 100}
	ll, addr := limitedFront(t, lim, httpfront.Config{})
	slowConns(t, addr, "127.0.0.2", 98)
	waitConns(t, ll, 98, 5*time.Second)
	// At its limit, the flooding address is still served.
	hc := tokenClient(t, "127.0.0.2")
	cs, err := session(hc, addr)
	if err != nil {
		t.Fatalf("the address at its limit: %v", err)
	}
	cs.Close()
	hc.Transport.(tokenTransport).CloseIdleConnections()
	waitConns(t, ll, 98, 5*time.Second)
	slowConns(t, addr, "127.0.0.2", 2)
	waitConns(t, ll, 100, 5*time.Second)
	turnedAway(t, addr, "127.0.0.2", "--max-conns-per-client")
	cs, err = session(tokenClient(t, "127.0.0.1"), addr)
	if err != nil {
		t.Fatalf("another address beside the flood: %v", err)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	cs.Close()
}

// TestSlowBodyIsCut: a client with the token that sends a body slower
// than --body-timeout has its connection closed, whether it begins a
// session or posts in one; an answer that streams longer than the body
// timeout, once the body is in, is not cut.
func TestSlowBodyIsCut(t *testing.T) {
	lim := httpfront.Limits{BodyTimeout: 500 * time.Millisecond, ConnIdleTimeout: 400 * time.Millisecond}
	ll, addr := limitedFront(t, lim, httpfront.Config{Serve: func(ctx context.Context, s *httpfront.Session) error {
		srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			time.Sleep(1200 * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slow and whole"}}}, nil, nil
		})
		return srv.Run(ctx, connTransport{s.Conn})
	}})
	hc := tokenClient(t, "")
	cs, err := session(hc, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow"})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "slow and whole" {
		t.Fatalf("an answer slower than the body timeout: %v %+v", err, res)
	}
	for _, sid := range []string{"", cs.ID()} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-11-25\r\n", token)
		if sid != "" {
			fmt.Fprintf(c, "Mcp-Session-Id: %s\r\n", sid)
		}
		io.WriteString(c, "Content-Length: 1000\r\n\r\n{\"jsonrpc\":")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(c) // an answer (400), then the close
		if err != nil {
			t.Fatalf("session %q: a slow body's connection still open after %v: %v", sid, time.Since(start), err)
		}
		if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
			t.Fatalf("session %q: a slow body's connection closed after %v, want about 500ms", sid, d)
		}
	}
	// A kept-alive connection without a request is closed too.
	hc.Transport.(tokenTransport).CloseIdleConnections()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", token)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a GET of no session: %v %v", err, resp)
	}
	io.ReadAll(resp.Body)
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("an idle kept-alive connection: %v, want it closed", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("an idle kept-alive connection closed after %v", d)
	}
	waitConns(t, ll, 0, 2*time.Second)
}

// TestFitKeepsDescriptorsFree: the connections get what the open file
// limit leaves beside the reserve, and a limit that leaves none refuses.
func TestFitKeepsDescriptorsFree(t *testing.T) {
	lim, nofile, err := httpfront.Limits{MaxConns: 1 << 30}.Fit(100)
	if nofile == 0 {
		t.Skip("no open file limit on this system")
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := int(nofile) - httpfront.BaseReserve - 100; lim.MaxConns != want || lim.MaxConnsPerClient > want {
		t.Fatalf("limits %+v under %d descriptors, want %d connections", lim, nofile, want)
	}
	if _, _, err := (httpfront.Limits{}).Fit(int(nofile)); !errors.Is(err, httpfront.ErrFileLimit) {
		t.Fatalf("a reserve of every descriptor: %v", err)
	}
	if lim, _, _ := (httpfront.Limits{MaxConns: 10}).Fit(0); lim.MaxConns != 10 || lim.MaxConnsPerClient != 10 {
		t.Fatalf("limits under the file limit changed: %+v", lim)
	}
}
