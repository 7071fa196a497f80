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
		t.probe.saw(req.Method, resp)
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
// POST (the initialize: 400, 404 or 405 there means a legacy SSE server)
// and whether the server refused the credentials (401 or 403).
type statusProbe struct {
	mu        sync.Mutex
	firstPost int
	denied    int
}

func (p *statusProbe) saw(method string, resp *http.Response) {
	if resp == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if method == http.MethodPost && p.firstPost == 0 {
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
