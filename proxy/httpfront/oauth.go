package httpfront

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// OAuth makes a [Front] an OAuth 2.1 resource server, as the MCP
// authorization specification (2025-11-25) asks of an MCP server over
// HTTP: every request carries a bearer access token issued by one
// authorization server (the issuer) for this resource (its audience),
// and the token's holder becomes the session's principal.
//
// A token is checked in one of two ways:
//
//   - as a JWT (RFC 9068), against the issuer's signing keys (JWKS),
//     discovered from the issuer's metadata (RFC 8414, else OpenID
//     Connect discovery) at start-up, kept in memory and fetched again
//     when a token names a key id not yet seen, at most once per
//     [OAuthConfig.RefetchEvery] (a flood of tokens with made-up key ids
//     costs the issuer one request per period, not one per token);
//   - by introspection (RFC 7662) at the issuer's introspection endpoint,
//     when a client id and secret for it are configured: the answer for
//     a token is kept until the token expires, at most a minute.
//
// Either way the token must be active, unexpired, issued by the issuer,
// for one of the audiences (the resource by default; RFC 8707), and hold
// every required scope. A JWT that is an ID token (it carries nonce or
// at_hash, or its typ is not a JWT access token's) is refused: an ID
// token is for the client that asked for it, not for a resource server.
type OAuth struct {
	cfg      OAuthConfig
	meta     *oauthex.AuthServerMeta
	verifier *oidc.IDTokenVerifier
	keys     *limitedKeys
	log      *slog.Logger

	mu    sync.Mutex
	cache map[[32]byte]introspected // introspection answers by the token's SHA-256
}

// OAuthConfig configures [NewOAuth].
type OAuthConfig struct {
	// Issuer is the authorization server's issuer identifier (https, or
	// http on a loopback address).
	Issuer string
	// Resource is this server's resource identifier: the URL clients
	// connect to (such as https://mcp.example.com/mcp). It is served in
	// the protected resource metadata.
	Resource string
	// Audiences are the aud values a token may carry, one of which it
	// must; empty means [Resource] alone.
	Audiences []string
	// Scopes must all be held by every token; a token without one is
	// refused with 403 insufficient_scope naming them (step-up).
	Scopes []string
	// Claims are the token's claims kept in the principal (such as groups
	// or email), for rules and the record.
	Claims []string
	// IntrospectClientID and IntrospectSecret, when set, make tokens be
	// checked by introspection, the gateway authenticating as this client
	// (client_secret_basic).
	IntrospectClientID, IntrospectSecret string
	// RefetchEvery bounds how often an unknown key id fetches the issuer's
	// keys again (0: 10 s).
	RefetchEvery time.Duration
	HTTPClient   *http.Client
	Now          func() time.Time
	Logger       *slog.Logger
}

// Errors of [OAuth.Verify]: the status a refusal gets follows them.
var (
	// ErrInvalidToken: 401 with error="invalid_token". It wraps the SDK's
	// [auth.ErrInvalidToken].
	ErrInvalidToken = fmt.Errorf("%w", auth.ErrInvalidToken)
	// ErrInsufficientScope: 403 with error="insufficient_scope".
	ErrInsufficientScope = errors.New("insufficient scope")
)

