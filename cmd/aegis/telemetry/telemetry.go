// Package telemetry is the thin shell that exports aegis's metrics and
// traces with the OpenTelemetry SDK: over OTLP (gRPC or HTTP) to a
// collector, and as a Prometheus page (--metrics-listen). What it exports
// is a fold of the event stream ([projector.Telemetry]); this package only
// feeds that fold from the store and hands its observations to the SDK.
//
// Invariants:
//   - Nothing on the relay's path waits for an exporter. The fold reads
//     the store's commits through a [events.CommitTap] from a goroutine of
//     its own, after they were acknowledged; a call's spans go to a
//     bounded queue that drops (and counts) rather than blocks when it is
//     full, and are encoded and sent from a goroutine of its own;
//     metrics are read by the exporters on their own schedule.
//   - With nothing configured (no --metrics-listen, no --otlp-endpoint,
//     no OTEL_EXPORTER_OTLP_*ENDPOINT), [Start] returns nil and nothing
//     runs: no tap, no goroutine, no SDK.
//   - The standard OTEL_* variables are honoured: the endpoints, headers,
//     protocol (OTEL_EXPORTER_OTLP_PROTOCOL: grpc or http/protobuf, the
//     default), timeouts, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
//     OTEL_SDK_DISABLED, and OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER
//     set to none. --otlp-endpoint overrides the endpoint variables.
//   - The Prometheus page answers only requests whose Host is the address
//     it listens on (the console's check), on loopback unless the user
//     allows another address.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// Config says what to export. The zero value exports nothing.
type Config struct {
	// MetricsListen is the address of the Prometheus page ("" for none);
	// AllowRemote lets it be off loopback.
	MetricsListen string
	AllowRemote   bool
	// OTLPEndpoint is the collector's URL (http://host:4318 for
	// http/protobuf, http://host:4317 for grpc); "" leaves it to the
	// OTEL_EXPORTER_OTLP_* variables.
	OTLPEndpoint string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// Version is aegis's version, the service.version of the resource.
	Version string
	Log     *slog.Logger
	// Every is how often the fold reads the store's commits (250 ms when 0).
	Every time.Duration
}

func (c *Config) getenv(k string) string {
	if c.Getenv == nil {
		return os.Getenv(k)
	}
	return c.Getenv(k)
}

// otlp reports whether traces and metrics go over OTLP.
func (c *Config) otlp() (traces, metrics bool) {
	if strings.EqualFold(c.getenv("OTEL_SDK_DISABLED"), "true") {
		return false, false
	}
	any := c.OTLPEndpoint != "" || c.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	traces = (any || c.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") && c.getenv("OTEL_TRACES_EXPORTER") != "none"
	metrics = (any || c.getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "") && c.getenv("OTEL_METRICS_EXPORTER") != "none"
	return traces, metrics
}

// Enabled reports whether cfg exports anything.
func (c Config) Enabled() bool {
	t, m := c.otlp()
	return c.MetricsListen != "" || t || m
}

// Check refuses a configuration that cannot work, before anything starts.
func (c Config) Check() error {
	if c.MetricsListen != "" {
		if _, err := console.CheckListen(c.MetricsListen, c.AllowRemote); err != nil {
			return fmt.Errorf("--metrics-%s", strings.TrimPrefix(err.Error(), "--"))
		}
	}
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--otlp-endpoint %q: want a URL such as http://127.0.0.1:4318", c.OTLPEndpoint)
		}
	}
	if _, err := c.protocol("TRACES"); err != nil {
		return err
	}
	_, err := c.protocol("METRICS")
	return err
}

