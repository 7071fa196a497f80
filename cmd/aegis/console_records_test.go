package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// waitRecord reads the console's state until its row of the record file
// at path satisfies ok, and returns that row.
func waitRecord(t *testing.T, c *consoleClient, path string, limit time.Duration, what string, ok func(console.RecordRow) bool) console.RecordRow {
	t.Helper()
	var last struct {
		Records []console.RecordRow `json:"records"`
		Notes   []string            `json:"notes"`
		Errors  []string            `json:"errors"`
	}
	deadline := time.Now().Add(limit)
	for {
		c.getJSON(t, "/api/state", &last)
		for _, r := range last.Records {
			if filepath.Base(r.Path) == filepath.Base(path) && ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record is not shown %s within %v: %+v", what, limit, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The console shows each record file with the verdict aegis verify gives
// it: Indeterminate while its session runs (no close yet), Verified and
// pinned to the state directory's key once the session closed, with its
// last signed checkpoint, and Tampered after a byte of it was changed, at
// the first check after the change.
func TestConsoleShowsRecordVerifyStatus(t *testing.T) {
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"hello"}}`); !strings.Contains(a, "hello") {
		t.Fatalf("echo: %s", a)
	}
	con := l.console("--recheck-every", "2s")
	c := loginClient(t, con)

	running := waitRecord(t, c, l.audit, 30*time.Second, "as checked", func(r console.RecordRow) bool { return r.CheckedAt != "" })
	if running.Verdict != "Indeterminate" || !strings.HasPrefix(running.Status, "Indeterminate: ") {
		t.Fatalf("while its session runs: %+v; want Indeterminate (no close yet)", running)
	}
	w.finish()

	k, err := projector.LoadKeyFile(l.key)
	if err != nil {
		t.Fatal(err)
	}
	b := readFile(t, l.audit)
	lines := int64(bytes.Count(b, []byte{'\n'}))
	// The check after the close line and the checkpoint of it (the one
	// after the close line alone may come first).
	closed := waitRecord(t, c, l.audit, 40*time.Second, "Verified with its last checkpoint", func(r console.RecordRow) bool {
		return r.Verdict == "Verified" && r.Checkpoint != nil && r.Checkpoint.Size == lines
	})
	if want := "Verified (pinned to " + k.KeyID() + ")"; closed.Status != want || closed.Lines != lines || closed.Files != 1 || closed.Note != "" {
		t.Fatalf("closed record: %+v; want %q, %d lines, one file", closed, want, lines)
	}
	// What aegis verify says of it, with the key pinned.
	out, code := l.aegis("verify", "--key", schemas.PublicKeyHex(k.PublicKey()), l.audit)
	if code != 0 || !strings.HasPrefix(out, closed.Status+"\n") {
		t.Fatalf("aegis verify: exit %d\n%s", code, out)
	}
	cp := closed.Checkpoint
	if cp == nil || cp.Size != lines || !cp.Matches || filepath.Base(cp.Name) != filepath.Base(l.audit)+projector.CheckpointsSuffix || cp.Count < 1 || cp.Time == "" {
		t.Fatalf("checkpoint %+v; want the one of all %d lines, matching", cp, lines)
	}
	if last := lastCheckpoint(t, l.audit); cp.Root != base64.StdEncoding.EncodeToString(last.Root[:]) || cp.Size != last.Size {
		t.Fatalf("checkpoint %+v; the sidecar's last is %+v", cp, last)
	}
	if _, err := time.Parse(time.RFC3339, closed.CheckedAt); err != nil {
		t.Fatalf("checked_at %q: %v", closed.CheckedAt, err)
	}

	// One hex digit of a line's prev_hash changed, the file's size kept.
	i := bytes.LastIndex(b, []byte(`"prev_hash":"`))
	if i < 0 {
		t.Fatal("no prev_hash in the record")
	}
	i += len(`"prev_hash":"`)
	if b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
	if err := os.WriteFile(l.audit, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tampered := waitRecord(t, c, l.audit, 40*time.Second, "Tampered", func(r console.RecordRow) bool { return r.Verdict == "Tampered" })
	if !strings.HasPrefix(tampered.Status, "Tampered: ") || tampered.CheckedAt == closed.CheckedAt {
		t.Fatalf("tampered record: %+v", tampered)
	}
	out, _ = l.aegis("verify", l.audit)
	if !strings.HasPrefix(out, tampered.Status+"\n") {
		t.Fatalf("the console says %q, aegis verify:\n%s", tampered.Status, out)
	}
	t.Logf("running: %s; closed: %s, checkpoint of %d lines; tampered: %s", running.Status, closed.Status, cp.Size, tampered.Status)
}

// lastCheckpoint is the last signed checkpoint of a record's sidecar.
func lastCheckpoint(t *testing.T, record string) schemas.Checkpoint {
	t.Helper()
	f, err := os.Open(record + projector.CheckpointsSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var last schemas.Checkpoint
	for {
		msg, err := schemas.ReadNote(br)
		if errors.Is(err, io.EOF) {
			return last
		}
		if err != nil {
			t.Fatal(err)
		}
		if last, err = schemas.ParseCheckpoint(schemas.NoteText(msg)); err != nil {
			t.Fatal(err)
		}
	}
}

// A record whose session runs, signing a checkpoint every line while the
// console checks it again and again, is Indeterminate at every check and
// never Tampered: a check reads the live checkpoints as they were before
// it opened the record, though the session appends to both meanwhile.
func TestConsoleChecksARecordInWritingHonestly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a session for ten seconds")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	l := newLive(t, "")
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--checkpoint-lines", "1", "--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	con := l.console("--recheck-every", "2s")
	c := loginClient(t, con)
	checks := map[string]console.RecordRow{}
	// Two checks, --recheck-every apart, each racing a session that appends
	// a line and a checkpoint every few milliseconds, not as fast as the
	// machine can answer: the test lasts --recheck-every whatever the pace,
	// and beside the other tests calls at full speed took the CPU that
	// the check must race. The page is read a few times a second: each
	// read makes the console gather its whole state.
	deadline := time.Now().Add(55 * time.Second)
	var polled time.Time
	for id := 1; len(checks) < 2; id++ {
		if time.Now().After(deadline) {
			t.Fatalf("only %d checks in 55 s", len(checks))
		}
		if a := w.call(id, "tools/call", fmt.Sprintf(`{"name":"echo","arguments":{"message":"m%d"}}`, id)); !strings.Contains(a, fmt.Sprintf("m%d", id)) {
			t.Fatalf("echo: %s", a)
		}
		time.Sleep(5 * time.Millisecond)
		if time.Since(polled) < 250*time.Millisecond {
			continue
		}
		polled = time.Now()
		var st struct {
			Records []console.RecordRow `json:"records"`
		}
		c.getJSON(t, "/api/state", &st)
		for _, r := range st.Records {
			if r.CheckedAt == "" {
				continue
			}
			if r.Verdict != "Indeterminate" {
				t.Fatalf("check at %s of a record in writing: %+v", r.CheckedAt, r)
			}
			checks[r.CheckedAt] = r
		}
	}
	w.finish()
	for at, r := range checks {
		t.Logf("%s: %d lines, checkpoint %+v: %s", at, r.Lines, r.Checkpoint, r.Status)
	}
}
