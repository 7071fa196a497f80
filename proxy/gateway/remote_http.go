package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The HTTP side of a remote server: the http.Client the go-sdk's client
// transports use. It owns no framing (the SDK's transports do); it adds
// the server's headers, verifies TLS, keeps every request on the server's
// origin and counts the notifications/cancelled the server accepted.

// remoteHTTP is what every connection attempt to one remote server shares:
// the HTTP transport (so that connections are reused), the headers and
// the cancellations delivered.
type remoteHTTP struct {
	origin  string // scheme://host:port of the url, lowercase
	header  http.Header
	oauth   *OAuthClient // nil without oauth: (or with token_exchange:)
	behalf  *onBehalf    // nil without oauth: token_exchange:
	base    *http.Transport
	cancels *cancelTally
}

// newRemoteHTTP builds the HTTP side of rs. TLS is verified against
// rs.RootCAs, or the system's roots when it is nil, at TLS 1.2 or later.
// A proxy named by aegis's environment (HTTPS_PROXY, NO_PROXY) is used as
// by any Go program; a loopback url never goes through one.
func newRemoteHTTP(rs *RemoteServer) (*remoteHTTP, error) {
	u, err := url.Parse(rs.URL)
	if err != nil {
		return nil, errors.New("bad url") // not quoted: its query may hold a secret
	}
	base := rs.HTTPTransport()
	rs.OAuth.reachedBy(rs)
	return &remoteHTTP{origin: originOf(u), header: rs.Header.Clone(), oauth: rs.OAuth, base: base, cancels: newCancelTally()}, nil
}

// refusal says why the server's calls are refused (it needs a login, or
// this session cannot reach it on behalf of its caller), or "".
func (h *remoteHTTP) refusal() string {
	if need := h.oauth.refusal(); need != "" {
		return need
	}
	return h.behalf.refusal()
}

// tokenSource gives the Authorization header of a server's requests.
type tokenSource interface {
	token(ctx context.Context, force bool) (string, error)
	forbidden(challenges []string)
	refused(status int)
}

// originOf is u's scheme, host and port, lowercase, with the scheme's
// default port made explicit.
func originOf(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + host + ":" + port
}

// errRedirect refuses a redirect: the headers would follow it elsewhere.
var errRedirect = errors.New("the server answered with a redirect, which aegis does not follow (its headers would go along); put the url it redirects to in the file")

// client is the http.Client of one connection attempt; probe, when not
// nil, notes the statuses the attempt gets.
func (h *remoteHTTP) client(probe *statusProbe) *http.Client {
	return &http.Client{
		Transport:     &remoteTripper{h: h, probe: probe},
		CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect },
	}
}

// close ends the idle connections of the server's transport.
func (h *remoteHTTP) close() { h.base.CloseIdleConnections() }

// remoteTripper adds the server's headers to each request to its origin,
// refuses requests anywhere else, and counts the cancellations it
// delivered.
type remoteTripper struct {
	h     *remoteHTTP
	probe *statusProbe
}

// maxCancelFrame bounds the request bodies looked into for cancellations:
// a notifications/cancelled is some 150 bytes.
const maxCancelFrame = 4 << 10

func (t *remoteTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if o := originOf(req.URL); o != t.h.origin {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("aegis refused a request to %s, another origin than the server's url: its headers and messages go to that origin only", o)
	}
	discover := req.Method == http.MethodPost && req.Header.Get("Mcp-Method") == "server/discover"
	if req.Method == http.MethodPost && !discover && t.probe != nil {
		if resp, ok, err := t.probe.fallback(req); ok {
			return resp, err
		}
	}
	r := req.Clone(req.Context())
	for k, vs := range t.h.header {
		r.Header[k] = vs
	}
	cancels := 0
	if req.Method == http.MethodPost && req.GetBody != nil && req.ContentLength > 0 && req.ContentLength <= maxCancelFrame {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(body)
			body.Close()
			if bytes.Contains(b, []byte("notifications/cancelled")) {
				cancels = countCancelled(b)
			}
		}
	}
	var resp *http.Response
	var err error
	if o := t.h.oauth; o != nil {
		resp, err = t.withToken(r, o)
	} else if b := t.h.behalf; b != nil {
		resp, err = t.withToken(r, b)
	} else {
		resp, err = t.h.base.RoundTrip(r)
	}
	if t.probe != nil {
		t.probe.saw(req.Method, discover, resp)
		if discover {
			resp, err = t.probe.discovered(resp, err)
		}
	}
	if err == nil && cancels > 0 && resp.StatusCode/100 == 2 {
		t.h.cancels.add(cancels)
	}
	return resp, err
}

