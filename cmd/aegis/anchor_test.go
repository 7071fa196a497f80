package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/witness/witnesstest"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// notesOf returns the signed notes of a file of notes (a sidecar, or a
// segment's one checkpoint); none when it is not there. A torn last note
// (a kill during its write) is left out.
func notesOf(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 2*schemas.MaxNote)
	var out [][]byte
	for {
		n, err := schemas.ReadNote(br)
		if errors.Is(err, io.EOF) || errors.Is(err, schemas.ErrTornNote) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, n)
	}
}

// checkAnchored checks that every record checkpoint on disk (the live
// sidecar, each segment's sidecar and seal) is a leaf of the state
// directory's anchor log and proved in its last signed checkpoint.
func (l *live) checkAnchored(files []string) int {
	t := l.t
	t.Helper()
	pub, err := hexKey(l.publicKey())
	if err != nil {
		t.Fatal(err)
	}
	st, err := events.Open(context.Background(), events.Config{Dir: l.state, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	origin := schemas.AnchorOrigin(schemas.KeyID(pub))
	v, err := projector.AnchorVerifierOf(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := projector.LoadAnchor(context.Background(), st, origin, v)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(tree.Note(), note.VerifierList(v))
	if err != nil {
		t.Fatalf("the anchor log's last checkpoint: %v", err)
	}
	c, err := schemas.ParseAnchorCheckpoint([]byte(n.Text))
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, f := range files {
		for _, cp := range append(notesOf(t, f+projector.CheckpointsSuffix), notesOf(t, f+projector.CheckpointSuffix)...) {
			text := schemas.NoteText(cp)
			i, ok := tree.LeafIndex(text)
			if !ok {
				t.Fatalf("a record checkpoint of %s is not in the anchor log of %d leaves:\n%s", f, tree.Size(), text)
			}
			p, err := tree.ProveLeaf(i, c.Size)
			if err == nil {
				err = tlog.CheckRecord(p, c.Size, c.Root, i, tlog.RecordHash(text))
			}
			if err != nil {
				t.Fatalf("leaf %d: %v", i, err)
			}
			count++
		}
	}
	return count
}

func hexKey(s string) ([]byte, error) { return hex.DecodeString(strings.TrimSpace(s)) }

// The anchor log survives kill -9 at any point of a session (the
// processes are killed after a varying number of calls, some while a
// checkpoint is being written) and a rotation: afterwards every record
// checkpoint on disk, of the live file, of the sealed segment and the
// seal itself, is a leaf of the log and proved by its last checkpoint.
func TestAnchorLogSurvivesKillAndRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	t.Parallel()
	l := newLive(t, "")
	l.session(2)
	for _, n := range []int{1, 3, 6} {
		w := l.wrapFlags("--checkpoint-lines", "2")
		w.initialize()
		for i := range n {
			w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`)
		}
		w.c.Process.Kill() // SIGKILL
		w.done <- <-w.done // for the cleanup's wait
	}
	l.session(1)
	l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key)
	l.session(2)
	seg := projector.SegmentName(l.audit, 1)
	if got := l.checkAnchored([]string{seg, l.audit}); got < 5 {
		t.Fatalf("%d record checkpoints on disk, want several", got)
	}
	// A line of the sealed segment is proved from the live directory,
	// whose log goes on across the rotation; the cosignatures made before
	// it are in the archive's stream only, which proves it too.
	out, stderr, code := l.aegisStdout("prove", "anchor", "--line", "1", "--state-dir", l.state, seg)
	if code != 0 || !strings.Contains(stderr, "prove anchor --state-dir "+filepath.Join(l.state, events.ArchiveDir)) {
		t.Fatalf("prove anchor of a sealed segment's line on the live directory: exit %d\n%s%s", code, out, stderr)
	}
	archives, _ := filepath.Glob(filepath.Join(l.state, events.ArchiveDir, "stream-*"))
	if len(archives) != 1 {
		t.Fatalf("the archives: %v", archives)
	}
	old, stderr, code := l.aegisStdout("prove", "anchor", "--line", "1", "--state-dir", archives[0], seg)
	var live, arch schemas.AnchorBundle
	if code != 0 || json.Unmarshal([]byte(out), &live) != nil || json.Unmarshal([]byte(old), &arch) != nil ||
		live.RecordCheckpoint != arch.RecordCheckpoint || live.AnchorCheckpoint == arch.AnchorCheckpoint {
		t.Fatalf("prove anchor of a sealed segment's line on its archive: exit %d, want the same record checkpoint in a smaller anchor checkpoint\n%s%s", code, old, stderr)
	}
}

// wrapFlags runs aegis wrap with extra flags before the server.
func (l *live) wrapFlags(flags ...string) *wrapProc {
	l.t.Helper()
	args := append([]string{"wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state}, flags...)
	args = append(args, "--", filepath.Join(l.bin, "aegis-example-server"))
	return l.start(exec.Command(filepath.Join(l.bin, "aegis"), args...))
}

// End to end with a real witness: aegis wrap submits the anchor log's
// checkpoints to litewitness, aegis prove anchor prints a bundle that
// aegis verify --witness-policy checks without the state directory; a
// record cut after its witnessed checkpoint is Tampered even though its
// sidecar was re-signed to match the cut record; and a forked anchor
// checkpoint (the same size, another root, signed by the host's key) is
// caught beside the witnessed one.
func TestWitnessedBundleVerifiesOfflineAndCatchesACutRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap and a witness")
	}
	t.Parallel()
	w := witnesstest.Start(t, "witness.example/w1")
	l := newLive(t, "")
	pub := l.publicKey()
	pubKey, _ := hex.DecodeString(pub)
	origin, vkey, err := projector.AnchorVerifierKey(pubKey)
	if err != nil {
		t.Fatal(err)
	}
	w.AddLog(t, origin, vkey)
	pol := filepath.Join(l.dir, "witnesses")
	if err := os.WriteFile(pol, []byte(w.PolicyLine("w1")+"quorum w1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wp := l.wrapFlags("--checkpoint-lines", "2", "--witness-policy", pol, "--witness-interval", "100ms")
	wp.initialize()
	for i := range 3 {
		wp.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`)
	}
	w.WaitSize(t, origin, 1) // a checkpoint of the lines so far, witnessed
	wp.finish()
	if out, _, code := l.aegisStdout("prove", "anchor", "--vkey", l.audit); code != 0 || out != "origin "+origin+"\nvkey "+vkey+"\n" {
		t.Fatalf("prove anchor --vkey: exit %d\n%s", code, out)
	}

	out, stderr, code := l.aegisStdout("prove", "anchor", "--line", "2", "--state-dir", l.state, l.audit)
	if code != 0 {
		t.Fatalf("prove anchor: exit %d\n%s%s", code, out, stderr)
	}
	if strings.Contains(stderr, "snapshot") {
		t.Fatalf("prove anchor did not start from the snapshot the wrap saved:\n%s", stderr)
	}
	// The cosignatures kept with the snapshot's head damaged: every
	// anchor.cosigned event read again, the same bundle.
	heads, _ := filepath.Glob(filepath.Join(l.state, events.IndexDir, "anchor.v1.*.head"))
	if len(heads) != 1 {
		t.Fatalf("the anchor log's head files: %v", heads)
	}
	good := readFile(t, heads[0])
	var head map[string]json.RawMessage
	if err := json.Unmarshal(good, &head); err != nil || head["cosigned"] == nil {
		t.Fatalf("the anchor log's head keeps no cosignatures (%v):\n%s", err, good)
	}
	head["cosigned"] = json.RawMessage(`{"at":{"seq":1,"index":0},"list":[]}`)
	damaged, _ := json.Marshal(head)
	if err := os.WriteFile(heads[0], damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if again, stderr, code := l.aegisStdout("prove", "anchor", "--line", "2", "--state-dir", l.state, l.audit); code != 0 || again != out || !strings.Contains(stderr, "cosignatures kept with the anchor log's snapshot") {
		t.Fatalf("prove anchor with every cosignature of the stream: exit %d, the same bundle: %v\n%s", code, again == out, stderr)
	}
	if err := os.WriteFile(heads[0], good, 0o600); err != nil {
		t.Fatal(err)
	}
	// The snapshot's hashes damaged: the whole stream folded, the same
	// bundle.
	hashes, _ := filepath.Glob(filepath.Join(l.state, events.IndexDir, "anchor.v1.*.hashes"))
	if len(hashes) != 1 {
		t.Fatalf("the anchor log's hashes files: %v", hashes)
	}
	hb := readFile(t, hashes[0])
	hb[len(hb)-1] ^= 1
	if err := os.WriteFile(hashes[0], hb, 0o600); err != nil {
		t.Fatal(err)
	}
	if again, stderr, code := l.aegisStdout("prove", "anchor", "--line", "2", "--state-dir", l.state, l.audit); code != 0 || again != out || !strings.Contains(stderr, "snapshot in the index folder was not used") {
		t.Fatalf("prove anchor from the whole stream: exit %d, the same bundle: %v\n%s", code, again == out, stderr)
	}
	bundle := filepath.Join(l.dir, "line2.bundle")
	if err := os.WriteFile(bundle, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := l.aegis("verify", "--witness-policy", pol, "--key", pub, "--bundle", bundle); code != 0 || !strings.Contains(out, "cosigned by w1") {
		t.Fatalf("verify of the bundle alone: exit %d\n%s", code, out)
	}
	if out, code := l.aegis("verify", "--witness-policy", pol, "--key", pub, "--bundle", bundle, l.audit); code != 0 {
		t.Fatalf("verify of the record with the bundle: exit %d\n%s", code, out)
	}

	// Cut the record after its second line and re-sign its sidecar, as
	// the host's owner could.
	var b schemas.AnchorBundle
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatal(err)
	}
	cp, _ := schemas.ParseCheckpoint(schemas.NoteText([]byte(b.RecordCheckpoint)))
	rec := readFile(t, l.audit)
	keep := strings.Join(strings.SplitAfter(string(rec), "\n")[:cp.Size-1], "")
	if err := os.WriteFile(l.audit, []byte(keep), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := projector.LoadKeyFile(l.key)
	if err != nil {
		t.Fatal(err)
	}
	note, _, err := projector.CheckpointFile(context.Background(), key, l.audit, projector.CheckpointOrigin(key, l.audit))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.audit+projector.CheckpointsSuffix, append(note, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	out2, code := l.aegis("verify", "--key", pub, l.audit)
	if code == 1 {
		t.Fatalf("the cut record with its rewritten sidecar should pass the local checks (else this test proves nothing):\n%s", out2)
	}
	if out, code := l.aegis("verify", "--witness-policy", pol, "--key", pub, "--bundle", bundle, l.audit); code != 1 || !strings.Contains(out, "Tampered") {
		t.Fatalf("the cut record against the witnessed bundle: exit %d, want Tampered (1)\n%s", code, out)
	}

	// A fork of the witnessed anchor checkpoint.
	a, _ := schemas.ParseAnchorCheckpoint(schemas.NoteText([]byte(b.AnchorCheckpoint)))
	a.Root[0] ^= 1
	forked, err := projector.SignAnchorCheckpoint(key, a)
	if err != nil {
		t.Fatal(err)
	}
	b.AnchorCheckpoint = string(forked)
	fb, _ := json.Marshal(b)
	fork := filepath.Join(l.dir, "fork.bundle")
	if err := os.WriteFile(fork, fb, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := l.aegis("verify", "--witness-policy", pol, "--key", pub, "--bundle", bundle, "--bundle", fork); code != 1 || !strings.Contains(out, "forked history") {
		t.Fatalf("a forked anchor checkpoint beside the witnessed one: exit %d, want Tampered (1)\n%s", code, out)
	}
	if out, code := l.aegis("verify", "--witness-policy", pol, "--key", pub, "--bundle", fork); code == 0 {
		t.Fatalf("a bundle of an anchor checkpoint no witness cosigned verified:\n%s", out)
	}
}