// NewOAuth discovers the issuer's metadata and returns a resource server
// that checks tokens against it. It fails when the issuer cannot be
// reached or its metadata lacks what the configuration needs: the
// gateway then does not start.
func NewOAuth(ctx context.Context, cfg OAuthConfig) (*OAuth, error) {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RefetchEvery <= 0 {
		cfg.RefetchEvery = 10 * time.Second
	}
	if cfg.Resource == "" {
		return nil, errors.New("oauth: no resource identifier")
	}
	if len(cfg.Audiences) == 0 {
		cfg.Audiences = []string{cfg.Resource}
	}
	if (cfg.IntrospectClientID == "") != (cfg.IntrospectSecret == "") {
		return nil, errors.New("oauth: introspection needs both a client id and a secret")
	}
	meta, err := discover(ctx, cfg.Issuer, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	o := &OAuth{cfg: cfg, meta: meta, log: cfg.Logger, cache: map[[32]byte]introspected{}}
	if cfg.IntrospectClientID != "" {
		if meta.IntrospectionEndpoint == "" {
			return nil, fmt.Errorf("oauth: the issuer %s names no introspection_endpoint in its metadata", cfg.Issuer)
		}
		return o, nil
	}
	if meta.JWKSURI == "" {
		return nil, fmt.Errorf("oauth: the issuer %s names no jwks_uri in its metadata, so its tokens cannot be checked as JWTs; configure introspection", cfg.Issuer)
	}
	o.keys = &limitedKeys{url: meta.JWKSURI, client: cfg.HTTPClient, every: cfg.RefetchEvery, now: cfg.Now}
	o.keys.mu.Lock()
	err = o.keys.fetch(ctx)
	o.keys.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	o.verifier = oidc.NewVerifier(meta.Issuer, o.keys, &oidc.Config{SkipClientIDCheck: true, Now: cfg.Now,
		SupportedSigningAlgs: []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}})
	return o, nil
}

// discover reads the issuer's metadata: RFC 8414 first, then OpenID
// Connect discovery, each checked to name the issuer itself.
func discover(ctx context.Context, issuer string, c *http.Client) (*oauthex.AuthServerMeta, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("oauth: issuer %q is not an https URL without query or fragment", issuer)
	}
	path := strings.TrimSuffix(u.Path, "/")
	urls := []string{
		u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + path,
		u.Scheme + "://" + u.Host + path + "/.well-known/openid-configuration",
	}
	var errs []error
	for _, m := range urls {
		meta, err := oauthex.GetAuthServerMeta(ctx, m, issuer, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if meta != nil {
			return meta, nil
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("oauth: discover the issuer %s: %w", issuer, errors.Join(errs...))
	}
	return nil, fmt.Errorf("oauth: the issuer %s serves no metadata at %s nor %s", issuer, urls[0], urls[1])
}

// Issuer is the issuer the tokens must come from.
func (o *OAuth) Issuer() string { return o.meta.Issuer }

// Introspects reports whether tokens are checked by introspection.
func (o *OAuth) Introspects() bool { return o.verifier == nil }

// MetadataURL is where the protected resource metadata of the resource
// is (RFC 9728 §3.1: the well-known path inserted before the resource's
// path).
func (o *OAuth) MetadataURL() string {
	u, err := url.Parse(o.cfg.Resource)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + o.MetadataPath()
}

// MetadataPath is the path of [OAuth.MetadataURL].
func (o *OAuth) MetadataPath() string {
	u, _ := url.Parse(o.cfg.Resource)
	p := "/.well-known/oauth-protected-resource"
	if u != nil && strings.TrimSuffix(u.Path, "/") != "" {
		p += u.Path
	}
	return p
}

// Metadata serves the protected resource metadata (RFC 9728), by the
// SDK's handler.
func (o *OAuth) Metadata() http.Handler {
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               o.cfg.Resource,
		AuthorizationServers:   []string{o.meta.Issuer},
		ScopesSupported:        o.cfg.Scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "aegis gateway",
	})
}

// challenge is the WWW-Authenticate value of a refusal (RFC 6750 §3, with
// resource_metadata of RFC 9728 §5.1). errCode is "" when the request
// carried no token.
func (o *OAuth) challenge(errCode, desc string) string {
	params := []string{fmt.Sprintf("resource_metadata=%q", o.MetadataURL())}
	if errCode != "" {
		params = append(params, fmt.Sprintf("error=%q", errCode))
		if desc != "" {
			params = append(params, fmt.Sprintf("error_description=%q", quotable(desc)))
		}
	}
	if len(o.cfg.Scopes) > 0 {
		params = append(params, fmt.Sprintf("scope=%q", strings.Join(o.cfg.Scopes, " ")))
	}
	return "Bearer " + strings.Join(params, ", ")
}

