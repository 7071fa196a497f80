package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/policy"
)

func storedToken(server string) StoredToken {
	return StoredToken{Server: server, URL: "https://wiki.example.com/mcp", Resource: "https://wiki.example.com/mcp",
		TokenURL: "https://auth.example.com/token", ClientID: "aegis", AccessToken: "at-" + server + "-5ecret-access",
		RefreshToken: "rt-" + server + "-5ecret-refresh", Expiry: time.Now().Add(time.Hour)}
}

// TestTokenStoreRefuses: each way a token file could leak, be swapped or
// be used for what it was not obtained for is refused, and no error
// quotes a token.
func TestTokenStoreRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, s *TokenStore)
		load string // the server loaded
		want string
	}{
		{"TokenFileReadableByGroup", func(t *testing.T, s *TokenStore) { os.Chmod(s.Path("wiki"), 0o640) }, "wiki", "accessible by group or others"},
		{"IdentityReadableByOthers", func(t *testing.T, s *TokenStore) { os.Chmod(s.identityPath(), 0o604) }, "wiki", "accessible by group or others"},
		{"TokenFileOfAnotherServerSwappedIn", func(t *testing.T, s *TokenStore) {
			b, _ := os.ReadFile(s.Path("wiki"))
			os.WriteFile(s.Path("docs"), b, 0o600)
		}, "docs", "is not a token file of server docs"},
		{"TokenFileEncryptedToAnotherIdentity", func(t *testing.T, s *TokenStore) {
			other := NewTokenStore(t.TempDir())
			if err := other.Save(storedToken("wiki")); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(other.Path("wiki"))
			os.WriteFile(s.Path("wiki"), b, 0o600)
		}, "wiki", "does not open with"},
		{"IdentityGone", func(t *testing.T, s *TokenStore) { os.Remove(s.identityPath()) }, "wiki", "no token stored"},
		{"NoLogin", func(t *testing.T, s *TokenStore) {}, "other", "no token stored for server other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewTokenStore(t.TempDir())
			if err := s.Save(storedToken("wiki")); err != nil {
				t.Fatal(err)
			}
			tc.harm(t, s)
			_, err := s.Load(tc.load)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load(%s) = %v; want an error with %q", tc.load, err, tc.want)
			}
			if strings.Contains(err.Error(), "5ecret") {
				t.Errorf("the error quotes a token: %v", err)
			}
		})
	}
}

// TestTokenStoreKeepsTokensEncrypted: a saved token file and its identity
// are 0600, the file holds no token in clear, and it opens again.
func TestTokenStoreKeepsTokensEncrypted(t *testing.T) {
	s := NewTokenStore(t.TempDir())
	want := storedToken("wiki")
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.Path("wiki"), s.identityPath()} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v mode %v; want 0600", p, err, fi.Mode().Perm())
		}
	}
	b, _ := os.ReadFile(s.Path("wiki"))
	if strings.Contains(string(b), "5ecret") || !strings.Contains(string(b), "BEGIN AGE ENCRYPTED FILE") {
		t.Errorf("the token file is not an armored age file without the tokens in clear:\n%s", b)
	}
	got, err := s.Load("wiki")
	if err != nil || got.AccessToken != want.AccessToken || got.RefreshToken != want.RefreshToken || got.Resource != want.Resource {
		t.Errorf("Load = %v %v", got, err)
	}
	if shown := fmt.Sprintf("%v %+v %s", got, got, got); strings.Contains(shown, "5ecret") {
		t.Errorf("formatting a stored token shows a token: %s", shown)
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.Path("wiki"))); len(entries) != 2 {
		t.Errorf("the store holds %d files; want the identity and the token (no temporary file left)", len(entries))
	}
}

// TestOAuthOfATokenForAnotherURL: a token obtained for another url is not
// sent; the server needs a login, and says so.
func TestOAuthOfATokenForAnotherURL(t *testing.T) {
	s := NewTokenStore(t.TempDir())
	if err := s.Save(storedToken("wiki")); err != nil {
		t.Fatal(err)
	}
	srv := policy.Server{Name: "wiki", URL: "https://evil.example.com/mcp", OAuth: &policy.OAuth{}}
	o, err := OAuthOf(srv, s, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.refusal(); !strings.Contains(got, "another url") || !strings.Contains(got, "aegis auth login wiki") {
		t.Errorf("refusal = %q", got)
	}
	if _, err := o.token(t.Context(), false); err == nil {
		t.Error("the token of another url was handed out")
	}
}
