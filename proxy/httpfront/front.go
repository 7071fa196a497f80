package httpfront

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of [Config].
const (
	DefaultMaxSessions = 32
	DefaultIdleTimeout = time.Hour
	// MaxBody bounds a request body, as the SDK's own handler does.
	MaxBody = 4 << 20
)

// Config configures a [Front].
type Config struct {
	// Token is the bearer token every request must carry in
	// "Authorization: Bearer TOKEN". It may be empty only with NoToken.
	Token string
	// OAuth, when not nil, checks each request's bearer token as an OAuth
	// 2.1 resource server instead of comparing it with Token (which must
	// then be empty): each session serves the principal that its
	// initialize's token named, and every later request of the session
	// must carry a token of that same principal (issuer and subject).
	OAuth *OAuth
	// NoToken serves without a token: only on a loopback listener, for a
	// client that cannot send one (a conformance suite).
	NoToken bool
	// Loopback says the listener is on a loopback address: requests must
	// then name a loopback host (localhost, 127.0.0.0/8, ::1) in Host.
	Loopback bool
	// Origins are Origin values allowed besides the listener's own
	// (scheme://host[:port] as in the request's Host); a request without
	// Origin (not from a browser) is allowed.
	Origins []string
	// Serve serves one session until its connection ends or ctx is done.
	Serve func(ctx context.Context, s *Session) error
	// MaxSessions bounds the sessions at once (0: DefaultMaxSessions).
	MaxSessions int
	// IdleTimeout ends a session that has had no request open for that
	// long (0: DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Stateless serves the stateless requests of MCP 2026-07-28 and later
	// (stateless.go): each principal's on one session, begun at its first.
	Stateless bool
	Logger    *slog.Logger
}

// Session is one HTTP client's session, as [Config.Serve] gets it.
type Session struct {
	ID        string         // the Mcp-Session-Id
	Remote    string         // the client's address
	UserAgent string         // its User-Agent, as sent
	Conn      mcp.Connection // the session's messages; Serve owns it
	// Principal is who the session serves, with [Config.OAuth]; nil
	// otherwise.
	Principal *Principal
	// Token is the caller's access token, with [Config.OAuth] (nil
	// otherwise): the one its last request sent, validated. It is held in
	// memory for the session's life only, for a gateway that exchanges it
	// for a remote server's (RFC 8693), and never logged or recorded.
	Token *CallerToken

	ended func() string
}

// Why a session ended, as [Session.Ended] says it.
const (
	EndDeleted  = "deleted"  // its client ended it (DELETE)
	EndEvicted  = "evicted"  // the one idle longest, to make room at MaxSessions
	EndIdle     = "idle"     // idle for IdleTimeout
	EndShutdown = "shutdown" // the front closed
)

// Ended is why the front ended the session (one of the End constants),
// "" while it has not: once Serve's connection is closed, "" means the
// session ended on its own (its Serve returned).
func (s *Session) Ended() string {
	if s == nil || s.ended == nil {
		return ""
	}
	return s.ended()
}

// CallerToken is the validated access token a session's caller sent last.
type CallerToken struct {
	mu  sync.Mutex
	tok string
}

// Get is the token; "" once the session ended.
func (c *CallerToken) Get() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tok
}

func (c *CallerToken) set(tok string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.tok = tok
	c.mu.Unlock()
}

// bearer is r's bearer token ("" for none).
func bearer(r *http.Request) string {
	fields := strings.Fields(r.Header.Get("Authorization"))
	if len(fields) != 2 || !strings.EqualFold(fields[0], "bearer") {
		return ""
	}
	return fields[1]
}

