package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The OpenID provider of these tests is the one zitadel/oidc ships
// (its example OP: the op package's real endpoints, discovery, keys,
// login form, PKCE, token endpoint and introspection), started in this
// process on a loopback port, with its two example users. Its example
// storage is used as it is, with what a deployment configures: which
// clients get JWT access tokens and which scopes they may ask for, a
// groups claim per user (id1 in eng, id2 in sales), and a switch that
// makes the next access token already expired (the storage decides a
// token's lifetime).
type testOP struct {
	issuer string
	st     *opStorage
	lastID string // the ID token of the last login
}

const (
	opClient      = "aegis-cli" // a native client with JWT access tokens: aud is its id
	opOtherClient = "other-app" // another client: its tokens are for another audience
	opWebClient   = "aegis-web" // a web client with opaque tokens (introspection)
	opWebSecret   = "web-secret-1234567890"
	// opGatewayClient is the gateway's own client, which exchanges its
	// callers' tokens (RFC 8693) and gets JWT access tokens.
	opGatewayClient = "aegis-gateway"
	opGatewaySecret = "gateway-secret-0987654321"
	opRedirect      = "http://127.0.0.1/callback"
	opUser1         = "id1" // test-user@127.0.0.1, group eng
	opUser2         = "id2" // test-user2, group sales
	opPassword      = "verysecure"
)

var (
	sharedOPOnce sync.Once
	sharedOPVal  *testOP
	sharedOPErr  error
)

// sharedOP starts the OpenID provider once for the test binary. Its
// expireNext and its count of token exchanges are the provider's, not a
// test's: the tests that use it run one after another, never t.Parallel.
func sharedOP(t *testing.T) *testOP {
	t.Helper()
	sharedOPOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			sharedOPErr = err
			return
		}
		issuer := "http://" + ln.Addr().String()
		storage.RegisterClients(
			storage.NativeClient(opClient, opRedirect),
			storage.NativeClient(opOtherClient, opRedirect),
			storage.WebClient(opWebClient, opWebSecret, opRedirect),
			storage.WebClient(opGatewayClient, opGatewaySecret, opRedirect),
		)
		st := &opStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer))}
		router := exampleop.SetupServer(issuer, st, nil, false)
		go (&http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
		sharedOPVal = &testOP{issuer: issuer, st: st}
	})
	if sharedOPErr != nil {
		t.Fatal(sharedOPErr)
	}
	return sharedOPVal
}

// opStorage is the example storage with a deployment's settings: the
// groups claim, the scope claim in JWT access tokens, expireNext, and
// whom it exchanges tokens for.
type opStorage struct {
	*storage.Storage
	expireNext atomic.Bool
	exchanges  atomic.Int64 // token exchange requests validated
}

// ValidateTokenExchangeRequest: the provider trusts the gateway's client
// to exchange any of its users' tokens (the example storage lets only an
// admin be exchanged without an actor token), except for an audience
// whose path ends in /vault/mcp, which it refuses (invalid_target).
func (s *opStorage) ValidateTokenExchangeRequest(ctx context.Context, r op.TokenExchangeRequest) error {
	s.exchanges.Add(1)
	for _, a := range append(r.GetAudience(), r.GetResourses()...) {
		if strings.HasSuffix(a, "/vault/mcp") {
			return zoidc.ErrInvalidTarget().WithDescription("no tokens are exchanged for the vault")
		}
	}
	r.SetCurrentScopes(r.GetScopes())
	return nil
}

var opGroups = map[string][]any{opUser1: {"eng"}, opUser2: {"sales"}}

func (s *opStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return opClientSettings{Client: c}, nil
}

func (s *opStorage) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil {
		return nil, err
	}
	if claims == nil {
		claims = map[string]any{}
	}
	if g, ok := opGroups[userID]; ok {
		claims["groups"] = g
	}
	// The op package writes no scope claim into a JWT access token; the
	// storage adds it (RFC 9068 §2.2.3), as a deployment would.
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	return claims, nil
}

