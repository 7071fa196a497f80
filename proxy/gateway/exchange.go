package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/policy"
)

// On behalf of each caller (oauth: token_exchange:): a url server whose
// authorization server trusts the gateway is reached, in each session of
// gateway --listen, with the caller's own access token exchanged for one
// for the server (RFC 8693). Invariants:
//
//   - The caller's token is taken from the session (Config.CallerToken),
//     in memory, at each exchange; the exchanged token is kept in memory
//     by the session's connection to the server only, until refreshSkew
//     before it expires (or the server answers 401), then exchanged
//     again. Neither is ever recorded, logged or said: errors are built
//     from the server's name and the authorization server's error code
//     and description, scrubbed of both tokens and the client secret.
//   - A session without a caller token (the static token, stdio) is
//     refused the server, fail closed: it is never reached with any other
//     token, the gateway's own included.
//   - An exchange the authorization server refuses refuses that server's
//     calls in that session only, each saying why, until the caller sends
//     another token; the refusal is recorded (a note, without tokens), as
//     is the first exchanged token: whom the server was reached for.
//   - An exchange that fails for another reason (the authorization
//     server is unreachable) fails only the request it was for.

// TokenExchange is a url server's oauth: token_exchange:, with its client
// secret read.
type TokenExchange struct {
	server   string
	endpoint string
	clientID string
	secret   string
	resource string
	audience string
	scopes   []string
	http     *http.Client
	now      func() time.Time
}

// TokenExchangeOf is the token exchange of s (nil when s has none); its
// client secret is read now, from its file or getenv.
func TokenExchangeOf(s policy.Server, getenv func(string) string, now func() time.Time) (*TokenExchange, error) {
	if s.OAuth == nil || s.OAuth.Exchange == nil {
		return nil, nil
	}
	x := s.OAuth.Exchange
	if now == nil {
		now = time.Now
	}
	var secret string
	if x.ClientSecret.File != "" {
		v, err := ReadSecretFile(x.ClientSecret.File, ErrOAuthConfig, "which no client secret can")
		if err != nil {
			return nil, fmt.Errorf("server %s: oauth token_exchange client_secret: %w", s.Name, err)
		}
		secret = v
	} else if secret = getenv(x.ClientSecret.Env); secret == "" {
		return nil, fmt.Errorf("server %s: oauth token_exchange client_secret: %s is not set in aegis's environment, or is empty", s.Name, x.ClientSecret.Env)
	}
	resource := x.Resource
	if resource == "" {
		resource = s.URL
	}
	return &TokenExchange{server: s.Name, endpoint: x.TokenEndpoint, clientID: x.ClientID, secret: secret, resource: resource,
		audience: x.Audience, scopes: x.Scopes, now: now, http: &http.Client{Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }}}, nil
}

// onBehalf is one session's exchanged token for one server.
type onBehalf struct {
	x      *TokenExchange
	caller func() string           // the session's caller token, "" for none
	note   func(map[string]string) // records a note of the session (no token)
	who    string                  // the principal's name, for the record

	mu        sync.Mutex
	tok       string
	exp       time.Time // zero: not said; used until the server refuses it
	failed    string    // why the exchange was refused, for failedFor
	failedFor string    // the caller token the refusal was for
	noted     bool      // the record says whom the server was reached for
}

// noCaller is why a session without a caller token is refused the server.
func (b *onBehalf) noCaller() string {
	return "server " + b.x.server + " is reached only on behalf of a caller (oauth: token_exchange), and this session has no caller token: connect through gateway --listen with --oauth-issuer and an OAuth access token"
}

