package telemetry

import (
	"context"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/aegis-dev/aegis/events"
)

// instruments are the metrics of docs/telemetry.md.
type instruments struct {
	calls, refusals, decided, commits, pins, httpClosed metric.Int64Counter
	spansDropped                                        metric.Int64Counter
	pending, sessions                                   metric.Int64UpDownCounter
	through, atServer, wait, commitLatency              metric.Float64Histogram
}

// Histogram bounds, in seconds: calls and commits from half a
// millisecond, approval waits up to an hour.
var (
	callBounds     = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	approvalBounds = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}
)

func bucketViews() []sdkmetric.View {
	v := func(name string, b []float64) sdkmetric.View {
		return sdkmetric.NewView(sdkmetric.Instrument{Name: name}, sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: b}})
	}
	return []sdkmetric.View{
		v("mcp.server.operation.duration", callBounds),
		v("mcp.client.operation.duration", callBounds),
		v("aegis.store.commit.duration", callBounds),
		v("aegis.approval.wait.duration", approvalBounds),
	}
}

func newInstruments(m metric.Meter, store *events.Store) (*instruments, error) {
	i := &instruments{}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	updown := func(name, unit, desc string) metric.Int64UpDownCounter {
		if err != nil {
			return nil
		}
		var c metric.Int64UpDownCounter
		c, err = m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	hist := func(name, desc string) metric.Float64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Float64Histogram
		h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		return h
	}
	i.calls = counter("aegis.calls", "{call}", "tools/call requests recorded, by server, tool and verdict")
	i.refusals = counter("aegis.refusals", "{call}", "tools/call requests refused, by server and reason")
	i.decided = counter("aegis.approvals.decided", "{approval}", "approvals decided, by verdict (approved, denied, expired, abandoned)")
	i.pending = updown("aegis.approvals.pending", "{approval}", "approvals requested and not yet decided")
	i.wait = hist("aegis.approval.wait.duration", "time from an approval's request to its decision")
	i.through = hist("mcp.server.operation.duration", "tools/call duration through aegis: from its intent to its recorded outcome")
	i.atServer = hist("mcp.client.operation.duration", "tools/call duration at the server, as the outcome's wall_ms records it")
	i.commits = counter("aegis.store.commits", "{commit}", "durable commits of the event store (one fsync each)")
	i.commitLatency = hist("aegis.store.commit.duration", "from the first event of a commit being queued to its durable acknowledgement")
	i.pins = counter("aegis.pins.changed", "{tool}", "tool definitions that changed from their pin (tool.changed events)")
	i.sessions = updown("aegis.sessions.open", "{session}", "recording sessions open, by front (stdio, http)")
	i.httpClosed = counter("aegis.http.sessions.closed", "{session}", "HTTP client sessions of gateway --listen that ended, by why (deleted, evicted, idle, shutdown, other)")
	i.spansDropped = counter("aegis.telemetry.spans.dropped", "{span}", "spans not exported because the export's queue was full")
	if err != nil {
		return nil, err
	}
	size, err := m.Int64ObservableGauge("aegis.store.size", metric.WithUnit("By"), metric.WithDescription("bytes the event stream holds"))
	if err != nil {
		return nil, err
	}
	msgs, err := m.Int64ObservableGauge("aegis.store.messages", metric.WithUnit("{message}"), metric.WithDescription("the stream's last sequence"))
	if err != nil {
		return nil, err
	}
	rss, err := m.Int64ObservableGauge("process.memory.usage", metric.WithUnit("By"), metric.WithDescription("resident set size of the aegis process"))
	if err != nil {
		return nil, err
	}
	fds, err := m.Int64ObservableGauge("process.open_fds", metric.WithUnit("{file_descriptor}"), metric.WithDescription("open file descriptors of the aegis process"))
	if err != nil {
		return nil, err
	}
	lag, err := m.Int64ObservableGauge("aegis.hub.mirror.lag", metric.WithUnit("{message}"),
		metric.WithDescription("messages of this host's stream that the hub's mirror is not known to hold, by host (a process linked to a hub)"))
	if err != nil {
		return nil, err
	}
	behind, err := m.Float64ObservableGauge("aegis.hub.mirror.behind", metric.WithUnit("s"),
		metric.WithDescription("how long ago the first message the hub's mirror lacks was stored, by host (0 when it lacks none)"))
	if err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if n, err := store.StoredBytes(ctx); err == nil {
			o.ObserveInt64(size, int64(n))
		}
		if n, err := store.LastSeq(ctx); err == nil {
			o.ObserveInt64(msgs, int64(n))
		}
		if n, ok := residentBytes(); ok {
			o.ObserveInt64(rss, n)
		}
		if n, ok := openFDs(); ok {
			o.ObserveInt64(fds, n)
		}
		if l, ok, err := store.MirrorLag(ctx); ok && err == nil {
			// Read at a collection, off the relay's path.
			hostSet := metric.WithAttributeSet(attribute.NewSet(attribute.String("aegis.host", l.Host)))
			o.ObserveInt64(lag, int64(l.Messages), hostSet)
			o.ObserveFloat64(behind, l.Behind.Seconds(), hostSet)
		}
		return nil
	}, size, msgs, rss, fds, lag, behind)
	return i, err
}

// residentBytes reads the process's resident set size (Linux).
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs() (int64, bool) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	return int64(len(names)) - 1, true // less the one reading it
}
