package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// session runs one wrap session of n echo calls.
func (l *live) session(n int) {
	l.t.Helper()
	w := l.wrap(false)
	w.initialize()
	for i := range n {
		if a := w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`); !strings.Contains(a, `"x"`) {
			l.t.Fatalf("echo: %s", a)
		}
	}
	w.finish()
}

func (l *live) mustAegis(args ...string) string {
	l.t.Helper()
	out, code := l.aegis(args...)
	if code != 0 {
		l.t.Fatalf("aegis %v: exit %d\n%s", args, code, out)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A rotation seals the record into a segment with a checkpoint and rolls
// the stream over into an archive; the chain goes on in the live file,
// and nothing of the history is lost: the archive still reads and exports
// the segment byte for byte.
func TestRotateSealsTheRecordAndTheChainGoesOn(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	l.session(2)
	l.session(1)
	before := readFile(t, l.audit)

	out := l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key)
	seg := projector.SegmentName(l.audit, 1)
	if !strings.Contains(out, "sealed "+l.audit) || !strings.Contains(out, seg) {
		t.Fatalf("rotate said:\n%s", out)
	}
	if got := readFile(t, seg); !bytes.Equal(got, before) {
		t.Fatal("the segment is not the record as it was")
	}
	if _, err := os.Stat(l.audit); !os.IsNotExist(err) {
		t.Fatalf("the live record is still there: %v", err)
	}
	if cp := readFile(t, seg+projector.CheckpointSuffix); len(cp) == 0 {
		t.Fatal("empty checkpoint")
	}
	// The live checkpoints went with the file: they cover the segment.
	if _, err := os.Stat(l.audit + projector.CheckpointsSuffix); !os.IsNotExist(err) {
		t.Fatalf("the live record's checkpoints stayed behind: %v", err)
	}
	if cps := readFile(t, seg+projector.CheckpointsSuffix); len(cps) == 0 {
		t.Fatal("the segment has no live checkpoints")
	}
	archives, _ := filepath.Glob(filepath.Join(l.state, events.ArchiveDir, "stream-1-*"))
	if len(archives) != 1 {
		t.Fatalf("archives %v", archives)
	}

	// The next session starts the live file, linked to the segment. While
	// it runs, readers copy the stream, base and all.
	w := l.wrap(false)
	w.initialize()
	for _, id := range l.sessionIDs() {
		if out := l.mustAegis("replay", "--state-dir", l.state, id); !strings.Contains(out, "initialize") {
			t.Fatalf("replay while the next session runs:\n%s", out)
		}
	}
	w.finish()
	pub := l.publicKey()
	out, code := l.aegis("verify", "--key", pub, seg, l.audit)
	if code != 0 || !strings.HasPrefix(out, "Verified (pinned") || !strings.Contains(out, "matches") ||
		!strings.Contains(out, "checkpoints "+seg+projector.CheckpointsSuffix+": ") || !strings.Contains(out, "checkpoints "+l.audit+projector.CheckpointsSuffix+": 1, ") {
		t.Fatalf("segment + live file: exit %d\n%s", code, out)
	}
	// Alone, the live file claims an earlier session it does not hold.
	if out, code := l.aegis("verify", l.audit); code != 1 {
		t.Fatalf("live file alone: exit %d\n%s", code, out)
	}

	// The live stream lists the new session and says where the rest went.
	out = l.mustAegis("sessions", "--state-dir", l.state)
	if !strings.Contains(out, "sealed by a rotation") || !strings.Contains(out, archives[0]) || strings.Count(out, "aegis-example-server") != 1 {
		t.Fatalf("sessions after rotation:\n%s", out)
	}
	// The archive reads as a state directory: its export is the segment.
	ex := filepath.Join(l.dir, "archived.aarl")
	l.mustAegis("export", "--state-dir", archives[0], "--out", ex)
	if !bytes.Equal(readFile(t, ex), before) {
		t.Fatal("the archive does not export the sealed record")
	}
	// ... and refuses to be recorded into.
	out, code = l.aegis("wrap", "--audit", filepath.Join(l.dir, "other.aarl"), "--signing-key", l.key, "--state-dir", archives[0], "--", filepath.Join(l.bin, "aegis-example-server"))
	if code != 1 || !strings.Contains(out, "archive sealed by a rotation") {
		t.Fatalf("wrap into an archive: exit %d\n%s", code, out)
	}

	// A second rotation seals the second segment; the set verifies.
	l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key, "--prune")
	seg2 := projector.SegmentName(l.audit, 2)
	out, code = l.aegis("verify", "--key", pub, seg, seg2)
	if code != 0 || strings.Count(out, "matches") != 2 {
		t.Fatalf("two segments: exit %d\n%s", code, out)
	}
	// Left out of the set, the first segment is missed.
	if out, code := l.aegis("verify", "--key", pub, seg2); code != 1 {
		t.Fatalf("second segment alone: exit %d\n%s", code, out)
	}
	if archives2, _ := filepath.Glob(filepath.Join(l.state, events.ArchiveDir, "stream-*")); len(archives2) != 1 {
		t.Fatalf("--prune kept the second archive, or deleted the first: %v", archives2)
	}
}

// A rotation checks every record file whole before it changes anything:
// an edited record, a foreign key, or a busy directory stop it with the
// state directory and the record as they were.
func TestRotateRefusesWhatItCannotSealAndChangesNothing(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	for _, tc := range []struct {
		name string
		prep func(l *live) []string // returns extra args
		want string
	}{
		{"an edited line in the record", func(l *live) []string {
			b := readFile(l.t, l.audit)
			i := bytes.Index(b, []byte(`"message":"x"`))
			b[i+len(`"message":"`)] = 'y'
			os.WriteFile(l.audit, b, 0o600)
			return nil
		}, "does not match the event stream"},
		{"lines appended to the record by something else", func(l *live) []string {
			f, _ := os.OpenFile(l.audit, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("{}\n")
			f.Close()
			return nil
		}, "does not match the event stream"},
		{"a checkpoint signed with another key", func(l *live) []string {
			other := filepath.Join(l.dir, "other.key")
			l.mustAegis("keygen", "--out", other)
			return []string{"--signing-key", other}
		}, "did not sign any session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLive(t, "")
			l.session(1)
			args := append([]string{"rotate", "--state-dir", l.state, "--signing-key", l.key}, tc.prep(l)...)
			rec := readFile(t, l.audit)
			out, code := l.aegis(args...)
			if code != 1 || !strings.Contains(out, tc.want) || !strings.Contains(out, "nothing was changed") {
				t.Fatalf("rotate: exit %d, want 1 with %q\n%s", code, tc.want, out)
			}
			if !bytes.Equal(readFile(t, l.audit), rec) {
				t.Fatal("the record changed")
			}
			if m, _ := filepath.Glob(filepath.Join(l.dir, "calls.0*")); len(m) > 0 {
				t.Fatalf("segments written: %v", m)
			}
			if _, err := os.Stat(filepath.Join(l.state, events.ArchiveDir)); !os.IsNotExist(err) {
				t.Fatal("the stream was rolled over")
			}
		})
	}
}

