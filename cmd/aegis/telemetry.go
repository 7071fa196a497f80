package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/telemetry"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// telemetryHelp is the part of wrap's and gateway's help on the export
// flags.
const telemetryHelp = `--metrics-listen ADDR serves Prometheus metrics at http://ADDR/metrics
(such as 127.0.0.1:9464; port 0 picks one, printed on stderr): calls by
server, tool and verdict, refusals by reason, approvals pending and
decided and their wait, call latency through aegis and at the server,
the store's commits (one fsync each), their latency and the stream's
size, tool pins changed, sessions open, and the process's memory and
open files. The page answers only requests whose Host is ADDR (a page of
another site that a DNS rebinding points at it is refused), on loopback
unless --metrics-allow-remote names one address off it. No label holds
arguments, ids or paths.

--otlp-endpoint URL exports the same metrics, and one span per tools/call
(with its commits and approval wait as children), over OTLP to a
collector: http/protobuf (such as http://127.0.0.1:4318) or, with
OTEL_EXPORTER_OTLP_PROTOCOL=grpc, gRPC (http://127.0.0.1:4317). Without
it, OTEL_EXPORTER_OTLP_ENDPOINT (and the _TRACES_ and _METRICS_ ones)
turn the export on; the other OTEL_EXPORTER_OTLP_* variables,
OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED and
OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER=none are honoured. A host's
trace context (params._meta.traceparent) is continued by the call's span,
passed to the server as sent, and kept in the call's intent line of the
record. The export reads what was recorded, after it is on disk: no call
waits for it, and a collector that is down loses spans, never calls.
With neither flag nor variable nothing is exported and nothing runs. See
docs/telemetry.md.
`

// telemetryFlags are the export flags of wrap and gateway
// (docs/telemetry.md).
type telemetryFlags struct {
	listen      *string
	allowRemote *bool
	endpoint    *string
}

func addTelemetryFlags(fs *flag.FlagSet) *telemetryFlags {
	return &telemetryFlags{
		listen:      fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (loopback)"),
		allowRemote: fs.Bool("metrics-allow-remote", false, "let --metrics-listen name an address off loopback"),
		endpoint:    fs.String("otlp-endpoint", "", "export traces and metrics over OTLP to this collector URL"),
	}
}

// config checks the flags and the OTEL_* variables before anything starts.
func (t *telemetryFlags) config(m *Main) (telemetry.Config, error) {
	cfg := telemetry.Config{MetricsListen: *t.listen, AllowRemote: *t.allowRemote, OTLPEndpoint: *t.endpoint, Getenv: m.Getenv, Version: Version, Log: m.logger()}
	if *t.allowRemote && *t.listen == "" {
		return cfg, usagef("add --metrics-listen ADDR", "--metrics-allow-remote needs --metrics-listen")
	}
	if err := cfg.Check(); err != nil {
		return cfg, usagef("serve metrics on loopback, such as --metrics-listen 127.0.0.1:9464, and give --otlp-endpoint as http://HOST:PORT", "%v", err)
	}
	return cfg, nil
}

// startTelemetry starts the export of store's commits, when cfg asks for
// one; the returned exporter is nil otherwise, and closing it is a no-op.
func (m *Main) startTelemetry(ctx context.Context, store *events.Store, cfg telemetry.Config) (*telemetry.Exporter, error) {
	x, err := telemetry.Start(ctx, store, cfg)
	if err != nil {
		return nil, withHint(err, "check --metrics-listen, --otlp-endpoint and the OTEL_EXPORTER_OTLP_* variables (docs/telemetry.md)")
	}
	if x != nil && x.Addr() != nil {
		fmt.Fprintf(m.Stderr, "aegis: metrics at http://%s/metrics\n", x.Addr())
	}
	return x, nil
}

// closeTelemetry exports what is left and stops, waiting at most 5 s for
// the collector: a stopping aegis does not wait long on an unreachable one.
func (m *Main) closeTelemetry(x *telemetry.Exporter) {
	if x == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.Close(ctx); err != nil {
		m.warnf("telemetry: %v", err)
	}
}

// replayOTLP exports the spans of the session arg names to the collector
// at endpoint: the same spans, with the same ids, that the process that
// recorded it exported (or would have) while it ran, less the commits'
// spans, whose acknowledgement times only the running process knew.
func (m *Main) replayOTLP(ctx context.Context, src subjectReader, ix *projector.Index, holder int, arg, endpoint string) error {
	sum, err := sessionNamed(ix, holder, arg)
	if err != nil {
		return err
	}
	id := sum.ID
	cfg := telemetry.Config{OTLPEndpoint: endpoint, Getenv: m.Getenv, Version: Version}
	res, err := telemetry.Resource(ctx, cfg)
	if err != nil {
		return err
	}
	fold := projector.NewTelemetry()
	col := &spanCollector{}
	err = src.ReplaySubjectFrom(ctx, "aegis."+id+".>", events.Position{Seq: sum.First.Seq}, func(r events.Record) error {
		if r.Event.Session == id {
			fold.Apply(projector.TelemetryEvent{Seq: r.Pos.Seq, Event: r.Event}, col)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the event stream: %w", err)
	}
	spans := 0
	for i := range col.calls {
		spans += 1 + len(col.calls[i].Children)
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	exp, err := telemetry.NewSpans(ectx, &cfg, res)
	if err != nil {
		return err
	}
	for i := 0; i < len(col.calls); i += 512 {
		if err := exp.Export(ectx, col.calls[i:min(i+512, len(col.calls))]); err != nil {
			exp.Shutdown(ectx)
			return withHint(fmt.Errorf("replay: export to %s: %w", endpoint, err), "check that a collector listens there (OTLP over HTTP, or set OTEL_EXPORTER_OTLP_PROTOCOL=grpc)")
		}
	}
	if err := exp.Shutdown(ectx); err != nil {
		return fmt.Errorf("replay: export to %s: %w", endpoint, err)
	}
	fmt.Fprintf(m.Stdout, "exported %d spans of %d calls of session %s to %s\n", spans, len(col.calls), id, endpoint)
	return nil
}

// spanCollector keeps the calls a fold finishes, for replay --otlp.
type spanCollector struct{ calls []projector.CallSpan }

func (c *spanCollector) Call(s projector.CallSpan)             { c.calls = append(c.calls, s) }
func (c *spanCollector) ApprovalRequested()                    {}
func (c *spanCollector) ApprovalDecided(string, time.Duration) {}
func (c *spanCollector) Commit(time.Duration)                  {}
func (c *spanCollector) PinChanged()                           {}
func (c *spanCollector) SessionOpened(bool)                    {}
func (c *spanCollector) SessionClosed(bool, string)            {}
