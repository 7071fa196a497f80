package projector

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// telSink records what the fold observes.
type telSink struct {
	calls     []CallSpan
	pending   int
	decided   map[string]int
	waits     []time.Duration
	commits   []time.Duration
	pins      int
	open, eph int
}

func (s *telSink) Call(c CallSpan)        { s.calls = append(s.calls, c) }
func (s *telSink) ApprovalRequested()     { s.pending++ }
func (s *telSink) PinChanged()            { s.pins++ }
func (s *telSink) Commit(d time.Duration) { s.commits = append(s.commits, d) }
func (s *telSink) SessionOpened(h bool) {
	s.open++
	if h {
		s.eph++
	}
}
func (s *telSink) SessionClosed(bool, string) { s.open-- }
func (s *telSink) ApprovalDecided(v string, w time.Duration) {
	s.pending--
	if s.decided == nil {
		s.decided = map[string]int{}
	}
	s.decided[v]++
	s.waits = append(s.waits, w)
}

var telT0 = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

type telBuilder struct {
	t    *testing.T
	sess string
	seq  uint64
	evs  []TelemetryEvent
}

func (b *telBuilder) add(kind schemas.Kind, at time.Duration, payload any) {
	raw, err := json.Marshal(payload)
	if err != nil {
		b.t.Fatal(err)
	}
	b.seq++
	b.evs = append(b.evs, TelemetryEvent{Seq: b.seq, Stored: telT0.Add(at + 2*time.Millisecond),
		Event: schemas.Event{V: 1, ID: fmt.Sprint(b.seq), Session: b.sess, Kind: kind, Time: telT0.Add(at), Payload: raw}})
}

func (b *telBuilder) line(l schemas.Line, seq uint64) string {
	l.Set(schemas.FieldSeq, seq)
	c, err := l.Canonical()
	if err != nil {
		b.t.Fatal(err)
	}
	return string(c)
}

func (b *telBuilder) call(n int, tool, traceparent string, at time.Duration, o func(schemas.WrapCall) schemas.Outcome) {
	wc := schemas.WrapCall{CallID: fmt.Sprintf("call-%d", n), ToolID: tool, RequestDigest: "d", PolicySetHash: "h"}
	in := wc.Intent()
	in.TraceParent = traceparent
	il, _ := in.Line()
	b.add(schemas.KindCallIntent, at, CallPayload{Line: b.line(il, uint64(2*n)), CallID: wc.CallID, ToolID: tool})
	ol, err := o(wc).Line()
	if err != nil {
		b.t.Fatal(err)
	}
	b.add(schemas.KindCallOutcome, at+40*time.Millisecond, CallPayload{Line: b.line(ol, uint64(2*n+1)), CallID: wc.CallID, ToolID: tool})
}

func telEvents(t *testing.T) []TelemetryEvent {
	b := &telBuilder{t: t, sess: "01KSESSION0000000000000000"}
	b.add(schemas.KindSessionOpened, 0, SessionOpened{Line: "{}"})
	b.add(schemas.KindChildStarted, time.Millisecond, map[string]any{"pid": 7, "argv": []string{"npx", "-y", "@modelcontextprotocol/server-everything"}})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b.call(1, "echo", tp, 10*time.Millisecond, func(wc schemas.WrapCall) schemas.Outcome { return wc.Answered("r", 30) })
	b.call(2, "add", "", 100*time.Millisecond, func(wc schemas.WrapCall) schemas.Outcome {
		return wc.Refused(schemas.PolicyDenied("denied by rule `no-add`"), "no-add")
	})
	b.call(3, "add", "", 200*time.Millisecond, func(wc schemas.WrapCall) schemas.Outcome {
		return wc.Refused(schemas.PolicyRateLimited("rate limit"), "")
	})
	b.add(schemas.KindApprovalRequested, 300*time.Millisecond, map[string]any{"approval_id": "ap-1", "tool_id": "echo"})
	b.add(schemas.KindApprovalResolved, 5300*time.Millisecond, map[string]any{"approval_id": "ap-1", "op": "approve"})
	// A second resolution of the same approval counts once.
	b.add(schemas.KindApprovalResolved, 5400*time.Millisecond, map[string]any{"approval_id": "ap-1", "op": "approve"})
	b.call(4, "echo", "", 6*time.Second, func(wc schemas.WrapCall) schemas.Outcome {
		o := wc.Answered("r", 5)
		o.DecisionAxes.ApprovalRef = "ap-1"
		return o
	})
	b.add(schemas.KindToolChanged, 7*time.Second, map[string]any{"tool": "echo"})
	// A call in flight when the session closes ends there, unfinished.
	wc := schemas.WrapCall{CallID: "call-9", ToolID: "echo", RequestDigest: "d"}
	il, _ := wc.Intent().Line()
	b.add(schemas.KindCallIntent, 8*time.Second, CallPayload{Line: b.line(il, 20), CallID: "call-9", ToolID: "echo"})
	b.add(schemas.KindSessionClosed, 9*time.Second, LinePayload{Line: "{}"})
	return b.evs
}

func foldTelemetry(evs []TelemetryEvent) *telSink {
	s := &telSink{}
	f := NewTelemetry()
	for _, e := range evs {
		f.Apply(e, s)
	}
	f.Flush(s)
	return s
}

