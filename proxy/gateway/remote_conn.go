package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/schemas"
)

// The sessions of remote servers. Invariants:
//
//   - A remote server is connected after the host's initialize has been
//     read, as a local one is initialized, so it is told the host's
//     capabilities. Each gets remoteAttempts attempts, remoteBackoff apart,
//     each bounded by remoteAttemptTimeout; a refused certificate or
//     refused credentials (401, 403) end them at once, since trying again
//     cannot help. A server none of whose attempts connects is skipped as
//     a local server that fails to start is.
//   - Every state is a server.connection event (schemas.ServerConnection):
//     connected with the transport that carried the session, retrying
//     with the attempt and why, failed with why, closed at the end. The
//     url in it has no userinfo, query or fragment, and no error in it,
//     on stderr or in a call's outcome holds a header value or the url's
//     query (remoteDown.scrub).
//   - A session that ends before the gateway closes it (the server ended
//     it or restarted, so that it answers 404 to its session id, or its
//     connection failed for good) is recorded as failed (without attempt)
//     and said on stderr, and the gateway connects the server again at
//     once, then reconnectBackoff apart for as long as it runs, recording
//     each failed attempt as retrying and the new session as connected.
//     The new session replaces the old one everywhere at once (every
//     table routes by the server's downstream, whose session() is the
//     one that runs), and the server's tools, resources and prompts are
//     listed again through the relisting path (relist.go), checked and
//     pinned as after a list_changed.
//   - A call of a server whose session is lost waits up to
//     remoteAttemptTimeout for it to come back, and is then refused with
//     an error that says so, after its intent and with its outcome, and
//     never sent. A call whose connection failed while it was in flight
//     fails with an error that says whether it may have reached the
//     server; no call is sent twice.
//   - At the end the gateway closes each session (streamable HTTP sends
//     its DELETE) once the notifications/cancelled owed to the server are
//     delivered, and records it closed.
//   - Tasks are not carried to a remote server: the task layer speaks
//     JSON-RPC on a local server's pipes, which a remote one has not.

const (
	remoteAttempts       = 3
	remoteAttemptTimeout = 10 * time.Second
)

// remoteBackoff is the wait before each attempt after the first.
var remoteBackoff = []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond}

// remoteDown is the gateway's side of one remote server's session.
type remoteDown struct {
	name   string
	srv    *RemoteServer
	http   *remoteHTTP
	shown  string           // the url as recorded
	used   policy.Transport // the transport that carries the session (under mu once connected)
	client *mcp.Client      // the client every session of the server is made with
	// life ends when the gateway closes the session: it bounds the
	// reconnections.
	life context.Context
	stop context.CancelFunc

	mu sync.Mutex
	cs *mcp.ClientSession // the session that runs, or the last one
	// release ends what the session's connection holds (the legacy
	// transport's stream); nil when there is nothing.
	release func()
	closing bool          // the gateway is closing the session
	lost    string        // why the session ended before that; "" while one runs
	back    chan struct{} // closed when a lost session is replaced
}

// session is the server's session that runs now (or the last one).
func (r *remoteDown) session() *mcp.ClientSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cs
}

// shownURL is raw without userinfo, query and fragment: what the record
// holds.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "https://invalid"
	}
	return strings.ToLower(u.Scheme) + "://" + u.Host + u.EscapedPath()
}

