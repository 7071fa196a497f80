package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/gateway"
	"github.com/aegis-dev/aegis/proxy/httpfront"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// mcpPath is where the gateway serves streamable HTTP.
const mcpPath = "/mcp"

// maxRecordLanes bounds the record files that HTTP sessions spread over.
const maxRecordLanes = 1000

type listenFlags struct {
	listen, tokenFile *string
	noToken, stdio    *bool
	origins           multiFlag
	idle              *time.Duration
	maxSessions       *int
	maxConns, perConn *int
	headerTimeout     *time.Duration
	bodyTimeout       *time.Duration
	connIdle          *time.Duration
	oauth             oauthFlags
}

// oauthFlags are the flags of the OAuth resource server (--oauth-*).
type oauthFlags struct {
	issuer, resource                 *string
	audiences, scopes, claims        multiFlag
	introspectClient, introspectFile *string
}

func addListenFlags(fs *flag.FlagSet) *listenFlags {
	l := &listenFlags{
		listen:      fs.String("listen", "", "serve streamable HTTP on this address, such as 127.0.0.1:8787"),
		tokenFile:   fs.String("token-file", "", "the bearer token HTTP clients must send, read from this file"),
		noToken:     fs.Bool("listen-without-token", false, "serve HTTP without a token (loopback only; for test suites)"),
		stdio:       fs.Bool("stdio", false, "with --listen, serve the host on stdin and stdout too"),
		idle:        fs.Duration("idle-timeout", httpfront.DefaultIdleTimeout, "end an HTTP session idle this long"),
		maxSessions: fs.Int("max-sessions", httpfront.DefaultMaxSessions, "HTTP sessions served at once"),
		maxConns:    fs.Int("max-conns", httpfront.DefaultMaxConns, "HTTP connections open at once, from every client"),
		perConn:     fs.Int("max-conns-per-client", httpfront.DefaultMaxConnsPerClient, "HTTP connections open at once from one IP address"),
		headerTimeout: fs.Duration("header-timeout", httpfront.DefaultHeaderTimeout,
			"time an HTTP request's headers may take to arrive"),
		bodyTimeout: fs.Duration("body-timeout", httpfront.DefaultBodyTimeout, "time an HTTP request's body may take to arrive"),
		connIdle:    fs.Duration("conn-idle-timeout", httpfront.DefaultConnIdleTimeout, "close a kept-alive HTTP connection without a request this long"),
	}
	fs.Var(&l.origins, "allow-origin", "an Origin allowed besides the listener's own (repeatable)")
	l.oauth.issuer = fs.String("oauth-issuer", "", "accept OAuth access tokens from this authorization server (its issuer URL) instead of one static token")
	l.oauth.resource = fs.String("oauth-resource", "", "this gateway's resource identifier, the URL clients connect to (default http://ADDR/mcp)")
	fs.Var(&l.oauth.audiences, "oauth-audience", "an aud value a token may carry (repeatable; default the resource)")
	fs.Var(&l.oauth.scopes, "oauth-scope", "a scope every token must hold (repeatable)")
	fs.Var(&l.oauth.claims, "oauth-claim", "a token claim to keep in the principal, for rules and the record, such as groups (repeatable)")
	l.oauth.introspectClient = fs.String("oauth-introspect-client", "", "check tokens by introspection (RFC 7662), as this client of the issuer")
	l.oauth.introspectFile = fs.String("oauth-introspect-secret-file", "", "the introspection client's secret, read from this file")
	return l
}

// listenOpts is what --listen and its flags ask for.
type listenOpts struct {
	addr        string
	loopback    bool
	tokenFile   string
	noToken     bool
	origins     []string
	stdio       bool
	idle        time.Duration
	maxSessions int
	limits      httpfront.Limits
	oauth       *httpfront.OAuthConfig // nil: the static token
}

