package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkFoldCall is the export's CPU per recorded call in the aegis
// process, off the relay's path: the fold of the call's two events, the
// metrics, and (spans) its three spans handed to a batch processor whose
// exporter drops them (the OTLP encoding is not counted).
func BenchmarkFoldCall(b *testing.B) {
	t0 := time.Now()
	mk := func(kind schemas.Kind, seq uint64, payload any) projector.TelemetryEvent {
		raw, _ := json.Marshal(payload)
		return projector.TelemetryEvent{Seq: seq, Stored: t0, Event: schemas.Event{V: 1, Session: "01KSESSION0000000000000000", Kind: kind, Time: t0, Payload: raw}}
	}
	var evs [][2]projector.TelemetryEvent
	for i := range 1000 {
		wc := schemas.WrapCall{CallID: fmt.Sprintf("call-%d", i), ToolID: "echo", RequestDigest: "d", PolicySetHash: "h"}
		il, _ := wc.Intent().Line()
		il.Set(schemas.FieldSeq, uint64(2*i+1))
		ic, _ := il.Canonical()
		ol, _ := wc.Answered("r", 3).Line()
		ol.Set(schemas.FieldSeq, uint64(2*i+2))
		oc, _ := ol.Canonical()
		evs = append(evs, [2]projector.TelemetryEvent{
			mk(schemas.KindCallIntent, uint64(2*i+1), projector.CallPayload{Line: string(ic), CallID: wc.CallID, ToolID: "echo"}),
			mk(schemas.KindCallOutcome, uint64(2*i+2), projector.CallPayload{Line: string(oc), CallID: wc.CallID, ToolID: "echo"}),
		})
	}
	for _, spans := range []bool{false, true} {
		b.Run(fmt.Sprintf("spans=%v", spans), func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer mp.Shutdown(context.Background())
			inst, err := newInstruments(mp.Meter("bench"), nil)
			if err != nil {
				b.Fatal(err)
			}
			s := &sink{inst: inst, res: resource.Empty(), sets: map[callLabels]*callSets{}}
			if spans {
				s.spans = sdktrace.NewBatchSpanProcessor(discard{})
				defer s.spans.Shutdown(context.Background())
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
