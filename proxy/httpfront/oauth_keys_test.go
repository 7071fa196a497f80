package httpfront

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// keyIssuer serves a JWKS of the keys it holds, counting the fetches.
type keyIssuer struct {
	mu      sync.Mutex
	keys    []jose.JSONWebKey // public
	fetches atomic.Int32
}

func (k *keyIssuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.fetches.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: k.keys})
}

// newKey makes a signing key kid; published, its public half is served.
func (k *keyIssuer) newKey(t *testing.T, kid string, publish bool) jose.Signer {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if publish {
		k.mu.Lock()
		k.keys = append(k.keys, jose.JSONWebKey{Key: &priv.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"})
		k.mu.Unlock()
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: priv, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sign(t *testing.T, s jose.Signer) string {
	t.Helper()
	jws, err := s.Sign([]byte(`{"iss":"x","sub":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The issuer's keys are fetched at the start, again for a key it rotated
// in, and no more than once per period however many tokens name key ids
// it does not have; a token signed by another key under a known key id
// is refused without a fetch.
func TestKeySetRefetchIsBounded(t *testing.T) {
	iss := &keyIssuer{}
	k1 := iss.newKey(t, "k1", true)
	srv := httptest.NewServer(iss)
	defer srv.Close()
	now := time.Unix(1_800_000_000, 0)
	ks := &limitedKeys{url: srv.URL, client: srv.Client(), every: 10 * time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	ks.mu.Lock()
	if err := ks.fetch(ctx); err != nil {
		t.Fatal(err)
	}
	ks.mu.Unlock()

	if _, err := ks.VerifySignature(ctx, sign(t, k1)); err != nil {
		t.Fatalf("a token of the issuer's key: %v", err)
	}
	// A flood of made-up key ids: one fetch for the period, then none.
	now = now.Add(11 * time.Second)
	for i := range 50 {
		forged := iss.newKey(t, "made-up-"+strings.Repeat("x", i%5), false)
		if _, err := ks.VerifySignature(ctx, sign(t, forged)); err == nil {
			t.Fatal("a token of an unknown key verified")
		}
	}
	if n := iss.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches for the start and a flood of unknown key ids; want 2", n)
	}
	// Another key under a known key id: refused, no fetch.
	impostor := iss.newKey(t, "k1", false)
	now = now.Add(11 * time.Second)
	if _, err := ks.VerifySignature(ctx, sign(t, impostor)); err == nil {
		t.Fatal("a token signed by another key under k1 verified")
	}
	if n := iss.fetches.Load(); n != 2 {
		t.Fatalf("a known key id fetched the keys again (%d fetches)", n)
	}
	// A key the issuer rotated in: fetched once the period is over.
	k2 := iss.newKey(t, "k2", true)
	if _, err := ks.VerifySignature(ctx, sign(t, k2)); err != nil {
		t.Fatalf("a token of the rotated-in key: %v", err)
	}
	if n := iss.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches; want 3", n)
	}
}
