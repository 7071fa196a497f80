package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
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
	// The key is opened by a helper built without the race detector: at
	// the real work factor scrypt takes 256 MiB, which must not count as
	// this test process's peak, and under the race detector most of a
	// minute.
	helper := exec.Command(filepath.Join(bins(t), "openkey"), out)
	helper.Stdin = strings.NewReader(pass + "\n")
	got, err := helper.CombinedOutput()
	if err != nil {
		t.Fatalf("open the key in a child: %v\n%s", err, got)
	}
	keyID, _, _ := strings.Cut(strings.TrimPrefix(string(got), "key_id "), "\n")
	if _, ok := a.Lookup(keyID); !ok {
		t.Fatalf("the printed line does not hold the key the file opens to:\n%s", got)
	}
}
