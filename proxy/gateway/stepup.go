package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Step-up authorization through the host: a url server with oauth: (a
// login) that answers a call 403 with error="insufficient_scope" asks
// for more scopes than its token has. Invariants:
//
//   - Toward a host that declared URL elicitation
//     (capabilities.elicitation.url), the gateway runs the authorization
//     code flow itself (the one aegis auth login runs: PKCE, state, the
//     server's resource, RFC 9207 iss checked) for the token's scopes and
//     those the server named, and the call is answered MCP's
//     URLElicitationRequired (-32042) whose one url-mode elicitation
//     opens the authorization request. The browser comes back to a
//     loopback listener that the gateway opens for that flow only.
//     Every other host gets the refusal that names the scopes and says
//     to run aegis auth login, unchanged.
//   - One flow per server at a time: a call refused meanwhile gets the
//     same elicitation. A flow ends at its first callback that carries
//     its state, or after stepUpTTL; its listener is then closed. A
//     callback without the flow's state, a second callback, or one after
//     the flow expired is refused and changes nothing.
//   - The new token is stored encrypted as aegis auth login stores it,
//     used from the next request on, and the host is then sent
//     notifications/elicitation/complete (also when the flow failed: the
//     host's retry then starts a new one). The token, the code and the
//     verifier are never recorded, logged or said; the authorization
//     request (which holds none of them) is.

// stepUpTTL bounds a step-up flow: its listener closes after it.
const stepUpTTL = 5 * time.Minute

// stepUpFlow is one step-up authorization of a server.
type stepUpFlow struct {
	id      string // the elicitation's id
	url     string // the authorization request
	scopes  string // the scopes the server named
	expires time.Time
	cb      *callback
	done    chan struct{} // closed when the flow ended
	err     error         // why it failed, once done
}

// over reports whether the flow ended or expired.
func (f *stepUpFlow) over(now time.Time) bool {
	select {
	case <-f.done:
		return true
	default:
	}
	return !now.Before(f.expires)
}

// callback is the loopback address the browser comes back to at the end
// of a step-up flow: it takes one answer that carries the flow's state,
// before the flow expires, and hands it to the flow.
type callback struct {
	path    string
	expires time.Time
	now     func() time.Time
	results chan loginAnswer
	done    <-chan struct{} // closed when the flow ended
	outcome func() error    // why the flow failed, once done

	mu    sync.Mutex
	state string // the state of the authorization request; "" before it
	used  bool
}

// loginAnswer is what the authorization server sent the browser back
// with.
type loginAnswer struct {
	res *auth.AuthorizationResult
	err error
}

func newCallback(path string, expires time.Time, now func() time.Time, done <-chan struct{}, outcome func() error) *callback {
	if path == "" {
		path = "/"
	}
	return &callback{path: path, expires: expires, now: now, results: make(chan loginAnswer, 1), done: done, outcome: outcome}
}

// expect sets the state of the authorization request.
func (c *callback) expect(state string) {
	c.mu.Lock()
	c.state = state
	c.mu.Unlock()
}

func (c *callback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != c.path {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	page := func(status int, msg string) {
		w.WriteHeader(status)
		io.WriteString(w, "<p>aegis: "+html.EscapeString(msg)+"</p>\n")
	}
	q := r.URL.Query()
	c.mu.Lock()
	switch {
	case !c.now().Before(c.expires):
		c.mu.Unlock()
		page(http.StatusGone, "this authorization expired; the agent's next call starts a new one")
		return
	case c.state == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(c.state)) != 1:
		c.mu.Unlock()
		page(http.StatusBadRequest, "this answer is not the one of the authorization aegis asked for (its state does not match); it was ignored")
		return
	case c.used:
		c.mu.Unlock()
		page(http.StatusConflict, "this authorization was already answered; it was ignored")
		return
	}
	var a loginAnswer
	switch {
	case q.Get("error") != "":
		a.err = fmt.Errorf("the authorization server refused: %s %s", q.Get("error"), q.Get("error_description"))
	case q.Get("code") != "":
		a.res = &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}
	default:
		c.mu.Unlock()
		page(http.StatusBadRequest, "this address is where the authorization server sends the browser back; it came without a code")
		return
	}
	c.used = true
	c.mu.Unlock()
	select {
	case c.results <- a: // buffered for the one answer taken
	default:
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		page(http.StatusAccepted, "aegis is still exchanging the authorization; go back to your agent")
		return
	}
	if err := c.outcome(); err != nil {
		page(http.StatusBadGateway, "the authorization failed ("+err.Error()+"); the agent's next call starts a new one")
		return
	}
	page(http.StatusOK, "authorized. You can close this tab and go back to your agent.")
}

