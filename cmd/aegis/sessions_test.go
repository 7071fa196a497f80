package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// aegis wrap is SIGKILLed at random points (after a random number of
// calls: allowed, refused, pending, approved, used, with or without a
// call in flight). Just before each kill the test takes the live views of
// the running process: the session index and the transcript read from a
// snapshot of its stream, the pending approvals as the process itself
// answers 'aegis approvals', and the record file it projected. After the
// kill, each is rebuilt from the stream alone and must equal the live one
// (the session now killed instead of running), and the record file must
// be a prefix of the rebuilt export that the next run completes.
func TestProjectionsRebuildAfterKillingWrap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills aegis wrap")
	}
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	l := newLive(t, scriptedPolicy)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := mrand.New(mrand.NewSource(seed))
	for round := 0; round < 4; round++ {
		w := l.wrap(false)
		w.initialize()
		calls, id := 0, 10
		var granted []string // argument sets approved and not yet used
		type asked struct{ apr, args string }
		var pending []asked
		for i, n := 0, rnd.Intn(7); i < n; i++ {
			id++
			calls++
			switch rnd.Intn(5) {
			case 0:
				w.call(id, "tools/call", `{"name":"echo","arguments":{"message":"m"}}`)
			case 1:
				w.call(id, "tools/call", `{"name":"fail","arguments":{"reason":"r"}}`)
			case 2:
				args := fmt.Sprintf(`{"a":%d,"b":1}`, id)
				w.call(id, "tools/call", `{"name":"add","arguments":`+args+`}`)
				pending = append(pending, asked{w.approvalID(), args})
			case 3:
				calls--
				if len(pending) == 0 {
					continue
				}
				p := pending[0]
				pending = pending[1:]
				if out, code := l.aegis("approve", p.apr); code != 0 {
					t.Fatalf("approve: %s", out)
				}
				granted = append(granted, p.args)
			case 4:
				if len(granted) == 0 {
					calls--
					continue
				}
				if a := w.call(id, "tools/call", `{"name":"add","arguments":`+granted[0]+`}`); !strings.Contains(a, `"sum"`) {
					t.Fatalf("approved call: %s", a)
				}
				granted = granted[1:]
			}
		}
		inflight := rnd.Intn(2) == 0
		if inflight {
			calls++
			w.send(`{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"slow","arguments":{"ms":10000}}}`)
		}
		// The live views, once the stream holds every call sent and has
		// stopped growing: frames that nobody waits for are committed
		// lazily (within 25 ms), so one look can come just before them,
		// and sessions lists a running wrap from the index it saves every
		// second, so the listing must hold still for longer than that.
		var liveIndex, prev []projector.SessionSummary
		var still time.Time // since when the listing has not changed
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, out, stderr := l.in("sessions", "--json")
			if code != 0 {
				t.Fatalf("sessions while running: %s", stderr)
			}
			prev, liveIndex = liveIndex, nil
			json.Unmarshal([]byte(out), &liveIndex)
			if !reflect.DeepEqual(prev, liveIndex) {
				still = time.Now()
			}
			if n := len(liveIndex); n == round+1 && liveIndex[n-1].Calls == calls && time.Since(still) > 1500*time.Millisecond {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the stream never showed %d calls: %s", round, calls, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cur := liveIndex[round]
		if cur.State != projector.StateRunning || cur.PID != w.c.Process.Pid || (cur.InFlight == 1) != inflight {
			t.Fatalf("round %d: live session %+v", round, cur)
		}
		_, liveSteps, _ := l.in("replay", "--json", cur.ID)
		approvalsOut, approvalsErr, code := l.aegisStdout("approvals", "--json")
		if code != 0 {
			t.Fatalf("aegis approvals: %s%s", approvalsOut, approvalsErr)
		}
		var livePending []struct {
			Session string `json:"session"`
			events.PendingApproval
		}
		if err := json.Unmarshal([]byte(approvalsOut), &livePending); err != nil {
			t.Fatalf("approvals --json: %v\n%s", err, approvalsOut)
		}
		if len(livePending) != len(pending) {
			t.Fatalf("round %d: the process lists %d pending approvals, the driver asked for %d", round, len(livePending), len(pending))
		}
		liveAudit, _ := os.ReadFile(l.audit)

		time.Sleep(time.Duration(rnd.Intn(200)) * time.Millisecond)
		w.kill()

		// Rebuilt: the session index.
		_, out, stderr := l.in("sessions", "--json")
		if strings.Contains(stderr, "aegis: error") {
			t.Fatalf("sessions after the kill: %s", stderr)
		}
		var rebuilt []projector.SessionSummary
		json.Unmarshal([]byte(out), &rebuilt)
		liveIndex[round].State = projector.StateKilled
		if !reflect.DeepEqual(rebuilt, liveIndex) {
			t.Errorf("round %d: session index rebuilt after the kill differs from the live one:\nrebuilt %+v\nlive    %+v", round, rebuilt, liveIndex)
		}
		// The transcript: the same steps, then killed instead of running.
		_, steps, _ := l.in("replay", "--json", cur.ID)
		if want := strings.Replace(liveSteps, `"state":"running"`, `"state":"killed"`, 1); steps != want {
			t.Errorf("round %d: transcript rebuilt after the kill differs from the live one:\nrebuilt %s\nlive    %s", round, steps, liveSteps)
		}
		// Pending approvals and the record.
		st, err := events.Open(context.Background(), events.Config{Dir: l.state})
		if err != nil {
			t.Fatal(err)
		}
		var p projector.Projections
		if err := st.Replay(context.Background(), events.Position{}, func(r events.Record) error { p.Fold(r); return nil }); err != nil {
			t.Fatal(err)
		}
		st.Close(context.Background())
		var got []string
		for _, a := range p.Approvals.Pending(time.Now()) {
			if a.Session == cur.ID {
				got = append(got, strings.Join([]string{a.ApprovalID, a.ToolID, a.RequestDigest, a.ArgsDigest, a.RequestedAt.UTC().Format(time.RFC3339Nano), a.ExpiresAt.UTC().Format(time.RFC3339Nano)}, " "))
			}
		}
		var want []string
		for _, a := range livePending {
			want = append(want, strings.Join([]string{a.ApprovalID, a.ToolID, a.RequestDigest, a.ArgsDigest, a.RequestedAt.UTC().Format(time.RFC3339Nano), a.ExpiresAt.UTC().Format(time.RFC3339Nano)}, " "))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("round %d: pending approvals rebuilt:\n%s\nlive (aegis approvals):\n%s", round, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		var export bytes.Buffer
		var ids []string
		for _, s := range p.Record.Sessions {
			ids = append(ids, s.ID)
		}
		p.Record.WriteSessions(&export, ids)
		if !bytes.HasPrefix(export.Bytes(), liveAudit) {
			t.Errorf("round %d: the record file aegis wrap wrote is not a prefix of the export rebuilt from the stream", round)
		}
		if s := p.Sessions.Sessions(0); len(s) != round+1 || s[round].Calls != calls {
			t.Errorf("round %d: rebuilt index %+v", round, s)
		}
	}
	// A last, clean run completes the record file and links to it.
	w := l.wrap(false)
	w.initialize()
	w.finish()
	if out, code := l.aegis("export", "--state-dir", l.state, "--out", filepath.Join(l.dir, "rebuilt.aarl")); code != 0 {
		t.Fatal(out)
	}
	a, _ := os.ReadFile(l.audit)
	b, _ := os.ReadFile(filepath.Join(l.dir, "rebuilt.aarl"))
	if !bytes.Equal(a, b) {
		t.Errorf("record file and export differ after the runs that followed the kills")
	}
	if out, code := l.aegis("verify", l.audit); code == 1 || code == 2 {
		t.Errorf("verify: exit %d\n%s", code, out)
	}
}

// Progress goes to stderr only when it is a terminal, and is cleared
// before anything else is printed.
func TestProgressOnlyOnATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, w := range []any{&bytes.Buffer{}, f} {
		m := &Main{Stderr: w.(interface{ Write([]byte) (int, error) })}
		if p := m.newProgress("x"); p != nil {
			t.Errorf("progress on %T", w)
		}
	}
	var nilp *progress
	nilp.add()
	nilp.done()

	master, slave := openPTY(t)
	m := &Main{Stderr: slave}
	p := m.newProgress("replay")
	if p == nil {
		t.Fatal("no progress on a terminal")
	}
	p.start = time.Now().Add(-time.Second)
	p.last = p.start
	for i := 0; i < 2048; i++ {
		p.add()
	}
	p.done()
	slave.Close()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	master.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		n, err := master.Read(buf)
		got.Write(buf[:n])
		if err != nil || strings.HasSuffix(got.String(), "\r\x1b[K\r\x1b[K") {
			break
		}
	}
	if s := got.String(); !strings.HasPrefix(s, "\raegis: replay: 1 024 events (") || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Errorf("terminal got %q", s)
	}
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1 000", 1234567: "1 234 567"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q", n, got)
		}
	}
}