// scrub returns s without the secrets of the server: its url's query and
// each header value (of 4 bytes or more: a shorter one would blank out
// ordinary words and can hardly be a secret).
func (r *remoteDown) scrub(s string) string {
	if u, err := url.Parse(r.srv.URL); err == nil && u.RawQuery != "" {
		for _, full := range []string{r.srv.URL, u.String()} {
			s = strings.ReplaceAll(s, full, r.shown)
		}
		s = strings.ReplaceAll(s, "?"+u.RawQuery, "")
	}
	for _, vs := range r.srv.Header {
		for _, v := range vs {
			if len(v) >= 4 {
				s = strings.ReplaceAll(s, v, "[redacted]")
			}
		}
	}
	secrets := r.srv.OAuth.secrets()
	if r.http != nil {
		secrets = append(secrets, r.http.behalf.secrets()...)
	}
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// scrubErr is err scrubbed. A server's JSON-RPC error keeps its code and
// data.
func (r *remoteDown) scrubErr(err error) error {
	if err == nil {
		return nil
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		c := *we
		c.Message = r.scrub(c.Message)
		return &c
	}
	return errors.New(r.scrub(err.Error()))
}

// lostReason says why the session ended before the gateway closed it, or
// "" while it runs.
func (r *remoteDown) lostReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// connectRemotes connects every remote server of servers at once and adds
// those that connect to g.downs; it appends those that do not to failed,
// which it returns in the file's order.
func (g *gateway) connectRemotes(ctx context.Context, servers []Server, caps *mcp.ClientCapabilities, failed []ServerFailure) []ServerFailure {
	type result struct {
		d   *downstream
		err error
	}
	results := make([]result, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { results[i].d, results[i].err = g.connectRemote(ctx, s, caps) })
	}
	wg.Wait()
	for i, s := range servers {
		if err := results[i].err; err != nil {
			g.skip(s.Name, "connect", err)
			failed = append(failed, ServerFailure{Server: s.Name, Stage: "connect", Err: err})
			continue
		}
		g.downs[s.Name] = results[i].d
	}
	order := map[string]int{}
	for i, s := range g.cfg.Servers {
		order[s.Name] = i
	}
	slices.SortStableFunc(failed, func(a, b ServerFailure) int { return order[a.Server] - order[b.Server] })
	return failed
}

// connectRemote connects one remote server, with its attempts, and
// records each state. Its error is scrubbed.
func (g *gateway) connectRemote(ctx context.Context, s Server, caps *mcp.ClientCapabilities) (*downstream, error) {
	r := &remoteDown{name: s.Name, srv: s.Remote, shown: shownURL(s.Remote.URL)}
	h, err := newRemoteHTTP(s.Remote)
	if err != nil {
		return nil, err
	}
	if x := s.Remote.Exchange; x != nil {
		caller := g.cfg.CallerToken
		if caller == nil {
			caller = func() string { return "" }
		}
		h.behalf = &onBehalf{x: x, caller: caller, who: g.cfg.Principal.Name(), note: func(n map[string]string) {
			if _, err := g.sess.Fact(schemas.KindNote, n); err != nil {
				g.log.Warn("record a token exchange", "server", s.Name, "err", err)
			}
		}}
	}
	r.http = h
	r.client = g.newClient(s.Name, caps, nil)
	client := r.client
	if need := r.http.refusal(); need != "" {
		// Not tried: the server would refuse aegis without a token.
		err := errors.New(need)
		g.connEvent(r, "", schemas.ConnFailed, 1, err.Error())
		h.close()
		return nil, err
	}
	attempt := 0
	var tried policy.Transport
	var last error
attempts:
	for attempt < remoteAttempts {
		if attempt > 0 {
			wait := remoteBackoff[min(attempt-1, len(remoteBackoff)-1)]
			fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s: connection attempt %d of %d failed: %v; trying again in %v\n", s.Name, attempt, remoteAttempts, last, wait)
			g.connEvent(r, tried, schemas.ConnRetrying, attempt, last.Error())
			select {
			case <-ctx.Done():
				last = fmt.Errorf("aegis was stopped before attempt %d: %w", attempt+1, context.Cause(ctx))
				break attempts
			case <-time.After(wait):
			}
		}
		attempt++
		var cs *mcp.ClientSession
		var final bool
		var release func()
		cs, tried, release, final, err = g.dial(ctx, r, client)
		if err == nil {
			r.used = tried
			r.cs, r.release = cs, release
			r.life, r.stop = context.WithCancel(context.WithoutCancel(ctx))
			g.connEvent(r, tried, schemas.ConnConnected, attempt, "")
			d := &downstream{name: s.Name, remote: r}
			go g.watchRemote(d)
			return d, nil
		}
		last = errors.New(r.scrub(err.Error()))
		if need := r.http.behalf.refusal(); need != "" {
			// The exchange was refused: that, not the SDK's wrapping, is why.
			last = errors.New(r.scrub(need))
		}
		if final || ctx.Err() != nil {
			break
		}
	}
	g.connEvent(r, tried, schemas.ConnFailed, attempt, last.Error())
	h.close()
	return nil, last
}

