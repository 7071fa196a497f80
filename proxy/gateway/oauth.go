package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/aegis-dev/aegis/policy"
)

// The gateway as an OAuth client of a url server (oauth: in the file).
// aegis auth login obtains the token once (cmd/aegis, with the go-sdk's
// authorization code handler); the gateway only uses and refreshes it.
// Invariants:
//
//   - The access token goes in the Authorization header of requests to
//     the server's origin only (remoteTripper), never anywhere else, and,
//     like every token, client secret and code, is never recorded, logged
//     or said: errors are built from the server's name, the token file's
//     path and the authorization server's error code.
//   - A token that has expired (or expires within refreshSkew) is
//     refreshed before the request, with the resource (RFC 8707) it was
//     obtained for; a request the server answers 401 is refreshed and
//     sent again once. The new token is saved (encrypted) before it is
//     used: a refresh token that rotates is not lost when aegis stops.
//   - A refresh that the authorization server refuses (or a server that
//     refuses a fresh token) makes the server's calls refused, each with
//     an error that says to run aegis auth login SERVER, until the token
//     file changes: a login while the gateway runs is taken at the next
//     call (the file is read again when its modification time is not the
//     one it had at the failure). The other servers are not affected. A
//     refresh that fails for another reason (the authorization server is
//     unreachable) fails only the request it was for.
//   - The gateway never opens a browser (its stdout belongs to MCP): the
//     one flow it runs, a step-up (stepup.go), is put before the human by
//     the host, as a URL elicitation.

// refreshSkew: a token that expires within it is refreshed first.
const refreshSkew = 30 * time.Second

// OAuthClient is the OAuth state of one url server in the gateway.
type OAuthClient struct {
	server string
	url    string // the server's url, as the file gives it
	store  *TokenStore
	http   *http.Client // to the authorization server's token endpoint
	secret string       // the configured client secret, if any
	now    func() time.Time

	mu     sync.Mutex
	tok    StoredToken
	failed string // why the server needs a login; "" while the token is usable
	scope  string // the scopes of the server's last 403 insufficient_scope
	// seen is the token file's modification time when it was last read
	// or written: a failed client reads it again only once it differs.
	seen time.Time
	// challenge is the WWW-Authenticate of the server's last 403
	// insufficient_scope, and stepScope its scopes, which a step-up
	// flow (stepup.go) starts from; nil once one started from it.
	challenge []string
	stepScope string

	cfg      policy.Server // the server's entry in the file
	remote   *RemoteServer // its transport (its CA file), for a step-up flow
	redirect string        // the file's redirect_uri, or ""
	stepMu   sync.Mutex    // held while a step-up flow starts
	flow     *stepUpFlow   // the last step-up flow (under stepMu)
}

// ErrOAuthConfig is wrapped by every error of [OAuthOf] about the file.
var ErrOAuthConfig = errors.New("unusable oauth setting")

// OAuthOf is the OAuth client of s, a url server with oauth:, with the
// token aegis auth login stored in store. A missing token, or one stored
// for another url, is not an error here: the server then refuses to
// connect, saying to log in. A client secret is read now (client_secret:
// {file:} or {env:}).
func OAuthOf(s policy.Server, store *TokenStore, getenv func(string) string, now func() time.Time) (*OAuthClient, error) {
	if s.OAuth == nil {
		return nil, nil
	}
	if now == nil {
		now = time.Now
	}
	o := &OAuthClient{server: s.Name, url: s.URL, cfg: s, redirect: s.OAuth.RedirectURI, store: store, now: now, http: &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }}}
	secret, err := ClientSecret(s)
	if err != nil {
		return nil, err
	}
	if s.OAuth.ClientSecret.Env != "" {
		secret = getenv(s.OAuth.ClientSecret.Env)
		if secret == "" {
			return nil, fmt.Errorf("server %s: oauth client_secret: %s is not set in aegis's environment, or is empty", s.Name, s.OAuth.ClientSecret.Env)
		}
	}
	o.secret = secret
	tok, err := store.Load(s.Name)
	switch {
	case errors.Is(err, ErrNoToken):
		o.failed = "no token is stored for it: run aegis auth login " + s.Name
	case err != nil:
		o.failed = fmt.Sprintf("its token file cannot be read (%v): run aegis auth login %s", err, s.Name)
	case tok.URL != s.URL:
		o.failed = "its token was obtained for another url: run aegis auth login " + s.Name
	default:
		o.tok = tok
	}
	o.seen = o.modTime()
	return o, nil
}

