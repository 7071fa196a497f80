package projector

import (
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/schemas"
)

var (
	// ErrKeyFileExists is returned by [WriteKeyFile] when the file exists and
	// force is false.
	ErrKeyFileExists = errors.New("key file exists")
	// ErrKeyFilePermissions is returned by [LoadKeyFile] when group or others
	// have any access to the key file.
	ErrKeyFilePermissions = errors.New("key file is accessible by group or others")
	// ErrKeyFileMalformed is returned by [LoadKeyFile] when the file is not
	// one line of 64 lowercase hex characters.
	ErrKeyFileMalformed = errors.New("malformed key file")
	// ErrInsecureDevKey is returned when the published development key would
	// be written to or loaded from a key file: a durable record signed with a
	// public seed proves nothing.
	ErrInsecureDevKey = errors.New("the insecure development key cannot sign durable records")
	// ErrZeroKey is returned when a zero PrivateKey is used.
	ErrZeroKey = errors.New("zero private key")
)

// PrivateKey is an Ed25519 signing key. It cannot be compared with == (use
// [PrivateKey.Equal], which runs in constant time) and it never prints its
// seed: every fmt verb renders it as "PrivateKey(key_id)". The zero value
// holds no key and is refused wherever a key is needed.
type PrivateKey struct {
	_    [0]func() // not comparable
	priv ed25519.PrivateKey
}

// GenerateKey draws a 32-byte seed from rand, normally crypto/rand.Reader.
func GenerateKey(rand io.Reader) (PrivateKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(rand, seed); err != nil {
		return PrivateKey{}, fmt.Errorf("generate key: %w", err)
	}
	return NewPrivateKey(seed)
}