// protocol is the OTLP protocol of one signal: grpc or http/protobuf.
func (c *Config) protocol(signal string) (string, error) {
	p := c.getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	if p == "" {
		p = c.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: aegis exports over grpc or http/protobuf", p)
}

// Exporter runs the export of one process.
type Exporter struct {
	cfg    Config
	log    *slog.Logger
	store  *events.Store
	tap    *events.CommitTap
	fold   *projector.Telemetry
	inst   *instruments
	queue  *spanQueue
	mp     *sdkmetric.MeterProvider
	srv    *http.Server
	addr   net.Addr
	stop   chan struct{}
	done   chan struct{}
	sink   *sink
	mu     sync.Mutex // the fold, the sink and pos
	pos    events.Position
	closed bool
}

// Start begins exporting what store commits from now on. It returns nil
// (and starts nothing) when cfg exports nothing.
func Start(ctx context.Context, store *events.Store, cfg Config) (*Exporter, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Every <= 0 {
		cfg.Every = 250 * time.Millisecond
	}
	x := &Exporter{cfg: cfg, log: cfg.Log, store: store, fold: projector.NewTelemetry(), stop: make(chan struct{}), done: make(chan struct{})}
	res, err := Resource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	traces, metrics := cfg.otlp()
	var readers []sdkmetric.Option
	var reg *prometheus.Registry
	if cfg.MetricsListen != "" {
		reg = prometheus.NewRegistry()
		pe, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(pe))
	}
	if metrics {
		me, err := metricExporter(ctx, &cfg)
		if err != nil {
			return nil, err
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me)))
	}
	x.mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res), sdkmetric.WithView(bucketViews()...))...)
	if x.inst, err = newInstruments(x.mp.Meter("github.com/aegis-dev/aegis"), store); err != nil {
		x.mp.Shutdown(ctx)
		return nil, err
	}
	if traces {
		sp, err := NewSpans(ctx, &cfg, res)
		if err != nil {
			x.mp.Shutdown(ctx)
			return nil, err
		}
		x.queue = newSpanQueue(sp, &cfg, x.log, func(n int) { x.inst.spansDropped.Add(context.Background(), int64(n)) })
	}
	if cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			x.shutdown(ctx)
			return nil, fmt.Errorf("--metrics-listen %s: %w", cfg.MetricsListen, err)
		}
		x.addr = ln.Addr()
		hosts := console.ListenHosts(ln.Addr())
		if h, _, _ := net.SplitHostPort(cfg.MetricsListen); net.ParseIP(h) == nil && !strings.EqualFold(h, "localhost") {
			hosts = append(hosts, net.JoinHostPort(h, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
		}
		x.srv = &http.Server{Handler: metricsHandler(hosts, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), ReadHeaderTimeout: 5 * time.Second}
		go x.srv.Serve(ln)
	}
	x.tap = store.TapCommits()
	last, err := store.LastSeq(ctx)
	if err != nil {
		x.tap.Close()
		x.shutdown(ctx)
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	x.pos = events.Position{Seq: last + 1}
	go x.run()
	return x, nil
}

// Addr is the address the Prometheus page listens on (nil without one).
func (x *Exporter) Addr() net.Addr {
	if x == nil {
		return nil
	}
	return x.addr
}

// metricsHandler serves /metrics to requests whose Host is one of hosts.
func metricsHandler(hosts []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !console.HostAllowed(hosts, r.Host) {
			http.Error(w, fmt.Sprintf("aegis metrics: refused: Host %q is not the address this page listens on (%s)", r.Host, hosts[0]), http.StatusForbidden)
			return
		}
		if r.URL.Path != "/metrics" {
			http.Error(w, "aegis metrics: the page is /metrics", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// run folds the store's commits every cfg.Every until Close.
func (x *Exporter) run() {
	defer close(x.done)
	t := time.NewTicker(x.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
			x.drain(context.Background())
		}
	}
}

// drain folds what was committed since the last drain: from the tap, and
// from the stream what the tap does not hold (another process's messages,
// or more than the tap keeps).
func (x *Exporter) drain(ctx context.Context) {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := x.out()
	apply := func(r events.Record) error {
		x.fold.Apply(projector.TelemetryEvent{Seq: r.Pos.Seq, Stored: r.Acked, Event: r.Event}, out)
		x.pos = events.Position{Seq: r.Pos.Seq + 1}
		return nil
	}
	next, err := x.tap.Replay(ctx, x.pos, apply)
	if err != nil {
		x.log.Warn("telemetry: read the commits", "err", err)
		return
	}
	x.pos = next
	// Only what the tap will not hand out is read from the stream: a
	// message another process published, or more than the tap keeps. A
	// commit in flight is not such a message (Rest waits for it, and the
	// next drain takes it from the tap): with calls in flight there is
	// nearly always one, and reading it back through a consumer of the
	// stream cost about as much CPU as the commits themselves.
	rest, err := x.tap.Rest(ctx, x.pos)
	if err != nil {
		x.log.Warn("telemetry: read the stream's end", "err", err)
	}
	if err != nil || !rest {
		x.fold.Flush(out)
		return
	}
	last, err := x.store.LastSeq(ctx)
	if err != nil || last < x.pos.Seq {
		x.fold.Flush(out)
		return
	}
	// The stream holds messages the tap does not: fold them too (without
	// their acknowledgement times, which only the tap knows: no commit
	// is counted or timed for them).
	err = x.store.Replay(ctx, x.pos, func(r events.Record) error {
		if r.Pos.Seq > last {
			return errStop
		}
		return apply(r)
	})
	if err != nil && !errors.Is(err, errStop) {
		x.log.Warn("telemetry: read the stream", "err", err)
	}
	x.fold.Flush(out)
}

var errStop = errors.New("stop")

// Close folds what is left, exports it and stops. It waits at most until
// ctx is done for the exporters.
func (x *Exporter) Close(ctx context.Context) error {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil
	}
	x.closed = true
	x.mu.Unlock()
	close(x.stop)
	<-x.done
	x.drain(ctx)
	x.tap.Close()
	return x.shutdown(ctx)
}

func (x *Exporter) shutdown(ctx context.Context) error {
	var errs []error
	if x.srv != nil {
		x.srv.Close()
	}
	if x.queue != nil {
		errs = append(errs, x.queue.close(ctx))
	}
	if x.mp != nil {
		errs = append(errs, x.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// out is the fold's sink: the instruments and the span processor.
func (x *Exporter) out() projector.TelemetryOut {
	if x.sink == nil {
		x.sink = &sink{inst: x.inst, queue: x.queue, sets: map[callLabels]*callSets{}}
	}
	return x.sink
}

type sink struct {
	inst  *instruments
	queue *spanQueue
	// sets caches the attribute sets of each label combination: the
	// labels are bounded, and building a set sorts and allocates.
	sets map[callLabels]*callSets
}

type callLabels struct{ server, tool, verdict, reason string }

// callSets are a label combination's options, as the slices the
// instruments take (passing one option alone would allocate its slice
// at every measurement).
type callSets struct {
	calls, refusals []metric.AddOption
	op              []metric.RecordOption
}

func (s *sink) setsOf(c projector.CallSpan) *callSets {
	k := callLabels{c.Server, c.Tool, c.Verdict, c.Reason}
	if cs := s.sets[k]; cs != nil {
		return cs
	}
	cs := &callSets{
		calls: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("aegis.server", c.Server), attribute.String("gen_ai.tool.name", c.Tool),
			attribute.String("aegis.verdict", c.Verdict)))},
		refusals: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("aegis.server", c.Server), attribute.String("aegis.refusal.reason", c.Reason)))},
	}
	op := []attribute.KeyValue{attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", c.Tool), attribute.String("aegis.server", c.Server)}
	if et := errorType(c); et != "" {
		op = append(op, attribute.String("error.type", et))
	}
	cs.op = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(op...))}
	s.sets[k] = cs
	return cs
}