// dial makes one connection attempt: streamable HTTP, falling back to the
// legacy SSE transport when the server answers the initialize POST with
// 400, 404 or 405; or SSE alone. It returns the session, the transport it
// tried last, what ends the session's stream (nil when nothing must),
// and whether the failure is final (another attempt cannot help).
func (g *gateway) dial(ctx context.Context, r *remoteDown, client *mcp.Client) (*mcp.ClientSession, policy.Transport, func(), bool, error) {
	actx, cancel := context.WithTimeout(ctx, remoteAttemptTimeout)
	defer cancel()
	probe := &statusProbe{}
	if r.srv.Transport == policy.TransportSSE {
		cs, release, err := g.dialSSE(actx, r, client, probe)
		return cs, policy.TransportSSE, release, finalFailure(err, probe) || r.http.refusal() != "", g.credentials(r, err, probe)
	}
	cs, err := client.Connect(actx, &mcp.StreamableClientTransport{Endpoint: r.srv.URL, HTTPClient: r.http.client(probe)}, g.remoteSession())
	if err == nil {
		return cs, policy.TransportStreamable, nil, false, nil
	}
	status := probe.legacy()
	if status == 0 {
		return nil, policy.TransportStreamable, nil, finalFailure(err, probe) || r.http.refusal() != "", g.credentials(r, err, probe)
	}
	sse := &statusProbe{}
	cs, release, err := g.dialSSE(actx, r, client, sse)
	if err != nil {
		err = fmt.Errorf("the initialize POST got %d %s, so aegis tried the legacy SSE transport: %w", status, http.StatusText(status), g.credentials(r, err, sse))
		return nil, policy.TransportSSE, nil, finalFailure(err, sse), err
	}
	return cs, policy.TransportSSE, release, false, nil
}

// dialSSE connects over the legacy SSE transport. Its stream lives as long
// as the session (the SDK ties it to the context it connects with), not
// as long as the attempt: only the handshake is bounded by ctx. It
// returns what ends the stream.
func (g *gateway) dialSSE(ctx context.Context, r *remoteDown, client *mcp.Client, probe *statusProbe) (*mcp.ClientSession, func(), error) {
	t := &sseDial{inner: &mcp.SSEClientTransport{Endpoint: r.srv.URL, HTTPClient: r.http.client(probe)}}
	cs, err := client.Connect(ctx, t, downstreamSession)
	if err != nil {
		t.end()
		return nil, nil, err
	}
	return cs, t.end, nil
}

// sseDial is the SDK's SSE client transport, connected under a context
// that outlives the attempt.
type sseDial struct {
	inner *mcp.SSEClientTransport
	mu    sync.Mutex
	stop  context.CancelFunc
}

func (t *sseDial) Connect(ctx context.Context) (mcp.Connection, error) {
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.mu.Lock()
	t.stop = cancel
	t.mu.Unlock()
	during := context.AfterFunc(ctx, cancel) // the handshake is the attempt's
	conn, err := t.inner.Connect(life)
	if !during() && err == nil {
		conn.Close()
		err = context.Cause(ctx)
	}
	return conn, err
}

// end releases the stream's context.
func (t *sseDial) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stop != nil {
		t.stop()
	}
}

// credentials says, of an attempt that failed with err, that the server
// refused the credentials, when it did: for a server that aegis logs in
// to (oauth:), that it needs aegis auth login again.
func (g *gateway) credentials(r *remoteDown, err error, probe *statusProbe) error {
	if st := probe.refused(); err != nil && st != 0 {
		if r.http.oauth != nil {
			return fmt.Errorf("the server answered %d %s: %s: %w", st, http.StatusText(st), r.http.oauth.loginHint(), err)
		}
		return fmt.Errorf("the server answered %d %s: check the server's headers (its token may be wrong or expired): %w", st, http.StatusText(st), err)
	}
	return err
}