// After a rotation the live record file starts empty. A segment copied
// back over it (or anything else written there) is not what the stream
// says, and wrap refuses to append to it.
func TestSegmentPutBackOverTheLiveRecordIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	l.session(1)
	l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key)
	if err := os.WriteFile(l.audit, readFile(t, projector.SegmentName(l.audit, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := l.aegis("wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state, "--", filepath.Join(l.bin, "aegis-example-server"))
	if code != 1 || !strings.Contains(out, "sealed by") && !strings.Contains(out, "moved its lines to") {
		t.Fatalf("wrap onto a put-back segment: exit %d\n%s", code, out)
	}
}

// A rotation cut short after its plan was written (a crash, a power
// loss): every command refuses the directory and says how to finish, and
// aegis rotate finishes it from the plan.
func TestInterruptedRotationIsFinishedByRotate(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	l.session(2)
	ctx := context.Background()
	st, err := events.Open(ctx, events.Config{Dir: l.state})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := projector.LoadIndex(ctx, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := projector.LoadKeyFile(l.key)
	if err != nil {
		t.Fatal(err)
	}
	rot, err := ix.PlanRotation(ctx, st, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.BeginRoll(ctx, rot, false); err != nil {
		t.Fatal(err)
	}
	st.Close(ctx) // the crash: nothing sealed, nothing moved

	for _, args := range [][]string{
		{"sessions", "--state-dir", l.state},
		{"wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state, "--", filepath.Join(l.bin, "aegis-example-server")},
	} {
		out, code := l.aegis(args...)
		if code != 1 || !strings.Contains(out, "did not finish") || !strings.Contains(out, "aegis rotate --state-dir") {
			t.Fatalf("aegis %s during a rotation: exit %d\n%s", args[0], code, out)
		}
	}
	out := l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key)
	if !strings.Contains(out, "sealed "+l.audit) {
		t.Fatalf("rotate did not finish the seal:\n%s", out)
	}
	l.session(1)
	out = l.mustAegis("sessions", "--state-dir", l.state)
	if strings.Count(out, "aegis-example-server") != 1 {
		t.Fatalf("sessions after the finished rotation:\n%s", out)
	}
}

// --if-larger and --if-older rotate by size or by time: a store within
// both is left alone, and a record file over the size is rotated.
func TestRotateBySizeOrByTime(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	l.session(1)
	out := l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key, "--if-larger", "1GiB", "--if-older", "7d")
	if !strings.Contains(out, "nothing rotated") || !strings.Contains(out, "not older than 168h") {
		t.Fatalf("rotate within both limits:\n%s", out)
	}
	if _, err := os.Stat(l.audit); err != nil {
		t.Fatal(err)
	}
	if out, code := l.aegis("rotate", "--state-dir", l.state, "--signing-key", l.key, "--if-older", "soon"); code != 2 {
		t.Fatalf("--if-older soon: exit %d\n%s", code, out)
	}
	out = l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key, "--if-larger", "2KiB")
	if !strings.Contains(out, "rotating: ") || !strings.Contains(out, "sealed "+l.audit) {
		t.Fatalf("rotate over the size:\n%s", out)
	}
}

// publicKey returns the signing key's public half, as verify --key takes it.
func (l *live) publicKey() string {
	l.t.Helper()
	k, err := projector.LoadKeyFile(l.key)
	if err != nil {
		l.t.Fatal(err)
	}
	return hex.EncodeToString(k.PublicKey())
}

// sessionIDs lists the sessions of the live state directory.
func (l *live) sessionIDs() []string {
	l.t.Helper()
	out, _, code := l.aegisStdout("sessions", "--state-dir", l.state)
	if code != 0 {
		l.t.Fatalf("sessions: exit %d", code)
	}
	var ids []string
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	if len(ids) == 0 {
		l.t.Fatalf("no sessions:\n%s", out)
	}
	return ids
}

// After a rotation the archive answers sessions and replay last as the
// live directory did before it: from the index that went with the stream
// (no event of the archive folded, on the first call or any later one),
// and replay reads the session's own events, not the whole archive.
func TestArchiveAnswersFromTheIndexThatWentWithIt(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	l.session(3)
	l.session(2)
	l.session(1)
	before, _, code := l.aegisStdout("sessions", "--state-dir", l.state, "--json")
	if code != 0 {
		t.Fatalf("sessions: exit %d", code)
	}
	replayBefore := l.mustAegis("replay", "--state-dir", l.state, "last")
	var list []projector.SessionSummary
	if err := json.Unmarshal([]byte(before), &list); err != nil || len(list) != 3 {
		t.Fatalf("sessions --json: %v\n%s", err, before)
	}
	total := 0
	for _, s := range list {
		total += s.Events
	}

	l.mustAegis("rotate", "--state-dir", l.state, "--signing-key", l.key)
	archives, _ := filepath.Glob(filepath.Join(l.state, events.ArchiveDir, "stream-1-*"))
	if len(archives) != 1 {
		t.Fatalf("archives %v", archives)
	}
	arch := archives[0]
	if _, err := os.Stat(filepath.Join(arch, events.IndexDir, "index.v1.head")); err != nil {
		t.Fatalf("the index did not go with the stream into the archive: %v", err)
	}
	debug := map[string]string{"AEGIS_DEBUG": "1"}
	for i := range 2 {
		code, out, stderr := cmd(t, debug, "sessions", "--state-dir", arch, "--json")
		if code != 0 {
			t.Fatalf("sessions of the archive: exit %d\n%s", code, stderr)
		}
		if !strings.Contains(stderr, "msg=\"session index\"") || !strings.Contains(stderr, " folded=0 ") {
			t.Fatalf("sessions of the archive (call %d) folded events of the archive instead of answering from its index:\n%s", i+1, grepLines(stderr, "session index"))
		}
		if out != before {
			t.Fatalf("the archive lists otherwise than the live directory did:\n%s\nwant\n%s", out, before)
		}
	}
	code, out, stderr := cmd(t, debug, "replay", "--state-dir", arch, "last")
	if code != 0 {
		t.Fatalf("replay last of the archive: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, " folded=0 ") {
		t.Fatalf("replay last of the archive folded events to find the session:\n%s", grepLines(stderr, "session index"))
	}
	want := fmt.Sprintf(" read=%d", list[2].Events)
	if !strings.Contains(stderr, "msg=replay") || !strings.Contains(stderr, want+"\n") {
		t.Fatalf("replay last read other than the last session's %d events (the archive holds %d):\n%s", list[2].Events, total, grepLines(stderr, "msg=replay"))
	}
	if out != replayBefore {
		t.Fatalf("replay last of the archive:\n%s\nwant, as the live directory said before the rotation:\n%s", out, replayBefore)
	}
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