// quotable keeps of s what may stand in a quoted error_description
// (RFC 6750 §3: %x20-21 / %x23-5B / %x5D-7E).
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return ' '
		}
		return r
	}, s)
}

// authorize checks r's bearer token: the principal, or false when it
// wrote the refusal (401 or 403, with WWW-Authenticate).
func (o *OAuth) authorize(w http.ResponseWriter, r *http.Request) (*Principal, bool) {
	fields := strings.Fields(r.Header.Get("Authorization"))
	if len(fields) != 2 || !strings.EqualFold(fields[0], "bearer") {
		w.Header().Set("WWW-Authenticate", o.challenge("", ""))
		http.Error(w, "aegis: no bearer token; get an access token from "+o.meta.Issuer+" for "+o.cfg.Resource+" (the protected resource metadata at "+o.MetadataURL()+" says how) and send Authorization: Bearer TOKEN", http.StatusUnauthorized)
		return nil, false
	}
	p, err := o.Verify(r.Context(), fields[1])
	switch {
	case err == nil:
		return p, true
	case errors.Is(err, ErrInsufficientScope):
		w.Header().Set("WWW-Authenticate", o.challenge("insufficient_scope", "the token lacks a scope this resource requires"))
		http.Error(w, "aegis: "+err.Error()+"; get a token with scope "+strconv.Quote(strings.Join(o.cfg.Scopes, " ")), http.StatusForbidden)
	case errors.Is(err, ErrInvalidToken):
		w.Header().Set("WWW-Authenticate", o.challenge("invalid_token", err.Error()))
		http.Error(w, "aegis: "+err.Error()+"; get a new access token from "+o.meta.Issuer, http.StatusUnauthorized)
	default:
		http.Error(w, "aegis: could not check the token: "+err.Error(), http.StatusServiceUnavailable)
	}
	o.log.Warn("refused an HTTP request's token", "remote", r.RemoteAddr, "why", err)
	return nil, false
}

// Verify checks token and returns the principal it names. Its errors
// wrap [ErrInvalidToken] or [ErrInsufficientScope], or say that the
// issuer could not be asked (neither: 503). An error never holds the
// token.
func (o *OAuth) Verify(ctx context.Context, token string) (*Principal, error) {
	var c tokenClaims
	if o.verifier == nil {
		var err error
		if c, err = o.introspect(ctx, token); err != nil {
			return nil, err
		}
	} else {
		t, err := o.verifier.Verify(ctx, token)
		if err != nil {
			var exp *oidc.TokenExpiredError
			if errors.As(err, &exp) {
				return nil, fmt.Errorf("%w: the token expired at %s", ErrInvalidToken, exp.Expiry.UTC().Format(time.RFC3339))
			}
			return nil, fmt.Errorf("%w: %s", ErrInvalidToken, strings.TrimPrefix(err.Error(), "oidc: "))
		}
		if err := t.Claims(&c.raw); err != nil {
			return nil, fmt.Errorf("%w: its claims: %v", ErrInvalidToken, err)
		}
		if typ := jwtType(token); typ != "" && !slices.Contains([]string{"jwt", "at+jwt", "application/at+jwt"}, strings.ToLower(typ)) {
			return nil, fmt.Errorf("%w: a JWT of type %q is not an access token", ErrInvalidToken, typ)
		}
		if _, ok := c.raw["nonce"]; ok {
			return nil, fmt.Errorf("%w: an ID token (it holds a nonce) is not an access token", ErrInvalidToken)
		}
		if _, ok := c.raw["at_hash"]; ok {
			return nil, fmt.Errorf("%w: an ID token (it holds at_hash) is not an access token", ErrInvalidToken)
		}
		c.iss, c.sub, c.aud = t.Issuer, t.Subject, t.Audience
	}
	c.fill()
	if c.sub == "" {
		return nil, fmt.Errorf("%w: the token names no subject (sub)", ErrInvalidToken)
	}
	if !audienceOK(c.aud, o.cfg.Audiences) {
		return nil, fmt.Errorf("%w: the token is for %s, not for this resource (%s)", ErrInvalidToken, quoteAll(c.aud), quoteAll(o.cfg.Audiences))
	}
	var missing []string
	for _, s := range o.cfg.Scopes {
		if !slices.Contains(c.scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: the token lacks scope %s", ErrInsufficientScope, strings.Join(missing, " "))
	}
	p := &Principal{Issuer: c.iss, Subject: c.sub, ClientID: c.clientID, Scopes: c.scopes}
	for _, k := range o.cfg.Claims {
		if v, ok := c.raw[k]; ok {
			if p.Claims == nil {
				p.Claims = map[string]any{}
			}
			p.Claims[k] = v
		}
	}
	return p, nil
}

// Principal is what a validated token says of its holder: the caller a
// session serves. It holds nothing from which the token could be rebuilt.
type Principal struct {
	Issuer, Subject, ClientID string
	Scopes                    []string
	// Claims are the token's claims that [OAuthConfig.Claims] names, as
	// the token has them (decoded from JSON).
	Claims map[string]any
}

// audienceOK reports whether one of aud is one of want, by the SDK's
// comparison (a trailing slash aside, exact: RFC 9728 §3.3).
func audienceOK(aud, want []string) bool {
	for _, w := range want {
		if oauthex.MatchesResource(aud, w) {
			return true
		}
	}
	return false
}

func quoteAll(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	if len(q) == 0 {
		return "no audience"
	}
	return strings.Join(q, ", ")
}

// jwtType is the typ header of a JWT ("" if none, or not a JWS).
func jwtType(token string) string {
	jws, err := jose.ParseSigned(token, allAlgs)
	if err != nil || len(jws.Signatures) == 0 {
		return ""
	}
	t, _ := jws.Signatures[0].Header.ExtraHeaders[jose.HeaderType].(string)
	return t
}

var allAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA}