// Digest names session id in logs and records: the first 16 hex digits of
// its SHA-256. The id itself is never logged or recorded, since with the
// token it lets its holder act in the session.
func Digest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// Front is the http.Handler of the gateway's HTTP side.
type Front struct {
	cfg   Config
	log   *slog.Logger
	store *replayStore // replays what a client missed when it resumes a stream
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
	// winding counts the sessions ended (DELETE, eviction) whose Serve
	// has not returned yet: their servers are still stopping. At most
	// MaxSessions wind down at once; wound is closed, and replaced, each
	// time one is done.
	winding int
	wound   chan struct{}
	// freed is closed, and replaced, each time a session's last open
	// request closes: an initialize at the cap with none idle waits on it.
	freed chan struct{}
	// statelessSessions are the stateless sessions, by principal.
	statelessSessions map[string]*statelessConn
}

type session struct {
	id      string
	tr      *mcp.StreamableServerTransport
	conn    *trackConn
	open    int       // requests open
	last    time.Time // when the last request ended
	closed  bool
	ended   string // why the front closed it (an End constant)
	winding bool   // out of sessions, counted in winding until Serve returns
	// principal is who the session serves (Config.OAuth); every request
	// of the session must name the same issuer and subject.
	principal *Principal
	token     *CallerToken // its caller's token, with principal
}