// finalFailure reports whether another attempt cannot help: the server's
// certificate was refused, or its credentials (401, 403).
func finalFailure(err error, probe *statusProbe) bool {
	if err == nil {
		return false
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) ||
		strings.Contains(err.Error(), "tls: failed to verify certificate") {
		return true
	}
	return probe.refused() != 0
}

// connEvent records a state of r's connection; a state that the schema
// would refuse is a bug, logged and not recorded.
func (g *gateway) connEvent(r *remoteDown, transport policy.Transport, state string, attempt int, why string) *events.Receipt {
	if transport == "" {
		transport = r.srv.Transport
	}
	c := schemas.ServerConnection{Server: r.name, URL: r.shown, Transport: string(transport), State: state, Attempt: attempt, Error: why}
	if err := c.Validate(); err != nil {
		g.log.Error("server connection event", "server", r.name, "err", err)
		return nil
	}
	rc, err := g.sess.Fact(schemas.KindServerConnection, c)
	if err != nil {
		g.log.Warn("record server connection", "server", r.name, "err", err)
		return nil
	}
	return rc
}

// reconnectBackoff is the wait before each reconnection attempt after
// the first, which is made at once; the last is repeated.
var reconnectBackoff = []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second, 30 * time.Second}

// watchRemote waits for d's session to end, and when it ends before the
// gateway closes it, records and says so and connects the server again
// until it is back or the gateway closes it; the new session replaces the
// old one and the server is listed again.
func (g *gateway) watchRemote(d *downstream) {
	r := d.remote
	for {
		err := r.session().Wait()
		why := "the session ended"
		if err != nil {
			why += ": " + r.scrub(err.Error())
		}
		r.mu.Lock()
		if r.closing {
			r.mu.Unlock()
			return
		}
		r.lost = why
		r.back = make(chan struct{})
		used := r.used
		r.mu.Unlock()
		fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s: %s; reconnecting\n", r.name, why)
		g.connEvent(r, used, schemas.ConnFailed, 0, why)
		if !g.reconnect(r) {
			return
		}
		// The new session's lists may differ from the old one's: the
		// relisting path checks, pins and shows them as after a
		// list_changed.
		g.listChanged(r.name, listTools|listResources|listPrompts)
	}
}

// reconnect connects r's server again, attempt after attempt, until a
// session runs (it replaces the lost one: true) or the gateway closes r
// (false).
func (g *gateway) reconnect(r *remoteDown) bool {
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			select {
			case <-r.life.Done():
				return false
			case <-time.After(reconnectBackoff[min(attempt-2, len(reconnectBackoff)-1)]):
			}
		}
		cs, tried, release, _, err := g.dial(r.life, r, r.client)
		if err != nil {
			if r.life.Err() != nil {
				return false
			}
			why := r.scrub(err.Error())
			g.connEvent(r, tried, schemas.ConnRetrying, attempt, why)
			if attempt == 1 || attempt%10 == 0 {
				fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s: reconnection attempt %d failed: %s; trying again\n", r.name, attempt, why)
			}
			continue
		}
		r.mu.Lock()
		if r.closing {
			r.mu.Unlock()
			cs.Close()
			if release != nil {
				release()
			}
			return false
		}
		old := r.release
		r.cs, r.release, r.used, r.lost = cs, release, tried, ""
		close(r.back)
		r.mu.Unlock()
		if old != nil {
			old()
		}
		g.connEvent(r, tried, schemas.ConnConnected, attempt, "")
		fmt.Fprintf(g.cfg.Stderr, "aegis: server %s: reconnected (attempt %d); its lists are read again\n", r.name, attempt)
		return true
	}
}