// opts checks the listen flags: nil without --listen (and then none of
// the others may be given).
func (l *listenFlags) opts() (*listenOpts, error) {
	if *l.listen == "" {
		if *l.tokenFile != "" || *l.noToken || *l.stdio || len(l.origins) > 0 || l.oauth.given() {
			return nil, usagef("aegis gateway ... --listen 127.0.0.1:8787", "--token-file, --listen-without-token, --stdio, --allow-origin and --oauth-* go with --listen")
		}
		return nil, nil
	}
	host, port, err := net.SplitHostPort(*l.listen)
	if err != nil {
		return nil, usagef("--listen 127.0.0.1:8787", "--listen %q: %v", *l.listen, err)
	}
	if host == "" {
		return nil, usagef("--listen 127.0.0.1:"+port+" (or 0.0.0.0:"+port+" to listen on every address, on purpose)", "--listen %q names no address, which would listen on every address", *l.listen)
	}
	o := &listenOpts{addr: *l.listen, tokenFile: *l.tokenFile, noToken: *l.noToken, origins: l.origins, stdio: *l.stdio,
		idle: *l.idle, maxSessions: *l.maxSessions,
		limits: httpfront.Limits{MaxConns: *l.maxConns, MaxConnsPerClient: *l.perConn, HeaderTimeout: *l.headerTimeout,
			BodyTimeout: *l.bodyTimeout, ConnIdleTimeout: *l.connIdle}}
	if ip := net.ParseIP(host); ip != nil {
		o.loopback = ip.IsLoopback()
	} else {
		o.loopback = strings.EqualFold(host, "localhost")
	}
	switch {
	case o.noToken && !o.loopback:
		return nil, usagef("--listen 127.0.0.1:"+port+" --listen-without-token", "--listen-without-token serves only a loopback address, not %s", host)
	case o.noToken && o.tokenFile != "":
		return nil, usagef("give one of them", "--listen-without-token and --token-file contradict each other")
	case o.idle <= 0:
		return nil, usagef("--idle-timeout 1h", "--idle-timeout must be positive")
	case o.maxSessions <= 0:
		return nil, usagef("--max-sessions 32", "--max-sessions must be positive")
	case o.limits.MaxConns <= 0 || o.limits.MaxConnsPerClient <= 0:
		return nil, usagef("--max-conns 2048 --max-conns-per-client 1024", "--max-conns and --max-conns-per-client must be positive")
	case o.limits.HeaderTimeout <= 0 || o.limits.BodyTimeout <= 0 || o.limits.ConnIdleTimeout <= 0:
		return nil, usagef("--header-timeout 10s --body-timeout 30s --conn-idle-timeout 2m", "--header-timeout, --body-timeout and --conn-idle-timeout must be positive")
	}
	oc, err := l.oauth.config(o)
	if err != nil {
		return nil, err
	}
	o.oauth = oc
	for _, origin := range o.origins {
		if !strings.HasPrefix(origin, "http://") && !strings.HasPrefix(origin, "https://") {
			return nil, usagef("--allow-origin https://app.example.com", "--allow-origin %q is not an http(s) origin", origin)
		}
	}
	return o, nil
}

