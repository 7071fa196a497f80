package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 3}
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
	data, err := projector.ReadApproverKeyFile(out)
	if err != nil {
		t.Fatal(err)
	}
	k, err := projector.OpenApproverKey(data, []byte(pass))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Lookup(k.KeyID()); !ok {
		t.Fatalf("the printed line does not hold key %s", k.KeyID())
	}
}
