package projector_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// script builds the events of sessions by hand, with a clock that moves
// only when told, so that folds over them are exact.
type script struct {
	t    testing.TB
	at   time.Time
	seq  uint64 // stream message sequence
	recs []events.Record
	idn  uint64
	line map[string]uint64 // next audit seq per session
}

func newScript(t testing.TB) *script {
	return &script{t: t, at: time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC), line: map[string]uint64{}}
}

func (s *script) id() string {
	s.idn++
	var b [10]byte
	for i := range b {
		b[i] = byte(s.idn >> (8 * (i % 8)))
	}
	id, err := schemas.NewID(s.at, bytes.NewReader(b[:]))
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

func (s *script) tick(d time.Duration) { s.at = s.at.Add(d) }

// add appends one event of session as its own stream message.
func (s *script) add(session string, kind schemas.Kind, payload any) events.Record {
	s.t.Helper()
	raw, ok := payload.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(payload); err != nil {
			s.t.Fatal(err)
		}
	}
	s.seq++
	e := schemas.Event{V: schemas.EnvelopeVersion, ID: s.id(), Session: session, Kind: kind, Time: s.at, Payload: raw}
	if err := e.Validate(); err != nil {
		s.t.Fatal(err)
	}
	r := events.Record{Pos: events.Position{Seq: s.seq}, Event: e}
	s.recs = append(s.recs, r)
	return r
}