// closeRemote closes d's session once the cancellations owed to the
// server are delivered, and records it closed (unless it had ended
// already, which is recorded).
func (g *gateway) closeRemote(d *downstream) {
	r := d.remote
	r.http.cancels.await(r.http.cancels.pending(), cancelSendWait)
	r.mu.Lock()
	r.closing = true
	lost := r.lost != ""
	cs, release, used := r.cs, r.release, r.used
	r.mu.Unlock()
	r.stop()
	if err := cs.Close(); err != nil {
		g.log.Debug("close a remote session", "server", r.name, "err", r.scrub(err.Error()))
	}
	if release != nil {
		release()
	}
	r.http.close()
	if lost {
		return
	}
	if rc := g.connEvent(r, used, schemas.ConnClosed, 0, ""); rc != nil {
		rc.Wait(context.Background())
	}
}

// await waits at most d for a lost session to come back, and returns why
// it is still lost ("" when a session runs).
func (r *remoteDown) await(d time.Duration) string {
	r.mu.Lock()
	why, back := r.lost, r.back
	r.mu.Unlock()
	if why == "" {
		return ""
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-back:
	case <-t.C:
	case <-r.life.Done():
	}
	return r.lostReason()
}

// runCall runs a tools/call that decideCall let through. A remote server
// whose session is lost is waited for (remoteAttemptTimeout), then not
// called: the call fails, saying why. A remote server's errors are
// scrubbed of its secrets before they are recorded or reach the host; one
// of the connection (not the server's JSON-RPC error) says that the call
// may or may not have reached the server.
func (g *gateway) runCall(cctx context.Context, wc schemas.WrapCall, e toolEntry, run callRunner) (any, error) {
	d := g.downs[e.server]
	if d == nil || d.remote == nil {
		return run(cctx, wc, e)
	}
	r := d.remote
	if need := r.http.refusal(); need != "" {
		// Before waiting for a reconnection that the same refusal stops.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: server %s: %s; the call was not sent", e.server, need)}
	}
	if why := r.await(remoteAttemptTimeout); why != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
			"aegis: server %s is disconnected (%s); the call was not sent. aegis is connecting it again: try the call later", e.server, why)}
	}
	res, err := run(cctx, wc, e)
	if err == nil {
		return res, nil
	}
	if !connectionFailed(err) || cctx.Err() != nil {
		return res, r.scrubErr(err)
	}
	if need := r.http.refusal(); need != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: server %s: %s", e.server, need)}
	}
	if more := r.http.oauth.stepUp(); more != "" {
		return nil, g.stepUpRefusal(r, e.server, more)
	}
	return res, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
		"aegis: server %s: the connection failed during the call, which may or may not have reached the server (%s); aegis reconnects the server if its session is lost: later calls go to the new session", e.server, r.scrub(err.Error()))}
}

// connectionFailed says whether err is the connection's, not the
// server's: the SDK's own codes for a request its transport could not
// carry (rejected, client or server closing), a closed connection, or
// any error that is not a JSON-RPC error.
func connectionFailed(err error) bool {
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return true
	}
	switch we.Code {
	case -32003, -32004, -32005:
		return true
	}
	return errors.Is(err, mcp.ErrConnectionClosed)
}

// awaitCancelSent takes a ticket for a cancellation aegis makes and waits
// (briefly) until the server has it: on a local server's stdin, or
// accepted by a remote server. It reports whether it is.
func (d *downstream) awaitCancelSent() bool {
	if d.remote != nil {
		c := d.remote.http.cancels
		return c.await(c.issue(), cancelSendWait)
	}
	return d.proc.stdin.await(d.proc.stdin.issue(), cancelSendWait)
}

// scrubbed is err without the secrets of server, when it is remote.
func (g *gateway) scrubbed(server string, err error) error {
	if d := g.downs[server]; d != nil && d.remote != nil {
		return d.remote.scrubErr(err)
	}
	return err
}

// taskless is the error of a task request for server when the gateway
// has no task channel to it.
func (g *gateway) taskless(server string) error {
	if d := g.downs[server]; d != nil && d.remote != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "aegis: tasks are not carried to remote server " + server + " (url:); call the tool without params.task"}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: server " + server + " is not running"}
}
