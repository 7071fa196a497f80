package projector

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(t *testing.T) PrivateKey {
	t.Helper()
	k, err := NewPrivateKey(bytes.Repeat([]byte{0x42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDevKeyID(t *testing.T) {
	if got, want := InsecureDevKey().KeyID(), "77a2c2f5952039243c043b69e7e812a2deb69e3271adb3013b8f24d3b8ea40f6"; got != want {
		t.Fatalf("InsecureDevKey().KeyID() = %s, want %s", got, want)
	}
	if !InsecureDevKey().IsInsecureDev() || testKey(t).IsInsecureDev() {
		t.Fatal("IsInsecureDev is wrong")
	}
}

// TestPrivateKeyDoesNotPrint stops the seed from reaching a log line through
// any fmt verb or encoding/json.
func TestPrivateKeyDoesNotPrint(t *testing.T) {
	k := testKey(t)
	seedHex := strings.Repeat("42", 32)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
		got := fmt.Sprintf(verb, k)
		if strings.Contains(strings.ToLower(got), seedHex) || strings.Contains(got, "\x42\x42") {
			t.Errorf("Sprintf(%q, key) = %q leaks the seed", verb, got)
		}
	}
	if got := fmt.Sprintf("%v", struct{ K PrivateKey }{k}); strings.Contains(got, seedHex) || strings.Contains(got, "66 66") {
		t.Errorf("key inside a struct prints %q", got)
	}
	if b, err := json.Marshal(k); err == nil {
		t.Errorf("json.Marshal(key) = %s, want error", b)
	}
}

func TestPrivateKeyEqual(t *testing.T) {
	a, b := testKey(t), testKey(t)
	if !a.Equal(b) || a.Equal(InsecureDevKey()) || a.Equal(PrivateKey{}) {
		t.Fatal("Equal is wrong")
	}
}

func TestGenerateKey(t *testing.T) {
	k, err := GenerateKey(rand.Reader)
	if err != nil || k.IsZero() {
		t.Fatalf("GenerateKey = %v, %v", k, err)
	}
	if _, err := GenerateKey(bytes.NewReader(make([]byte, 31))); err == nil {
		t.Fatal("GenerateKey from a short reader succeeded")
	}
}

func TestKeyFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	k := testKey(t)
	if err := WriteKeyFile(path, k, false); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got, want := string(b), strings.Repeat("42", 32)+"\n"; got != want {
		t.Fatalf("key file = %q, want %q", got, want)
	}
	fi, _ := os.Stat(path)
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("key file mode = %#o, want 0600", got)
	}
	got, err := LoadKeyFile(path)
	if err != nil || !got.Equal(k) {
		t.Fatalf("LoadKeyFile = %v, %v", got, err)
	}
}

// TestKeyFileNoSilentOverwrite: overwriting a signing key orphans every
// record it signed, so it needs force.
func TestKeyFileNoSilentOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	if err := WriteKeyFile(path, testKey(t), false); err != nil {
		t.Fatal(err)
	}
	other, _ := GenerateKey(rand.Reader)
	if err := WriteKeyFile(path, other, false); !errors.Is(err, ErrKeyFileExists) {
		t.Fatalf("second WriteKeyFile = %v, want ErrKeyFileExists", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyFile(path, other, true); err != nil {
		t.Fatalf("forced WriteKeyFile: %v", err)
	}
	fi, _ := os.Stat(path)
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("forced key file mode = %#o, want 0600", got)
	}
	if got, err := LoadKeyFile(path); err != nil || !got.Equal(other) {
		t.Fatalf("LoadKeyFile after force = %v, %v", got, err)
	}
}

// TestKeyFileGroupReadableRefused: a key others can read is a key others may
// have copied; refuse it before reading it.
func TestKeyFileGroupReadableRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o610, 0o601} {
		path := filepath.Join(t.TempDir(), "signing.key")
		if err := WriteKeyFile(path, testKey(t), false); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadKeyFile(path)
		if !errors.Is(err, ErrKeyFilePermissions) {
			t.Fatalf("LoadKeyFile(mode %#o) = %v, want ErrKeyFilePermissions", mode, err)
		}
		// The mode, once; the fix (chmod 600) is the command line's hint.
		if want := fmt.Sprintf("(mode %#o)", mode); !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "chmod") {
			t.Fatalf("error %q: want it to name %s and leave the fix to the hint", err, want)
		}
	}
}

func TestKeyFileMalformed(t *testing.T) {
	hex := strings.Repeat("42", 32)
	for _, tc := range []struct{ name, content, want string }{
		{"short", hex[:63] + "\n", "expected 64 characters, found 63"},
		{"long", hex + "0\n", "expected 64 characters, found 65"},
		{"empty", "", "expected 64 characters, found 0"},
		{"uppercase", "A" + hex[1:] + "\n", "expected lowercase hex, found 'A'"},
		{"comment", "#" + hex[1:], "expected lowercase hex, found '#'"},
		{"two newlines", hex + "\n\n", "expected 64 characters, found 65"},
		{"pem", "-----BEGIN PRIVATE KEY-----\n", "expected 64 characters, found 27"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadKeyFile(path)
			if !errors.Is(err, ErrKeyFileMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadKeyFile(%q) = %v, want %q", tc.content, err, tc.want)
			}
		})
	}
	for _, ok := range []string{hex, hex + "\n", hex + "\r\n"} {
		path := filepath.Join(t.TempDir(), "k")
		if err := os.WriteFile(path, []byte(ok), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKeyFile(path); err != nil {
			t.Errorf("LoadKeyFile(%q) = %v", ok, err)
		}
	}
}

// TestKeyFileRefusesDevKey: the development seed is public; a durable record
// signed with it proves nothing.
func TestKeyFileRefusesDevKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	if err := WriteKeyFile(path, InsecureDevKey(), false); !errors.Is(err, ErrInsecureDevKey) {
		t.Fatalf("WriteKeyFile(dev key) = %v", err)
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%x\n", "aegis-insecure-dev-key-not-real!")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(path); !errors.Is(err, ErrInsecureDevKey) {
		t.Fatalf("LoadKeyFile(dev key) = %v", err)
	}
}

func TestLoadKeyFileMissing(t *testing.T) {
	if _, err := LoadKeyFile(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKeyFile(missing) = %v", err)
	}
}
