package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A state directory whose event stream lost messages used to make
// sessions, export and events list print nothing and never return, and
// made wrap hang before its server started. Every command now ends within
// seconds with an error that names the lost sequences, and wrap refuses
// to start a session after them.
func TestDamagedStateDirectoryIsNeverReadAsAShorterHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	for _, tc := range []struct {
		name string
		hurt func([]byte) []byte
	}{
		{"a flipped byte in the last message", func(b []byte) []byte { b[len(b)-40] ^= 0xff; return b }},
		{"a torn tail", func(b []byte) []byte { return b[:len(b)-30] }},
		{"the block truncated to nothing", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLive(t, "")
			w := l.wrap(false)
			w.initialize()
			for i := range 3 {
				if a := w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`); !strings.Contains(a, `"x"`) {
					t.Fatalf("echo: %s", a)
				}
			}
			w.finish()
			blks, _ := filepath.Glob(filepath.Join(l.state, "jetstream", "jetstream", "*", "streams", "*", "msgs", "*.blk"))
			if len(blks) == 0 {
				t.Fatal("no message block in the state directory")
			}
			blk := blks[len(blks)-1]
			b, err := os.ReadFile(blk)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(blk, tc.hurt(b), 0o600); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(l.dir, "export.aarl")
			for _, args := range [][]string{
				{"sessions", "--state-dir", l.state},
				{"export", "--state-dir", l.state, "--out", out},
				{"events", "list", "--state-dir", l.state},
				{"wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state, "--", filepath.Join(l.bin, "aegis-example-server")},
			} {
				start := time.Now()
				got, code := l.aegis(args...)
				if code != 1 {
					t.Fatalf("aegis %s: exit %d, want 1\n%s", args[0], code, got)
				}
				for _, want := range []string{"aegis: error: ", "is damaged", "gone (sequences ", "aegis: hint: the event stream denies delete and purge"} {
					if !strings.Contains(got, want) {
						t.Fatalf("aegis %s says nothing of %q:\n%s", args[0], want, got)
					}
				}
				t.Logf("aegis %s (%s): %s", args[0], time.Since(start).Round(time.Millisecond), strings.TrimSpace(got))
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("export wrote a record file from a damaged stream")
			}
		})
	}
}