// New returns a Front; it refuses a configuration without a token unless
// NoToken is set for a loopback listener.
func New(cfg Config) (*Front, error) {
	if cfg.Serve == nil {
		return nil, errors.New("httpfront: no Serve")
	}
	if cfg.OAuth != nil && (cfg.Token != "" || cfg.NoToken) {
		return nil, errors.New("httpfront: OAuth replaces the static token; give one or the other")
	}
	if cfg.Token == "" && cfg.OAuth == nil && !(cfg.NoToken && cfg.Loopback) {
		return nil, errors.New("httpfront: a bearer token is required; only a loopback listener may serve without one, when asked to explicitly")
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Front{cfg: cfg, log: cfg.Logger, store: newReplayStore(), sessions: map[string]*session{}, wound: make(chan struct{}), freed: make(chan struct{}),
		statelessSessions: map[string]*statelessConn{}}
	f.ctx, f.stop = context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.reap()
	return f, nil
}

// Close ends every session and waits until each Serve returned, or ctx is
// done.
func (f *Front) Close(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	for _, s := range f.sessions {
		s.closed = true
		if s.ended == "" {
			s.ended = EndShutdown
		}
		s.conn.Close()
	}
	for _, c := range f.statelessSessions {
		c.Close()
	}
	f.mu.Unlock()
	f.stop()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sessions is the number of sessions open.
func (f *Front) Sessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// refuse writes a refusal: status and a message that says what to do.
func refuse(w http.ResponseWriter, status int, msg string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="aegis"`)
	}
	http.Error(w, "aegis: "+msg, status)
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if why := f.check(r); why != "" {
		status := http.StatusForbidden
		if strings.HasPrefix(why, "unauthorized: ") {
			status, why = http.StatusUnauthorized, strings.TrimPrefix(why, "unauthorized: ")
		}
		f.log.Warn("refused an HTTP request", "remote", r.RemoteAddr, "method", r.Method, "why", why)
		refuse(w, status, why)
		return
	}
	var principal *Principal
	if f.cfg.OAuth != nil {
		p, ok := f.cfg.OAuth.authorize(w, r)
		if !ok {
			return
		}
		principal = p
	}
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && !slices.Contains(mcp.SupportedProtocolVersions(), v) {
		refuse(w, http.StatusBadRequest, fmt.Sprintf("unsupported MCP-Protocol-Version %q", v))
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	}
	id := r.Header.Get("Mcp-Session-Id")
	switch r.Method {
	case http.MethodPost:
		if !f.postHeaders(w, r) {
			return
		}
		if id == "" {
			if f.cfg.Stateless {
				req, version, note, err := readStateless(r)
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit))
					return
				}
				if req != nil {
					f.stateless(w, r, principal, req, version)
					return
				}
				if note != nil {
					acceptNotification(w, r, note)
					return
				}
			}
			f.begin(w, r, principal)
			return
		}
	case http.MethodGet, http.MethodDelete:
		if r.Method == http.MethodGet && !getHeaders(w, r) {
			return
		}
		if id == "" {
			refuse(w, http.StatusBadRequest, r.Method+" needs the Mcp-Session-Id header of a session")
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		refuse(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	s := f.enter(id)
	if s == nil {
		refuse(w, http.StatusNotFound, "session not found: it ended or never existed; start a new one with initialize")
		return
	}
	defer f.leave(s)
	if !samePrincipal(s.principal, principal) {
		// Another caller's token: the session id alone does not let
		// anyone act in a session.
		refuse(w, http.StatusForbidden, "this session serves another principal; a token of the principal that began it must be sent")
		return
	}
	if principal != nil {
		// The caller's newest token (it refreshes its own as they expire).
		s.token.set(bearer(r))
	}
	if r.Method == http.MethodDelete {
		f.end(s)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method == http.MethodPost && !noBatch(w, r) {
		return
	}
	s.tr.ServeHTTP(w, r)
}

// check returns why r is refused ("" if it is not): Host, Origin, token.
// A token refusal begins "unauthorized: ".
func (f *Front) check(r *http.Request) string {
	if f.cfg.Loopback && !loopbackHost(r.Host) {
		return fmt.Sprintf("Host %q is not a loopback name; aegis listens on loopback and serves only requests for localhost, 127.0.0.1 or [::1] (DNS rebinding)", r.Host)
	}
	if o := r.Header.Get("Origin"); o != "" && !f.originAllowed(o, r.Host) {
		return fmt.Sprintf("Origin %q is not allowed; only the listener's own origin is, and those given with --allow-origin", o)
	}
	if f.cfg.Token == "" { // no token, or OAuth (checked after)
		return ""
	}
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "unauthorized: no bearer token; send Authorization: Bearer TOKEN with the token aegis gateway --listen printed, or the one in its --token-file"
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[len(prefix):])), []byte(f.cfg.Token)) != 1 {
		return "unauthorized: wrong bearer token; use the token aegis gateway --listen printed, or the one in its --token-file"
	}
	return ""
}

// loopbackHost reports whether hostport's host is localhost or a loopback
// address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// originAllowed reports whether origin is the listener's own (its host and
// port are those of the request's Host) or one of the configured ones.
func (f *Front) originAllowed(origin, host string) bool {
	if slices.Contains(f.cfg.Origins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" && u.Path != "/" {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// postHeaders checks a POST's Content-Type and Accept, as the transport
// requires, and says what is wrong.
func (f *Front) postHeaders(w http.ResponseWriter, r *http.Request) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		refuse(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return false
	}
	if jsonOK, sseOK := accepts(r); !jsonOK || !sseOK {
		refuse(w, http.StatusBadRequest, "Accept must contain both application/json and text/event-stream")
		return false
	}
	return true
}

// begin starts a session with r, a POST without a session id, which must
// be one initialize request.
func (f *Front) begin(w http.ResponseWriter, r *http.Request, principal *Principal) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit))
			return
		}
		refuse(w, http.StatusBadRequest, "could not read the request body")
		return
	}
	msg, err := jsonrpc.DecodeMessage(bytes.TrimSpace(body))
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || req.Method != "initialize" || !req.IsCall() {
		refuse(w, http.StatusBadRequest, "no session: a POST without Mcp-Session-Id must be a single initialize request")
		return
	}
	id := rand.Text()
	tr := &mcp.StreamableServerTransport{SessionID: id, EventStore: f.store}
	conn, err := tr.Connect(f.ctx)
	if err != nil {
		refuse(w, http.StatusInternalServerError, "could not start the session: "+err.Error())
		return
	}
	s := &session{id: id, tr: tr, conn: &trackConn{Connection: conn, initID: req.ID}, open: 1, principal: principal}
	if principal != nil {
		s.token = &CallerToken{tok: bearer(r)}
	}
	f.mu.Lock()
	if !f.roomToWind(r.Context()) {
		f.mu.Unlock()
		conn.Close()
		refuse(w, http.StatusServiceUnavailable, fmt.Sprintf("%d ended sessions are still stopping their servers, the most aegis lets wind down at once (--max-sessions); try again in a few seconds", f.cfg.MaxSessions))
		return
	}
	// Clients seldom end their sessions (DELETE): at the cap the one idle
	// longest makes room, and its client starts anew if it comes back.
	lru := f.idlest(r.Context())
	switch {
	case f.closed:
		f.mu.Unlock()
		conn.Close()
		refuse(w, http.StatusServiceUnavailable, "aegis is stopping")
		return
	case len(f.sessions) >= f.cfg.MaxSessions:
		if lru == nil {
			f.mu.Unlock()
			conn.Close()
			refuse(w, http.StatusServiceUnavailable, fmt.Sprintf("%d sessions are open and busy, the most aegis serves at once (--max-sessions); try again when one is done", f.cfg.MaxSessions))
			return
		}
		lru.closed, lru.ended = true, EndEvicted
		f.unlist(lru) // its Serve is still counted in wg
		f.log.Info("ended the HTTP session idle longest to make room", "http_session_digest", Digest(lru.id), "idle_since", lru.last)
		defer lru.conn.Close()
	}
	f.sessions[id] = s
	f.wg.Add(1)
	f.mu.Unlock()
	sess := &Session{ID: id, Remote: r.RemoteAddr, UserAgent: r.UserAgent(), Conn: s.conn, Principal: principal, Token: s.token, ended: f.endedOf(s)}
	go f.serve(s, sess)
	defer f.leave(s)
	r.Body = io.NopCloser(bytes.NewReader(body))
	tr.ServeHTTP(w, r)
}

// serve runs Serve for one session, then forgets it.
func (f *Front) serve(s *session, sess *Session) {
	defer f.wg.Done()
	err := f.cfg.Serve(f.ctx, sess)
	s.token.set("") // the session is over: its caller's token is forgotten
	if err != nil {
		f.log.Warn("an HTTP session failed", "http_session_digest", Digest(s.id), "err", err)
		s.conn.fail(err)
	}
	f.mu.Lock()
	if s.winding {
		f.winding--
		close(f.wound)
		f.wound = make(chan struct{})
	} else if f.sessions[s.id] == s {
		delete(f.sessions, s.id)
	}
	f.mu.Unlock()
	s.conn.Close()
}

// windWait is how long an initialize waits for an ended session to finish
// winding down when MaxSessions of them are.
const windWait = 5 * time.Second

// roomToWind reports whether fewer than MaxSessions ended sessions are
// winding down, waiting up to windWait (or until ctx is done) for one to
// finish when that many are; a client that ends its session and begins
// another at once waits for the first's servers rather than piling up
// servers that are stopping. f.mu is held, and released while it waits.
func (f *Front) roomToWind(ctx context.Context) bool {
	if f.winding < f.cfg.MaxSessions {
		return true
	}
	t := time.NewTimer(windWait)
	defer t.Stop()
	for f.winding >= f.cfg.MaxSessions {
		wound := f.wound
		f.mu.Unlock()
		select {
		case <-wound:
		case <-t.C:
			f.mu.Lock()
			return f.winding < f.cfg.MaxSessions
		case <-ctx.Done():
			f.mu.Lock()
			return false
		}
		f.mu.Lock()
	}
	return true
}

// busyWait is how long an initialize at the cap waits for a session to
// have no request open when every one has. A client sees its answer a
// moment before the request counts as closed, so without it a client that
// begins a session right after another's answer would find that one busy.
const busyWait = time.Second

// idlest returns the session idle longest when MaxSessions are open, nil
// when fewer are (or the front is closed). When every session has a
// request open it waits up to busyWait (or until ctx is done) for one to
// become idle, and returns nil if none did. f.mu is held, and released
// while it waits.
func (f *Front) idlest(ctx context.Context) *session {
	deadline := time.Now().Add(busyWait)
	for {
		if f.closed || len(f.sessions) < f.cfg.MaxSessions {
			return nil
		}
		var lru *session
		for _, o := range f.sessions {
			if !o.closed && o.open == 0 && (lru == nil || o.last.Before(lru.last)) {
				lru = o
			}
		}
		wait := time.Until(deadline)
		if lru != nil || wait <= 0 || ctx.Err() != nil {
			return lru
		}
		freed := f.freed
		f.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		f.mu.Lock()
	}
}

// unlist takes s, which is ending, out of the sessions: its slot is free,
// and it counts as winding down until its Serve returns. f.mu is held.
func (f *Front) unlist(s *session) {
	if f.sessions[s.id] == s {
		delete(f.sessions, s.id)
		s.winding = true
		f.winding++
	}
}

// endedOf reads why s ended, under f.mu.
func (f *Front) endedOf(s *session) func() string {
	return func() string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return s.ended
	}
}

// enter finds session id and counts a request open in it (nil: none).
func (f *Front) enter(id string) *session {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if s == nil || s.closed {
		return nil
	}
	s.open++
	return s
}

// leave counts a request of s closed.
func (f *Front) leave(s *session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.open--
	s.last = time.Now()
	if s.open == 0 {
		close(f.freed)
		f.freed = make(chan struct{})
	}
}

// end ends session s: Serve sees its connection close. Its slot is free
// at once (its Serve, still counted in wg and in winding, winds down on
// its own), so that a client that deleted its session can begin another
// at the cap.
func (f *Front) end(s *session) {
	f.mu.Lock()
	if !s.closed {
		s.ended = EndDeleted
	}
	s.closed = true
	f.unlist(s)
	f.mu.Unlock()
	s.conn.Close()
}

// reap ends the sessions idle for longer than the idle timeout.
func (f *Front) reap() {
	defer f.wg.Done()
	every := min(f.cfg.IdleTimeout/4, time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case now := <-t.C:
			var idle []*session
			f.mu.Lock()
			for _, s := range f.sessions {
				if !s.closed && s.open == 0 && now.Sub(s.last) >= f.cfg.IdleTimeout {
					s.closed, s.ended = true, EndIdle
					idle = append(idle, s)
				}
			}
			f.mu.Unlock()
			for _, s := range idle {
				f.log.Info("ended an idle HTTP session", "http_session_digest", Digest(s.id), "idle_for", f.cfg.IdleTimeout)
				s.conn.Close()
			}
		}
	}
}

// trackConn is a session's connection that knows whether the initialize
// that began the session has been read and answered, so that a Serve that
// fails before answering it can still tell the client why.
type trackConn struct {
	mcp.Connection
	initID jsonrpc.ID

	mu       sync.Mutex
	read     bool
	answered bool
}

func (c *trackConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Request); ok && r.ID == c.initID && r.Method == "initialize" {
		c.mu.Lock()
		c.read = true
		c.mu.Unlock()
	}
	return msg, err
}

func (c *trackConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok {
		if r.ID == c.initID {
			c.mu.Lock()
			c.answered = true
			c.mu.Unlock()
		}
		// The answer ends its request's stream: the replay store keeps
		// only the last few answered streams.
		ctx = context.WithValue(ctx, answerKey{}, true)
	}
	return c.Connection.Write(ctx, msg)
}

// fail answers the initialize with err, if nothing answered it yet.
func (c *trackConn) fail(err error) {
	c.mu.Lock()
	read, answered := c.read, c.answered
	c.mu.Unlock()
	if answered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if !read {
		// It is the first message of the session, there already.
		if _, rerr := c.Read(ctx); rerr != nil {
			return
		}
	}
	data, _ := json.Marshal(map[string]string{"aegis": err.Error()})
	c.Connection.Write(ctx, &jsonrpc.Response{ID: c.initID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: "aegis could not serve this session: " + err.Error(), Data: data}})
}

// samePrincipal reports whether a and b are the same caller: both nil, or
// the same issuer and subject.
func samePrincipal(a, b *Principal) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Issuer == b.Issuer && a.Subject == b.Subject
}
