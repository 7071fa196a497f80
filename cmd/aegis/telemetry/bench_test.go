package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// discard is an OTLP client that sends nothing.
type discard struct{}

func (discard) Start(context.Context) error                                  { return nil }
func (discard) Stop(context.Context) error                                   { return nil }
func (discard) UploadTraces(context.Context, []*tracepb.ResourceSpans) error { return nil }

// benchEvent is one event of the benchmarks' session.
func benchEvent(kind schemas.Kind, seq uint64, payload any) projector.TelemetryEvent {
	t0 := time.Unix(1800000000, 0)
	raw, _ := json.Marshal(payload)
	return projector.TelemetryEvent{Seq: seq, Stored: t0, Event: schemas.Event{V: 1, Session: "01KSESSION0000000000000000", Kind: kind, Time: t0, Payload: raw}}
}

// benchCalls returns n calls' intent and outcome events, as a wrap
// records an answered call.
func benchCalls(n int) [][2]projector.TelemetryEvent {
	var evs [][2]projector.TelemetryEvent
	for i := range n {
		wc := schemas.WrapCall{CallID: fmt.Sprintf("call-%d", i), ToolID: "echo", RequestDigest: "d", PolicySetHash: "h"}
		il, _ := wc.Intent().Line()
		il.Set(schemas.FieldSeq, uint64(2*i+1))
		ic, _ := il.Canonical()
		ol, _ := wc.Answered("r", 3).Line()
		ol.Set(schemas.FieldSeq, uint64(2*i+2))
		oc, _ := ol.Canonical()
		evs = append(evs, [2]projector.TelemetryEvent{
			benchEvent(schemas.KindCallIntent, uint64(2*i+1), projector.CallPayload{Line: string(ic), CallID: wc.CallID, ToolID: "echo"}),
			benchEvent(schemas.KindCallOutcome, uint64(2*i+2), projector.CallPayload{Line: string(oc), CallID: wc.CallID, ToolID: "echo"}),
		})
	}
	return evs
}

// BenchmarkFoldCall is the export's CPU per recorded call in the aegis
// process, off the relay's path: the fold of the call's two events, the
// metrics, and (spans) its three spans queued and written as OTLP
// messages for a client that sends nothing (the protobuf encoding is not
// counted).
func BenchmarkFoldCall(b *testing.B) {
	evs := benchCalls(1000)
	mk := benchEvent
	for _, spans := range []bool{false, true} {
		b.Run(fmt.Sprintf("spans=%v", spans), func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer mp.Shutdown(context.Background())
			inst, err := newInstruments(mp.Meter("bench"), nil)
			if err != nil {
				b.Fatal(err)
			}
			s := &sink{inst: inst, sets: map[callLabels]*callSets{}}
			if spans {
				s.queue = newSpanQueue(&Spans{client: discard{}, enc: newSpanEncoder(resource.Empty())}, &Config{}, slog.New(slog.DiscardHandler), func(int) {})
				defer s.queue.close(context.Background())
			}
			f := projector.NewTelemetry()
			f.Apply(mk(schemas.KindChildStarted, 0, map[string]any{"argv": []string{"server"}}), s)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c := evs[i%len(evs)]
				f.Apply(c[0], s)
				f.Apply(c[1], s)
				i++
			}
		})
	}
}

// BenchmarkExportCall is the whole export's CPU per recorded call in the
// process (every goroutine, from getrusage): the fold, the metrics, and
// the spans encoded and sent over OTLP/HTTP to a sink of the benchmark's
// own that discards them, in batches of 256 calls (about what the
// exporter's ticker takes at a thousand calls a second).
func BenchmarkExportCall(b *testing.B) {
	evs := benchCalls(2000)
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	ctx := context.Background()
	cfg := Config{OTLPEndpoint: srv.URL, Getenv: func(string) string { return "" }}
	spans, err := NewSpans(ctx, &cfg, resource.Empty())
	if err != nil {
		b.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(ctx)
	inst, err := newInstruments(mp.Meter("bench"), nil)
	if err != nil {
		b.Fatal(err)
	}
	s := &sink{inst: inst, sets: map[callLabels]*callSets{}}
	s.queue = newSpanQueue(spans, &cfg, slog.New(slog.DiscardHandler), func(int) { b.Fatal("spans dropped") })
	f := projector.NewTelemetry()
	f.Apply(benchEvent(schemas.KindChildStarted, 0, map[string]any{"argv": []string{"server"}}), s)
	cpu := processCPU
	if cpu() == 0 {
		b.Skip("no process CPU time on " + runtime.GOOS)
	}
	runtime.GC()
	t0 := cpu()
	i := 0
	for b.Loop() {
		c := evs[i%len(evs)]
		f.Apply(c[0], s)
		f.Apply(c[1], s)
		i++
		if i%256 == 0 {
			s.queue.send(ctx)
		}
	}
	s.queue.close(ctx)
	b.ReportMetric(float64(cpu()-t0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/call")
	b.ReportMetric(float64(got.Load())/float64(b.N), "otlp-B/call")
}