// withToken sends r with the server's access token, refreshed first when
// it has expired; a 401 refreshes it and sends r again, once, when its
// body can be sent again. A second 401 means the server refuses even a
// fresh token: the server needs a login.
func (t *remoteTripper) withToken(r *http.Request, o tokenSource) (*http.Response, error) {
	tok, err := o.token(r.Context(), false)
	if err != nil {
		return nil, err
	}
	r.Header.Set("Authorization", "Bearer "+tok)
	resp, err := t.h.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		o.forbidden(resp.Header.Values("WWW-Authenticate"))
	}
	if err != nil || resp.StatusCode != http.StatusUnauthorized || (r.Body != nil && r.GetBody == nil) {
		return resp, err
	}
	again := r.Clone(r.Context())
	if r.GetBody != nil {
		if again.Body, err = r.GetBody(); err != nil {
			return resp, nil
		}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if tok, err = o.token(r.Context(), true); err != nil {
		return nil, err
	}
	again.Header.Set("Authorization", "Bearer "+tok)
	resp, err = t.h.base.RoundTrip(again)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		o.refused(resp.StatusCode)
	}
	return resp, err
}

// statusProbe notes, for one connection attempt, the status of the first
// POST but a server/discover (the initialize: 400, 404 or 405 there means
// a legacy SSE server) and whether the server refused the credentials
// (401 or 403). It also holds the answer of a server/discover that the
// server did not answer as a server (held), which stands for the
// initialize that the SDK would send next.
type statusProbe struct {
	mu        sync.Mutex
	firstPost int
	denied    int
	held      *heldAnswer
}

// heldAnswer is a server/discover's failure: the HTTP answer (status,
// header, body) or the error of the round trip.
type heldAnswer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// maxHeldBody bounds the body of a held answer: an error page or a
// JSON-RPC error.
const maxHeldBody = 64 << 10

// unanswered reports whether status says that the server did not answer a
// request now, rather than how it answers it: it refused the credentials
// (401, 403), or it is not ready or overloaded (429, 502, 503, 504: what
// the SDK calls transient).
func unanswered(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// discovered takes the answer of a server/discover. The SDK falls back to
// the session protocol's initialize after any failure of the discover, as
// the specification says of a server that does not speak 2026-07-28. But
// a discover that was not answered says nothing of the protocols the
// server speaks: after refused credentials the initialize would only send
// them again (a second refusal, and a second token sent where it is not
// accepted), and after a server that is not ready it would speak the
// session protocol to a server that may speak 2026-07-28, for as long as
// the session lasts, and skip the backoff of the attempts. So such an
// answer is held, and stands for the initialize (fallback): the attempt
// fails as it would have with the session protocol alone, with the same
// error, and is retried, or not, as that failure says.
func (p *statusProbe) discovered(resp *http.Response, err error) (*http.Response, error) {
	var h *heldAnswer
	switch {
	case err != nil:
		h = &heldAnswer{err: err}
	case unanswered(resp.StatusCode):
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxHeldBody))
		resp.Body.Close()
		if rerr != nil {
			body = nil
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		h = &heldAnswer{status: resp.StatusCode, header: resp.Header.Clone(), body: body}
	default:
		return resp, err
	}
	p.mu.Lock()
	p.held = h
	p.mu.Unlock()
	return resp, err
}

// fallback answers req, the first POST after a server/discover that was
// not answered, with the discover's answer, and reports whether it did;
// req is not sent.
func (p *statusProbe) fallback(req *http.Request) (*http.Response, bool, error) {
	p.mu.Lock()
	h := p.held
	p.held = nil
	p.mu.Unlock()
	if h == nil {
		return nil, false, nil
	}
	if req.Body != nil {
		req.Body.Close()
	}
	if h.err != nil {
		return nil, true, h.err
	}
	resp := &http.Response{
		Status: fmt.Sprintf("%d %s", h.status, http.StatusText(h.status)), StatusCode: h.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h.header.Clone(), Body: io.NopCloser(bytes.NewReader(h.body)), ContentLength: int64(len(h.body)),
		Request: req,
	}
	p.saw(req.Method, false, resp)
	return resp, true, nil
}

func (p *statusProbe) saw(method string, discover bool, resp *http.Response) {
	if resp == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if method == http.MethodPost && !discover && p.firstPost == 0 {
		p.firstPost = resp.StatusCode
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		p.denied = resp.StatusCode
	}
}

// legacy reports the status of the first POST when it says the server
// speaks only the legacy SSE transport (the MCP specification's
// backwards compatibility: 400, 404 or 405), or 0.
func (p *statusProbe) legacy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.firstPost {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
		return p.firstPost
	}
	return 0
}

// refused returns 401 or 403 when the server refused the credentials.
func (p *statusProbe) refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.denied
}

// cancelTally counts the notifications/cancelled that reached a server:
// written to a local one's stdin ([downWriter]), or accepted by a remote
// one. A cancellation takes a ticket and waits until that many are
// delivered.
type cancelTally struct {
	mu      sync.Mutex
	issued  int
	sent    int
	changed chan struct{} // closed, and replaced, when sent changes
}

func newCancelTally() *cancelTally { return &cancelTally{changed: make(chan struct{})} }

func (c *cancelTally) add(n int) {
	c.mu.Lock()
	c.sent += n
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// issue takes the next ticket.
func (c *cancelTally) issue() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.issued++
	return c.issued
}

// pending returns the last ticket taken.
func (c *cancelTally) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.issued
}

// await waits at most d until ticket cancellations are delivered, and
// reports whether they are.
func (c *cancelTally) await(ticket int, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		done, ch := c.sent >= ticket, c.changed
		c.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		}
	}
}