// listenGateway serves the gateway over streamable HTTP (and stdio with
// --stdio) until a signal or, with --stdio, the stdio host leaves. Each
// HTTP client session runs a gateway of its own: its own servers, its own
// recorded session, active profile and approvals.
func (m *Main) listenGateway(ctx context.Context, sigs chan os.Signal, ended <-chan struct{}, start *startup, lo *listenOpts, base gateway.Config, rec projector.SessionConfig) error {
	if _, err := os.Stat(filepath.Dir(rec.AuditPath)); err != nil {
		return start.err(withHint(fmt.Errorf("%w: %s has no directory %s", projector.ErrNoRecordDir, rec.AuditPath, filepath.Dir(rec.AuditPath)),
			"create the directory first, or give --audit a path in an existing directory; nothing was started"))
	}
	rec.Run = rand.Text() // aegis sessions: every session of this run is running
	// The sessions share one index: each keeping its own would fold every
	// session's commits and save once a second, n times over.
	shared, err := projector.NewSharedIndex(ctx, rec.Store, rec.Logger, rec.IndexEvery)
	if err != nil {
		return start.err(withHint(fmt.Errorf("read audit record from stream: %w", err), "nothing was started"))
	}
	defer shared.Close()
	rec.Shared = shared
	token := ""
	switch {
	case lo.noToken, lo.oauth != nil:
	case lo.tokenFile != "":
		t, err := readTokenFile(lo.tokenFile)
		if err != nil {
			return start.err(withHint(err, "write the token alone in a file only you can read (chmod 600)"))
		}
		token = t
	default:
		token = rand.Text()
	}
	ln, err := net.Listen("tcp", lo.addr)
	if err != nil {
		return start.err(withHint(fmt.Errorf("listen on %s: %w", lo.addr, err), "choose a free port, or stop what listens on it"))
	}
	defer ln.Close()
	// The connections get what the open file limit leaves beside the
	// sessions: each session's servers (pipes, or a remote server's
	// connections) and record files, at most --max-sessions of them.
	limits, nofile, err := lo.limits.Fit(lo.maxSessions * (4 + 4*len(base.Servers)))
	if err != nil {
		return start.err(withHint(fmt.Errorf("listen on %s: %w", lo.addr, err), "raise the open file limit (ulimit -n; LimitNOFILE= in a systemd unit) or lower --max-sessions"))
	}
	var oauth *httpfront.OAuth
	if lo.oauth != nil {
		oc := *lo.oauth
		if oc.Resource == "" {
			oc.Resource = "http://" + ln.Addr().String() + mcpPath
		}
		oc.Logger = base.Logger
		dctx, cancel := context.WithTimeout(start.ctx, 30*time.Second)
		oauth, err = httpfront.NewOAuth(dctx, oc)
		cancel()
		if err != nil {
			return start.err(withHint(err, "check --oauth-issuer: aegis reads the issuer's metadata (/.well-known/oauth-authorization-server or /.well-known/openid-configuration) and its keys when it starts; nothing was started"))
		}
	}
	lanes := newLanes()
	front, err := httpfront.New(httpfront.Config{Token: token, OAuth: oauth, NoToken: lo.noToken, Loopback: lo.loopback, Origins: lo.origins,
		MaxSessions: lo.maxSessions, IdleTimeout: lo.idle, Logger: base.Logger, Stateless: base.HostProtocol >= "2026-07-28",
		Serve: func(ctx context.Context, s *httpfront.Session) error {
			return m.serveHTTPSession(ctx, s, base, rec, lanes)
		}})
	if err != nil {
		return start.err(err)
	}
	if !start.done() {
		return start.err(context.Cause(start.ctx))
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	m.watchStop(sigs, stop, ended)

	// The token and the warnings come first, the address last: whoever
	// waits for the address has read them.
	url := "http://" + ln.Addr().String() + mcpPath
	switch {
	case oauth != nil:
		how := "signed JWTs, checked against the issuer's keys"
		if oauth.Introspects() {
			how = "checked by introspection at the issuer"
		}
		fmt.Fprintf(m.Stderr, "aegis: clients send Authorization: Bearer TOKEN with an OAuth access token from %s (%s); protected resource metadata at %s\n",
			oauth.Issuer(), how, oauth.MetadataURL())
	case lo.noToken:
		fmt.Fprintf(m.Stderr, "aegis: warning: --listen-without-token: any process of any user on this machine can use the gateway at %s; use it only for a test suite\n", url)
	case lo.tokenFile != "":
		fmt.Fprintf(m.Stderr, "aegis: clients send Authorization: Bearer TOKEN with the token in %s\n", lo.tokenFile)
	default:
		fmt.Fprintf(m.Stderr, "aegis: bearer token, shown once: %s\naegis: clients send Authorization: Bearer TOKEN; give --token-file to choose the token yourself\n", token)
	}
	if !lo.loopback {
		fmt.Fprintf(m.Stderr, "aegis: warning: %s is not a loopback address: anyone who can reach it and has the token can use the gateway, and plain HTTP carries the token in the clear; put a TLS proxy in front\n", lo.addr)
	}
	if base.HostProtocol >= "2026-07-28" {
		// Said at start: a go-sdk client (v1.8.0 on) asks for 2026-07-28,
		// so it gets no session of its own unless the gateway withholds it.
		who := "all of them, as they send the one token"
		if oauth != nil {
			who = "by their access token's issuer and subject"
		}
		fmt.Fprintf(m.Stderr, "aegis: note: clients of MCP 2026-07-28 have no session: they share one gateway session per principal (%s), with its servers, profile and approvals; --protocol 2025-11-25 gives every client a session of its own\n", who)
	}
	if limits.MaxConns < lo.limits.MaxConns {
		fmt.Fprintf(m.Stderr, "aegis: warning: the open file limit (%d, ulimit -n) leaves room for %d HTTP connections beside %d sessions; --max-conns is %d\n",
			nofile, limits.MaxConns, lo.maxSessions, limits.MaxConns)
	}
	fmt.Fprintf(m.Stderr, "aegis: gateway serving streamable HTTP at %s\n", url)
	mux := http.NewServeMux()
	mux.Handle(mcpPath, front)
	if oauth != nil {
		// RFC 9728: at the resource's own well-known path, and at the
		// root for clients that look there.
		mux.Handle(oauth.MetadataPath(), oauth.Metadata())
		if oauth.MetadataPath() != "/.well-known/oauth-protected-resource" {
			mux.Handle("/.well-known/oauth-protected-resource", oauth.Metadata())
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "aegis: the gateway serves MCP at "+mcpPath, http.StatusNotFound)
	})
	srv := limits.Server(mux, base.Logger)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(limits.Listen(ln, base.Logger)) }()

	var stdioErr error
	stdioDone := make(chan struct{})
	if lo.stdio {
		go func() {
			defer close(stdioDone)
			defer stop()
			stdioErr = m.serveStdioSession(ctx, base, rec, lanes)
		}()
	}

	select {
	case <-ctx.Done():
	case err = <-served:
		stop()
	}
	// The sessions end first, side by side (their streams with them),
	// then the server: what it still serves is no session's, and has a
	// moment to finish. watchStop bounds the whole.
	t0 := time.Now()
	front.Close(context.Background())
	base.Logger.Debug("HTTP sessions closed", "took", time.Since(t0))
	sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	srv.Shutdown(sctx)
	srv.Close()
	base.Logger.Debug("HTTP server closed", "took", time.Since(t0))
	if lo.stdio {
		<-stdioDone
		if stdioErr != nil {
			return stdioErr
		}
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP: %w", err)
	}
	return nil
}