// must returns l, failing the test on err.
func (s *script) must(l schemas.Line, err error) schemas.Line {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

// audit returns the canonical bytes of l with the session's next seq.
func (s *script) audit(session string, l schemas.Line) string {
	s.t.Helper()
	n := s.line[session]
	s.line[session] = n + 1
	if err := l.Set("seq", n); err != nil {
		s.t.Fatal(err)
	}
	if err := l.Set("prev_hash", schemas.GenesisHash); err != nil {
		s.t.Fatal(err)
	}
	b, err := l.Canonical()
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

func (s *script) open(argv ...string) string {
	sess := s.id()
	l := s.audit(sess, s.must(schemas.Open{PublicKey: strings.Repeat("ab", 32)}.Line()))
	s.add(sess, schemas.KindSessionOpened, projector.SessionOpened{Line: l, AuditPath: "/r/calls.aarl", KeyID: strings.Repeat("c", 64), PID: 4242, Argv: argv, Version: "test"})
	return sess
}

func (s *script) frame(sess string, kind schemas.Kind, b string) {
	s.add(sess, kind, schemas.FramePayload{Bytes: []byte(b)})
}

func wrapCall(n uint64, tool string) schemas.WrapCall {
	return schemas.WrapCall{CallID: schemas.CallID(n), ToolID: tool, RequestDigest: schemas.HashHex([]byte(tool)), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
}

func (s *script) intent(sess string, c schemas.WrapCall) {
	s.add(sess, schemas.KindCallIntent, projector.CallPayload{Line: s.audit(sess, s.must(c.Intent().Line())), CallID: c.CallID, ToolID: c.ToolID})
}

func (s *script) outcome(sess string, o schemas.Outcome) {
	s.add(sess, schemas.KindCallOutcome, projector.CallPayload{Line: s.audit(sess, s.must(o.Line())), CallID: o.CallID, ToolID: o.ToolID})
}

func (s *script) requested(sess, id, tool string, ttl time.Duration) {
	s.add(sess, schemas.KindApprovalRequested, map[string]any{"approval_id": id, "tool_id": tool, "request_digest": schemas.HashHex([]byte(tool)),
		"args_digest": schemas.HashHex([]byte("{}")), "session": sess, "requested_at": s.at, "expires_at": s.at.Add(ttl)})
}

func (s *script) resolved(sess, id, op, by string, v schemas.ApprovalVerdict) {
	l := s.audit(sess, s.must(schemas.Decision{ApprovalID: id, Verdict: v}.Line()))
	s.add(sess, schemas.KindApprovalResolved, map[string]string{"line": l, "approval_id": id, "op": op, "by": by})
}

func (s *script) close(sess string) {
	s.add(sess, schemas.KindSessionClosed, projector.LinePayload{Line: s.audit(sess, schemas.CloseLine())})
}

// scripted is one session with every kind of step: a confined child, frames,
// an allowed call, a refused one, a profile switch, an approval asked for,
// granted and used, and a call left in flight by a kill.
func scripted(t testing.TB) (*script, string) {
	s := newScript(t)
	sess := s.open("aegis-example-server", "-v")
	s.add(sess, schemas.KindConfinementApplied, json.RawMessage(`{"exec_path":"/bin/srv","landlock_abi":7,"kernel_landlock_abi":7,"landlock_fully_enforced":true,"landlock_tcp_restricted":true,"fs_rules":[{"path":"/bin","kind":"dir","access":["read_file"],"origin":"read"}],"net_hosts_enforced":false,"exec_support":true,"seccomp_applied":true,"seccomp_network_denied":true,"no_new_privs":true,"protected_paths":["/k","/s"],"protected_verified":true,"io_uring_denied":true}`))
	s.tick(3 * time.Millisecond)
	s.add(sess, schemas.KindChildStarted, map[string]any{"pid": 4250, "argv": []string{"aegis-example-server", "-v"}})
	s.tick(10 * time.Millisecond)
	s.frame(sess, schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	s.frame(sess, schemas.KindFrameC2S, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	s.tick(2 * time.Millisecond)
	s.frame(sess, schemas.KindFrameS2C, `{"jsonrpc":"2.0","id":0,"result":{}}`)
	s.tick(time.Second)
	s.frame(sess, schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`)
	echo := wrapCall(1, "echo")
	s.intent(sess, echo)
	s.tick(4 * time.Millisecond)
	s.frame(sess, schemas.KindFrameS2C, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	s.outcome(sess, echo.Answered(schemas.HashHex([]byte("r")), 4))
	s.tick(time.Second)
	s.frame(sess, schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fail"}}`)
	fail := wrapCall(2, "fail")
	s.intent(sess, fail)
	s.outcome(sess, fail.Refused(schemas.PolicyDenied("fail is disabled here"), "no-fail"))
	s.frame(sess, schemas.KindFrameRefusal, `{"error":{"code":-32042,"data":{"aegis":{"code":"POLICY_DENIED","layer":"wrap"}},"message":"aegis wrap refused this tools/call"},"id":2,"jsonrpc":"2.0"}`)
	s.tick(time.Second)
	s.add(sess, schemas.KindProfileSwitched, map[string]string{"profile": "strict"})
	s.frame(sess, schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1}}}`)
	add := wrapCall(3, "add")
	s.intent(sess, add)
	s.requested(sess, "apr-gate-add-1", "add", 10*time.Minute)
	s.outcome(sess, add.Refused(schemas.PolicyPendingApproval("apr-gate-add-1"), "gate"))
	s.frame(sess, schemas.KindFrameRefusal, `{"error":{"code":-32042,"data":{"aegis":{"code":"PENDING_APPROVAL","layer":"wrap"}},"message":"aegis wrap refused this tools/call"},"id":3,"jsonrpc":"2.0"}`)
	s.tick(5 * time.Second)
	s.resolved(sess, "apr-gate-add-1", "approve", "ann@box, pid 77", schemas.Approved(schemas.ApprovalScope{ToolID: "add"}))
	s.tick(time.Second)
	s.frame(sess, schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"add","arguments":{"a":1}}}`)
	add2 := wrapCall(4, "add")
	s.intent(sess, add2)
	s.tick(time.Millisecond)
	s.frame(sess, schemas.KindFrameS2C, `{"jsonrpc":"2.0","id":4,"result":{}}`)
	o := add2.Answered(schemas.HashHex([]byte("r4")), 1)
	o.DecisionAxes.MatchedRule, o.DecisionAxes.ApprovalRef = "gate", "apr-gate-add-1"
	s.outcome(sess, o)
	s.tick(time.Second)
	s.frame(sess, schemas.KindFrameC2S, `[{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":9000}}},{"jsonrpc":"2.0","id":6,"method":"ping"}]`)
	s.intent(sess, wrapCall(5, "slow"))
	s.tick(300 * time.Millisecond)
	return s, sess
}

const scriptedTranscript = `  +0.000s  -        open      pid 4242 · aegis-example-server -v · audit /r/calls.aarl · key cccccccccccc… · seq 0
  +0.000s  -        confined  landlock ABI 7 fully enforced (1 fs rules, 0 net rules, tcp restricted) · seccomp: network denied · no_new_privs · 2 protected paths verified · exec /bin/srv
  +0.003s  -        started   pid 4250 · aegis-example-server -v
  +0.013s  -        c2s       initialize id=0 · 58 B
  +0.013s  -        c2s       notifications/initialized · 54 B
  +0.015s  -        s2c       result id=0 · 36 B
  +1.015s  -        c2s       tools/call echo id=1 · 100 B
  +1.015s  -        intent    call-1 echo · seq 1
  +1.019s  -        s2c       result id=1 · 48 B
  +1.019s  -        outcome   call-1 echo: allowed → success in 4 ms · seq 2
  +2.019s  -        c2s       tools/call fail id=2 · 71 B
  +2.019s  -        intent    call-2 fail · seq 3
  +2.019s  -        outcome   call-2 fail: denied "fail is disabled here" (rule no-fail) → refused, not executed · seq 4
  +2.019s  -        refusal   error POLICY_DENIED id=2 · 152 B
  +3.019s  strict   profile   switched to strict
  +3.019s  strict   c2s       tools/call add id=3 · 90 B
  +3.019s  strict   intent    call-3 add · seq 5
  +3.019s  strict   approval  requested apr-gate-add-1 for add · expires 2026-09-01T10:10:03Z
  +3.019s  strict   outcome   call-3 add: pending_approval apr-gate-add-1 (rule gate) → refused, not executed · seq 6
  +3.019s  strict   refusal   error PENDING_APPROVAL id=3 · 155 B
  +8.019s  strict   approval  apr-gate-add-1 approved by ann@box, pid 77 · seq 7
  +9.019s  strict   c2s       tools/call add id=4 · 90 B
  +9.019s  strict   intent    call-4 add · seq 8
  +9.020s  strict   s2c       result id=4 · 36 B
  +9.020s  strict   outcome   call-4 add: allowed (rule gate) by approval apr-gate-add-1 → success in 1 ms · seq 9
 +10.020s  strict   c2s       batch of 2: tools/call slow id=5, ping id=6 · 138 B
 +10.020s  strict   intent    call-5 slow · seq 10
 +10.020s  strict   in-flight call-5 slow: in flight, no outcome (intent at 2026-09-01T10:00:10.02Z)
 +10.020s  strict   end       killed: no close line, and its process (pid 4242) is gone; 1 call(s) in flight
`

func TestTimelineTranscript(t *testing.T) {
	s, sess := scripted(t)
	other := s.open("other")
	s.frame(other, schemas.KindFrameC2S, `{}`)
	tl := projector.NewTimeline(sess)
	var b strings.Builder
	var last events.Record
	for _, r := range s.recs {
		if st, ok := tl.Fold(r); ok {
			b.WriteString(st.Line() + "\n")
			last = r
		}
	}
	if fl := tl.InFlight(sess); len(fl) != 1 || fl[0].CallID != "call-5" {
		t.Fatalf("in flight = %+v", fl)
	}
	for _, st := range tl.Finish(sess, projector.StateKilled, last) {
		b.WriteString(st.Line() + "\n")
	}
	if got := b.String(); got != scriptedTranscript {
		t.Errorf("transcript:\n%s\nwant:\n%s", got, scriptedTranscript)
	}
}

func TestTimelineFinish(t *testing.T) {
	s, sess := scripted(t)
	tl := projector.NewTimeline("")
	var last events.Record
	for _, r := range s.recs {
		if _, ok := tl.Fold(r); ok {
			last = r
		}
	}
	running := tl.Finish(sess, projector.StateRunning, last)
	if len(running) != 2 || running[1].End.State != projector.StateRunning || !strings.HasPrefix(running[1].Text(), "running: aegis process 4242") {
		t.Fatalf("running finish = %+v", running)
	}
	// After the outcome and the close, nothing is in flight and a closed
	// session needs no end step.
	s.outcome(sess, wrapCall(5, "slow").ChildExited())
	s.add(sess, schemas.KindChildExited, map[string]any{"code": 0, "server_exited_first": false})
	s.close(sess)
	for _, r := range s.recs[len(s.recs)-3:] {
		st, _ := tl.Fold(r)
		last = r
		if r.Event.Kind == schemas.KindCallOutcome && !strings.Contains(st.Text(), "host_denied (child exited before responding)") {
			t.Errorf("child-exited outcome: %q", st.Text())
		}
		if r.Event.Kind == schemas.KindChildExited && st.Text() != "status 0" {
			t.Errorf("exit step: %q", st.Text())
		}
	}
	if fin := tl.Finish(sess, projector.StateClosed, last); len(fin) != 0 {
		t.Errorf("closed session finish = %+v", fin)
	}
	if fin := tl.Finish("01M8NT0JSNKCRH3HWPGW88AMBV", projector.StateKilled, last); fin != nil {
		t.Errorf("unknown session finish = %+v", fin)
	}
}

func TestTimelineJSONSteps(t *testing.T) {
	s, sess := scripted(t)
	tl := projector.NewTimeline(sess)
	kinds := map[string]int{}
	for _, r := range s.recs {
		st, ok := tl.Fold(r)
		if !ok {
			continue
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var back projector.Step
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Pos != r.Pos || back.Kind != string(r.Event.Kind) || !back.Time.Equal(r.Event.Time) {
			t.Errorf("round trip of %s: %+v", r.Event.Kind, back)
		}
		kinds[back.Kind]++
		switch r.Event.Kind {
		case schemas.KindCallOutcome:
			if back.Call == nil || back.Call.Policy == "" {
				t.Errorf("outcome step without a verdict: %s", b)
			}
		case schemas.KindApprovalResolved:
			if back.Approval == nil || back.Approval.By != "ann@box, pid 77" || back.Approval.Event != "approved" {
				t.Errorf("resolved step: %s", b)
			}
		case schemas.KindConfinementApplied:
			if back.Confinement == nil || !json.Valid(back.Confinement.Fact) || back.Confinement.LandlockABI != 7 {
				t.Errorf("confinement step: %s", b)
			}
		}
	}
	if kinds["call.outcome"] != 4 || kinds["frame.c2s"] != 7 {
		t.Errorf("kinds = %v", kinds)
	}
}

func TestSummarizeFrame(t *testing.T) {
	cases := []struct {
		kind schemas.Kind
		in   string
		want string
	}{
		{schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}`, `tools/call x id="a"`},
		{schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":3}}`, `tools/call <unknown> id=7`},
		{schemas.KindFrameC2S, `{"jsonrpc":"2.0","id":null,"method":"tools/call"}`, `tools/call <unknown> id=null`},
		{schemas.KindFrameS2C, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}`, `error -32602 id=1`},
		{schemas.KindFrameS2C, `{"jsonrpc":"2.0","method":"notifications/progress"}`, `notifications/progress`},
		{schemas.KindFrameC2S, "not json\xff", `not JSON-RPC`},
		{schemas.KindFrameC2S, ``, `not JSON-RPC`},
		{schemas.KindFrameC2S, `[1,{"id":2,"method":"ping"}]`, `batch of 2: not JSON-RPC, ping id=2`},
		{schemas.KindFrameC2S, `{"id":1,"method":"tools/call","method":"x"}`, `x id=1`},
	}
	for _, c := range cases {
		f := projector.SummarizeFrame(c.kind, []byte(c.in))
		st := projector.Step{Frame: &f}
		if got := st.Text(); !strings.HasPrefix(got, c.want+" · ") {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
		if f.Size != len(c.in) {
			t.Errorf("%q: size %d", c.in, f.Size)
		}
	}
}

// Recorded text cannot drive a terminal: control characters in a tool name,
// a reason or a profile are escaped in the transcript.
func TestTranscriptEscapesControlCharacters(t *testing.T) {
	s := newScript(t)
	sess := s.open("srv")
	s.add(sess, schemas.KindProfileSwitched, map[string]string{"profile": "p\x1b[2J"})
	c := wrapCall(1, "evil\x1b]0;owned\x07\u009b")
	s.intent(sess, c)
	s.outcome(sess, c.Refused(schemas.PolicyDenied("no\x1b[31m"), "r"))
	tl := projector.NewTimeline(sess)
	var out strings.Builder
	for _, r := range s.recs {
		if st, ok := tl.Fold(r); ok {
			out.WriteString(st.Line() + "\n")
		}
	}
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07\u009b") {
		t.Errorf("control characters reached the transcript: %q", got)
	}
	if !strings.Contains(got, `evil\x1b]0;owned\x07\u009b`) || !strings.Contains(got, `p\x1b[2J`) {
		t.Errorf("transcript: %s", got)
	}
	if projector.Printable("plain · text →") != "plain · text →" {
		t.Error("Printable changed printable text")
	}
}

// A cancellation, a dropped frame and a task's result read as what
// happened, not as raw JSON, and a server's text cannot drive the terminal.
func TestStepTextOfCancelledCallsAndDroppedFrames(t *testing.T) {
	for _, tc := range []struct {
		step projector.Step
		want string
	}{
		{projector.Step{Kind: string(schemas.KindCallCancelled), Payload: []byte(`{"after_ms":8000,"call_id":"call-2","request_id":"2","tool_id":"slow"}`)},
			"cancelled call-2 slow cancelled by the host 8000 ms after its intent"},
		{projector.Step{Kind: string(schemas.KindFrameDropped), Payload: []byte(`{"direction":"s2c","frame_digest":"ab","reason":"it answers id 7, which no request of the host's in flight has"}`)},
			"dropped   the s2c frame above was not relayed: it answers id 7, which no request of the host's in flight has"},
		{projector.Step{Kind: string(schemas.KindCallCancelled), Payload: []byte(`{"by":"host","call_id":"call-1","method":"tasks/cancel","server":"s","task_id":"t-9","tool_id":"s__research"}`)},
			"cancelled task t-9 of call-1 s__research cancelled by the host (tasks/cancel)"},
		{projector.Step{Kind: string(schemas.KindTaskResult), Payload: []byte(`{"call_id":"call-1","is_error":false,"result_digest":"f6784d146d312c6216c36fc6","server":"s","task_id":"t-9","tool_id":"s__research"}`)},
			"task      task t-9 of call-1 s__research: result f6784d146d31…"},
		{projector.Step{Kind: string(schemas.KindTaskResult), Payload: []byte("{\"call_id\":\"call-1\",\"error\":\"the grace ran out\\u001b[2J\",\"task_id\":\"t-9\",\"tool_id\":\"s__research\"}")},
			"task      task t-9 of call-1 s__research: no result: the grace ran out\\x1b[2J"},
	} {
		if got := tc.step.Line(); !strings.HasSuffix(got, tc.want) {
			t.Errorf("Line() = %q, want it to end in %q", got, tc.want)
		}
	}
}

// A server that wrap stopped reads as stopped, with why; one that exited on
// its own says so.
func TestStepTextOfAStoppedServer(t *testing.T) {
	code := 137
	for _, tc := range []struct {
		child projector.ChildInfo
		want  string
	}{
		{projector.ChildInfo{Code: &code, EndedBy: "SIGKILL", Reason: "the server sent a frame of at least 16842752 bytes, larger than the 16 MiB frame limit"},
			"exited    status 137 · ended by SIGKILL: the server sent a frame of at least 16842752 bytes, larger than the 16 MiB frame limit"},
		{projector.ChildInfo{Code: &code, ServerExitedFirst: true},
			"exited    status 137 · the server exited before the host closed stdin"},
	} {
		st := projector.Step{Kind: string(schemas.KindChildExited), Child: &tc.child}
		if got := st.Line(); !strings.HasSuffix(got, tc.want) {
			t.Errorf("Line() = %q, want it to end in %q", got, tc.want)
		}
	}
}