// refusal says why the server's calls are refused in this session, or "".
func (b *onBehalf) refusal() string {
	if b == nil {
		return ""
	}
	c := b.caller()
	if c == "" {
		return b.noCaller()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != "" && b.failedFor == c {
		return b.failed
	}
	return ""
}

// token is the exchanged token to send, exchanged first when there is
// none, it expires within refreshSkew, or force is set.
func (b *onBehalf) token(ctx context.Context, force bool) (string, error) {
	c := b.caller()
	if c == "" {
		return "", errors.New(b.noCaller())
	}
	b.mu.Lock()
	if b.failed != "" && b.failedFor == c {
		defer b.mu.Unlock()
		return "", errors.New(b.failed)
	}
	if !force && b.tok != "" && (b.exp.IsZero() || b.x.now().Add(refreshSkew).Before(b.exp)) {
		defer b.mu.Unlock()
		return b.tok, nil
	}
	tok, exp, refused, err := b.x.exchange(ctx, c)
	var note map[string]string
	switch {
	case refused != "":
		b.tok, b.failed, b.failedFor = "", "server "+b.x.server+": the authorization server refused to exchange the caller's token for one for the server ("+refused+")", c
		err = errors.New(b.failed)
		note = map[string]string{"server": b.x.server, "token_exchange": "refused", "on_behalf_of": b.who, "error": b.failed}
	case err == nil:
		b.tok, b.exp, b.failed = tok, exp, ""
		if !b.noted {
			b.noted = true
			note = map[string]string{"server": b.x.server, "token_exchange": "exchanged", "on_behalf_of": b.who}
		}
	}
	b.mu.Unlock()
	if note != nil && b.note != nil {
		b.note(note)
	}
	if err != nil {
		return "", err
	}
	return tok, nil
}

// forbidden: a 403 of the server; the exchanged token keeps its scopes.
func (b *onBehalf) forbidden([]string) {}

// refused notes that the server refused a freshly exchanged token.
func (b *onBehalf) refused(status int) {
	c := b.caller()
	b.mu.Lock()
	b.tok, b.failedFor = "", c
	b.failed = fmt.Sprintf("server %s answered %d %s to the caller's freshly exchanged token", b.x.server, status, http.StatusText(status))
	b.mu.Unlock()
}

// secrets are the values no error of the server may show.
func (b *onBehalf) secrets() []string {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return []string{b.tok, b.caller(), b.x.secret}
}

// exchange asks the token endpoint for a token for the server in exchange
// for the caller's token. refused is the authorization server's error
// ("code: description") when it answered one; err is any other failure.
func (x *TokenExchange) exchange(ctx context.Context, caller string) (tok string, exp time.Time, refused string, err error) {
	form := url.Values{
		"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":        {caller},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:access_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"resource":             {x.resource},
	}
	if x.audience != "" {
		form.Set("audience", x.audience)
	}
	if len(x.scopes) > 0 {
		form.Set("scope", strings.Join(x.scopes, " "))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, x.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", time.Time{}, "", fmt.Errorf("server %s: token exchange: bad token endpoint", x.server)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(x.clientID), url.QueryEscape(x.secret))
	start := x.now()
	resp, err := x.http.Do(req)
	if err != nil {
		return "", time.Time{}, "", fmt.Errorf("server %s: exchange the caller's token at %s: %s", x.server, x.endpoint, x.scrub(err.Error(), caller))
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string  `json:"access_token"`
		TokenType   string  `json:"token_type"`
		IssuedType  string  `json:"issued_token_type"`
		ExpiresIn   float64 `json:"expires_in"`
		Error       string  `json:"error"`
		Description string  `json:"error_description"`
	}
	derr := json.NewDecoder(io.LimitReader(resp.Body, 256<<10)).Decode(&body)
	if resp.StatusCode != http.StatusOK {
		if derr != nil || body.Error == "" {
			if resp.StatusCode >= 500 {
				return "", time.Time{}, "", fmt.Errorf("server %s: exchange the caller's token at %s: it answered %s", x.server, x.endpoint, resp.Status)
			}
			return "", time.Time{}, resp.Status, nil
		}
		why := x.scrub(body.Error, caller)
		if d := x.scrub(body.Description, caller); d != "" {
			if len(d) > 200 {
				d = d[:200] + "…"
			}
			why += ": " + d
		}
		return "", time.Time{}, why, nil
	}
	switch {
	case derr != nil || body.AccessToken == "":
		return "", time.Time{}, "its answer holds no access token", nil
	case !strings.EqualFold(body.TokenType, "bearer"):
		return "", time.Time{}, fmt.Sprintf("it issued a token of type %q, not a Bearer token", x.scrub(body.TokenType, caller)), nil
	case body.IssuedType != "" && body.IssuedType != "urn:ietf:params:oauth:token-type:access_token":
		return "", time.Time{}, fmt.Sprintf("it issued a %q, not an access token", x.scrub(body.IssuedType, caller)), nil
	}
	if body.ExpiresIn > 0 && body.ExpiresIn < 1e9 {
		exp = start.Add(time.Duration(body.ExpiresIn * float64(time.Second)))
	}
	return body.AccessToken, exp, "", nil
}

// scrub takes the caller's token and the client secret out of s.
func (x *TokenExchange) scrub(s, caller string) string {
	for _, v := range []string{caller, x.secret} {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}