// TestTelemetryFold: calls are labelled by server, tool and verdict, and
// refusals by a reason from a closed set (never the rule's free text); the
// host's trace context makes the call's span a child of the host's; an
// approval is decided once, with its wait, and the call it let through
// gets the wait as a child span; each commit is counted once; a call in
// flight at the close is reported unfinished. Folding again gives the
// same spans, ids included: a replay re-emits what the process exported.
func TestTelemetryFold(t *testing.T) {
	evs := telEvents(t)
	s := foldTelemetry(evs)
	if len(s.calls) != 5 {
		t.Fatalf("%d calls, want 5: %+v", len(s.calls), s.calls)
	}
	got := map[string][3]string{}
	for _, c := range s.calls {
		got[c.CallID] = [3]string{c.Server, c.Verdict, c.Reason}
	}
	want := map[string][3]string{
		"call-1": {"server-everything", CallAllowed, ""},
		"call-2": {"server-everything", CallDenied, RefusalPolicy},
		"call-3": {"server-everything", CallRateLimited, RefusalRateLimited},
		"call-4": {"server-everything", CallAllowed, ""},
		"call-9": {"server-everything", CallUnfinished, ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	c1 := s.calls[0]
	if fmt.Sprintf("%x", c1.TraceID) != "4bf92f3577b34da6a3ce929d0e0e4736" || fmt.Sprintf("%x", c1.Parent) != "00f067aa0ba902b7" {
		t.Errorf("call-1 trace %x parent %x: not the host's", c1.TraceID, c1.Parent)
	}
	if c1.AtServer == nil || *c1.AtServer != 30*time.Millisecond || c1.End.Sub(c1.Start) != 40*time.Millisecond {
		t.Errorf("call-1 durations: at server %v, through %v", c1.AtServer, c1.End.Sub(c1.Start))
	}
	if c1.IntentSeq == nil || *c1.IntentSeq != 2 || c1.OutcomeSeq == nil || *c1.OutcomeSeq != 3 {
		t.Errorf("call-1 record seqs %v %v, want 2 3", c1.IntentSeq, c1.OutcomeSeq)
	}
	if len(c1.Children) != 2 || c1.Children[0].Name != SpanCommitIntent || c1.Children[1].Name != SpanCommitOutcome {
		t.Errorf("call-1 children %+v", c1.Children)
	}
	c2 := s.calls[1]
	if c2.Parent != [8]byte{} || c2.TraceID == c1.TraceID || c2.AtServer != nil {
		t.Errorf("call-2 (no host trace, refused): %+v", c2)
	}
	c4 := s.calls[3]
	if n := len(c4.Children); n != 3 || c4.Children[2].Name != SpanApprovalWait || c4.Children[2].End.Sub(c4.Children[2].Start) != 5*time.Second {
		t.Errorf("call-4 children %+v, want the approval wait of 5 s", c4.Children)
	}
	if !s.calls[4].Unfinished {
		t.Errorf("call-9 was in flight at the close: %+v", s.calls[4])
	}
	if s.pending != 0 || s.decided["approved"] != 1 || len(s.waits) != 1 || s.waits[0] != 5*time.Second {
		t.Errorf("approvals: pending %d decided %v waits %v", s.pending, s.decided, s.waits)
	}
	if len(s.commits) != len(evs) || s.commits[0] != 2*time.Millisecond {
		t.Errorf("%d commits (%v), want %d of 2 ms", len(s.commits), s.commits, len(evs))
	}
	if s.pins != 1 || s.open != 0 {
		t.Errorf("pins %d, sessions open %d", s.pins, s.open)
	}
	if again := foldTelemetry(evs); !reflect.DeepEqual(again.calls, s.calls) {
		t.Error("a second fold gave other spans")
	}
	// Without the commit times (a replay of the stream) the calls keep
	// their ids and lose only the commits' spans.
	bare := make([]TelemetryEvent, len(evs))
	for i, e := range evs {
		e.Stored = time.Time{}
		bare[i] = e
	}
	r := foldTelemetry(bare)
	if len(r.commits) != 0 || r.calls[0].SpanID != c1.SpanID || r.calls[0].TraceID != c1.TraceID || len(r.calls[0].Children) != 0 {
		t.Errorf("replayed: commits %d, call-1 %+v", len(r.commits), r.calls[0])
	}
}

// TestTelemetryToolLabelsBounded: a host that calls ever new tool names
// (each refused) cannot grow the label set past MaxToolLabels; the rest
// count under OtherLabel.
func TestTelemetryToolLabelsBounded(t *testing.T) {
	b := &telBuilder{t: t, sess: "01KSESSION0000000000000001"}
	for i := 0; i < MaxToolLabels+50; i++ {
		b.call(i+1, fmt.Sprintf("tool-%d", i), "", time.Duration(i)*time.Millisecond, func(wc schemas.WrapCall) schemas.Outcome {
			return wc.Refused(schemas.PolicyDenied("unknown tool "+wc.ToolID), "")
		})
	}
	s := foldTelemetry(b.evs)
	tools := map[string]bool{}
	for _, c := range s.calls {
		tools[c.Tool] = true
		if c.Reason != RefusalPolicy {
			t.Fatalf("reason %q: a free-text reason became a label", c.Reason)
		}
	}
	if len(tools) != MaxToolLabels+1 || !tools[OtherLabel] {
		t.Errorf("%d tool labels, want %d and %q", len(tools), MaxToolLabels+1, OtherLabel)
	}
}