// A state directory held by another process is read through a snapshot,
// and the snapshot goes away afterwards; a stale snapshot of a reader
// that died is cleaned up.
func TestSessionsReadsASnapshotWhileLocked(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if code, _, stderr := cmd(t, nil, "events", "append", "--state-dir", state, `{"text":"x"}`); code != 0 {
		t.Fatal(stderr)
	}
	stale := filepath.Join(state, "readers", "999999999-abc")
	os.MkdirAll(stale, 0o700)
	st, err := events.Open(context.Background(), events.Config{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	code, out, stderr := cmd(t, nil, "sessions", "--state-dir", state)
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf("aegis: note: state directory %s is in use by aegis process %d", state, os.Getpid())) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "readers", "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if holder := lockHolder(state); holder != os.Getpid() {
		t.Errorf("lockHolder = %d, want %d", holder, os.Getpid())
	}
	st.Close(context.Background())
	if holder := lockHolder(state); holder != 0 {
		t.Errorf("lockHolder after close = %d", holder)
	}
}

// While aegis wrap runs, it holds the state directory, and aegis sessions
// lists from the index the wrap keeps instead of copying the whole stream:
// the running session is there, with its calls, within about a second.
func TestSessionsListsARunningWrapFromItsIndex(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	for i := range 3 {
		w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, stderr, code := l.aegisStdout("sessions", "--state-dir", l.state, "--json")
		if code != 0 {
			t.Fatalf("sessions: exit %d\n%s", code, stderr)
		}
		var list []projector.SessionSummary
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		fromIndex := strings.Contains(stderr, "listing from the index it keeps")
		if fromIndex && len(list) == 1 && list[0].State == projector.StateRunning && list[0].Calls == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running session with 3 calls never showed from the index:\n%s\n%s", stderr, out)
		}
		os.RemoveAll(filepath.Join(l.state, "readers"))
		time.Sleep(200 * time.Millisecond)
	}
	w.finish()
}
