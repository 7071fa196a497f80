package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
)

// Tokens at rest: what aegis auth login obtained for a url server, kept
// for the gateway. Invariants:
//
//   - A token file is an age file (filippo.io/age, ASCII-armored, the
//     format of approver keys), encrypted to the X25519 identity in
//     oauth/identity of the state directory; both are written with mode
//     0600 (atomically: a temporary file renamed over the old one) and
//     read only when no one else can access them. So a token file copied
//     without the identity (a backup, a sync of the state directory's
//     tokens) is an opaque blob, and `age -d -i oauth/identity FILE`
//     shows it.
//   - A token file names the server and its url: a token is used only
//     for the url it was obtained for (a changed url needs a new login).
//   - Nothing of a token file (access or refresh token, client secret)
//     is ever recorded, logged or said: errors name the file, never a
//     value.

// TokenDir is the directory of the state directory that holds the
// identity and the token files.
const TokenDir = "oauth"

// maxTokenFile bounds a token file; a real one is some 4 KiB.
const maxTokenFile = 64 << 10

// ErrNoToken: no token was stored for the server (aegis auth login).
var ErrNoToken = errors.New("no token stored")

// StoredToken is what a token file holds (JSON, then encrypted).
type StoredToken struct {
	Server string `json:"server"`
	URL    string `json:"url"` // the server's url, as the file gives it
	// Resource is the resource indicator (RFC 8707) sent on authorize,
	// token and refresh: the protected resource metadata's resource.
	Resource string `json:"resource,omitempty"`
	Issuer   string `json:"issuer,omitempty"`
	TokenURL string `json:"token_url"`
	ClientID string `json:"client_id"`
	// ClientSecret is a secret that dynamic registration gave; a
	// configured one (client_secret:) is read from the file again.
	ClientSecret string    `json:"client_secret,omitempty"`
	AuthStyle    int       `json:"auth_style,omitempty"` // oauth2.AuthStyle
	Scopes       []string  `json:"scopes,omitempty"`
	AccessToken  string    `json:"access_token"`
	TokenType    string    `json:"token_type,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
}

// String never shows a secret.
func (t StoredToken) String() string {
	return fmt.Sprintf("StoredToken(%s, expires %s)", t.Server, t.Expiry.Format(time.RFC3339))
}

// Format never shows a secret.
func (t StoredToken) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// TokenStore is the token files of one state directory.
type TokenStore struct {
	dir string // <state>/oauth
}

// NewTokenStore is the token store of state directory stateDir.
func NewTokenStore(stateDir string) *TokenStore {
	return &TokenStore{dir: filepath.Join(stateDir, TokenDir)}
}

// Path is the token file of server.
func (s *TokenStore) Path(server string) string { return filepath.Join(s.dir, server+".age") }

func (s *TokenStore) identityPath() string { return filepath.Join(s.dir, "identity") }

// identity reads the store's X25519 identity, making it when create and
// there is none.
func (s *TokenStore) identity(create bool) (*age.X25519Identity, error) {
	p := s.identityPath()
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) && create {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			return nil, fmt.Errorf("token store: %w", err)
		}
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, fmt.Errorf("token store: %w", err)
		}
		if err := writePrivate(p, []byte(id.String()+"\n")); err != nil {
			return nil, fmt.Errorf("token store: %w", err)
		}
		return id, nil
	}
	v, err := ReadSecretFile(p, errTokenFile, "which no age identity can")
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return nil, fmt.Errorf("%w (the token store's identity %s does not exist)", ErrNoToken, p)
		}
		return nil, err
	}
	id, err := age.ParseX25519Identity(strings.TrimSpace(v))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not an age X25519 identity", errTokenFile, p)
	}
	return id, nil
}

var errTokenFile = errors.New("unusable token store file")

// Save encrypts t and writes it as server's token file.
func (s *TokenStore) Save(t StoredToken) error {
	id, err := s.identity(true)
	if err != nil {
		return err
	}
	plain, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, id.Recipient())
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if _, err := w.Write(plain); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := aw.Close(); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := writePrivate(s.Path(t.Server), buf.Bytes()); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	return nil
}

// Load reads and decrypts server's token file; [ErrNoToken] when there
// is none.
func (s *TokenStore) Load(server string) (StoredToken, error) {
	p := s.Path(server)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return StoredToken{}, fmt.Errorf("%w for server %s (%s does not exist)", ErrNoToken, server, p)
	}
	data, err := ReadSecretFile(p, errTokenFile, "which no token file can")
	if err != nil {
		return StoredToken{}, err
	}
	if len(data) > maxTokenFile {
		return StoredToken{}, fmt.Errorf("%w: %s is larger than %d KiB", errTokenFile, p, maxTokenFile>>10)
	}
	id, err := s.identity(false)
	if err != nil {
		return StoredToken{}, err
	}
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(data)), id)
	if err != nil {
		return StoredToken{}, fmt.Errorf("%w: %s does not open with %s: %w", errTokenFile, p, s.identityPath(), err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, maxTokenFile))
	if err != nil {
		return StoredToken{}, fmt.Errorf("%w: %s: %w", errTokenFile, p, err)
	}
	var t StoredToken
	if err := json.Unmarshal(plain, &t); err != nil || t.Server != server || t.AccessToken == "" || t.TokenURL == "" {
		return StoredToken{}, fmt.Errorf("%w: %s is not a token file of server %s", errTokenFile, p, server)
	}
	return t, nil
}

// writePrivate writes b to path with mode 0600, atomically.
func writePrivate(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%x.tmp", filepath.Base(path), rnd))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
