package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/aegis-dev/aegis/projector"
)

// A call's spans go to the collector without the SDK's span objects: the
// fold's [projector.CallSpan] is written in the OTLP wire format into a
// buffer reused from one batch to the next ([spanEncoder]), and sent by
// the SDK's own OTLP clients (which honour the OTEL_EXPORTER_OTLP_*
// variables). At 64 calls in flight the SDK's path (a read-only span per
// span, a channel send each, then a protobuf message per span, attribute
// and value, marshalled) cost more than the rest of the export together.

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
	if q.log == nil {
		q.log = slog.New(slog.DiscardHandler)
	}
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

// spanEncoder writes calls' spans in the OTLP wire format with protowire,
// into a buffer reused from one batch to the next, and hands them to the
// client as the unknown fields of the scope's message: the same bytes
// proto.Marshal writes for the spans (field 2 of ScopeSpans, each a
// Span), which a receiver reads as the spans, and which the client's
// proto.Marshal copies as they are instead of walking a message per span,
// attribute and value (TestSpanEncoderWritesWhatTheSDKWrote).
type spanEncoder struct {
	out []*tracepb.ResourceSpans
	rs  tracepb.ResourceSpans
	ss  tracepb.ScopeSpans
	buf []byte // the spans, as ScopeSpans fields
	one []byte // one span
	// names holds the span name of each tool, for the first maxNames.
	names map[string]string
}

const maxNames = 1024

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
		av.Value = &commonpb.AnyValue_StringValue{StringValue: valid(kv.Value.Emit())}
	}
	return &commonpb.KeyValue{Key: valid(string(kv.Key)), Value: av}
}

// encode writes the spans of calls: per call, the call's span, then its
// children (the durable commits of its intent and outcome, and the wait
// for the approval that let it through). They carry ids, names, verdicts,
// times and the record's line numbers, never arguments or results.
func (e *spanEncoder) encode(calls []projector.CallSpan) []*tracepb.ResourceSpans {
	e.buf = e.buf[:0]
	for i := range calls {
		e.call(&calls[i])
	}
	e.ss.ProtoReflect().SetUnknown(protoreflect.RawFields(e.buf))
	return e.out
}

// Field numbers of the OTLP messages a span is made of.
const (
	fScopeSpans     = 2  // ScopeSpans.spans
	fTraceID        = 1  // Span.trace_id
	fSpanID         = 2  // Span.span_id
	fParentSpanID   = 4  // Span.parent_span_id
	fName           = 5  // Span.name
	fKind           = 6  // Span.kind
	fStart          = 7  // Span.start_time_unix_nano
	fEnd            = 8  // Span.end_time_unix_nano
	fAttributes     = 9  // Span.attributes
	fStatus         = 15 // Span.status
	fFlags          = 16 // Span.flags
	fStatusMessage  = 2  // Status.message
	fStatusCode     = 3  // Status.code
	fKey            = 1  // KeyValue.key
	fValue          = 2  // KeyValue.value
	fStringValue    = 1  // AnyValue.string_value
	fIntValue       = 3  // AnyValue.int_value
	fDoubleValue    = 4  // AnyValue.double_value
	statusOK        = uint64(tracepb.Status_STATUS_CODE_OK)
	statusError     = uint64(tracepb.Status_STATUS_CODE_ERROR)
	spanKindServer  = uint64(tracepb.Span_SPAN_KIND_SERVER)
	spanKindInternl = uint64(tracepb.Span_SPAN_KIND_INTERNAL)
)

// valid is s as valid UTF-8, which a protobuf string must be (the fold's
// strings come from JSON and are, but a receiver would refuse the whole
// batch for one that is not).
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func appendStr(b []byte, n protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, valid(s))
}

// appendStrAttr appends a KeyValue with a string value.
func appendStrAttr(b []byte, key, v string) []byte {
	v = valid(v)
	av := 1 + protowire.SizeBytes(len(v))
	b = protowire.AppendTag(b, fAttributes, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(1+protowire.SizeBytes(len(key))+1+protowire.SizeBytes(av)))
	b = appendStr(b, fKey, key)
	b = protowire.AppendTag(b, fValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(av))
	return appendStr(b, fStringValue, v)
}

