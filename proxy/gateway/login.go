package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/aegis-dev/aegis/policy"
)

// One authorization code flow of a url server with oauth:, as aegis auth
// login runs it and as the gateway runs it for a step-up (stepup.go):
// the go-sdk's authorization code handler configured from the file, and
// the token file made of what it obtained. Invariants:
//
//   - Nothing of the flow goes over the network in clear: metadata,
//     registration and the code's exchange go to https://, or http:// on
//     loopback, and so must the token endpoint kept in the token file.
//   - The resource sent with the code (RFC 8707) and the issuer of the
//     authorization server's metadata are kept with the token: a refresh
//     sends that resource again.

// Login is one authorization code flow for server s (a url server with
// oauth:). Its Handler runs the flow (its Authorize, or the go-sdk's
// client transport on a 401); Token then gives what the flow obtained.
type Login struct {
	Handler *auth.AuthorizationCodeHandler

	server policy.Server
	secret string
	tr     *loginTripper
	cfg    *oauth2.Config
	tok    *oauth2.Token
}

// ErrNotAsked: the flow obtained no token (the server never asked for
// one).
var ErrNotAsked = errors.New("the server answered without asking for a login")

// LoginOf is a flow for s, reached over rs's transport (its CA file),
// with client secret secret (read already, "" for none), the browser
// coming back to redirect, the code fetched by fetch. keep, when not nil,
// are scopes already granted: the flow asks for them and those the
// server names (a step-up), whatever the file's scopes.
func LoginOf(s policy.Server, rs *RemoteServer, secret, redirect string, fetch auth.AuthorizationCodeFetcher, keep []string) (*Login, error) {
	l := &Login{server: s, secret: secret, tr: &loginTripper{base: rs.HTTPTransport()}}
	hc := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              redirect,
		AuthorizationCodeFetcher: fetch,
		RequestRefreshToken:      true,
		// A matching iss is taken even when the server does not say it
		// sends one; a different one is always refused (RFC 9207 §2.4).
		AcceptUnadvertisedIss: true,
		Client:                &http.Client{Transport: l.tr, Timeout: 30 * time.Second},
		NewTokenSource: func(_ context.Context, c *oauth2.Config, t *oauth2.Token) (oauth2.TokenSource, error) {
			l.cfg, l.tok = c, t
			return oauth2.StaticTokenSource(t), nil
		},
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "aegis", TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
		}},
	}
	if o := s.OAuth; o.ClientID != "" {
		pc := &oauthex.ClientCredentials{ClientID: o.ClientID}
		if secret != "" {
			pc.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: secret}
		}
		hc.PreregisteredClient = pc
	}
	if u := s.OAuth.ClientMetadataURL; u != "" {
		hc.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: u}
	}
	switch sc := s.OAuth.Scopes; {
	case keep != nil:
		hc.ScopeFilter = func(named []string) []string {
			out := slices.Clone(keep)
			for _, s := range named {
				if !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
			return out
		}
	case len(sc) > 0:
		hc.ScopeFilter = func([]string) []string { return sc }
	}
	h, err := auth.NewAuthorizationCodeHandler(hc)
	if err != nil {
		return nil, err
	}
	l.Handler = h
	return l, nil
}

// Token is what the flow obtained, as the token file keeps it.
func (l *Login) Token() (StoredToken, error) {
	if l.tok == nil {
		return StoredToken{}, ErrNotAsked
	}
	if prob := EndpointProblem(l.cfg.Endpoint.TokenURL); prob != "" {
		return StoredToken{}, fmt.Errorf("the token endpoint %s", prob)
	}
	st := StoredToken{
		Server: l.server.Name, URL: l.server.URL, Resource: l.tr.resource, Issuer: l.tr.issuer,
		TokenURL: l.cfg.Endpoint.TokenURL, ClientID: l.cfg.ClientID, AuthStyle: int(l.cfg.Endpoint.AuthStyle),
		Scopes: l.cfg.Scopes, AccessToken: l.tok.AccessToken, TokenType: l.tok.TokenType,
		RefreshToken: l.tok.RefreshToken, Expiry: l.tok.Expiry,
	}
	if l.cfg.ClientSecret != "" && l.cfg.ClientSecret != l.secret {
		st.ClientSecret = l.cfg.ClientSecret // given by dynamic registration
	}
	return st, nil
}

// Scrub takes the flow's token and the client secret out of s.
func (l *Login) Scrub(s string) string {
	vals := []string{l.secret}
	if l.tok != nil {
		vals = append(vals, l.tok.AccessToken, l.tok.RefreshToken)
	}
	if l.cfg != nil {
		vals = append(vals, l.cfg.ClientSecret)
	}
	for _, v := range vals {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// EndpointProblem says why an endpoint would carry tokens in clear, or "".
func EndpointProblem(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "is not a url"
	}
	if u.Scheme == "https" {
		return ""
	}
	if h := u.Hostname(); u.Scheme == "http" && (h == "localhost" || net.ParseIP(h) != nil && net.ParseIP(h).IsLoopback()) {
		return ""
	}
	return "is not https:// (nor http:// to a loopback host): aegis will not send tokens there in clear"
}

// loginTripper carries a flow's requests to the authorization server
// and notes what the token file keeps: the resource sent with the code
// (RFC 8707) and the issuer of the server's metadata.
type loginTripper struct {
	base     http.RoundTripper
	resource string
	issuer   string
}

func (t *loginTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if prob := EndpointProblem(req.URL.String()); prob != "" {
		// Metadata, registration and the code's exchange: nothing of
		// the flow goes over the network in clear.
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("aegis refused a request of the login to %s://%s: it %s", req.URL.Scheme, req.URL.Host, prob)
	}
	if req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
			body.Close()
			if q, err := url.ParseQuery(string(b)); err == nil && q.Get("grant_type") == "authorization_code" {
				t.resource = q.Get("resource")
			}
		}
	}
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet && resp.StatusCode == http.StatusOK &&
		(strings.Contains(req.URL.Path, "/.well-known/oauth-authorization-server") || strings.Contains(req.URL.Path, "/.well-known/openid-configuration")) {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		if rerr == nil {
			var meta struct {
				Issuer string `json:"issuer"`
			}
			if json.Unmarshal(b, &meta) == nil && meta.Issuer != "" {
				t.issuer = meta.Issuer
			}
		}
	}
	return resp, err
}

// ListenForRedirect listens where the browser comes back after an
// authorization: on redirect's host and port (80 when it names none), or,
// with no redirect, on a free loopback port, whose /callback is then the
// redirect. It returns the listener and the redirect address, as given
// (an authorization server compares it byte for byte) and parsed.
func ListenForRedirect(redirect string) (net.Listener, string, *url.URL, error) {
	addr := "127.0.0.1:0"
	if redirect != "" {
		u, err := url.Parse(redirect)
		if err != nil {
			return nil, "", nil, fmt.Errorf("redirect_uri %q: %w", redirect, err)
		}
		addr = u.Host
		if u.Port() == "" {
			addr += ":80"
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen on %s for the browser: %w", addr, err)
	}
	if redirect == "" {
		redirect = "http://" + ln.Addr().String() + "/callback"
	}
	ru, err := url.Parse(redirect)
	if err != nil {
		ln.Close()
		return nil, "", nil, fmt.Errorf("redirect_uri %q: %w", redirect, err)
	}
	return ln, redirect, ru, nil
}
