package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/projector"
)

// --checkpoint-lines sets how many lines a checkpoint waits for: with 2,
// a session of a few calls leaves several checkpoints, each of which
// verify checks; a policy that could never sign one is refused.
func TestCheckpointLinesSetHowOften(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	for _, bad := range [][]string{{"--checkpoint-lines", "0"}, {"--checkpoint-interval", "0s"}} {
		args := append([]string{"wrap", "--audit", l.audit, "--signing-key", l.key}, bad...)
		if out, code := l.aegis(append(args, "--", "true")...); code != 2 || !strings.Contains(out, bad[0]+" must be at least") {
			t.Errorf("%v: exit %d\n%s", bad, code, out)
		}
	}
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--checkpoint-lines", "2", "--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	for i := range 6 {
		w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`)
	}
	w.finish()
	// A signed note's signature lines start with an em dash.
	notes := bytes.Count(readFile(t, l.audit+projector.CheckpointsSuffix), []byte("\n\u2014 "))
	if notes < 3 {
		t.Fatalf("%d checkpoints for 8 lines at --checkpoint-lines 2", notes)
	}
	if out, code := l.aegis("verify", "--key", l.publicKey(), l.audit); code != 0 || !strings.Contains(out, "checkpoints") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
}
