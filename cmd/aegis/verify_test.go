package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// appendSessions writes n sessions of the real chain at the end of the
// record file at path, linked to the tail of prev (the file itself when
// prev is "", as a wrap does).
func appendSessions(t *testing.T, key projector.PrivateKey, path, prev string, n int) {
	t.Helper()
	if prev == "" {
		prev = path
	}
	var tail string
	if b, err := os.ReadFile(prev); err == nil {
		tl, err := projector.TailOf(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		tail = tl.Hash
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range n {
		c, err := projector.NewChain(key)
		if err != nil {
			t.Fatal(err)
		}
		write := func(e projector.Entry, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(append(e.Bytes, '\n')); err != nil {
				t.Fatal(err)
			}
		}
		write(c.Open(tail))
		in, err := schemas.Intent{CallID: "call-1", ToolID: "echo", RequestDigest: schemas.HashHex([]byte("req"))}.Line()
		if err != nil {
			t.Fatal(err)
		}
		write(c.Append(in))
		call := schemas.WrapCall{CallID: "call-1", ToolID: "echo", RequestDigest: schemas.HashHex([]byte("req")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
		out, err := call.Answered(schemas.HashHex([]byte("resp")), 3).Line()
		if err != nil {
			t.Fatal(err)
		}
		write(c.Append(out))
		write(c.Append(schemas.CloseLine()))
		_, tail = c.Tail()
	}
}

// rotate seals the live file as rotation does: rename it to its n-th
// segment and write the signed checkpoint next to it.
func rotate(t *testing.T, key projector.PrivateKey, live string, n int) string {
	t.Helper()
	seg := projector.SegmentName(live, n)
	if err := os.Rename(live, seg); err != nil {
		t.Fatal(err)
	}
	note, _, err := projector.CheckpointFile(context.Background(), key, seg, projector.CheckpointOrigin(key, seg))
	if err != nil {
		t.Fatal(err)
	}
	if err := projector.WriteCheckpointFile(seg+".checkpoint", note); err != nil {
		t.Fatal(err)
	}
	return seg
}

// rotatedRecord builds audit.000001.jsonl, audit.000002.jsonl (each with a
// checkpoint) and audit.jsonl in a temporary directory and returns their
// paths, oldest first, and the key.
func rotatedRecord(t *testing.T) ([]string, projector.PrivateKey) {
	key, err := projector.NewPrivateKey(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(t.TempDir(), "audit.jsonl")
	appendSessions(t, key, live, "", 2)
	seg1 := rotate(t, key, live, 1)
	appendSessions(t, key, live, seg1, 3)
	seg2 := rotate(t, key, live, 2)
	appendSessions(t, key, live, seg2, 1)
	return []string{seg1, seg2, live}, key
}

func TestVerifyRotatedRecord(t *testing.T) {
	paths, key := rotatedRecord(t)
	code, out, stderr := cmd(t, nil, append([]string{"verify", "--key", schemas.PublicKeyHex(key.PublicKey())}, paths...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"Verified (pinned to " + key.KeyID() + ")\n",
		"key_id " + key.KeyID() + "\npublic_key " + schemas.PublicKeyHex(key.PublicKey()) + "\n",
		"checkpoint " + paths[0] + ".checkpoint: 8 lines, root ",
		"checkpoint " + paths[1] + ".checkpoint: 12 lines, root ",
		", matches\n",
		"coverage session 5 seq 3\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(paths[0] + ".checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "aegis/"+key.KeyID()+"/audit.000001.jsonl\n8\n") || !strings.Contains(string(b), "\n\n— aegis-"+key.KeyID()+" ") {
		t.Fatalf("checkpoint file:\n%s", b)
	}

	// One sealed segment alone verifies with its checkpoint.
	if code, out, stderr := cmd(t, nil, "verify", paths[0]); code != 0 || !strings.Contains(out, "checkpoint "+paths[0]+".checkpoint: 8 lines") {
		t.Fatalf("first segment alone: exit %d\n%s%s", code, out, stderr)
	}
}

// TestVerifyRotatedAttacks: the attacks on a rotated record that verify
// must report as Tampered, each with what the user sees.
func TestVerifyRotatedAttacks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bend   func(t *testing.T, paths []string, key projector.PrivateKey) []string // returns the arguments
		stdout []string
		stderr []string
	}{
		{
			name: "segment truncated after its checkpoint",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				truncateLines(t, paths[1], 4)
				return paths
			},
			stdout: []string{"Tampered: ", "audit.000002.jsonl holds 8 lines, fewer than the 12 that its signed checkpoint ", "lines were cut from its end"},
		},
		{
			name: "line edited in a sealed segment",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				editFile(t, paths[0], `"tool_id":"echo"`, `"tool_id":"ecco"`)
				return paths
			},
			stdout: []string{"Tampered: line at session 0 seq 2 chains to", "audit.000001.jsonl line 3)"},
		},
		{
			name: "segment left out of the set",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				return []string{paths[0], paths[2]}
			},
			stdout: []string{"Tampered: open at session 2 seq 0 links to previous tail", "audit.jsonl line 1)"},
		},
		{
			name: "segments in the wrong order",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				return []string{paths[1], paths[0], paths[2]}
			},
			stdout: []string{"Tampered: open at session 0 seq 0 links to previous tail", "no earlier session is in this record"},
			stderr: []string{"aegis: hint: ", "audit.000002.jsonl continues a rotated record; name the earlier segments before it, oldest first (aegis verify "},
		},
		{
			name: "forged checkpoint (other key) over a truncated segment",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				truncateLines(t, paths[0], 4)
				other, _ := projector.NewPrivateKey(bytes.Repeat([]byte{4}, 32))
				note, _, err := projector.CheckpointFile(context.Background(), other, paths[0], projector.CheckpointOrigin(other, paths[0]))
				if err != nil {
					t.Fatal(err)
				}
				if err := projector.WriteCheckpointFile(paths[0]+".checkpoint", note); err != nil {
					t.Fatal(err)
				}
				return paths
			},
			stdout: []string{"Tampered: checkpoint ", "audit.000001.jsonl.checkpoint is signed by aegis-", "not by a key of this record"},
		},
		{
			name: "checkpoint with a bumped size",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				editFile(t, paths[0]+".checkpoint", "\n8\n", "\n9\n")
				return paths
			},
			stdout: []string{"Tampered: checkpoint ", "carries a signature by aegis-", "that does not verify"},
		},
		{
			name: "torn last line in a non-final segment",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				b, _ := os.ReadFile(paths[1])
				if err := os.WriteFile(paths[1], b[:len(b)-1], 0o600); err != nil {
					t.Fatal(err)
				}
				return paths
			},
			stdout: []string{"Tampered: ", "audit.000002.jsonl does not end in a newline"},
		},
		{
			name: "later segment verified alone",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				return []string{paths[2]}
			},
			stdout: []string{"Tampered: open at session 0 seq 0 links to previous tail", "no earlier session is in this record"},
			stderr: []string{"continues a rotated record", "(aegis verify " + filepath.Join("DIR", "audit.000001.jsonl") + " … " + filepath.Join("DIR", "audit.jsonl") + ")"},
		},
		{
			name: "explicit checkpoint of another segment",
			bend: func(t *testing.T, paths []string, _ projector.PrivateKey) []string {
				if err := os.Rename(paths[1]+".checkpoint", filepath.Join(filepath.Dir(paths[1]), "seg2.cp")); err != nil {
					t.Fatal(err)
				}
				return []string{"--checkpoint", filepath.Join(filepath.Dir(paths[1]), "seg2.cp"), paths[0]}
			},
			stdout: []string{"Tampered: ", "audit.000001.jsonl holds 8 lines, fewer than the 12 that ", "checkpoint 1 of "},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			paths, _ := rotatedRecord(t)
			args := tc.bend(t, paths, projector.PrivateKey{})
			code, out, stderr := cmd(t, nil, append([]string{"verify"}, args...)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s%s", code, out, stderr)
			}
			dir := filepath.Dir(paths[0])
			for _, want := range tc.stdout {
				if !strings.Contains(out, strings.ReplaceAll(want, "DIR", dir)) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, strings.ReplaceAll(want, "DIR", dir)) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

// TestVerifyCheckpointFlag: --checkpoint names a checkpoint explicitly; it
// goes to the file its origin names, and a second one for the same file
// or one for no file given is a usage error (exit 1).
func TestVerifyCheckpointFlag(t *testing.T) {
	paths, _ := rotatedRecord(t)
	dir := filepath.Dir(paths[0])
	moved := filepath.Join(dir, "first.cp")
	if err := os.Rename(paths[0]+".checkpoint", moved); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cmd(t, nil, append([]string{"verify", "--checkpoint", moved}, paths...)...)
	if code != 0 || !strings.Contains(out, "checkpoint "+moved+": 8 lines") || !strings.Contains(out, "checkpoint "+paths[1]+".checkpoint: 12 lines") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = cmd(t, nil, append([]string{"verify", "--checkpoint", moved, "--checkpoint", moved}, paths...)...)
	if code != 2 || !strings.Contains(stderr, "both seal") {
		t.Fatalf("twice: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = cmd(t, nil, "verify", "--checkpoint", moved, paths[1], paths[2])
	if code != 2 || !strings.Contains(stderr, "cannot tell which RECORD it seals") {
		t.Fatalf("no target: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = cmd(t, nil, "verify", "--checkpoint", filepath.Join(dir, "missing.cp"), paths[0])
	if code != 2 || !strings.Contains(stderr, "read checkpoint") {
		t.Fatalf("missing checkpoint: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = cmd(t, nil, "verify")
	if code != 2 || !strings.Contains(stderr, "got none") {
		t.Fatalf("no RECORD: exit %d\n%s%s", code, out, stderr)
	}
}

func TestRotatedNames(t *testing.T) {
	for _, tc := range []struct{ live, seg, back string }{
		{"audit.jsonl", "audit.000001.jsonl", "audit.jsonl"},
		{"audit", "audit.000001", "audit"},
		{"dir/calls.aarl", "dir/calls.000001.aarl", "dir/calls.aarl"},
		{".hidden", ".hidden.000001", ".hidden"},
	} {
		if got := projector.SegmentName(tc.live, 1); got != tc.seg {
			t.Errorf("SegmentName(%q) = %q, want %q", tc.live, got, tc.seg)
		}
		if got := liveRecordName(tc.seg); got != tc.back {
			t.Errorf("liveRecordName(%q) = %q, want %q", tc.seg, got, tc.back)
		}
		if got := liveRecordName(tc.live); got != tc.live {
			t.Errorf("liveRecordName(%q) = %q, want it unchanged", tc.live, got)
		}
	}
}

func truncateLines(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1-n] // the last element is the empty one after the final '\n'
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s holds no %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o600); err != nil {
		t.Fatal(err)
	}
}

// verify of a record that aegis wrap is writing, with a checkpoint signed
// after every line, says Indeterminate (the session has not closed), never
// Tampered: checkpoints appended while verify reads are left for the next
// run, not taken for a sidecar that changed under it.
func TestVerifyARecordInWritingIsNotTampered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	l := newLive(t, "")
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--checkpoint-lines", "1", "--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	stop := make(chan struct{})
	calls := make(chan int)
	go func() {
		id := 1
		defer func() { calls <- id }()
		for ; ; id++ {
			// A call every 2 ms or so, not flat out: several land in
			// every verify's read, and the CPU stays with the verifies
			// and the tests beside this one.
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			w.call(id, "tools/call", fmt.Sprintf(`{"name":"echo","arguments":{"message":"m%d"}}`, id))
		}
	}()
	for i := range 16 {
		out, code := l.aegis("verify", l.audit)
		if strings.HasPrefix(out, "Tampered") || strings.Contains(out, "\nTampered") || code != 3 && code != 0 {
			close(stop)
			<-calls
			t.Fatalf("verify %d of a record in writing: exit %d\n%s", i, code, out)
		}
	}
	close(stop)
	if n := <-calls; n < 10 {
		t.Fatalf("only %d calls while verify ran: the test did not race it", n)
	}
	w.finish()
	if out, code := l.aegis("verify", l.audit); code != 0 {
		t.Errorf("verify after the close: exit %d\n%s", code, out)
	}
}

// A record that aegis wrap writes carries its live checkpoints beside it,
// and verify checks every one: cutting whole sessions from the end of the
// record is caught by them, and by a copy of the last one kept elsewhere
// when the sidecar is cut too.
func TestVerifyLiveCheckpoints(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	for range 2 {
		w := l.wrap(false)
		w.initialize()
		for i := range 3 {
			w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"hello"}}`)
		}
		w.finish()
	}
	sidecar := l.audit + projector.CheckpointsSuffix
	code, out, stderr := cmd(t, nil, "verify", l.audit)
	if code != 0 || !strings.Contains(out, "checkpoints "+sidecar+": 2, the last of 16 lines, root ") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	kept := filepath.Join(t.TempDir(), "kept.checkpoint")
	b, err := os.ReadFile(sidecar)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.SplitAfter(string(b), "\n\n")
	// text, signature, text, signature: the last note is its last two
	if err := os.WriteFile(kept, []byte(notes[2]+notes[3]), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		bend  func(t *testing.T, audit string) []string
		code  int
		parts []string
	}{
		{
			name: "the last session cut from the end",
			bend: func(t *testing.T, audit string) []string {
				truncateLines(t, audit, 8)
				return []string{audit}
			},
			code:  1,
			parts: []string{"Tampered: ", "calls.aarl holds 8 lines, fewer than the 16 that ", "checkpoint 2 of "},
		},
		{
			name: "the last session and its checkpoint cut, with a copy kept elsewhere",
			bend: func(t *testing.T, audit string) []string {
				truncateLines(t, audit, 8)
				if err := os.WriteFile(audit+projector.CheckpointsSuffix, []byte(notes[0]+notes[1]), 0o600); err != nil {
					t.Fatal(err)
				}
				return []string{"--checkpoint", kept, audit}
			},
			code:  1,
			parts: []string{"Tampered: ", "holds 8 lines, fewer than the 16 that ", "checkpoint 1 of "},
		},
		{
			name: "checkpoints put out of order",
			bend: func(t *testing.T, audit string) []string {
				if err := os.WriteFile(audit+projector.CheckpointsSuffix, []byte(notes[2]+notes[3]+notes[0]+notes[1]), 0o600); err != nil {
					t.Fatal(err)
				}
				return []string{audit}
			},
			code:  1,
			parts: []string{"Tampered: ", "covers 8 lines, not more than the 16 of the one before it"},
		},
		{
			name: "a checkpoint's size bumped",
			bend: func(t *testing.T, audit string) []string {
				editFile(t, audit+projector.CheckpointsSuffix, "\n8\n", "\n7\n")
				return []string{audit}
			},
			code:  1,
			parts: []string{"Tampered: ", "holds as its first 7 lines what hashes to root "},
		},
		{
			name: "a checkpoint's signature forged",
			bend: func(t *testing.T, audit string) []string {
				// The root of the first 7 lines, as the writer would have
				// signed it, under the old signature.
				b, _ := os.ReadFile(audit)
				lines := strings.SplitAfter(string(b), "\n")
				var tree projector.TreeHasher
				for _, l := range lines[:7] {
					tree.Add([]byte(strings.TrimSuffix(l, "\n")))
				}
				root, _ := tree.Root()
				cp := schemas.Checkpoint{Origin: "o", Size: 7, Root: root, Tail: schemas.HashHex([]byte(strings.TrimSuffix(lines[6], "\n")))}
				text := notes[0][:strings.Index(notes[0], "\n")+1] + string(cp.Body()[len("o\n"):])
				if err := os.WriteFile(audit+projector.CheckpointsSuffix, []byte(text+"\n"+notes[1]+notes[2]+notes[3]), 0o600); err != nil {
					t.Fatal(err)
				}
				return []string{audit}
			},
			code:  1,
			parts: []string{"Tampered: ", "carries a signature by aegis-", "that does not verify"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			audit := filepath.Join(dir, "calls.aarl")
			for _, p := range []string{l.audit, sidecar} {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out, stderr := cmd(t, nil, append([]string{"verify"}, tc.bend(t, audit)...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, stderr)
			}
			for _, p := range tc.parts {
				if !strings.Contains(out, p) {
					t.Errorf("stdout lacks %q:\n%s", p, out)
				}
			}
		})
	}
}

// aegis prove prints proofs over a real record's checkpoints that aegis
// verify --proof accepts under the record's key only, without the record;
// a proof bent in transit is Tampered, and a record cut after a
// checkpoint gets no proof.
func TestProveAndVerifyProof(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	for range 2 {
		w := l.wrap(false)
		w.initialize()
		w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"hello"}}`)
		w.finish()
	}
	pub := l.publicKey()
	dir := t.TempDir()
	prove := func(name string, args ...string) string {
		t.Helper()
		code, out, stderr := cmd(t, nil, append([]string{"prove"}, args...)...)
		if code != 0 {
			t.Fatalf("prove %q: exit %d\n%s", args, code, stderr)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	line3 := prove("line3.proof", "inclusion", "--line", "3", l.audit)
	grew := prove("grew.proof", "consistency", "4", "8", l.audit)
	for _, tc := range []struct{ proof, want string }{
		{line3, "line 3 (leaf hash "},
		{grew, "the tree of 4 lines, root "},
	} {
		code, out, stderr := cmd(t, nil, "verify", "--key", pub, "--proof", tc.proof)
		if code != 0 || !strings.HasPrefix(out, "Verified (pinned to ") || !strings.Contains(out, tc.want) {
			t.Fatalf("exit %d\n%s%s", code, out, stderr)
		}
	}

	other := filepath.Join(dir, "other.key")
	if code, _, stderr := cmd(t, nil, "keygen", "--out", other); code != 0 {
		t.Fatal(stderr)
	}
	k, err := projector.LoadKeyFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, _ := cmd(t, nil, "verify", "--key", hex.EncodeToString(k.PublicKey()), "--proof", line3); code != 1 || !strings.Contains(out, "Tampered: checkpoint of the proof is signed by aegis-") {
		t.Fatalf("another key: exit %d\n%s", code, out)
	}
	if code, _, stderr := cmd(t, nil, "verify", "--proof", line3); code != exitUsage || !strings.Contains(stderr, "needs the key that signed the checkpoints") {
		t.Fatalf("no key: exit %d\n%s", code, stderr)
	}
	editFile(t, line3, `"line_number":3`, `"line_number":4`)
	editFile(t, line3, `"leaf_index":2`, `"leaf_index":3`)
	if code, out, _ := cmd(t, nil, "verify", "--key", pub, "--proof", line3); code != 1 || !strings.Contains(out, "Tampered: line 4 is not in the tree") {
		t.Fatalf("another index: exit %d\n%s", code, out)
	}

	truncateLines(t, l.audit, 1)
	code, _, stderr := cmd(t, nil, "prove", "inclusion", "--line", "1", l.audit)
	if code != 1 || !strings.Contains(stderr, "no proof made: record does not hold what the checkpoint covers") || !strings.Contains(stderr, "aegis: hint: ") {
		t.Fatalf("a cut record: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := cmd(t, nil, "prove", "consistency", "4", "5", l.audit); code != 1 || !strings.Contains(stderr, "holds no checkpoint of 5 lines") {
		t.Fatalf("no such checkpoint: exit %d\n%s", code, stderr)
	}
}
