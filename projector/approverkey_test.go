package projector

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

// TestApproverKeyFile: the key is an armored age file that opens only
// with its passphrase, is private to its owner, and signs claims that the
// approvers line it prints accepts.
func TestApproverKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "alice.age")
	k, err := GenerateApproverKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pass := []byte("correct horse battery")
	if err := WriteApproverKeyFile(path, k, []byte("short"), 10, false); err == nil {
		t.Fatal("a 5-character passphrase was taken")
	}
	if err := WriteApproverKeyFile(path, k, pass, 10, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteApproverKeyFile(path, k, pass, 10, false); !errors.Is(err, ErrKeyFileExists) {
		t.Fatalf("second write: %v", err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	data, err := ReadApproverKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("-----BEGIN AGE ENCRYPTED FILE-----")) || bytes.Contains(data, []byte(schemas.PublicKeyHex(k.PublicKey()))) {
		t.Fatalf("not an armored age file:\n%s", data)
	}
	if _, err := OpenApproverKey(data, []byte("wrong horse battery")); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	if _, err := OpenApproverKey([]byte("aegis-approver-key\n"), pass); err == nil || errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("garbage: %v", err)
	}
	got, err := OpenApproverKey(data, pass)
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyID() != k.KeyID() || strings.Contains(got.String(), "priv") {
		t.Fatalf("opened %v, want %v", got, k)
	}
	approvers, err := schemas.ParseApprovers([]byte(schemas.ApproverLine(k.PublicKey(), "alice")))
	if err != nil {
		t.Fatal(err)
	}
	c := schemas.ApprovalClaim{ApprovalID: "apr-1", Session: "01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM", Target: "add", ArgsDigest: strings.Repeat("0", 64)}
	s, err := got.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	if ap, err := approvers.Check(c, s); err != nil || ap.Name != "alice" {
		t.Fatalf("check: %v", err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadApproverKeyFile(path); !errors.Is(err, ErrKeyFilePermissions) {
		t.Fatalf("group-readable key: %v", err)
	}
}