// modTime is the token file's modification time (zero without one).
func (o *OAuthClient) modTime() time.Time {
	fi, err := os.Stat(o.store.Path(o.server))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// reachedBy notes rs, the server's transport, for a step-up flow.
func (o *OAuthClient) reachedBy(rs *RemoteServer) {
	if o == nil {
		return
	}
	o.stepMu.Lock()
	o.remote = rs
	o.stepMu.Unlock()
}

// retry reads the token file again when the client failed and the file
// changed since (a new aegis auth login): a usable token for the
// server's url ends the failure. o.mu is held.
func (o *OAuthClient) retry() {
	if o.failed == "" {
		return
	}
	mt := o.modTime()
	if mt.IsZero() || mt.Equal(o.seen) {
		return
	}
	o.seen = mt
	tok, err := o.store.Load(o.server)
	if err != nil || tok.URL != o.url {
		return
	}
	o.tok, o.failed = tok, ""
}

// ClientSecret reads the client secret of s's oauth: from its file ("" for
// none, or one given by env, which the caller reads).
func ClientSecret(s policy.Server) (string, error) {
	if s.OAuth == nil || s.OAuth.ClientSecret.File == "" {
		return "", nil
	}
	v, err := ReadSecretFile(s.OAuth.ClientSecret.File, ErrOAuthConfig, "which no client secret can")
	if err != nil {
		return "", fmt.Errorf("server %s: oauth client_secret: %w", s.Name, err)
	}
	return v, nil
}

// loginHint is what a user does when the server's token is unusable.
func (o *OAuthClient) loginHint() string {
	return "its OAuth token is refused or cannot be refreshed: run aegis auth login " + o.server
}

// refusal says why the server's calls are refused (it needs a login), or
// "" while its token is usable. A nil client never refuses.
func (o *OAuthClient) refusal() string {
	if o == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retry()
	if o.failed == "" {
		return ""
	}
	return "server " + o.server + " needs a new login (" + o.failed + ")"
}

// config is the oauth2 configuration of the stored token.
func (o *OAuthClient) config() *oauth2.Config {
	secret := o.tok.ClientSecret
	if o.secret != "" {
		secret = o.secret
	}
	return &oauth2.Config{ClientID: o.tok.ClientID, ClientSecret: secret, Scopes: o.tok.Scopes,
		Endpoint: oauth2.Endpoint{TokenURL: o.tok.TokenURL, AuthStyle: oauth2.AuthStyle(o.tok.AuthStyle)}}
}

// token returns the access token to send, refreshing it first when it has
// expired or force is set (the server refused it).
func (o *OAuthClient) token(ctx context.Context, force bool) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retry()
	if o.failed != "" {
		return "", errors.New("server " + o.server + " needs a new login (" + o.failed + ")")
	}
	expired := !o.tok.Expiry.IsZero() && !o.now().Add(refreshSkew).Before(o.tok.Expiry)
	if !expired && !force {
		return o.tok.AccessToken, nil
	}
	if o.tok.RefreshToken == "" {
		o.failed = "its token expired and the authorization server gave no refresh token: run aegis auth login " + o.server
		return "", errors.New("server " + o.server + " needs a new login (" + o.failed + ")")
	}
	if err := o.refresh(ctx); err != nil {
		return "", err
	}
	return o.tok.AccessToken, nil
}

// refresh refreshes the token, with its resource, and saves it. o.mu is
// held. A refusal by the authorization server (an OAuth error answer)
// marks the server as needing a login; any other failure does not.
func (o *OAuthClient) refresh(ctx context.Context) error {
	client := &http.Client{Timeout: o.http.Timeout, CheckRedirect: o.http.CheckRedirect,
		Transport: &resourceParam{base: o.http.Transport, tokenURL: o.tok.TokenURL, resource: o.tok.Resource}}
	rctx := context.WithValue(context.WithoutCancel(ctx), oauth2.HTTPClient, client)
	rctx, cancel := context.WithTimeout(rctx, 30*time.Second)
	defer cancel()
	nt, err := o.config().TokenSource(rctx, &oauth2.Token{RefreshToken: o.tok.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			code := re.ErrorCode
			if code == "" {
				code = strconv.Itoa(re.Response.StatusCode)
			}
			o.failed = fmt.Sprintf("the authorization server refused to refresh its token (%s): run aegis auth login %s", code, o.server)
			return errors.New("server " + o.server + " needs a new login (" + o.failed + ")")
		}
		return fmt.Errorf("server %s: refresh its OAuth token: %s", o.server, o.scrub(err.Error()))
	}
	t := o.tok
	t.AccessToken, t.TokenType, t.Expiry = nt.AccessToken, nt.TokenType, nt.Expiry
	if nt.RefreshToken != "" {
		t.RefreshToken = nt.RefreshToken
	}
	if err := o.store.Save(t); err != nil {
		return fmt.Errorf("server %s: save its refreshed token: %w", o.server, err)
	}
	o.tok, o.seen = t, o.modTime()
	return nil
}

// scrub takes the stored secrets out of s.
func (o *OAuthClient) scrub(s string) string {
	for _, v := range []string{o.tok.AccessToken, o.tok.RefreshToken, o.tok.ClientSecret, o.secret} {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// secrets are the values no error of the server may show.
func (o *OAuthClient) secrets() []string {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return []string{o.tok.AccessToken, o.tok.RefreshToken, o.tok.ClientSecret, o.secret}
}

// stepUp says, once, which scopes the server last asked for, or "".
func (o *OAuthClient) stepUp() string {
	if o == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.scope
	o.scope = ""
	if s == "" {
		return ""
	}
	return fmt.Sprintf("the server refused the call for want of scopes %q (403 insufficient_scope), which its token lacks: add them to oauth: scopes: in the gateway file and run aegis auth login %s", s, o.server)
}

// refused notes that the server refused a fresh token: it needs a login.
func (o *OAuthClient) refused(status int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed == "" {
		o.failed = fmt.Sprintf("the server answered %d %s to a refreshed token: run aegis auth login %s", status, http.StatusText(status), o.server)
	}
}

// resourceParam adds resource (RFC 8707) to a refresh request to the
// token endpoint: golang.org/x/oauth2 sends only grant_type and
// refresh_token, and a token refreshed without its resource may come back
// for another audience, or none.
type resourceParam struct {
	base     http.RoundTripper
	tokenURL string
	resource string
}

func (t *resourceParam) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.resource == "" || req.Method != http.MethodPost || req.URL.String() != t.tokenURL || req.Body == nil {
		return base.RoundTrip(req)
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, 64<<10))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(b))
	if err == nil && form.Get("grant_type") == "refresh_token" && form.Get("resource") == "" {
		form.Set("resource", t.resource)
		b = []byte(form.Encode())
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return base.RoundTrip(r)
}
