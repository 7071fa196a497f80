package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegis-dev/aegis/projector"
)

// Resource is the resource aegis exports under: service.name aegis (or
// OTEL_SERVICE_NAME), service.version, and OTEL_RESOURCE_ATTRIBUTES.
func Resource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "aegis")}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	if v := cfg.getenv("OTEL_SERVICE_NAME"); v != "" {
		attrs[0] = attribute.String("service.name", v)
	}
	for _, kv := range strings.Split(cfg.getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if d, err := url.QueryUnescape(v); err == nil {
			v = d
		}
		if k == "service.name" && cfg.getenv("OTEL_SERVICE_NAME") != "" {
			continue
		}
		attrs = append(attrs, attribute.String(k, v))
	}
	return resource.NewSchemaless(attrs...), nil
}

var scope = instrumentation.Scope{Name: "github.com/aegis-dev/aegis"}

// CallSpans returns the spans of one call: the call's, then its children
// (the durable commits of its intent and outcome, and the wait for the
// approval that let it through). They carry ids, names, verdicts, times
// and the record's line numbers, never arguments or results.
func CallSpans(c projector.CallSpan, res *resource.Resource) []sdktrace.ReadOnlySpan {
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

// endpoint splits --otlp-endpoint into host:port, URL path and whether it
// is plain HTTP.
func endpoint(raw string) (host, path string, insecure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", "", false, fmt.Errorf("--otlp-endpoint %q: want a URL such as http://127.0.0.1:4318", raw)
	}
	return u.Host, strings.TrimSuffix(u.Path, "/"), u.Scheme == "http", nil
}

// target is where cfg's exporter of signal (TRACES, METRICS) sends: its
// protocol, and the host and path of --otlp-endpoint (empty when the
// OTEL_EXPORTER_OTLP_* variables decide).
func (cfg *Config) target(signal string) (proto, host, path string, insecure bool, err error) {
	if proto, err = cfg.protocol(signal); err != nil {
		return "", "", "", false, err
	}
	if cfg.OTLPEndpoint != "" {
		if host, path, insecure, err = endpoint(cfg.OTLPEndpoint); err != nil {
			return "", "", "", false, err
		}
	}
	return proto, host, path, insecure, nil
}

// SpanExporter is the OTLP exporter of spans that cfg names.
func SpanExporter(ctx context.Context, cfg *Config) (sdktrace.SpanExporter, error) {
	proto, host, path, insecure, err := cfg.target("TRACES")
	if err != nil {
		return nil, err
	}
	if proto == "grpc" {
		var opts []otlptracegrpc.Option
		if host != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(host))
			if insecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		e, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		return e, nil
	}
	var opts []otlptracehttp.Option
	if host != "" {
		opts = append(opts, otlptracehttp.WithEndpoint(host), otlptracehttp.WithURLPath(path+"/v1/traces"))
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	e, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	return e, nil
}

// metricExporter is the OTLP exporter of metrics that cfg names.
func metricExporter(ctx context.Context, cfg *Config) (sdkmetric.Exporter, error) {
	proto, host, path, insecure, err := cfg.target("METRICS")
	if err != nil {
		return nil, err
	}
	if proto == "grpc" {
		var opts []otlpmetricgrpc.Option
		if host != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpoint(host))
			if insecure {
				opts = append(opts, otlpmetricgrpc.WithInsecure())
			}
		}
		e, err := otlpmetricgrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
		return e, nil
	}
	var opts []otlpmetrichttp.Option
	if host != "" {
		opts = append(opts, otlpmetrichttp.WithEndpoint(host), otlpmetrichttp.WithURLPath(path+"/v1/metrics"))
		if insecure {
			opts = append(opts, otlpmetrichttp.WithInsecure())
		}
	}
	e, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp metric exporter: %w", err)
	}
	return e, nil
}