// serveHTTPSession runs one HTTP client's session: a gateway of its own,
// recorded as a session of its own.
func (m *Main) serveHTTPSession(ctx context.Context, s *httpfront.Session, base gateway.Config, rec projector.SessionConfig, ln *lanes) error {
	cfg := base
	cfg.Host = s.Conn
	principal := principalOf(s.Principal)
	cfg.Principal = principal
	rec.Principal = principal
	if s.Token != nil {
		// In memory only: a url server with oauth: token_exchange: is
		// reached with it exchanged.
		cfg.CallerToken = s.Token.Get
	}
	if b, ok := cfg.Policy.(interface {
		StartProfile(*schemas.Principal) string
	}); ok && principal != nil {
		// A profile bound to the caller's groups or scopes.
		cfg.DefaultProfile = b.StartProfile(principal)
		rec.Profile = cfg.DefaultProfile
	}
	var path string
	release := func() {}
	defer func() { release() }()
	cfg.Open = func(facts map[string]sandbox.Fact) (*projector.Session, error) {
		sess, p, free, err := ln.open(ctx, rec, facts)
		if err != nil {
			return nil, err
		}
		path, release = p, free
		// Who the session serves; never the session id itself, which lets
		// a holder of the token act in the session.
		note := map[string]any{"host_transport": "streamable-http",
			"http_session_digest": httpfront.Digest(s.ID), "remote": s.Remote, "user_agent": s.UserAgent}
		if principal != nil {
			note["principal"] = principal.Name()
		}
		if _, err := sess.Fact(schemas.KindNote, note); err != nil {
			sess.Abandon()
			return nil, err
		}
		return sess, nil
	}
	id, err := runGatewaySession(ctx, cfg, rec.AuditPath, s.Ended)
	if id != "" {
		if principal != nil {
			base.Logger.Info("HTTP session ended", "session", id, "record", path, "remote", s.Remote, "principal", principal.Name())
		} else {
			base.Logger.Info("HTTP session ended", "session", id, "record", path, "remote", s.Remote)
		}
	}
	return err
}