// appendIntAttr appends a KeyValue with an integer value.
func appendIntAttr(b []byte, key string, v int64) []byte {
	av := 1 + protowire.SizeVarint(uint64(v))
	b = protowire.AppendTag(b, fAttributes, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(1+protowire.SizeBytes(len(key))+1+protowire.SizeBytes(av)))
	b = appendStr(b, fKey, key)
	b = protowire.AppendTag(b, fValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(av))
	b = protowire.AppendTag(b, fIntValue, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// appendFloatAttr appends a KeyValue with a double value.
func appendFloatAttr(b []byte, key string, v float64) []byte {
	const av = 1 + 8
	b = protowire.AppendTag(b, fAttributes, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(1+protowire.SizeBytes(len(key))+1+protowire.SizeBytes(av)))
	b = appendStr(b, fKey, key)
	b = protowire.AppendTag(b, fValue, protowire.BytesType)
	b = protowire.AppendVarint(b, av)
	b = protowire.AppendTag(b, fDoubleValue, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
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

// appendHead appends a span's fields up to its attributes.
func appendHead(b []byte, traceID, spanID, parent []byte, name string, kind uint64, start, end time.Time, flags uint32) []byte {
	b = protowire.AppendTag(b, fTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, traceID)
	b = protowire.AppendTag(b, fSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, spanID)
	if len(parent) > 0 {
		b = protowire.AppendTag(b, fParentSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, parent)
	}
	b = appendStr(b, fName, name)
	b = protowire.AppendTag(b, fKind, protowire.VarintType)
	b = protowire.AppendVarint(b, kind)
	b = protowire.AppendTag(b, fStart, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(start))
	b = protowire.AppendTag(b, fEnd, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(end))
	b = protowire.AppendTag(b, fFlags, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}

// appendSpan appends the span e.one holds as a ScopeSpans field.
func (e *spanEncoder) appendSpan() {
	e.buf = protowire.AppendTag(e.buf, fScopeSpans, protowire.BytesType)
	e.buf = protowire.AppendBytes(e.buf, e.one)
}

func (e *spanEncoder) call(c *projector.CallSpan) {
	name := e.names[c.ToolID]
	if name == "" {
		name = "tools/call " + c.ToolID
		if len(e.names) < maxNames {
			e.names[c.ToolID] = name
		}
	}
	var parent []byte
	flags := localParentFlags
	if c.Parent != [8]byte{} {
		parent, flags = c.Parent[:], remoteParentFlags
	}
	b := appendHead(e.one[:0], c.TraceID[:], c.SpanID[:], parent, name, spanKindServer, c.Start, c.End, flags)
	b = appendStrAttr(b, "mcp.method.name", "tools/call")
	b = appendStrAttr(b, "gen_ai.tool.name", c.ToolID)
	b = appendStrAttr(b, "gen_ai.operation.name", "execute_tool")
	b = appendStrAttr(b, "mcp.session.id", c.Session)
	b = appendStrAttr(b, "aegis.session.id", c.Session)
	b = appendStrAttr(b, "aegis.call.id", c.CallID)
	b = appendStrAttr(b, "aegis.server", c.Server)
	b = appendStrAttr(b, "aegis.verdict", c.Verdict)
	if c.Reason != "" {
		b = appendStrAttr(b, "aegis.refusal.reason", c.Reason)
	}
	if et := errorType(*c); et != "" {
		b = appendStrAttr(b, "error.type", et)
	}
	if c.IntentSeq != nil {
		b = appendIntAttr(b, "aegis.record.intent_seq", int64(*c.IntentSeq))
	}
	if c.OutcomeSeq != nil {
		b = appendIntAttr(b, "aegis.record.outcome_seq", int64(*c.OutcomeSeq))
	}
	if c.HostTraceParent != "" {
		b = appendStrAttr(b, "aegis.host.traceparent", c.HostTraceParent)
	}
	if c.AtServer != nil {
		b = appendFloatAttr(b, "aegis.server.duration", c.AtServer.Seconds())
	}
	// The status: OK for an allowed call, else an error that names the
	// verdict.
	b = protowire.AppendTag(b, fStatus, protowire.BytesType)
	if c.Verdict == projector.CallAllowed {
		b = protowire.AppendVarint(b, 2)
		b = protowire.AppendTag(b, fStatusCode, protowire.VarintType)
		b = protowire.AppendVarint(b, statusOK)
	} else {
		v := valid(c.Verdict)
		b = protowire.AppendVarint(b, uint64(1+protowire.SizeBytes(len(v))+2))
		b = appendStr(b, fStatusMessage, v)
		b = protowire.AppendTag(b, fStatusCode, protowire.VarintType)
		b = protowire.AppendVarint(b, statusError)
	}
	e.one = b
	e.appendSpan()
	for _, ch := range c.Children {
		b := appendHead(e.one[:0], c.TraceID[:], ch.SpanID[:], c.SpanID[:], ch.Name, spanKindInternl, ch.Start, ch.End, localParentFlags)
		b = appendStrAttr(b, "aegis.call.id", c.CallID)
		// An unset status, as the SDK writes it: present and empty.
		b = protowire.AppendTag(b, fStatus, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
		e.one = b
		e.appendSpan()
	}
}
