package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// screen collects what a child writes on its terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		ok := strings.Contains(s.buf.String(), text)
		s.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Fatalf("the terminal never showed %q; it shows:\n%s", text, s.buf.String())
}

// TestKeygenApproverOnARealTerminal: the real binary, with a pseudo-
// terminal as its controlling terminal and stdin elsewhere, asks twice on
// /dev/tty without echo, and the key opens with what was typed there.
func TestKeygenApproverOnARealTerminal(t *testing.T) {
	master, slave := openPTY(t)
	out := filepath.Join(t.TempDir(), "approver.age")
	c := exec.Command(filepath.Join(bins(t), "aegis"), "keygen", "--approver", "--out", out, "--name", "alice")
	c.Stdin = strings.NewReader("not the passphrase\n")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	c.ExtraFiles = []*os.File{slave}
	onTerminal(c, 3)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	scr := &screen{}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			scr.mu.Lock()
			scr.buf.Write(b[:n])
			scr.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	const pass = "typed on the terminal"
	scr.waitFor(t, "passphrase for the new approver key")
	master.WriteString(pass + "\r")
	scr.waitFor(t, "again, to confirm: ")
	master.WriteString(pass + "\r")
	if err := c.Wait(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, stderr.String())
	}
	scr.mu.Lock()
	shown := scr.buf.String()
	scr.mu.Unlock()
	if strings.Contains(shown, pass) {
		t.Fatalf("the passphrase was echoed:\n%s", shown)
	}
	line, _, _ := strings.Cut(stdout.String(), "\n")
	a, err := schemas.ParseApprovers([]byte(line))
	if err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	// The key is opened in a child process: at the real work factor
	// scrypt takes 256 MiB, which must not count as this test process's
	// peak (the scale tests measure against it).
	helper := exec.Command(os.Args[0], "-test.run=^TestOpenApproverKeyHelper$")
	helper.Env = append(os.Environ(), "AEGIS_TEST_OPEN_KEY="+out, "AEGIS_TEST_OPEN_PASS="+pass)
	got, err := helper.CombinedOutput()
	if err != nil {
		t.Fatalf("open the key in a child: %v\n%s", err, got)
	}
	keyID, _, _ := strings.Cut(strings.TrimPrefix(string(got), "key_id "), "\n")
	if _, ok := a.Lookup(keyID); !ok {
		t.Fatalf("the printed line does not hold the key the file opens to:\n%s", got)
	}
}

// TestOpenApproverKeyHelper opens the key file AEGIS_TEST_OPEN_KEY names
// with AEGIS_TEST_OPEN_PASS and prints its key id; it runs only as the
// child of TestKeygenApproverOnARealTerminal.
func TestOpenApproverKeyHelper(t *testing.T) {
	path := os.Getenv("AEGIS_TEST_OPEN_KEY")
	if path == "" {
		t.Skip("a helper of TestKeygenApproverOnARealTerminal")
	}
	data, err := projector.ReadApproverKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := projector.OpenApproverKey(data, []byte(os.Getenv("AEGIS_TEST_OPEN_PASS")))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("key_id %s\n", k.KeyID())
	os.Stdout.Sync()
	os.Exit(0)
}