func (s *opStorage) SetIntrospectionFromToken(ctx context.Context, in *zoidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	if err := s.Storage.SetIntrospectionFromToken(ctx, in, tokenID, subject, clientID); err != nil {
		return err
	}
	in.Audience = []string{clientID}
	if g, ok := opGroups[subject]; ok {
		in.Claims = map[string]any{"groups": g}
	}
	return nil
}

func (s *opStorage) CreateAccessAndRefreshTokens(ctx context.Context, r op.TokenRequest, current string) (string, string, time.Time, error) {
	id, refresh, exp, err := s.Storage.CreateAccessAndRefreshTokens(ctx, r, current)
	if s.expireNext.Swap(false) {
		exp = time.Now().Add(-time.Minute)
	}
	return id, refresh, exp, err
}

func (s *opStorage) CreateAccessToken(ctx context.Context, r op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, r)
	if s.expireNext.Swap(false) {
		exp = time.Now().Add(-time.Minute)
	}
	return id, exp, err
}

// opClientSettings: the native clients get JWT access tokens, and every
// client may ask for the gateway's scopes.
type opClientSettings struct{ op.Client }

func (c opClientSettings) AccessTokenType() op.AccessTokenType {
	if c.GetID() == opWebClient {
		return op.AccessTokenTypeBearer
	}
	return op.AccessTokenTypeJWT
}

func (c opClientSettings) IsScopeAllowed(s string) bool {
	return s == "mcp:tools" || s == "mcp:admin" || c.Client.IsScopeAllowed(s)
}

// login signs user in through the OP's login form with client (the
// authorization code flow with PKCE, driven over HTTP as a browser
// would) and returns the access token and the authorization code it
// was exchanged for.
func (o *testOP) login(t *testing.T, client, username, scope string) (token, code string) {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"client_id": {client}, "redirect_uri": {opRedirect}, "response_type": {"code"}, "scope": {scope},
		"state": {"st"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	loc := o.follow(t, hc, http.MethodGet, o.issuer+"/auth?"+q.Encode(), nil)
	lu, err := url.Parse(loc)
	if err != nil || !strings.HasPrefix(lu.Path, "/login/username") {
		t.Fatalf("authorize did not send to the login form: %q", loc)
	}
	id := lu.Query().Get("authRequestID")
	loc = o.follow(t, hc, http.MethodPost, o.issuer+"/login/username", url.Values{"id": {id}, "username": {username}, "password": {opPassword}})
	if !strings.HasPrefix(loc, "http") {
		loc = o.issuer + loc
	}
	loc = o.follow(t, hc, http.MethodGet, loc, nil)
	cu, err := url.Parse(loc)
	if err != nil || cu.Query().Get("code") == "" {
		t.Fatalf("the login did not end at the redirect with a code: %q", loc)
	}
	code = cu.Query().Get("code")
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {opRedirect}, "code_verifier": {verifier}}
	req, _ := http.NewRequest(http.MethodPost, o.issuer+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if client == opWebClient {
		req.SetBasicAuth(client, opWebSecret)
	} else {
		form.Set("client_id", client)
		req, _ = http.NewRequest(http.MethodPost, o.issuer+"/oauth/token", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
		IDToken     string `json:"id_token"`
		Error       string `json:"error_description"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("token endpoint: %s %v %q", resp.Status, err, tok.Error)
	}
	o.lastID = tok.IDToken
	return tok.AccessToken, code
}

// follow makes one request and returns its redirect's Location.
func (o *testOP) follow(t *testing.T, hc *http.Client, method, u string, form url.Values) string {
	t.Helper()
	var req *http.Request
	if form != nil {
		req, _ = http.NewRequest(method, u, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req, _ = http.NewRequest(method, u, nil)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode/100 != 3 || loc == "" {
		t.Fatalf("%s %s: %s, no redirect", method, u, resp.Status)
	}
	return loc
}
