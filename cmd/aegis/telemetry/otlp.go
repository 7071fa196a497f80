package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/aegis-dev/aegis/projector"
)

// A call's spans go to the collector without the SDK's span objects: the
// fold's [projector.CallSpan] is written straight into the OTLP messages,
// which are reused from one batch to the next, and sent by the SDK's own
// OTLP clients (which honour the OTEL_EXPORTER_OTLP_* variables). At 64
// calls in flight the SDK's path (a read-only span per span, a channel
// send each, then its conversion to OTLP) cost more than the rest of the
// export together.

// Span batches, as the OTEL_BSP_* variables set them.
const (
	// defaultQueue is the spans waiting to be sent, at most: about two
	// seconds of calls at a few thousand calls a second. Past it the
	// newest calls' spans are dropped and counted, never waited for.
	defaultQueue = 16384
	// defaultBatch is the spans of one export.
	defaultBatch = 2048
	// defaultDelay is the longest a span waits for a batch to fill.
	defaultDelay = 5 * time.Second
	// defaultTimeout bounds one export.
	defaultTimeout = 30 * time.Second
)

// Spans sends calls' spans over OTLP, a batch at a time.
type Spans struct {
	client otlptrace.Client
	mu     sync.Mutex // enc, whose messages one export at a time uses
	enc    *spanEncoder
}