// runGatewaySession runs the gateway of cfg until its host leaves, then
// closes its recorded session, saying why it ended when ended (an HTTP
// session's) tells. It returns that session's id ("" if none was opened).
func runGatewaySession(ctx context.Context, cfg gateway.Config, audit string, ended func() string) (string, error) {
	sess, err := gateway.Run(ctx, cfg)
	var oe *proxy.OpenError
	if errors.As(err, &oe) {
		err = openSessionError(oe.Err, audit)
	}
	if sess == nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	why := ""
	if ended != nil {
		why = ended()
	}
	if cerr := sess.CloseEnded(cctx, why); cerr != nil && err == nil {
		err = cerr
	}
	return sess.ID(), err
}

// serveStdioSession serves the host on stdin and stdout beside the HTTP
// sessions, as a session of its own.
func (m *Main) serveStdioSession(ctx context.Context, base gateway.Config, rec projector.SessionConfig, ln *lanes) error {
	cfg := base
	stdout, restore := hostStdout()
	defer restore()
	cfg.Stdin, cfg.Stdout = os.Stdin, stdout
	release := func() {}
	defer func() { release() }()
	cfg.Open = func(facts map[string]sandbox.Fact) (*projector.Session, error) {
		sess, _, free, err := ln.open(ctx, rec, facts)
		release = free
		return sess, err
	}
	_, err := runGatewaySession(ctx, cfg, rec.AuditPath, nil)
	return err
}

// lanePath is the nth record file of path: path itself, then path with
// "-n" before its extension (calls.aarl, calls-2.aarl, calls-3.aarl…).
func lanePath(path string, n int) string {
	if n <= 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + strconv.Itoa(n) + ext
}

// lanes are the record files ("lanes") that this process's sessions
// write. Sessions that run at once each have a record file (a file has
// one writer), and one that runs later continues a file's chain. A new
// session tries only the lanes no session of this process holds, so that
// the nth session at once costs one open of a record file, not n (each
// open of a file another session holds costs a lock attempt and the
// reading of its end).
type lanes struct {
	mu    sync.Mutex
	busy  map[int]bool // lanes held, or being opened, by this process
	tries int          // record files opened or tried, for the tests
}

func newLanes() *lanes { return &lanes{busy: map[int]bool{}} }

// open opens a session on the first lane of rec.AuditPath that no session
// is writing: first those this process does not hold, each skipped when
// another process holds it. free gives the lane back; call it once the
// session is closed (it is a no-op on error).
func (l *lanes) open(ctx context.Context, rec projector.SessionConfig, facts map[string]sandbox.Fact) (_ *projector.Session, path string, free func(), _ error) {
	for n := 1; n <= maxRecordLanes; n++ {
		l.mu.Lock()
		if l.busy[n] {
			l.mu.Unlock()
			continue
		}
		l.busy[n] = true
		l.tries++
		l.mu.Unlock()
		cfg := rec
		cfg.AuditPath = lanePath(rec.AuditPath, n)
		if len(facts) > 0 {
			cfg.Confinement = facts
		}
		sess, err := projector.OpenSession(ctx, cfg)
		if err != nil {
			l.release(n)
			if errors.Is(err, projector.ErrRecordLocked) {
				continue // another process writes it
			}
			return nil, "", func() {}, err
		}
		var once sync.Once
		return sess, cfg.AuditPath, func() { once.Do(func() { l.release(n) }) }, nil
	}
	return nil, "", func() {}, fmt.Errorf("%w: all %d record files of %s are being written", projector.ErrRecordLocked, maxRecordLanes, rec.AuditPath)
}

func (l *lanes) release(n int) {
	l.mu.Lock()
	delete(l.busy, n)
	l.mu.Unlock()
}

// errTokenFile is wrapped by every refusal of a --token-file.
var errTokenFile = errors.New("unusable token file")