// NewPrivateKey returns the key with the given 32-byte Ed25519 seed.
func NewPrivateKey(seed []byte) (PrivateKey, error) {
	if len(seed) != ed25519.SeedSize {
		return PrivateKey{}, fmt.Errorf("private key seed is %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	return PrivateKey{priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// InsecureDevKey returns the published development key of the upstream
// specification ([schemas.InsecureDevKeySeed]). Use it only for tests and
// records that are thrown away; [WriteKeyFile] and [LoadKeyFile] refuse it.
func InsecureDevKey() PrivateKey {
	k, _ := NewPrivateKey([]byte(schemas.InsecureDevKeySeed))
	return k
}

// IsZero reports whether k holds no key.
func (k PrivateKey) IsZero() bool { return k.priv == nil }

// IsInsecureDev reports whether k is [InsecureDevKey].
func (k PrivateKey) IsInsecureDev() bool {
	return !k.IsZero() && subtle.ConstantTimeCompare(k.priv.Seed(), []byte(schemas.InsecureDevKeySeed)) == 1
}

// Equal reports whether k and o are the same key, in constant time.
func (k PrivateKey) Equal(o PrivateKey) bool {
	return subtle.ConstantTimeCompare(k.priv, o.priv) == 1
}

// PublicKey returns the Ed25519 public key, or nil for the zero key.
func (k PrivateKey) PublicKey() ed25519.PublicKey {
	if k.IsZero() {
		return nil
	}
	return k.priv.Public().(ed25519.PublicKey)
}

// KeyID returns the key_id of the public key (hex SHA-256 of its 32 bytes),
// or "" for the zero key.
func (k PrivateKey) KeyID() string {
	if k.IsZero() {
		return ""
	}
	return schemas.KeyID(k.PublicKey())
}

// Sign returns the Ed25519 signature of msg.
func (k PrivateKey) Sign(msg []byte) ([]byte, error) {
	if k.IsZero() {
		return nil, ErrZeroKey
	}
	return ed25519.Sign(k.priv, msg), nil
}

// String names the key by its key_id, never by its seed.
func (k PrivateKey) String() string {
	if k.IsZero() {
		return "PrivateKey(zero)"
	}
	return "PrivateKey(" + k.KeyID() + ")"
}

// GoString is String: %#v must not print the seed either.
func (k PrivateKey) GoString() string { return k.String() }

// Format renders k as String for every verb, so that %x or %+v cannot print
// the seed.
func (k PrivateKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// MarshalText refuses: a private key is never serialized by accident. Use
// [WriteKeyFile].
func (k PrivateKey) MarshalText() ([]byte, error) {
	return nil, errors.New("a private key is not serialized; use WriteKeyFile")
}

// WriteKeyFile writes k's seed to path as one line of 64 lowercase hex
// characters and a newline, with mode 0600, and fsyncs the file and its
// directory. It refuses an existing file unless force is true, in which case
// the file is truncated and re-chmodded to 0600 before the seed is written.
// It refuses the zero key and [InsecureDevKey].
func WriteKeyFile(path string, k PrivateKey, force bool) (err error) {
	if k.IsZero() {
		return fmt.Errorf("write key file %q: %w", path, ErrZeroKey)
	}
	if k.IsInsecureDev() {
		return fmt.Errorf("write key file %q: %w", path, ErrInsecureDevKey)
	}
	line := make([]byte, 0, 2*ed25519.SeedSize+1)
	line = hex.AppendEncode(line, k.priv.Seed())
	line = append(line, '\n')
	if err := writeSecretFile(path, line, force); err != nil {
		if errors.Is(err, ErrKeyFileExists) {
			return fmt.Errorf("write key file %q: %w (pass force to overwrite)", path, err)
		}
		return fmt.Errorf("write key file: %w", err)
	}
	return nil
}

// writeSecretFile writes data to a new file at path, mode 0600 (replacing
// one only with force; else an existing file is [ErrKeyFileExists]), and
// makes it and its directory entry durable.
func writeSecretFile(path string, data []byte, force bool) (err error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return ErrKeyFileExists
		}
		return err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	// Windows: a new file inherits its directory's DACL, and Chmod does
	// not change it.
	if err := platform.MakePrivate(path); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		// Best effort: make the new directory entry durable too.
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// maxKeyFile bounds how much of a key file is read; a real one is 65 or 66
// bytes.
const maxKeyFile = 4096

// LoadKeyFile reads a key written by [WriteKeyFile]. On Unix it refuses, before
// reading any byte, a file that group or others can access in any way
// (mode&0o077 != 0), with an error that names the path and the chmod that
// fixes it. The content must be exactly 64 lowercase hex characters, optionally
// followed by "\n" or "\r\n"; anything else is [ErrKeyFileMalformed] with a
// message saying what was expected and found. The insecure development key is
// refused with [ErrInsecureDevKey]. There is no fallback: any error means no
// key.
func LoadKeyFile(path string) (PrivateKey, error) {
	b, err := ReadPrivateFile(path, maxKeyFile)
	var pe *PrivateFileError
	switch {
	case errors.As(err, &pe):
		return PrivateKey{}, fmt.Errorf("load key file %w", err)
	case err != nil:
		return PrivateKey{}, fmt.Errorf("load key file: %w", err)
	}
	seed, err := parseKeyFile(b)
	if err != nil {
		return PrivateKey{}, fmt.Errorf("load key file %q: %w", path, err)
	}
	k, err := NewPrivateKey(seed)
	if err != nil {
		return PrivateKey{}, err
	}
	if k.IsInsecureDev() {
		return PrivateKey{}, fmt.Errorf("load key file %q: %w", path, ErrInsecureDevKey)
	}
	return k, nil
}

func parseKeyFile(b []byte) ([]byte, error) {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%w: expected 64 characters, found more than %d", ErrKeyFileMalformed, maxKeyFile)
	}
	if n := utf8.RuneCount(b); n != 2*ed25519.SeedSize {
		return nil, fmt.Errorf("%w: expected 64 characters, found %d", ErrKeyFileMalformed, n)
	}
	for _, r := range string(b) {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return nil, fmt.Errorf("%w: expected lowercase hex, found %s", ErrKeyFileMalformed, strconv.QuoteRuneToASCII(r))
		}
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := hex.Decode(seed, b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyFileMalformed, err)
	}
	return seed, nil
}

// PrivateFileError is a secret's file that [ReadPrivateFile] refused
// before reading it. It wraps [ErrKeyFilePermissions] when group or
// others can access the file.
type PrivateFileError struct {
	Path string
	Perm os.FileMode
	// NotRegular: the path is not a regular file.
	NotRegular bool
}

func (e *PrivateFileError) Error() string {
	if e.NotRegular {
		return fmt.Sprintf("%q: not a regular file", e.Path)
	}
	if runtime.GOOS == "windows" {
		return fmt.Sprintf("%q: %v (it %s; run: %s)", e.Path, ErrKeyFilePermissions, platform.ModeWords(e.Perm), platform.FixCommand(e.Path, false))
	}
	return fmt.Sprintf("%q: %v (mode %#o)", e.Path, ErrKeyFilePermissions, e.Perm)
}

func (e *PrivateFileError) Unwrap() error {
	if e.NotRegular {
		return nil
	}
	return ErrKeyFilePermissions
}

// ReadPrivateFile reads a file that holds a secret (a signing key, a
// hub link key): it refuses, before reading any byte, a file that is not
// regular or that group or others can access in any way
// ([*PrivateFileError]), and reads at most limit bytes and one more.
func ReadPrivateFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &PrivateFileError{Path: path, NotRegular: true}
	}
	a, err := platform.FileAccess(f, fi)
	if err != nil {
		return nil, err
	}
	if a.Perm&0o077 != 0 {
		return nil, &PrivateFileError{Path: path, Perm: a.Perm}
	}
	return io.ReadAll(io.LimitReader(f, limit+1))
}