// tokenClaims is what a token says, from its JWT claims or its
// introspection.
type tokenClaims struct {
	raw                map[string]any
	iss, sub, clientID string
	aud, scopes        []string
}

// fill takes client_id (else azp) and scope (a space-separated string, or
// a list as some issuers write scp) from raw.
func (c *tokenClaims) fill() {
	if s, ok := c.raw["client_id"].(string); ok {
		c.clientID = s
	} else if s, ok := c.raw["azp"].(string); ok {
		c.clientID = s
	}
	for _, k := range []string{"scope", "scp"} {
		switch v := c.raw[k].(type) {
		case string:
			c.scopes = append(c.scopes, strings.Fields(v)...)
		case []any:
			for _, e := range v {
				if s, ok := e.(string); ok {
					c.scopes = append(c.scopes, s)
				}
			}
		}
	}
}

// introspected is a kept introspection answer.
type introspected struct {
	c     tokenClaims
	until time.Time
}

// introspect asks the issuer about token (RFC 7662).
func (o *OAuth) introspect(ctx context.Context, token string) (tokenClaims, error) {
	key := sha256.Sum256([]byte(token))
	now := o.cfg.Now()
	o.mu.Lock()
	if e, ok := o.cache[key]; ok && now.Before(e.until) {
		o.mu.Unlock()
		return e.c, nil
	}
	o.mu.Unlock()
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.meta.IntrospectionEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return tokenClaims{}, fmt.Errorf("introspection: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(o.cfg.IntrospectClientID), url.QueryEscape(o.cfg.IntrospectSecret))
	resp, err := o.cfg.HTTPClient.Do(req)
	if err != nil {
		return tokenClaims{}, fmt.Errorf("introspection at %s: %v", o.meta.IntrospectionEndpoint, redact(err, token))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return tokenClaims{}, fmt.Errorf("introspection at %s answered %s", o.meta.IntrospectionEndpoint, resp.Status)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		return tokenClaims{}, fmt.Errorf("introspection at %s answered no JSON object", o.meta.IntrospectionEndpoint)
	}
	if active, _ := raw["active"].(bool); !active {
		return tokenClaims{}, fmt.Errorf("%w: the issuer says the token is not active (expired, revoked, or not its own)", ErrInvalidToken)
	}
	c := tokenClaims{raw: raw}
	c.iss, _ = raw["iss"].(string)
	c.sub, _ = raw["sub"].(string)
	switch a := raw["aud"].(type) {
	case string:
		c.aud = []string{a}
	case []any:
		for _, e := range a {
			if s, ok := e.(string); ok {
				c.aud = append(c.aud, s)
			}
		}
	}
	if c.iss == "" {
		c.iss = o.meta.Issuer
	} else if c.iss != o.meta.Issuer {
		return tokenClaims{}, fmt.Errorf("%w: the token was issued by %q, not %q", ErrInvalidToken, c.iss, o.meta.Issuer)
	}
	until := now.Add(time.Minute)
	if exp, ok := raw["exp"].(float64); ok {
		e := time.Unix(int64(exp), 0)
		if !now.Before(e) {
			return tokenClaims{}, fmt.Errorf("%w: the token expired at %s", ErrInvalidToken, e.UTC().Format(time.RFC3339))
		}
		if e.Before(until) {
			until = e
		}
	}
	o.mu.Lock()
	if len(o.cache) >= 4096 {
		for k, e := range o.cache {
			if !now.Before(e.until) {
				delete(o.cache, k)
			}
		}
		if len(o.cache) >= 4096 {
			clear(o.cache)
		}
	}
	o.cache[key] = introspected{c: c, until: until}
	o.mu.Unlock()
	return c, nil
}

// redact takes token out of err's text (a client's error may quote the
// request).
func redact(err error, token string) string {
	return strings.ReplaceAll(err.Error(), token, "[token]")
}

// limitedKeys is the issuer's key set (JWKS): fetched at start-up, kept,
// and fetched again when a token names a key id not in it (the issuer
// rotated its keys), at most once per every: a token that names an
// unknown key id past that is refused without asking the issuer. The
// signature is checked by go-jose, with the key the token's key id
// names (every key, for a token without one).
type limitedKeys struct {
	url    string
	client *http.Client
	every  time.Duration
	now    func() time.Time

	mu   sync.Mutex // held while fetching: one fetch at a time
	keys []jose.JSONWebKey
	last time.Time // the last fetch
}

// fetch reads the key set. k.mu is held.
func (k *limitedKeys) fetch(ctx context.Context) error {
	k.last = k.now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("fetch the issuer's keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch the issuer's keys at %s: %s", k.url, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return fmt.Errorf("the issuer's keys at %s: %w", k.url, err)
	}
	var keys []jose.JSONWebKey
	for _, key := range set.Keys {
		if key.Use == "" || key.Use == "sig" {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("the issuer's key set at %s holds no signing key", k.url)
	}
	k.keys = keys
	return nil
}

func (k *limitedKeys) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, allAlgs)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, errors.New("malformed jwt")
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.verify(jws, kid); ok {
		return p, nil
	}
	if k.has(kid) {
		return nil, errors.New("the signature does not verify")
	}
	if now := k.now(); now.Sub(k.last) < k.every {
		return nil, fmt.Errorf("key id %q is not one of the issuer's keys (fetched %s ago)", kid, now.Sub(k.last).Round(time.Second))
	}
	if err := k.fetch(ctx); err != nil {
		return nil, err
	}
	if p, ok := k.verify(jws, kid); ok {
		return p, nil
	}
	return nil, fmt.Errorf("key id %q is not one of the issuer's keys, or the signature does not verify", kid)
}

func (k *limitedKeys) has(kid string) bool {
	return kid != "" && slices.ContainsFunc(k.keys, func(key jose.JSONWebKey) bool { return key.KeyID == kid })
}

func (k *limitedKeys) verify(jws *jose.JSONWebSignature, kid string) ([]byte, bool) {
	for i := range k.keys {
		if kid == "" || k.keys[i].KeyID == kid {
			if p, err := jws.Verify(&k.keys[i]); err == nil {
				return p, true
			}
		}
	}
	return nil, false
}
