package projector_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// A writer process records sessions (calls allowed and refused, approvals
// requested, decided, expired and used, profile switches, calls left in
// flight) while a follower in the same process folds every event it sees
// into live projections and writes each state down. The test SIGKILLs it
// at random points, then rebuilds every projection from the stream alone
// and checks that at each position the live process reached, the rebuilt
// projections equal the live ones, that the record file the writer
// projected is a prefix of the rebuilt export, and that the next writer
// completes it exactly.
func TestProjectionsRebuildAfterKill(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	if dir := os.Getenv("AEGIS_PROJECTOR_CHILD"); dir != "" {
		seed, _ := strconv.ParseInt(os.Getenv("AEGIS_PROJECTOR_SEED"), 10, 64)
		os.Exit(crashChild(dir, os.Getenv("AEGIS_PROJECTOR_LIVE"), seed))
	}
	if testing.Short() {
		t.Skip("kills a writer process several times")
	}
	dir := filepath.Join(t.TempDir(), "state")
	audit := filepath.Join(filepath.Dir(dir), "calls.aarl")
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := mrand.New(mrand.NewSource(seed))
	compared := 0
	for round := 0; round < 5; round++ {
		live := filepath.Join(t.TempDir(), fmt.Sprintf("live-%d.jsonl", round))
		cmd := exec.Command(os.Args[0], "-test.run=^TestProjectionsRebuildAfterKill$")
		cmd.Env = append(os.Environ(), "AEGIS_PROJECTOR_CHILD="+dir, "AEGIS_PROJECTOR_LIVE="+live, "AEGIS_PROJECTOR_SEED="+strconv.FormatInt(rnd.Int63(), 10))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(out)
		if l, err := br.ReadString('\n'); err != nil || l != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child said %q, %v", round, l, err)
		}
		// Killed at a random point once it has made some progress: on a
		// loaded machine a fixed sleep may end before the writer wrote
		// anything, and the test would compare nothing.
		waitLiveStates(t, live, 10+rnd.Intn(40))
		time.Sleep(time.Duration(rnd.Intn(600)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		compared += compareRebuilt(t, round, dir, audit, live)
	}
	t.Logf("%d live states compared with the rebuilt projections", compared)
	if compared < 50 {
		t.Errorf("only %d live states compared; the writer did too little", compared)
	}
	// The next writer (here: CatchUp, as OpenSession runs it) completes the
	// record file from the stream, byte for byte.
	st, err := events.Open(context.Background(), events.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	if _, _, err := projector.CatchUp(context.Background(), st, audit); err != nil {
		t.Fatal(err)
	}
	rec, err := projector.ReadRecord(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	rec.WriteSessions(&want, sessionIDs(rec))
	if got, _ := os.ReadFile(audit); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("record file after catch-up (%d bytes) is not the rebuilt export (%d bytes)", len(got), want.Len())
	}
}

// waitLiveStates waits until the writer has written n live states to
// live, or a minute has passed.
func waitLiveStates(t *testing.T, live string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(live); bytes.Count(b, []byte("\n")) >= n {
			return
		}
	}
	t.Logf("the writer wrote fewer than %d live states in a minute", n)
}

func sessionIDs(r *projector.Record) []string {
	var ids []string
	for _, s := range r.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

// compareRebuilt rebuilds the projections from the stream and compares
// them with every complete live state; it returns how many it compared.
func compareRebuilt(t *testing.T, round int, dir, audit, live string) int {
	t.Helper()
	raw, err := os.ReadFile(live)
	if err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	var states [][]byte
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			break // torn by the kill
		}
		states = append(states, raw[:i])
		raw = raw[i+1:]
	}
	st, err := events.Open(context.Background(), events.Config{Dir: dir})
	if err != nil {
		t.Fatalf("round %d: reopen after kill: %v", round, err)
	}
	defer st.Close(context.Background())
	var p projector.Projections
	next := 0
	err = st.Replay(context.Background(), events.Position{}, func(r events.Record) error {
		p.Fold(r)
		for next < len(states) {
			var at struct {
				At events.Position `json:"at"`
			}
			if err := json.Unmarshal(states[next], &at); err != nil {
				return fmt.Errorf("live state %d: %v", next, err)
			}
			if at.At != r.Pos {
				if at.At.Less(r.Pos) {
					return fmt.Errorf("live state at %v, which the stream does not hold", at.At)
				}
				break
			}
			got, err := json.Marshal(p.Snapshot())
			if err != nil {
				return err
			}
			if !bytes.Equal(got, states[next]) {
				return fmt.Errorf("at %v the rebuilt projections differ from the live ones:\nrebuilt %s\nlive    %s", r.Pos, got, states[next])
			}
			next++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	if next != len(states) {
		t.Fatalf("round %d: %d live states beyond the end of the stream: an event the live projections saw is not on disk", round, len(states)-next)
	}
	// The record file the writer projected is a prefix of the rebuilt
	// export: it never holds a line the stream does not.
	var want bytes.Buffer
	p.Record.WriteSessions(&want, sessionIDs(&p.Record))
	if got, _ := os.ReadFile(audit); !bytes.HasPrefix(want.Bytes(), got) {
		t.Fatalf("round %d: the record file is not a prefix of the export rebuilt from the stream", round)
	}
	return len(states)
}

// crashChild writes sessions until it is killed, with a follower folding
// the live projections and appending each state to live.
func crashChild(dir, live string, seed int64) int {
	ctx := context.Background()
	rnd := mrand.New(mrand.NewSource(seed))
	st, err := events.Open(ctx, events.Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lf, err := os.Create(live)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		var p projector.Projections
		st.Follow(ctx, events.Position{}, func(r events.Record) error {
			p.Fold(r)
			b, err := json.Marshal(p.Snapshot())
			if err != nil {
				return err
			}
			_, err = lf.Write(append(b, '\n'))
			return err
		})
	}()
	key, err := projector.GenerateKey(rand.Reader)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	audit := filepath.Join(filepath.Dir(dir), "calls.aarl")
	profiles := []string{"dev", "prod", "strict"}
	for n := 0; ; n++ {
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: key, AuditPath: audit, Argv: []string{"srv", strconv.Itoa(n)}, Version: "test"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "open session:", err)
			return 1
		}
		if err := crashSession(ctx, rnd, sess, profiles); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
}

func crashSession(ctx context.Context, rnd *mrand.Rand, sess *projector.Session, profiles []string) error {
	type pending struct{ id, tool string }
	var asked, granted []pending
	var last *events.Receipt
	keep := func(r *events.Receipt, err error) error {
		if err != nil {
			return err
		}
		last = r
		return nil
	}
	frame := func(kind schemas.Kind, s string) error { return keep(sess.Frame(kind, []byte(s))) }
	call := func(tool string) schemas.WrapCall {
		return schemas.WrapCall{CallID: sess.NextCallID(), ToolID: tool, RequestDigest: schemas.HashHex([]byte(tool)), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
	}
	for i, n := 0, 1+rnd.Intn(25); i < n; i++ {
		var err error
		switch rnd.Intn(8) {
		case 0, 1: // an allowed call, answered
			c := call("echo")
			if err = frame(schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`); err == nil {
				err = keep(sess.Intent(c.Intent()))
			}
			if err == nil {
				err = frame(schemas.KindFrameS2C, `{"jsonrpc":"2.0","id":1,"result":{}}`)
			}
			if err == nil {
				err = keep(sess.Outcome(c.Answered(schemas.HashHex(nil), uint64(rnd.Intn(50)))))
			}
		case 2: // refused
			c := call("fail")
			if err = keep(sess.Intent(c.Intent())); err == nil {
				err = keep(sess.Outcome(c.Refused(schemas.PolicyDenied("no"), "no-fail")))
			}
		case 3: // pending approval
			c := call("deploy")
			id := fmt.Sprintf("apr-gate-deploy-%d", len(asked)+len(granted)+1)
			now := time.Now().UTC()
			if err = keep(sess.Intent(c.Intent())); err == nil {
				err = keep(sess.Fact(schemas.KindApprovalRequested, map[string]any{"approval_id": id, "tool_id": "deploy", "request_digest": c.RequestDigest,
					"args_digest": schemas.HashHex([]byte("{}")), "session": sess.ID(), "requested_at": now, "expires_at": now.Add(time.Hour)}))
			}
			if err == nil {
				err = keep(sess.Outcome(c.Refused(schemas.PolicyPendingApproval(id), "gate")))
			}
			asked = append(asked, pending{id, "deploy"})
		case 4: // a decision on a pending approval
			if len(asked) == 0 {
				continue
			}
			p := asked[0]
			asked = asked[1:]
			v, op := schemas.Rejected("no"), "deny"
			if rnd.Intn(2) == 0 {
				v, op = schemas.Approved(schemas.ApprovalScope{ToolID: p.tool}), "approve"
				granted = append(granted, p)
			}
			err = keep(sess.Decision(schemas.Decision{ApprovalID: p.id, Verdict: v}, map[string]string{"approval_id": p.id, "op": op, "by": "tester"}))
		case 5: // an approval used
			if len(granted) == 0 {
				continue
			}
			p := granted[0]
			granted = granted[1:]
			c := call(p.tool)
			o := c.Answered(schemas.HashHex(nil), 1)
			o.DecisionAxes.ApprovalRef, o.DecisionAxes.MatchedRule = p.id, "gate"
			if err = keep(sess.Intent(c.Intent())); err == nil {
				err = keep(sess.Outcome(o))
			}
		case 6: // expiry
			if len(asked) == 0 {
				continue
			}
			err = keep(sess.Fact(schemas.KindApprovalExpired, map[string]string{"approval_id": asked[0].id}))
			asked = asked[1:]
		case 7:
			err = keep(sess.Fact(schemas.KindProfileSwitched, map[string]string{"profile": profiles[rnd.Intn(len(profiles))]}))
		}
		if err != nil {
			return err
		}
		if last != nil && rnd.Intn(3) == 0 {
			if _, err := last.Wait(ctx); err != nil {
				return err
			}
		}
	}
	if rnd.Intn(3) == 0 { // a call left in flight
		c := call("slow")
		if err := keep(sess.Intent(c.Intent())); err != nil {
			return err
		}
	}
	if last != nil {
		if _, err := last.Wait(ctx); err != nil {
			return err
		}
	}
	if rnd.Intn(4) == 0 {
		return sess.Abandon() // a session that never closes
	}
	return sess.Close(ctx)
}