// forbidden notes a 403 of the server: with error="insufficient_scope"
// (step-up), the scopes it asks for, which the next error of a call
// names (stepUp), and its challenge, which a step-up flow starts from.
func (o *OAuthClient) forbidden(challenges []string) {
	chs, err := oauthex.ParseWWWAuthenticate(challenges)
	if err != nil {
		return
	}
	for _, c := range chs {
		if c.Scheme == "bearer" && c.Params["error"] == "insufficient_scope" {
			o.mu.Lock()
			o.scope = c.Params["scope"]
			if o.scope == "" {
				o.scope = "(not named)"
			}
			o.challenge, o.stepScope = append([]string(nil), challenges...), o.scope
			o.mu.Unlock()
			return
		}
	}
}

// stepUpFlow starts the step-up flow of the server's last 403
// insufficient_scope, or returns the one that runs; life bounds it,
// ended is called with its id, and why it failed (scrubbed), when it
// ended.
func (o *OAuthClient) stepUpFlow(life context.Context, ended func(id string, err error)) (*stepUpFlow, error) {
	o.stepMu.Lock()
	defer o.stepMu.Unlock()
	now := o.now()
	if f := o.flow; f != nil && !f.over(now) {
		return f, nil
	}
	o.mu.Lock()
	challenge, scopes := o.challenge, o.stepScope
	o.challenge = nil
	keep := append([]string{}, o.tok.Scopes...)
	secret := o.secret
	o.mu.Unlock()
	if challenge == nil || o.remote == nil {
		return nil, errors.New("no 403 insufficient_scope to start from")
	}

	ln, redirect, ru, err := ListenForRedirect(o.redirect)
	if err != nil {
		return nil, err
	}

	f := &stepUpFlow{id: "aegis-step-up-" + rand.Text(), scopes: scopes, expires: now.Add(stepUpTTL), done: make(chan struct{})}
	f.cb = newCallback(ru.Path, f.expires, o.now, f.done, func() error { return f.err })
	srv := &http.Server{Handler: f.cb, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)

	asked := make(chan string, 1)
	var code string // the answer's code, which no error may show (set before Authorize returns)
	fetch := func(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		u, err := url.Parse(a.URL)
		if err != nil || u.Query().Get("state") == "" {
			return nil, errors.New("the authorization request has no state")
		}
		f.cb.expect(u.Query().Get("state"))
		asked <- a.URL
		select {
		case r := <-f.cb.results:
			if r.res != nil {
				code = r.res.Code
			}
			return r.res, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer from the browser within %s", stepUpTTL)
		}
	}
	login, err := LoginOf(o.cfg, o.remote, secret, redirect, fetch, keep)
	if err != nil {
		ln.Close()
		return nil, err
	}
	fctx, cancel := context.WithDeadline(context.WithoutCancel(life), f.expires)
	stop := context.AfterFunc(life, cancel)
	req, _ := http.NewRequestWithContext(fctx, http.MethodPost, o.url, nil)
	resp := &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Www-Authenticate": challenge}, Body: http.NoBody, Request: req}
	var shown bool // the request reached the host: it is told the end
	go func() {
		err := login.Handler.Authorize(fctx, req, resp)
		if err == nil {
			var st StoredToken
			if st, err = login.Token(); err == nil {
				err = o.adopt(st)
			}
		}
		if err != nil {
			msg := login.Scrub(err.Error())
			for _, v := range append(o.secrets(), code) {
				if len(v) >= 4 {
					msg = strings.ReplaceAll(msg, v, "[redacted]")
				}
			}
			err = errors.New(msg)
		}
		f.err = err
		close(f.done)
		stop()
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(sctx)
		scancel()
		o.stepMu.Lock()
		tell := shown
		o.stepMu.Unlock()
		if tell {
			ended(f.id, err)
		}
	}()
	select {
	case f.url = <-asked:
	case <-f.done:
		return nil, f.err
	}
	shown = true
	o.flow = f
	return f, nil
}

