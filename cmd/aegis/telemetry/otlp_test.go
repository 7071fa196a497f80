package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/aegis-dev/aegis/projector"
)

// TestSpanEncoderWritesWhatTheSDKWrote: the spans aegis writes itself
// are, field for field, what the OpenTelemetry SDK's exporter sent for
// the same calls before (their read-only spans, converted by the SDK's
// OTLP exporter): a call that continues the host's trace with its three
// children, a refused call, an unfinished one, and a tool name that is
// not valid UTF-8. Both go over OTLP/HTTP to the same receiver, which
// decodes the two requests.
func TestSpanEncoderWritesWhatTheSDKWrote(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	ctx := context.Background()
	cfg := Config{OTLPEndpoint: srv.URL, Version: "v9", Getenv: func(k string) string {
		return map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,team=a%20b"}[k]
	}}
	res, err := Resource(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1800000000, 123456789)
	seq := func(n uint64) *uint64 { return &n }
	wall := 3 * time.Millisecond
	calls := []projector.CallSpan{
		{Session: "01KSESSION", CallID: "c-1", Server: "everything", Tool: "echo", ToolID: "echo", Verdict: projector.CallAllowed,
			TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4}, Parent: [8]byte{5, 6}, HostTraceParent: "00-01020300000000000000000000000000-0506000000000000-01",
			Start: t0, End: t0.Add(5 * time.Millisecond), AtServer: &wall, IntentSeq: seq(7), OutcomeSeq: seq(9),
			Children: []projector.ChildSpan{
				{Name: projector.SpanCommitIntent, SpanID: [8]byte{7}, Start: t0, End: t0.Add(time.Millisecond)},
				{Name: projector.SpanApprovalWait, SpanID: [8]byte{8}, Start: t0.Add(time.Millisecond), End: t0.Add(2 * time.Millisecond)},
				{Name: projector.SpanCommitOutcome, SpanID: [8]byte{9}, Start: t0.Add(4 * time.Millisecond), End: t0.Add(5 * time.Millisecond)},
			}},
		{Session: "01KSESSION", CallID: "c-2", Server: projector.OtherLabel, Tool: "rm", ToolID: "rm", Verdict: projector.CallDenied, Reason: projector.RefusalPolicy,
			TraceID: [16]byte{9}, SpanID: [8]byte{10}, Start: t0, End: t0.Add(time.Millisecond), IntentSeq: seq(1 << 40), OutcomeSeq: seq(1<<40 + 1),
			Children: []projector.ChildSpan{{Name: projector.SpanCommitOutcome, SpanID: [8]byte{11}, Start: t0, End: t0}}},
		{Session: "01KSESSION", CallID: "c-3", Server: "everything", Tool: "slow", ToolID: "sl\xffow", Verdict: projector.CallUnfinished, Unfinished: true,
			TraceID: [16]byte{12}, SpanID: [8]byte{13}, Start: t0, End: t0.Add(time.Hour)},
	}

	sdk, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(srv.Listener.Addr().String()), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	var ro []sdktrace.ReadOnlySpan
	for _, c := range calls {
		if c.ToolID != "sl\xffow" {
			ro = append(ro, sdkCallSpans(c, res)...)
		}
	}
	if err := sdk.ExportSpans(ctx, ro); err != nil {
		t.Fatal(err)
	}
	sdk.Shutdown(ctx)
	spans, err := NewSpans(ctx, &cfg, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := spans.Export(ctx, calls[:2]); err != nil {
		t.Fatal(err)
	}
	// A tool name that is not UTF-8 (the SDK refuses the whole batch)
	// goes out with U+FFFD in its place.
	if err := spans.Export(ctx, calls[2:]); err != nil {
		t.Fatal(err)
	}
	spans.Shutdown(ctx)
	if len(bodies) != 3 {
		t.Fatalf("the receiver got %d requests, want 3", len(bodies))
	}
	var want, got, odd coltracepb.ExportTraceServiceRequest
	for i, m := range []*coltracepb.ExportTraceServiceRequest{&want, &got, &odd} {
		if err := proto.Unmarshal(bodies[i], m); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if !proto.Equal(&want, &got) {
		t.Errorf("aegis's spans differ from the SDK's\n aegis %v\n   sdk %v", &got, &want)
	}
	if n := len(got.ResourceSpans[0].ScopeSpans[0].Spans); n != 6 {
		t.Errorf("%d spans, want 6", n)
	}
	sp := odd.ResourceSpans[0].ScopeSpans[0].Spans
	if len(sp) != 1 || sp[0].Name != "tools/call sl\uFFFDow" || sp[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the unfinished call's span: %v", sp)
	}
}

// TestSpanQueueDropsRatherThanWaits: while the collector does not answer,
// a full queue drops a call's spans, and counts them, instead of making
// the fold (and behind it the tap) wait; what it held goes out when the
// collector answers.
func TestSpanQueueDropsRatherThanWaits(t *testing.T) {
	release := make(chan struct{})
	var sent sync.WaitGroup
	sent.Add(1)
	c := &stuckClient{release: release, sent: &sent}
	var dropped int
	q := newSpanQueue(&Spans{client: c, enc: newSpanEncoder(resource.Empty())},
		&Config{Getenv: func(k string) string {
			return map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "6", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "3", "OTEL_BSP_SCHEDULE_DELAY": "1"}[k]
		}}, nil, func(n int) { dropped += n })
	call := projector.CallSpan{CallID: "c", Verdict: projector.CallAllowed, Children: []projector.ChildSpan{{Name: "a"}, {Name: "b"}}}
	q.add(call) // 3 spans: a full batch, sent, and the collector holds it
	sent.Wait()
	done := make(chan struct{})
	go func() {
		for range 4 {
			q.add(call) // 2 fit, 2 dropped
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("adding to a full queue waited for the collector")
	}
	if dropped != 6 {
		t.Errorf("dropped %d spans, want 6", dropped)
	}
	close(release)
	if err := q.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.spans != 9 {
		t.Errorf("the collector got %d spans, want 9 (3 calls)", c.spans)
	}
}

// stuckClient is a collector that takes its first request only when
// released.
type stuckClient struct {
	release chan struct{}
	sent    *sync.WaitGroup
	mu      sync.Mutex
	n       int
	spans   int
}

func (c *stuckClient) Start(context.Context) error { return nil }
func (c *stuckClient) Stop(context.Context) error  { return nil }
func (c *stuckClient) UploadTraces(ctx context.Context, rs []*tracepb.ResourceSpans) error {
	c.mu.Lock()
	c.n++
	first := c.n == 1
	c.mu.Unlock()
	if first {
		c.sent.Done()
		<-c.release
	}
	b, err := proto.Marshal(rs[0].ScopeSpans[0])
	if err != nil {
		return err
	}
	var ss tracepb.ScopeSpans
	if err := proto.Unmarshal(b, &ss); err != nil {
		return err
	}
	c.mu.Lock()
	c.spans += len(ss.Spans)
	c.mu.Unlock()
	return nil
}

// sdkCallSpans is how aegis made a call's spans with the SDK, kept to
// hold what it writes now to what it wrote then.
func sdkCallSpans(c projector.CallSpan, res *resource.Resource) []sdktrace.ReadOnlySpan {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: c.TraceID, SpanID: c.SpanID, TraceFlags: trace.FlagsSampled})
	var parent trace.SpanContext
	if c.Parent != [8]byte{} {
		parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: c.TraceID, SpanID: c.Parent, TraceFlags: trace.FlagsSampled, Remote: true})
	}
	// Sized for every attribute a call's span can have: one allocation.
	attrs := make([]attribute.KeyValue, 0, 14)
	attrs = append(attrs,
		attribute.String("mcp.method.name", "tools/call"),
		attribute.String("gen_ai.tool.name", c.ToolID),
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("mcp.session.id", c.Session),
		attribute.String("aegis.session.id", c.Session),
		attribute.String("aegis.call.id", c.CallID),
		attribute.String("aegis.server", c.Server),
		attribute.String("aegis.verdict", c.Verdict),
	)
	if c.Reason != "" {
		attrs = append(attrs, attribute.String("aegis.refusal.reason", c.Reason))
	}
	if et := errorType(c); et != "" {
		attrs = append(attrs, attribute.String("error.type", et))
	}
	if c.IntentSeq != nil {
		attrs = append(attrs, attribute.Int64("aegis.record.intent_seq", int64(*c.IntentSeq)))
	}
	if c.OutcomeSeq != nil {
		attrs = append(attrs, attribute.Int64("aegis.record.outcome_seq", int64(*c.OutcomeSeq)))
	}
	if c.HostTraceParent != "" {
		attrs = append(attrs, attribute.String("aegis.host.traceparent", c.HostTraceParent))
	}
	if c.AtServer != nil {
		attrs = append(attrs, attribute.Float64("aegis.server.duration", c.AtServer.Seconds()))
	}
	status := sdktrace.Status{Code: codes.Ok}
	if c.Verdict != projector.CallAllowed {
		status = sdktrace.Status{Code: codes.Error, Description: c.Verdict}
	}
	stub := tracetest.SpanStub{
		Name:                 "tools/call " + c.ToolID,
		SpanContext:          sc,
		Parent:               parent,
		SpanKind:             trace.SpanKindServer,
		StartTime:            c.Start,
		EndTime:              c.End,
		Attributes:           attrs,
		Status:               status,
		ChildSpanCount:       len(c.Children),
		Resource:             res,
		InstrumentationScope: scope,
	}
	out := make([]sdktrace.ReadOnlySpan, 1, 1+len(c.Children))
	out[0] = stub.Snapshot()
	// The children share one read-only attribute slice.
	var childAttrs []attribute.KeyValue
	if len(c.Children) > 0 {
		childAttrs = []attribute.KeyValue{attribute.String("aegis.call.id", c.CallID)}
	}
	for _, ch := range c.Children {
		kind := trace.SpanKindInternal
		cs := tracetest.SpanStub{
			Name:                 ch.Name,
			SpanContext:          trace.NewSpanContext(trace.SpanContextConfig{TraceID: c.TraceID, SpanID: ch.SpanID, TraceFlags: trace.FlagsSampled}),
			Parent:               sc,
			SpanKind:             kind,
			StartTime:            ch.Start,
			EndTime:              ch.End,
			Attributes:           childAttrs,
			Resource:             res,
			InstrumentationScope: scope,
		}
		out = append(out, cs.Snapshot())
	}
	return out
}