// readTokenFile reads a bearer token: a secret file as gateway.ReadSecretFile
// reads one (regular, no group or other access, trailing newline
// trimmed), holding one token of at least 16 characters.
func readTokenFile(path string) (string, error) {
	t, err := gateway.ReadSecretFile(path, errTokenFile, "which no token holds")
	if err != nil {
		return "", err
	}
	switch {
	case t == "":
		return "", fmt.Errorf("%w: %s is empty", errTokenFile, path)
	case strings.ContainsAny(t, " \t\r\n"):
		return "", fmt.Errorf("%w: %s holds more than one token (white space inside)", errTokenFile, path)
	case len(t) < 16:
		return "", fmt.Errorf("%w: %s holds a token of %d bytes; use at least 16 random characters", errTokenFile, path, len(t))
	}
	return t, nil
}

// given reports whether any --oauth-* flag was given.
func (f *oauthFlags) given() bool {
	return *f.issuer != "" || *f.resource != "" || len(f.audiences)+len(f.scopes)+len(f.claims) > 0 ||
		*f.introspectClient != "" || *f.introspectFile != ""
}

// config checks the --oauth-* flags: nil without --oauth-issuer. The
// introspection secret is read here; the issuer is asked at start.
func (f *oauthFlags) config(o *listenOpts) (*httpfront.OAuthConfig, error) {
	if !f.given() {
		return nil, nil
	}
	const ex = "--oauth-issuer https://id.example.com --oauth-scope mcp:tools --oauth-claim groups"
	switch {
	case *f.issuer == "":
		return nil, usagef(ex, "--oauth-resource, --oauth-audience, --oauth-scope, --oauth-claim and --oauth-introspect-* go with --oauth-issuer")
	case o.noToken || o.tokenFile != "":
		return nil, usagef("give --oauth-issuer alone", "--oauth-issuer replaces the static token; it contradicts --token-file and --listen-without-token")
	case (*f.introspectClient == "") != (*f.introspectFile == ""):
		return nil, usagef("--oauth-introspect-client aegis --oauth-introspect-secret-file /etc/aegis/introspect.secret", "--oauth-introspect-client and --oauth-introspect-secret-file go together")
	}
	u, err := url.Parse(*f.issuer)
	if err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && loopbackURLHost(u.Hostname()))) || u.Host == "" {
		return nil, usagef(ex, "--oauth-issuer %q is not an https URL (http only on a loopback address)", *f.issuer)
	}
	if *f.resource != "" {
		r, err := url.Parse(*f.resource)
		if err != nil || (r.Scheme != "https" && r.Scheme != "http") || r.Host == "" || r.Fragment != "" {
			return nil, usagef("--oauth-resource https://mcp.example.com/mcp", "--oauth-resource %q is not an http(s) URL without a fragment", *f.resource)
		}
	}
	for _, a := range f.audiences {
		if strings.TrimSpace(a) == "" {
			return nil, usagef("--oauth-audience https://mcp.example.com/mcp", "--oauth-audience must not be empty")
		}
	}
	for _, s := range f.scopes {
		if s == "" || strings.ContainsAny(s, " \t\"\\") {
			return nil, usagef("--oauth-scope mcp:tools", "--oauth-scope %q is not one scope", s)
		}
	}
	cfg := &httpfront.OAuthConfig{Issuer: *f.issuer, Resource: *f.resource, Audiences: f.audiences, Scopes: f.scopes, Claims: f.claims,
		IntrospectClientID: *f.introspectClient}
	if *f.introspectFile != "" {
		s, err := gateway.ReadSecretFile(*f.introspectFile, errTokenFile, "which no secret holds")
		if err != nil {
			return nil, withHint(err, "write the introspection client's secret alone in a file only you can read (chmod 600)")
		}
		if s == "" {
			return nil, withHint(fmt.Errorf("%w: %s is empty", errTokenFile, *f.introspectFile), "write the introspection client's secret in it")
		}
		cfg.IntrospectSecret = s
	}
	return cfg, nil
}

func loopbackURLHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// principalOf is the caller a validated token named, as the record and
// the policy keep it (nil for none).
func principalOf(p *httpfront.Principal) *schemas.Principal {
	if p == nil {
		return nil
	}
	keep := make([]string, 0, len(p.Claims))
	for k := range p.Claims {
		keep = append(keep, k)
	}
	sort.Strings(keep)
	return schemas.NewPrincipal(p.Issuer, p.Subject, p.ClientID, p.Scopes, p.Claims, keep)
}