// NewSpans starts the OTLP client of spans that cfg names, for spans under
// res.
func NewSpans(ctx context.Context, cfg *Config, res *resource.Resource) (*Spans, error) {
	c, err := spanClient(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	return &Spans{client: c, enc: newSpanEncoder(res)}, nil
}

// Export sends the spans of calls, in one request. Exports run one at a
// time: the messages of one are reused by the next.
func (s *Spans) Export(ctx context.Context, calls []projector.CallSpan) error {
	if len(calls) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.client.UploadTraces(ctx, s.enc.encode(calls)); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// Shutdown stops the client.
func (s *Spans) Shutdown(ctx context.Context) error { return s.client.Stop(ctx) }

// spanCount is the spans of a call: its own and its children.
func spanCount(c *projector.CallSpan) int { return 1 + len(c.Children) }

// spanQueue holds the finished calls whose spans are not sent yet, and
// sends them from a goroutine of its own: when a batch is full, or when
// the oldest has waited the delay. Adding never blocks: past the queue's
// bound a call's spans are dropped and counted.
type spanQueue struct {
	spans   *Spans
	log     *slog.Logger
	max     int
	batch   int
	delay   time.Duration
	timeout time.Duration
	dropped func(n int)

	mu      sync.Mutex
	pending []projector.CallSpan
	n       int // spans pending
	spare   []projector.CallSpan
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	warned  time.Time
}

// bspEnv reads a whole number of an OTEL_BSP_* variable, or def.
func bspEnv(cfg *Config, name string, def int) int {
	if n, err := strconv.Atoi(cfg.getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func newSpanQueue(spans *Spans, cfg *Config, log *slog.Logger, dropped func(int)) *spanQueue {
	q := &spanQueue{
		spans:   spans,
		log:     log,
		max:     bspEnv(cfg, "OTEL_BSP_MAX_QUEUE_SIZE", defaultQueue),
		batch:   bspEnv(cfg, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaultBatch),
		delay:   time.Duration(bspEnv(cfg, "OTEL_BSP_SCHEDULE_DELAY", int(defaultDelay/time.Millisecond))) * time.Millisecond,
		timeout: time.Duration(bspEnv(cfg, "OTEL_BSP_EXPORT_TIMEOUT", int(defaultTimeout/time.Millisecond))) * time.Millisecond,
		dropped: dropped,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	q.batch = min(q.batch, q.max)
	go q.run()
	return q
}

// add queues c's spans, or drops them when the queue is full.
func (q *spanQueue) add(c projector.CallSpan) {
	n := spanCount(&c)
	q.mu.Lock()
	if q.n+n > q.max {
		q.mu.Unlock()
		q.dropped(n)
		return
	}
	q.pending = append(q.pending, c)
	q.n += n
	full := q.n >= q.batch
	q.mu.Unlock()
	if full {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

func (q *spanQueue) run() {
	defer close(q.done)
	t := time.NewTimer(q.delay)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-q.wake:
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
		q.send(ctx)
		cancel()
		t.Reset(q.delay)
	}
}

// send exports everything queued, a batch at a time.
func (q *spanQueue) send(ctx context.Context) error {
	q.mu.Lock()
	all := q.pending
	q.pending, q.spare, q.n = q.spare[:0], nil, 0
	q.mu.Unlock()
	var errs []error
	for calls := all; len(calls) > 0; {
		k, n := 0, 0
		for k < len(calls) && (k == 0 || n+spanCount(&calls[k]) <= q.batch) {
			n += spanCount(&calls[k])
			k++
		}
		if err := q.spans.Export(ctx, calls[:k]); err != nil {
			errs = append(errs, err)
			// Spans are telemetry: a collector that is away loses them,
			// and says so once a minute at most.
			if time.Since(q.warned) > time.Minute {
				q.warned = time.Now()
				q.log.Warn("telemetry: spans not exported", "spans", n, "err", err)
			}
		}
		calls = calls[k:]
	}
	clear(all) // lets go of the calls
	q.mu.Lock()
	q.spare = all[:0]
	q.mu.Unlock()
	return errors.Join(errs...)
}

// close sends what is queued and stops the queue and its client, within
// ctx.
func (q *spanQueue) close(ctx context.Context) error {
	close(q.stop)
	<-q.done
	err := q.send(ctx)
	return errors.Join(err, q.spans.Shutdown(ctx))
}

// spanEncoder writes calls' spans as OTLP messages, reusing the messages
// of the last batch: a batch allocates only when it is larger than every
// batch before it.
type spanEncoder struct {
	out   []*tracepb.ResourceSpans
	rs    tracepb.ResourceSpans
	ss    tracepb.ScopeSpans
	spans []tracepb.Span
	ptrs  []*tracepb.Span
	stat  []tracepb.Status
	kv    []commonpb.KeyValue
	kvp   []*commonpb.KeyValue
	av    []commonpb.AnyValue
	sv    []commonpb.AnyValue_StringValue
	iv    []commonpb.AnyValue_IntValue
	dv    []commonpb.AnyValue_DoubleValue
	ids   []byte
	// names holds the span name of each tool, for the first maxNames.
	names map[string]string
}

const maxNames = 1024

// callAttrs is the most attributes a call's span has.
const callAttrs = 14

func newSpanEncoder(res *resource.Resource) *spanEncoder {
	e := &spanEncoder{names: map[string]string{}}
	var r *resourcepb.Resource
	if res != nil {
		r = &resourcepb.Resource{}
		for it := res.Iter(); it.Next(); {
			r.Attributes = append(r.Attributes, keyValue(it.Attribute()))
		}
		e.rs.SchemaUrl = res.SchemaURL()
	}
	e.rs.Resource = r
	e.ss.Scope = &commonpb.InstrumentationScope{Name: scope.Name, Version: scope.Version}
	e.ss.SchemaUrl = scope.SchemaURL
	e.rs.ScopeSpans = []*tracepb.ScopeSpans{&e.ss}
	e.out = []*tracepb.ResourceSpans{&e.rs}
	return e
}

// keyValue is an attribute as OTLP writes it (the resource's).
func keyValue(kv attribute.KeyValue) *commonpb.KeyValue {
	av := &commonpb.AnyValue{}
	switch kv.Value.Type() {
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: kv.Value.AsBool()}
	case attribute.INT64:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: kv.Value.AsInt64()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: kv.Value.AsFloat64()}
	default:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: kv.Value.Emit()}
	}
	return &commonpb.KeyValue{Key: string(kv.Key), Value: av}
}

// grow returns s with room for n elements, its contents not kept.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n+n/4)
	}
	return s[:0]
}

// encode writes the spans of calls: per call, the call's span, then its
// children (the durable commits of its intent and outcome, and the wait
// for the approval that let it through). They carry ids, names, verdicts,
// times and the record's line numbers, never arguments or results.
func (e *spanEncoder) encode(calls []projector.CallSpan) []*tracepb.ResourceSpans {
	spans := 0
	for i := range calls {
		spans += spanCount(&calls[i])
	}
	e.spans, e.ptrs, e.stat = grow(e.spans, spans), grow(e.ptrs, spans), grow(e.stat, spans)
	attrs := len(calls)*(callAttrs+1) + spans
	e.kv, e.kvp, e.av = grow(e.kv, attrs), grow(e.kvp, attrs), grow(e.av, attrs)
	e.sv, e.iv, e.dv = grow(e.sv, attrs), grow(e.iv, 2*len(calls)), grow(e.dv, len(calls))
	e.ids = grow(e.ids, spans*32)
	for i := range calls {
		e.call(&calls[i])
	}
	e.ss.Spans = e.ptrs
	return e.out
}

func (e *spanEncoder) id(b []byte) []byte {
	e.ids = append(e.ids, b...)
	return e.ids[len(e.ids)-len(b) : len(e.ids) : len(e.ids)]
}

// attr appends an attribute whose value is the last one appended to av.
func (e *spanEncoder) attr(key string) {
	e.kv = append(e.kv, commonpb.KeyValue{Key: key, Value: &e.av[len(e.av)-1]})
	e.kvp = append(e.kvp, &e.kv[len(e.kv)-1])
}

func (e *spanEncoder) str(key, v string) {
	e.sv = append(e.sv, commonpb.AnyValue_StringValue{StringValue: v})
	e.av = append(e.av, commonpb.AnyValue{Value: &e.sv[len(e.sv)-1]})
	e.attr(key)
}

func (e *spanEncoder) int(key string, v int64) {
	e.iv = append(e.iv, commonpb.AnyValue_IntValue{IntValue: v})
	e.av = append(e.av, commonpb.AnyValue{Value: &e.iv[len(e.iv)-1]})
	e.attr(key)
}

func (e *spanEncoder) float(key string, v float64) {
	e.dv = append(e.dv, commonpb.AnyValue_DoubleValue{DoubleValue: v})
	e.av = append(e.av, commonpb.AnyValue{Value: &e.dv[len(e.dv)-1]})
	e.attr(key)
}

// span appends a span and returns it, with its status.
func (e *spanEncoder) span() *tracepb.Span {
	e.stat = append(e.stat, tracepb.Status{})
	e.spans = append(e.spans, tracepb.Span{Status: &e.stat[len(e.stat)-1]})
	sp := &e.spans[len(e.spans)-1]
	e.ptrs = append(e.ptrs, sp)
	return sp
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

// Span flags as the SDK's exporter writes them: sampled, and whether the
// parent is remote (known, and then said).
const (
	flagSampled       = 1
	flagHasIsRemote   = uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	flagIsRemote      = uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	localParentFlags  = flagSampled | flagHasIsRemote
	remoteParentFlags = flagSampled | flagHasIsRemote | flagIsRemote
)

func (e *spanEncoder) call(c *projector.CallSpan) {
	sp := e.span()
	traceID := e.id(c.TraceID[:])
	spanID := e.id(c.SpanID[:])
	sp.TraceId, sp.SpanId = traceID, spanID
	sp.Name = e.names[c.ToolID]
	if sp.Name == "" {
		sp.Name = "tools/call " + c.ToolID
		if len(e.names) < maxNames {
			e.names[c.ToolID] = sp.Name
		}
	}
	sp.Kind = tracepb.Span_SPAN_KIND_SERVER
	sp.StartTimeUnixNano, sp.EndTimeUnixNano = unixNano(c.Start), unixNano(c.End)
	sp.Flags = localParentFlags
	if c.Parent != [8]byte{} {
		sp.ParentSpanId = e.id(c.Parent[:])
		sp.Flags = remoteParentFlags
	}
	if c.Verdict == projector.CallAllowed {
		sp.Status.Code = tracepb.Status_STATUS_CODE_OK
	} else {
		sp.Status.Code, sp.Status.Message = tracepb.Status_STATUS_CODE_ERROR, c.Verdict
	}
	first := len(e.kvp)
	e.str("mcp.method.name", "tools/call")
	e.str("gen_ai.tool.name", c.ToolID)
	e.str("gen_ai.operation.name", "execute_tool")
	e.str("mcp.session.id", c.Session)
	e.str("aegis.session.id", c.Session)
	e.str("aegis.call.id", c.CallID)
	e.str("aegis.server", c.Server)
	e.str("aegis.verdict", c.Verdict)
	if c.Reason != "" {
		e.str("aegis.refusal.reason", c.Reason)
	}
	if et := errorType(*c); et != "" {
		e.str("error.type", et)
	}
	if c.IntentSeq != nil {
		e.int("aegis.record.intent_seq", int64(*c.IntentSeq))
	}
	if c.OutcomeSeq != nil {
		e.int("aegis.record.outcome_seq", int64(*c.OutcomeSeq))
	}
	if c.HostTraceParent != "" {
		e.str("aegis.host.traceparent", c.HostTraceParent)
	}
	if c.AtServer != nil {
		e.float("aegis.server.duration", c.AtServer.Seconds())
	}
	sp.Attributes = e.kvp[first:len(e.kvp):len(e.kvp)]
	if len(c.Children) == 0 {
		return
	}
	// The children share one attribute.
	first = len(e.kvp)
	e.str("aegis.call.id", c.CallID)
	shared := e.kvp[first:len(e.kvp):len(e.kvp)]
	for _, ch := range c.Children {
		cs := e.span()
		cs.TraceId, cs.SpanId, cs.ParentSpanId = traceID, e.id(ch.SpanID[:]), spanID
		cs.Name = ch.Name
		cs.Kind = tracepb.Span_SPAN_KIND_INTERNAL
		cs.StartTimeUnixNano, cs.EndTimeUnixNano = unixNano(ch.Start), unixNano(ch.End)
		cs.Flags = localParentFlags
		cs.Attributes = shared
	}
}
