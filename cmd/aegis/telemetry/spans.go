package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
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

// spanClient is the OTLP client of spans that cfg names (not started).
func spanClient(cfg *Config) (otlptrace.Client, error) {
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
		return otlptracegrpc.NewClient(opts...), nil
	}
	var opts []otlptracehttp.Option
	if host != "" {
		opts = append(opts, otlptracehttp.WithEndpoint(host), otlptracehttp.WithURLPath(path+"/v1/traces"))
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	return otlptracehttp.NewClient(opts...), nil
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
