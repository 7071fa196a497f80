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
//     it, or its connection failed for good) is recorded as failed, said
//     on stderr, and every later call of one of its tools is refused with
//     an error that says so, after its intent and with its outcome, and
//     never sent. The gateway does not reconnect during a run: a new
//     session would have to replace the old one in every table that
//     routes to it (docs/GATEWAY-PARITY.md).
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
	name  string
	srv   *RemoteServer
	http  *remoteHTTP
	shown string           // the url as recorded
	used  policy.Transport // the transport that carries the session
	// release ends what the session's connection holds (the legacy
	// transport's stream); nil when there is nothing.
	release func()

	mu      sync.Mutex
	closing bool   // the gateway is closing the session
	lost    string // why the session ended before that; "" while it runs
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
	r.http = h
	client := g.newClient(s.Name, caps)
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
		cs, tried, final, err = g.dial(ctx, r, client)
		if err == nil {
			r.used = tried
			g.connEvent(r, tried, schemas.ConnConnected, attempt, "")
			d := &downstream{name: s.Name, cs: cs, remote: r}
			go g.watchRemote(d)
			return d, nil
		}
		last = errors.New(r.scrub(err.Error()))
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
// tried last, and whether the failure is final (another attempt cannot
// help).
func (g *gateway) dial(ctx context.Context, r *remoteDown, client *mcp.Client) (*mcp.ClientSession, policy.Transport, bool, error) {
	actx, cancel := context.WithTimeout(ctx, remoteAttemptTimeout)
	defer cancel()
	probe := &statusProbe{}
	if r.srv.Transport == policy.TransportSSE {
		cs, err := g.dialSSE(actx, r, client, probe)
		return cs, policy.TransportSSE, finalFailure(err, probe), credentials(err, probe)
	}
	cs, err := client.Connect(actx, &mcp.StreamableClientTransport{Endpoint: r.srv.URL, HTTPClient: r.http.client(probe)}, downstreamSession)
	if err == nil {
		return cs, policy.TransportStreamable, false, nil
	}
	status := probe.legacy()
	if status == 0 {
		return nil, policy.TransportStreamable, finalFailure(err, probe), credentials(err, probe)
	}
	sse := &statusProbe{}
	cs, err = g.dialSSE(actx, r, client, sse)
	if err != nil {
		err = fmt.Errorf("the initialize POST got %d %s, so aegis tried the legacy SSE transport: %w", status, http.StatusText(status), credentials(err, sse))
		return nil, policy.TransportSSE, finalFailure(err, sse), err
	}
	return cs, policy.TransportSSE, false, nil
}

// dialSSE connects over the legacy SSE transport. Its stream lives as long
// as the session (the SDK ties it to the context it connects with), not
// as long as the attempt: only the handshake is bounded by ctx.
func (g *gateway) dialSSE(ctx context.Context, r *remoteDown, client *mcp.Client, probe *statusProbe) (*mcp.ClientSession, error) {
	t := &sseDial{inner: &mcp.SSEClientTransport{Endpoint: r.srv.URL, HTTPClient: r.http.client(probe)}}
	cs, err := client.Connect(ctx, t, downstreamSession)
	if err != nil {
		t.end()
		return nil, err
	}
	r.release = t.end
	return cs, nil
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
// refused the credentials, when it did.
func credentials(err error, probe *statusProbe) error {
	if st := probe.refused(); err != nil && st != 0 {
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

// watchRemote waits for d's session to end, and when it ends before the
// gateway closes it, records and says so; from then on its calls are
// refused (runCall).
func (g *gateway) watchRemote(d *downstream) {
	r := d.remote
	err := d.cs.Wait()
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
	r.mu.Unlock()
	fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s: %s; its calls are refused until aegis is restarted\n", r.name, why)
	g.connEvent(r, r.used, schemas.ConnFailed, 0, why)
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
	r.mu.Unlock()
	if err := d.cs.Close(); err != nil {
		g.log.Debug("close a remote session", "server", r.name, "err", r.scrub(err.Error()))
	}
	if r.release != nil {
		r.release()
	}
	r.http.close()
	if lost {
		return
	}
	if rc := g.connEvent(r, r.used, schemas.ConnClosed, 0, ""); rc != nil {
		rc.Wait(context.Background())
	}
}

// runCall runs a tools/call that decideCall let through. A remote server
// whose session ended is not called: the call fails, saying why. A remote
// server's errors are scrubbed of its secrets before they are recorded or
// reach the host.
func (g *gateway) runCall(cctx context.Context, wc schemas.WrapCall, e toolEntry, run callRunner) (any, error) {
	d := g.downs[e.server]
	if d == nil || d.remote == nil {
		return run(cctx, wc, e)
	}
	if why := d.remote.lostReason(); why != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
			"aegis: server %s is disconnected (%s); the call was not sent. aegis does not reconnect during a run: restart the gateway", e.server, why)}
	}
	res, err := run(cctx, wc, e)
	return res, d.remote.scrubErr(err)
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