// adopt stores st, a token the step-up flow obtained, and uses it from
// now on.
func (o *OAuthClient) adopt(st StoredToken) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.store.Save(st); err != nil {
		return fmt.Errorf("save the token: %w", err)
	}
	o.tok, o.failed, o.seen = st, "", o.modTime()
	return nil
}

// stepUpRefusal is the error of a call that server refused for want of
// scopes: toward a host that takes URL elicitations, the elicitation of
// a step-up flow, else (or when no flow can start) refusal, the refusal
// that says to run aegis auth login.
func (g *gateway) stepUpRefusal(r *remoteDown, server, refusal string) error {
	plain := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: server %s: %s", server, refusal)}
	if !g.hostTakesURLElicitation() {
		return plain
	}
	f, err := r.http.oauth.stepUpFlow(r.life, func(id string, err error) {
		if err != nil {
			g.log.Warn("a step-up authorization failed; the next call refused for want of scopes starts a new one", "server", server, "err", r.scrub(err.Error()))
		}
		g.elicitationComplete(id)
	})
	if err != nil {
		g.log.Warn("start a step-up authorization", "server", server, "err", r.scrub(err.Error()))
		plain.Message += fmt.Sprintf(" (aegis could not ask for them through the host: %s)", r.scrub(err.Error()))
		return plain
	}
	msg := fmt.Sprintf("aegis: server %s asks for scopes %q for this call, which its token lacks. Open the link to authorize them at its authorization server (until %s UTC); the agent calls again once you have.",
		server, f.scopes, f.expires.UTC().Format("15:04:05"))
	el := &mcp.ElicitParams{Mode: "url", ElicitationID: f.id, URL: f.url, Message: msg}
	data, _ := json.Marshal(map[string]any{
		"aegis": map[string]string{"code": "STEP_UP_REQUIRED", "server": server, "scopes": f.scopes, "layer": "gateway",
			"hint": "open the link of the elicitation and authorize the scopes, then call again; or add them to oauth: scopes: and run aegis auth login " + server},
		"elicitations": []*mcp.ElicitParams{el},
	})
	return &jsonrpc.Error{Code: mcp.CodeURLElicitationRequired, Data: data,
		Message: fmt.Sprintf("aegis gateway: server %s asks for more scopes (%s, 403 insufficient_scope): open the link of the elicitation to authorize them, then call again", server, f.scopes)}
}

// hostTakesURLElicitation reports whether the host declared URL
// elicitation: in its initialize (a host that probed with server/discover
// first made the servers be told the gateway's own capabilities), or in
// its requests' _meta (a stateless host).
func (g *gateway) hostTakesURLElicitation() bool {
	if !g.el.hostURL {
		return false
	}
	if g.stateless.Load() {
		return true
	}
	if g.srv == nil {
		return false
	}
	for ss := range g.srv.Sessions() {
		if p := ss.InitializeParams(); p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil && p.Capabilities.Elicitation.URL != nil {
			return true
		}
	}
	return false
}

// elicitationComplete tells the host that elicitation id ended.
func (g *gateway) elicitationComplete(id string) {
	if g.srv == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for ss := range g.srv.Sessions() {
			if err := ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: id}); err != nil {
				g.log.Warn("tell the host an elicitation is complete", "elicitation", id, "err", err)
			}
		}
	}()
}
