// Package witnesstest runs a real C2SP tlog-witness for tests:
// litewitness from filippo.io/torchwood v0.6.1, as built by
// `make witness-deps` into .cache/witness/bin (or AEGIS_WITNESS_BINDIR),
// with its key served by an ssh-agent in the test process. A test that
// needs it skips when the binaries are missing, or fails when
// AEGIS_REQUIRE_WITNESS is set (make test sets it).
package witnesstest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/agent"
)

// Witness is a running litewitness.
type Witness struct {
	Name string
	URL  string
	Pub  ed25519.PublicKey
	db   string
	bin  string
}

// PolicyLine is the witness's line of a witness policy, under alias.
func (w *Witness) PolicyLine(alias string) string {
	return fmt.Sprintf("witness %s %s %s\n", alias, w.vkeyOrHex(), w.URL)
}

// vkeyOrHex is the witness's vkey (name+hash+base64(0x04 ‖ key)).
func (w *Witness) vkeyOrHex() string {
	h := sha256.Sum256(append([]byte(w.Name+"\n\x04"), w.Pub...))
	return fmt.Sprintf("%s+%x+%s", w.Name, h[:4], base64.StdEncoding.EncodeToString(append([]byte{0x04}, w.Pub...)))
}

// bindir finds the witness binaries.
func bindir(t testing.TB) string {
	if d := os.Getenv("AEGIS_WITNESS_BINDIR"); d != "" {
		return d
	}
	// The module root, above the test's package folder (its working
	// directory): no source path is compiled in, as builds may be trimmed.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".cache", "witness", "bin")
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("no go.mod at or above %s", wd)
		}
	}
}

// Start runs a litewitness named name (its cosignature key name) until
// the test ends. The witness knows no log until AddLog.
func Start(t testing.TB, name string) *Witness {
	t.Helper()
	bin := bindir(t)
	if _, err := os.Stat(filepath.Join(bin, "litewitness")); err != nil {
		if os.Getenv("AEGIS_REQUIRE_WITNESS") != "" {
			t.Fatalf("litewitness is not built in %s: run make witness-deps", bin)
		}
		t.Skipf("litewitness is not built in %s: run make witness-deps", bin)
	}
	// A short directory: a unix socket path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "aw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				agent.ServeAgent(keyring, c)
			}()
		}
	}()
	w := &Witness{Name: name, Pub: pub, db: filepath.Join(dir, "witness.db"), bin: bin}
	w.ctl(t, "add-log", "-origin", "aegis/bootstrap") // creates the database
	port, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := port.Addr().String()
	port.Close()
	fp := sha256.Sum256(pub)
	c := exec.Command(filepath.Join(bin, "litewitness"), "-db", w.db, "-name", name, "-ssh-agent", sock,
		"-key", hex.EncodeToString(fp[:]), "-listen", addr)
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	w.URL = "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(w.URL + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("litewitness did not listen on %s within 20 s:\n%s", addr, stderr.String())
		}
	}
	return w
}

// AddLog makes the witness accept checkpoints of origin signed with vkey.
func (w *Witness) AddLog(t testing.TB, origin, vkey string) {
	t.Helper()
	w.ctl(t, "add-log", "-origin", origin)
	w.ctl(t, "add-key", "-origin", origin, "-key", vkey)
}

// Size returns the size of the last checkpoint of origin the witness
// cosigned (witnessctl list-logs), 0 for none.
func (w *Witness) Size(t testing.TB, origin string) int64 {
	t.Helper()
	out, err := exec.Command(filepath.Join(w.bin, "witnessctl"), "list-logs", "-db", w.db).CombinedOutput()
	if err != nil {
		t.Fatalf("witnessctl list-logs: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var l struct {
			Origin string `json:"origin"`
			Size   int64  `json:"size"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Origin == origin {
			return l.Size
		}
	}
	return 0
}

// WaitSize waits (20 s at most) until the witness cosigned a checkpoint
// of origin of at least n leaves.
func (w *Witness) WaitSize(t testing.TB, origin string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); w.Size(t, origin) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the witness cosigned no checkpoint of %s of %d leaves within 20 s", origin, n)
		}
	}
}

func (w *Witness) ctl(t testing.TB, args ...string) {
	t.Helper()
	args = append(args[:1:1], append([]string{"-db", w.db}, args[1:]...)...)
	out, err := exec.Command(filepath.Join(w.bin, "witnessctl"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("witnessctl %v: %v\n%s", args, err, out)
	}
}