func (s *sink) Call(c projector.CallSpan) {
	ctx := context.Background()
	i := s.inst
	cs := s.setsOf(c)
	i.calls.Add(ctx, 1, cs.calls...)
	if c.Reason != "" {
		i.refusals.Add(ctx, 1, cs.refusals...)
	}
	if !c.Unfinished {
		i.through.Record(ctx, c.End.Sub(c.Start).Seconds(), cs.op...)
	}
	if c.AtServer != nil {
		i.atServer.Record(ctx, c.AtServer.Seconds(), cs.op...)
	}
	if s.queue != nil {
		s.queue.add(c)
	}
}

func (s *sink) ApprovalRequested() { s.inst.pending.Add(context.Background(), 1) }

func (s *sink) ApprovalDecided(verdict string, wait time.Duration) {
	ctx := context.Background()
	s.inst.pending.Add(ctx, -1)
	a := metric.WithAttributes(attribute.String("aegis.approval.verdict", verdict))
	s.inst.decided.Add(ctx, 1, a)
	if wait > 0 {
		s.inst.wait.Record(ctx, wait.Seconds(), a)
	}
}

func (s *sink) Commit(d time.Duration) {
	ctx := context.Background()
	s.inst.commits.Add(ctx, 1)
	s.inst.commitLatency.Record(ctx, d.Seconds())
}

func (s *sink) PinChanged() { s.inst.pins.Add(context.Background(), 1) }

func (s *sink) SessionOpened(http bool) {
	s.inst.sessions.Add(context.Background(), 1, transport(http))
}

func (s *sink) SessionClosed(http bool, ended string) {
	s.inst.sessions.Add(context.Background(), -1, transport(http))
	if http {
		s.inst.httpClosed.Add(context.Background(), 1, metric.WithAttributes(attribute.String("aegis.http.session.ended", ended)))
	}
}

func transport(http bool) metric.AddOption {
	if http {
		return metric.WithAttributes(attribute.String("network.transport", "tcp"), attribute.String("aegis.front", "http"))
	}
	return metric.WithAttributes(attribute.String("network.transport", "pipe"), attribute.String("aegis.front", "stdio"))
}

// errorType is the error.type of a call's duration: the refusal reason,
// or "failed" for a call that ran and failed.
func errorType(c projector.CallSpan) string {
	switch {
	case c.Reason != "":
		return c.Reason
	case c.Verdict == projector.CallFailed:
		return "tool_error"
	case c.Unfinished:
		return projector.CallUnfinished
	}
	return ""
}
