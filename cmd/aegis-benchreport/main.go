// Command aegis-benchreport reads the JSON that make bench writes (the
// benchmarks of ./events, ./proxy and ./cmd/aegis merge their figures into
// the file named by AEGIS_BENCH_JSON) and prints the performance goals P1–P6,
// M1, S1–S5 and F1–F2 with each figure, its goal, and whether it is met.
//
// Usage:
//
//	aegis-benchreport [-json | -md] [-update FILE] [-svg FILE] RUN.json…
//
// It prints a plain table to stdout: with one file that run's figures; with
// several (runs of make bench on the same machine) the min, median and max
// of each, the goal judged on the median.
//
//	-json         print the goals, the figures and the in-flight sweep as JSON
//	-md           print markdown (machine, goals, context, sweep) for docs
//	-update FILE  replace what FILE holds between the lines
//	              <!-- benchreport:begin --> and <!-- benchreport:end -->
//	              with the -md output
//	-svg FILE     write the plot of latency and calls/s against calls in
//	              flight (BenchmarkWrapInflight) as SVG
//
// Exit status: 0 when it could read every file (met or not), 1 on an error,
// 2 on a usage error.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/aegis-dev/aegis/cmd/aegis-benchreport/benchjson"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "aegis-benchreport: error:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aegis-benchreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	asMD := fs.Bool("md", false, "print markdown")
	update := fs.String("update", "", "replace the marked section of this markdown file")
	svg := fs.String("svg", "", "write the latency-vs-in-flight plot to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: aegis-benchreport [-json | -md] [-update FILE] [-svg FILE] RUN.json…")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageError{"no JSON file given"}
	}
	if *asJSON && *asMD {
		return usageError{"-json and -md exclude each other"}
	}
	var runs []*benchRun
	for _, path := range fs.Args() {
		r, err := loadRun(path)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	rep := buildReport(runs)
	if *svg != "" {
		if err := os.WriteFile(*svg, plotSVG(rep), 0o644); err != nil {
			return err
		}
	}
	if *update != "" {
		if err := updateFile(*update, markdown(rep)); err != nil {
			return err
		}
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case *asMD:
		_, err := io.WriteString(stdout, markdown(rep))
		return err
	}
	_, err := io.WriteString(stdout, text(rep))
	return err
}

// benchRun is one JSON file: one run of make bench.
type benchRun struct {
	path    string
	env     map[string]any
	benches map[string]json.RawMessage
}

func loadRun(path string) (*benchRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var top struct {
		Env        map[string]any             `json:"env"`
		Benchmarks map[string]json.RawMessage `json:"benchmarks"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &benchRun{path: path, env: top.Env, benches: top.Benchmarks}, nil
}

// metric returns the number bench/key of the run, if it is there.
func (r *benchRun) metric(bench, key string) (float64, bool) {
	raw, ok := r.benches[bench]
	if !ok {
		return 0, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return 0, false
	}
	var v float64
	if json.Unmarshal(m[key], &v) != nil {
		return 0, false
	}
	return v, true
}

// figure is one number the report shows: a goal (Goal set) or context.
type figure struct {
	ID    string `json:"id,omitempty"` // P1…P6, M1 for goals
	What  string `json:"what"`
	Unit  string `json:"unit"`
	Bench string `json:"bench"`
	Key   string `json:"key"`
	// Goal is "<= X" or ">= X"; empty for context figures.
	Cmp       string  `json:"cmp,omitempty"`
	Limit     float64 `json:"limit,omitempty"`
	LimitText string  `json:"limit_text,omitempty"` // how to print Limit, if not plainly

	Values  []float64 `json:"values"` // one per run that has it
	Min     float64   `json:"min"`
	Median  float64   `json:"median"`
	Max     float64   `json:"max"`
	Met     *bool     `json:"met,omitempty"` // judged on the median
	MetRuns int       `json:"met_runs"`      // runs whose own value met the goal
}

func (f *figure) meets(v float64) bool {
	if f.Cmp == "<=" {
		return v <= f.Limit
	}
	return v >= f.Limit
}

// The goals, as the issue states them: differences and ratios measured in
// one run on the same disk.
var goalSpecs = []figure{
	{ID: "P1", What: "recorded tools/call − direct call − 2 × bare fsync", Unit: "µs", Bench: "BenchmarkWrap", Key: "call-overhead-minus-2fsync-µs", Cmp: "<=", Limit: 200},
	{ID: "P2", What: "relayed non-call frame (ping) through aegis − through a bare pipe relay", Unit: "µs", Bench: "BenchmarkWrap", Key: "frame-overhead-µs", Cmp: "<=", Limit: 25},
	{ID: "P3", What: "recorded calls/s, 64 in flight ÷ sequential", Unit: "×", Bench: "BenchmarkWrapConcurrent", Key: "inflight64/inflight1", Cmp: ">=", Limit: 4},
	{ID: "P4", What: "start to first initialize answer, aegis wrap − direct", Unit: "ms", Bench: "BenchmarkWrapStartup", Key: "startup-overhead-ms", Cmp: "<=", Limit: 30},
	{ID: "P5", What: "VmRSS of an idle aegis wrap with its embedded server", Unit: "MiB", Bench: "BenchmarkWrapIdleRSS", Key: "idle-rss-MiB", Cmp: "<=", Limit: 32e6 / (1 << 20), LimitText: "32 MB = 30.5 MiB"},
	{ID: "P6", What: "aegis export (rebuild), record lines/s", Unit: "lines/s", Bench: "BenchmarkExportVerify", Key: "export-lines/s", Cmp: ">=", Limit: 50000},
	{ID: "P6", What: "aegis verify, record lines/s", Unit: "lines/s", Bench: "BenchmarkExportVerify", Key: "verify-lines/s", Cmp: ">=", Limit: 50000},
	{ID: "M1", What: "peak VmRSS of aegis wrap under a 60 s flood of 16 MiB frames", Unit: "MiB", Bench: "BenchmarkWrapFloodRSS", Key: "flood-peak-rss-MiB", Cmp: "<=", Limit: 256},
	{ID: "S1", What: "start to first initialize answer, new record: big store − small store", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-new-diff-ms", Cmp: "<=", Limit: 50},
	{ID: "S2", What: "the same, continuing the store's record (catch-up)", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-cont-diff-ms", Cmp: "<=", Limit: 50},
	{ID: "S2", What: "the same, first start after a clean session of a third of the calls", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-after-clean-diff-ms", Cmp: "<=", Limit: 50},
	{ID: "S2", What: "the same, first start after an unclean stop (catches up the killed session)", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-after-kill-diff-ms", Cmp: "<=", Limit: 50},
	{ID: "S3", What: "peak RSS of catch-up (aegis wrap continuing the big store's record)", Unit: "MiB", Bench: "BenchmarkScale", Key: "catchup-rss-MiB", Cmp: "<=", Limit: 256},
	{ID: "S3", What: "peak RSS of aegis export of the big store", Unit: "MiB", Bench: "BenchmarkScale", Key: "export-rss-MiB", Cmp: "<=", Limit: 256},
	{ID: "S3", What: "peak RSS of aegis verify of the big store's record", Unit: "MiB", Bench: "BenchmarkScale", Key: "verify-rss-MiB", Cmp: "<=", Limit: 256},
	{ID: "S3", What: "peak RSS of aegis sessions on the big store", Unit: "MiB", Bench: "BenchmarkScale", Key: "sessions-rss-MiB", Cmp: "<=", Limit: 256},
	{ID: "S4", What: "aegis sessions on the big store, wall time", Unit: "s", Bench: "BenchmarkScale", Key: "sessions-s", Cmp: "<=", Limit: 1},
	{ID: "S5", What: "after aegis rotate of the big store: first start after an unclean stop − small store", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-after-rotate-kill-diff-ms", Cmp: "<=", Limit: 50},
	{ID: "S5", What: "peak RSS of aegis rotate of the big store", Unit: "MiB", Bench: "BenchmarkScale", Key: "rotate-rss-MiB", Cmp: "<=", Limit: 256},
	{ID: "P7", What: "CPU of the aegis process per relayed non-call frame (ping)", Unit: "µs", Bench: "BenchmarkWrap", Key: "wrap-ping-aegis-cpu-µs", Cmp: "<=", Limit: 40},
	{ID: "P8", What: "CPU of the aegis process per recorded call, 1 in flight", Unit: "µs", Bench: "BenchmarkWrapConcurrent", Key: "inflight1-aegis-cpu-µs", Cmp: "<=", Limit: 400},
	{ID: "P8", What: "CPU of the aegis process per recorded call, 64 in flight", Unit: "µs", Bench: "BenchmarkWrapConcurrent", Key: "inflight64-aegis-cpu-µs", Cmp: "<=", Limit: 120},
	{ID: "P9", What: "recorded calls/s at 64 in flight ÷ the example server alone, one connection each", Unit: "×", Bench: "BenchmarkWrapConcurrent", Key: "inflight64/direct-inflight64", Cmp: ">=", Limit: 0.85},
	{ID: "P10", What: "recorded call through aegis gateway − through aegis wrap (p50s)", Unit: "µs", Bench: "BenchmarkGateway", Key: "gateway-minus-wrap-µs", Cmp: "<=", Limit: 150},
	{ID: "H1", What: "recorded calls/s, 64 in flight: aegis gateway --listen (4 HTTP sessions × 16, go-sdk clients) ÷ aegis wrap over stdio (one connection, same run)", Unit: "×", Bench: "BenchmarkGatewayHTTPInflight", Key: "http/wrap-inflight64", Cmp: ">=", Limit: 0.5},
	{ID: "F1", What: "fleet: local ack to the hub's mirror, p99, 1 leaf at up to 1000 events/s", Unit: "ms", Bench: "BenchmarkHubMirror/leaves=1", Key: "lag-p99-ms", Cmp: "<=", Limit: 250},
	{ID: "F1", What: "the same, 4 leaves at up to 1000 events/s each", Unit: "ms", Bench: "BenchmarkHubMirror/leaves=4", Key: "lag-p99-ms", Cmp: "<=", Limit: 250},
	{ID: "F1", What: "the same, 3 leaves at 200 events/s each", Unit: "ms", Bench: "BenchmarkHubMirror/leaves=3-at-200", Key: "lag-p99-ms", Cmp: "<=", Limit: 250},
	{ID: "F2", What: "fleet: durable append (a call's wait) on a store linked to a hub − on one without (p50s)", Unit: "µs", Bench: "BenchmarkHubCallCost", Key: "hub-minus-alone-µs", Cmp: "<=", Limit: 50},
}

// The figures behind the goals, and the ones docs/BENCHMARKS.md compares.
var contextSpecs = []figure{
	{What: "tools/call echo, direct, p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "direct-p50-µs"},
	{What: "tools/call echo through aegis wrap (recorded), p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "wrap-call-p50-µs"},
	{What: "2 × bare write+fsync of 300 B, p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "fsync2-p50-µs"},
	{What: "recorded call ÷ 2 fsyncs (p50s)", Unit: "×", Bench: "BenchmarkWrap", Key: "wrap-call/fsync2"},
	{What: "tools/call echo through a bare relay that appends and fsyncs 300 B per line, p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "pipe-rec-p50-µs"},
	{What: "… that relay − direct call − 2 × bare fsync (P1's formula applied to it)", Unit: "µs", Bench: "BenchmarkWrap", Key: "recording-floor-minus-2fsync-µs"},
	{What: "recorded call through aegis wrap − through that relay", Unit: "µs", Bench: "BenchmarkWrap", Key: "call-overhead-beyond-recording-µs"},
	{What: "tools/call echo through a bare relay that appends a 1 KB event to its own embedded JetStream per line, p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "pipe-js-p50-µs"},
	{What: "… that relay − direct call − 2 × bare fsync", Unit: "µs", Bench: "BenchmarkWrap", Key: "jetstream-floor-minus-2fsync-µs"},
	{What: "CPU of that relay per call, sequential (the floor of P8 with 1 in flight)", Unit: "µs", Bench: "BenchmarkWrap", Key: "pipe-js-relay-cpu-µs"},
	{What: "recorded call through aegis wrap − through that relay", Unit: "µs", Bench: "BenchmarkWrap", Key: "call-overhead-beyond-jetstream-µs"},
	{What: "commits a recorded call waits for", Unit: "", Bench: "BenchmarkWrap", Key: "commits/call"},
	{What: "CPU of the aegis process per recorded call, sequential (user+sys)", Unit: "µs", Bench: "BenchmarkWrap", Key: "wrap-call-aegis-cpu-µs"},
	{What: "… of which in the kernel (sys)", Unit: "µs", Bench: "BenchmarkWrap", Key: "wrap-call-aegis-sys-µs"},
	{What: "ping through a bare pipe relay, p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "pipe-ping-p50-µs"},
	{What: "ping through aegis wrap (relayed non-call frame), p50", Unit: "µs", Bench: "BenchmarkWrap", Key: "wrap-ping-p50-µs"},
	{What: "CPU of a bare pipe relay per relayed ping (the floor of P7)", Unit: "µs", Bench: "BenchmarkWrap", Key: "pipe-ping-relay-cpu-µs"},
	{What: "recorded calls/s, 1 in flight", Unit: "calls/s", Bench: "BenchmarkWrapConcurrent", Key: "inflight1-calls/s"},
	{What: "recorded calls/s, 64 in flight", Unit: "calls/s", Bench: "BenchmarkWrapConcurrent", Key: "inflight64-calls/s"},
	{What: "tools/call echo/s to the example server alone, 64 in flight (same run)", Unit: "calls/s", Bench: "BenchmarkWrapConcurrent", Key: "direct-inflight64-calls/s"},
	{What: "CPU of the aegis process per recorded call, 1 in flight", Unit: "µs", Bench: "BenchmarkWrapConcurrent", Key: "inflight1-aegis-cpu-µs"},
	{What: "CPU of the aegis process per recorded call, 64 in flight", Unit: "µs", Bench: "BenchmarkWrapConcurrent", Key: "inflight64-aegis-cpu-µs"},
	{What: "exporting telemetry (OTLP + /metrics) ÷ not: sequential recorded call, p50 (P1's measure)", Unit: "×", Bench: "BenchmarkWrapTelemetry", Key: "exporting/plain-p50"},
	{What: "exporting telemetry ÷ not: aegis CPU per recorded call, 1 in flight (P8's measure)", Unit: "×", Bench: "BenchmarkWrapTelemetry", Key: "exporting/plain-inflight1-cpu"},
	{What: "exporting telemetry ÷ not: aegis CPU per recorded call, 64 in flight (P8's measure)", Unit: "×", Bench: "BenchmarkWrapTelemetry", Key: "exporting/plain-inflight64-cpu"},
	{What: "the control: a second plain wrap ÷ the first, aegis CPU per recorded call, 64 in flight (the run's noise)", Unit: "×", Bench: "BenchmarkWrapTelemetry", Key: "control/plain-inflight64-cpu"},
	{What: "start to initialize answer, direct, p50", Unit: "ms", Bench: "BenchmarkWrapStartup", Key: "direct-p50-ms"},
	{What: "start to initialize answer, aegis wrap, p50", Unit: "ms", Bench: "BenchmarkWrapStartup", Key: "wrap-p50-ms"},
	{What: "the same on a new state directory, p50", Unit: "ms", Bench: "BenchmarkWrapStartup", Key: "wrap-fresh-p50-ms"},
	{What: "the same on a state directory holding the P6 record", Unit: "ms", Bench: "BenchmarkExportVerify", Key: "startup-after-record-p50-ms"},
	{What: "VmRSS of the wrapped example server (not counted in P5)", Unit: "MiB", Bench: "BenchmarkWrapIdleRSS", Key: "server-rss-MiB"},
	{What: "VmRSS of aegis wrap after 2000 calls, then idle", Unit: "MiB", Bench: "BenchmarkWrapIdleRSS", Key: "loaded-rss-MiB"},
	{What: "16 MiB frames relayed and recorded in the M1 flood", Unit: "MiB/s", Bench: "BenchmarkWrapFloodRSS", Key: "flood-MiB/s"},
	{What: "lines in the P6 record", Unit: "lines", Bench: "BenchmarkExportVerify", Key: "record-lines"},
	{What: "aegis export, median run", Unit: "s", Bench: "BenchmarkExportVerify", Key: "export-p50-s"},
	{What: "aegis verify, median run", Unit: "s", Bench: "BenchmarkExportVerify", Key: "verify-p50-s"},
	{What: "events: durable Append ÷ bare fsync (p50s)", Unit: "×", Bench: "BenchmarkAppendVsFsync", Key: "append/fsync-p50"},
	{What: "events: durable Append − bare fsync (p50s), back to back", Unit: "µs", Bench: "BenchmarkAppendVsFsync", Key: "append-minus-fsync-µs"},
	{What: "… the same, each started after a 300 µs idle wait, as a relay's commit is", Unit: "µs", Bench: "BenchmarkAppendVsFsync", Key: "idle-append-minus-fsync-µs"},
	{What: "events: bare fsync started after a 300 µs idle wait − one back to back (p50s)", Unit: "µs", Bench: "BenchmarkAppendVsFsync", Key: "idle-fsync-minus-fsync-µs"},
	{What: "events: durable appends/s, 64 appenders", Unit: "events/s", Bench: "BenchmarkAppendConcurrent/appenders=64", Key: "events/s"},
	{What: "events: events per commit, 64 appenders", Unit: "", Bench: "BenchmarkAppendConcurrent/appenders=64", Key: "events/commit"},
	{What: "fleet: local ack to the hub's mirror, p50, 1 leaf", Unit: "ms", Bench: "BenchmarkHubMirror/leaves=1", Key: "lag-p50-ms"},
	{What: "fleet: events/s acked, 1 leaf loaded at up to 1000/s", Unit: "events/s", Bench: "BenchmarkHubMirror/leaves=1", Key: "acked-events/s/leaf"},
	{What: "fleet: stream messages/s mirrored (an event or a batch each), 1 leaf", Unit: "msgs/s", Bench: "BenchmarkHubMirror/leaves=1", Key: "mirrored-events/s/leaf"},
	{What: "fleet: local ack to the hub's mirror, p50, 4 leaves", Unit: "ms", Bench: "BenchmarkHubMirror/leaves=4", Key: "lag-p50-ms"},
	{What: "fleet: events/s acked per leaf, 4 leaves loaded at up to 1000/s each", Unit: "events/s", Bench: "BenchmarkHubMirror/leaves=4", Key: "acked-events/s/leaf"},
	{What: "fleet: stream messages/s mirrored per leaf, 4 leaves", Unit: "msgs/s", Bench: "BenchmarkHubMirror/leaves=4", Key: "mirrored-events/s/leaf"},
	{What: "fleet: local ack to the hub's mirror, worst, 3 leaves at 200 events/s", Unit: "ms", Bench: "BenchmarkHubMirror/leaves=3-at-200", Key: "lag-max-ms"},
	{What: "fleet: cores the hub's three nodes kept busy, 3 leaves at 200 events/s", Unit: "cores", Bench: "BenchmarkHubMirror/leaves=3-at-200", Key: "hub-cores"},
	{What: "fleet: durable append p50, store linked to a hub", Unit: "µs", Bench: "BenchmarkHubCallCost", Key: "hub-append-p50-µs"},
	{What: "fleet: durable append p50, store without a hub (same run)", Unit: "µs", Bench: "BenchmarkHubCallCost", Key: "alone-append-p50-µs"},
	{What: "gateway: recorded tools/call through aegis gateway, p50", Unit: "µs", Bench: "BenchmarkGateway", Key: "gateway-call-p50-µs"},
	{What: "gateway: the same call through aegis wrap on the same server, p50 (same run)", Unit: "µs", Bench: "BenchmarkGateway", Key: "wrap-call-p50-µs"},
	{What: "gateway: recorded call through aegis gateway − through aegis wrap (p50s)", Unit: "µs", Bench: "BenchmarkGateway", Key: "gateway-minus-wrap-µs"},
	{What: "gateway HTTP: recorded tools/call through aegis gateway --listen (go-sdk client), p50", Unit: "µs", Bench: "BenchmarkGatewayHTTP", Key: "http-call-p50-µs"},
	{What: "gateway HTTP: the same call through the stdio front (go-sdk client), p50 (same run)", Unit: "µs", Bench: "BenchmarkGatewayHTTP", Key: "stdio-call-p50-µs"},
	{What: "gateway HTTP: recorded call over HTTP ÷ over stdio (p50s)", Unit: "×", Bench: "BenchmarkGatewayHTTP", Key: "http-over-stdio"},
	{What: "gateway HTTP: recorded calls/s through aegis gateway --listen, 4 sessions × 16 in flight (go-sdk clients)", Unit: "calls/s", Bench: "BenchmarkGatewayHTTPInflight", Key: "http-inflight64-calls/s"},
	{What: "gateway HTTP: recorded calls/s through aegis wrap over stdio, 64 in flight (raw client, same run)", Unit: "calls/s", Bench: "BenchmarkGatewayHTTPInflight", Key: "wrap-inflight64-calls/s"},
	{What: "gateway HTTP: the same through aegis gateway over stdio (raw client)", Unit: "calls/s", Bench: "BenchmarkGatewayHTTPInflight", Key: "gateway-inflight64-calls/s"},
	{What: "gateway HTTP: the same through aegis wrap, go-sdk client over its pipes", Unit: "calls/s", Bench: "BenchmarkGatewayHTTPInflight", Key: "wrap-sdk-inflight64-calls/s"},
	{What: "gateway HTTP: HTTP ÷ wrap with the go-sdk client on both sides", Unit: "×", Bench: "BenchmarkGatewayHTTPInflight", Key: "http/wrap-sdk-inflight64"},
	{What: "gateway HTTP: CPU of aegis gateway --listen per recorded call, 64 in flight", Unit: "µs", Bench: "BenchmarkGatewayHTTPInflight", Key: "http-inflight64-aegis-cpu-µs"},
	{What: "gateway HTTP: CPU of aegis wrap per recorded call, 64 in flight (same run)", Unit: "µs", Bench: "BenchmarkGatewayHTTPInflight", Key: "wrap-inflight64-aegis-cpu-µs"},
	{What: "scale: calls recorded in the big store (3 sessions, the last killed)", Unit: "calls", Bench: "BenchmarkScale", Key: "calls"},
	{What: "scale: lines of its record", Unit: "lines", Bench: "BenchmarkScale", Key: "record-lines"},
	{What: "scale: size of its record", Unit: "MiB", Bench: "BenchmarkScale", Key: "record-MiB"},
	{What: "scale: size of its state directory", Unit: "MiB", Bench: "BenchmarkScale", Key: "state-MiB"},
	{What: "scale: recorded calls/s while building it (batches of 500, 4 in flight)", Unit: "calls/s", Bench: "BenchmarkScale", Key: "fill-calls/s"},
	{What: "scale: peak RSS of the aegis wrap runs that recorded it", Unit: "MiB", Bench: "BenchmarkScale", Key: "fill-wrap-rss-MiB"},
	{What: "scale: start to initialize answer, new record, big store, p50", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-new-big-ms"},
	{What: "scale: the same, small store (one session of 10 calls), p50", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-new-small-ms"},
	{What: "scale: start to initialize answer, continuing the record, big store, p50", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-cont-big-ms"},
	{What: "scale: the same, small store, p50", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-cont-small-ms"},
	{What: "scale: first start after the clean sessions, big store", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-after-clean-ms"},
	{What: "scale: peak RSS of that start (reads back the last clean session)", Unit: "MiB", Bench: "BenchmarkScale", Key: "catchup-after-clean-rss-MiB"},
	{What: "scale: first start after the unclean stop, big store", Unit: "ms", Bench: "BenchmarkScale", Key: "startup-after-kill-ms"},
	{What: "scale: peak RSS of that first start (catch-up of the killed session)", Unit: "MiB", Bench: "BenchmarkScale", Key: "catchup-after-kill-rss-MiB"},
	{What: "scale: peak RSS of aegis wrap starting on a new record, big store", Unit: "MiB", Bench: "BenchmarkScale", Key: "startup-new-rss-MiB"},
	{What: "scale: aegis export of the big store, wall time", Unit: "s", Bench: "BenchmarkScale", Key: "export-s"},
	{What: "scale: aegis verify of its record, wall time", Unit: "s", Bench: "BenchmarkScale", Key: "verify-s"},
	{What: "scale: peak RSS of the benchmark process (no peak RSS above is reported lower)", Unit: "MiB", Bench: "BenchmarkScale", Key: "rss-floor-MiB"},
	{What: "scale: aegis rotate of the big store", Unit: "s", Bench: "BenchmarkScale", Key: "rotate-s"},
}

// The first seed's published figures, measured on another machine.
const (
	seedCallMS  = 4.371 // per recorded tools/call
	seedFrameUS = 136   // per relayed non-call message
)

// sweepSummary is one configuration and total in flight over the runs.
type sweepSummary struct {
	Config    string  `json:"config"`
	Procs     int     `json:"procs"`
	PerProc   int     `json:"per_proc"`
	InFlight  int     `json:"in_flight"`
	Runs      int     `json:"runs"`
	P50       float64 `json:"p50_us"` // median over runs of each run's p50
	P50Min    float64 `json:"p50_min_us"`
	P50Max    float64 `json:"p50_max_us"`
	P99       float64 `json:"p99_us"`
	CallsPerS float64 `json:"calls_per_s"`
	CPSMin    float64 `json:"calls_per_s_min"`
	CPSMax    float64 `json:"calls_per_s_max"`
}

type report struct {
	Runs    []string         `json:"runs"`
	Env     []map[string]any `json:"env"`
	Goals   []*figure        `json:"goals"`
	Context []*figure        `json:"context"`
	Sweep   []*sweepSummary  `json:"sweep"`
}

func buildReport(runs []*benchRun) *report {
	rep := &report{}
	for _, r := range runs {
		rep.Runs = append(rep.Runs, r.path)
		rep.Env = append(rep.Env, r.env)
	}
	collect := func(specs []figure) []*figure {
		var out []*figure
		for _, spec := range specs {
			f := spec
			f.Values = []float64{}
			for _, r := range runs {
				if v, ok := r.metric(f.Bench, f.Key); ok {
					f.Values = append(f.Values, v)
				}
			}
			if len(f.Values) > 0 {
				f.Min, f.Max, f.Median = slices.Min(f.Values), slices.Max(f.Values), benchjson.Median(f.Values)
				if f.Cmp != "" {
					met := f.meets(f.Median)
					f.Met = &met
					for _, v := range f.Values {
						if f.meets(v) {
							f.MetRuns++
						}
					}
				}
			}
			out = append(out, &f)
		}
		return out
	}
	rep.Goals = collect(goalSpecs)
	rep.Context = collect(contextSpecs)

	type key struct {
		config   string
		inFlight int
	}
	acc := map[key][]benchjson.SweepPoint{}
	var order []key
	for _, r := range runs {
		raw, ok := r.benches["BenchmarkWrapInflight"]
		if !ok {
			continue
		}
		var sw struct {
			Points []benchjson.SweepPoint `json:"points"`
		}
		if json.Unmarshal(raw, &sw) != nil {
			continue
		}
		for _, p := range sw.Points {
			k := key{p.Config, p.InFlight}
			if _, seen := acc[k]; !seen {
				order = append(order, k)
			}
			acc[k] = append(acc[k], p)
		}
	}
	for _, k := range order {
		ps := acc[k]
		var p50, p99, cps []float64
		for _, p := range ps {
			p50, p99, cps = append(p50, p.P50), append(p99, p.P99), append(cps, p.CallsPerS)
		}
		rep.Sweep = append(rep.Sweep, &sweepSummary{
			Config: k.config, Procs: ps[0].Procs, PerProc: ps[0].PerProc, InFlight: k.inFlight, Runs: len(ps),
			P50: benchjson.Median(p50), P50Min: slices.Min(p50), P50Max: slices.Max(p50), P99: benchjson.Median(p99),
			CallsPerS: benchjson.Median(cps), CPSMin: slices.Min(cps), CPSMax: slices.Max(cps),
		})
	}
	return rep
}

// num formats v for a table: thousands grouped with a thin space, few
// decimals.
func num(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 10000:
		s := fmt.Sprintf("%.0f", a)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteString(" ")
			}
			b.WriteRune(c)
		}
		if v < 0 {
			return "−" + b.String()
		}
		return b.String()
	case a >= 100:
		return strings.Replace(fmt.Sprintf("%.0f", v), "-", "−", 1)
	case a >= 10:
		return strings.Replace(fmt.Sprintf("%.1f", v), "-", "−", 1)
	default:
		return strings.Replace(fmt.Sprintf("%.2f", v), "-", "−", 1)
	}
}

func withUnit(v float64, unit string) string {
	switch unit {
	case "":
		return num(v)
	case "×":
		return num(v) + "×"
	}
	return num(v) + " " + unit
}

func goalText(f *figure) string {
	op := "≤"
	if f.Cmp == ">=" {
		op = "≥"
	}
	if f.LimitText != "" {
		return op + " " + f.LimitText
	}
	limit := strconv.FormatFloat(f.Limit, 'f', -1, 64)
	if f.Limit >= 10000 {
		limit = num(f.Limit)
	}
	switch f.Unit {
	case "×":
		return op + " " + limit + "×"
	case "":
		return op + " " + limit
	}
	return op + " " + limit + " " + f.Unit
}

func verdict(f *figure, runs int) string {
	switch {
	case len(f.Values) == 0:
		return "not measured"
	case *f.Met && runs == 1:
		return "met"
	case runs == 1:
		return "not met"
	case *f.Met:
		return fmt.Sprintf("met (%d/%d runs)", f.MetRuns, len(f.Values))
	}
	return fmt.Sprintf("not met (%d/%d runs met)", f.MetRuns, len(f.Values))
}

// text is the plain table make bench prints.
func text(rep *report) string {
	var b strings.Builder
	n := len(rep.Runs)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if n == 1 {
		fmt.Fprintf(&b, "aegis performance goals (%s)\n", rep.Runs[0])
		fmt.Fprintf(tw, "\tmeasure\tvalue\tgoal\t\n")
	} else {
		fmt.Fprintf(&b, "aegis performance goals over %d runs (goal judged on the median)\n", n)
		fmt.Fprintf(tw, "\tmeasure\tmin\tmedian\tmax\tgoal\t\n")
	}
	for _, f := range rep.Goals {
		if len(f.Values) == 0 {
			dashes := "–\t–\t–"
			if n == 1 {
				dashes = "–"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tnot measured\n", f.ID, f.What, dashes, goalText(f))
			continue
		}
		if n == 1 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.ID, f.What, withUnit(f.Median, f.Unit), goalText(f), verdict(f, n))
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, f.What, withUnit(f.Min, f.Unit), withUnit(f.Median, f.Unit), withUnit(f.Max, f.Unit), goalText(f), verdict(f, n))
		}
	}
	tw.Flush()
	b.WriteString("\ncontext (medians)\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, f := range rep.Context {
		if len(f.Values) > 0 {
			fmt.Fprintf(tw, "  %s\t%s\n", f.What, withUnit(f.Median, f.Unit))
		}
	}
	tw.Flush()
	if len(rep.Sweep) > 0 {
		b.WriteString("\ntools/call echo against calls in flight (medians)\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "config\tprocs\tin flight\tp50 µs\tp99 µs\tcalls/s\t\n")
		for _, s := range rep.Sweep {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t\n", s.Config, s.Procs, s.InFlight, s.P50, s.P99, s.CallsPerS)
		}
		tw.Flush()
	}
	return b.String()
}

// envLine describes the machine of the runs (the first run's env; the
// commits and times of all).
func envLines(rep *report) []string {
	if len(rep.Env) == 0 || rep.Env[0] == nil {
		return nil
	}
	e := rep.Env[0]
	get := func(k string) string {
		if v, ok := e[k]; ok {
			return fmt.Sprint(v)
		}
		return "?"
	}
	var commits, times []string
	for _, e := range rep.Env {
		if e == nil {
			continue
		}
		if c, ok := e["commit"]; ok && !slices.Contains(commits, fmt.Sprint(c)) {
			commits = append(commits, fmt.Sprint(c))
		}
		if t, ok := e["time"]; ok {
			times = append(times, fmt.Sprint(t))
		}
	}
	lines := []string{
		fmt.Sprintf("%s cores (nproc), %s, %s RAM, Linux %s", get("nproc"), get("cpu"), get("mem"), get("kernel")),
		fmt.Sprintf("state directories and fsync probe in %s: %s; work dir: %s", get("tmpdir"), get("tmpdir_fs"), get("workdir_fs")),
		fmt.Sprintf("%s %s/%s; commit %s", get("go"), get("goos"), get("goarch"), strings.Join(commits, ", ")),
	}
	if len(times) > 0 {
		slices.Sort(times)
		lines = append(lines, fmt.Sprintf("runs started %s … %s", times[0], times[len(times)-1]))
	}
	return lines
}

// markdown is the section docs/BENCHMARKS.md holds between its markers.
func markdown(rep *report) string {
	var b strings.Builder
	n := len(rep.Runs)
	fmt.Fprintf(&b, "Generated by `aegis-benchreport -md` from %d run(s) of `make bench`", n)
	if n > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(rep.Runs, ", "))
	}
	b.WriteString(".\n\n")
	for _, l := range envLines(rep) {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	b.WriteString("\n| | measure | min | median | max | goal | verdict (on the median) |\n|---|---|---:|---:|---:|---|---|\n")
	for _, f := range rep.Goals {
		if len(f.Values) == 0 {
			fmt.Fprintf(&b, "| %s | %s | – | – | – | %s | not measured |\n", f.ID, f.What, goalText(f))
			continue
		}
		v := verdict(f, n)
		if *f.Met {
			v = "**" + v + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", f.ID, f.What,
			withUnit(f.Min, f.Unit), withUnit(f.Median, f.Unit), withUnit(f.Max, f.Unit), goalText(f), v)
	}
	b.WriteString("\nThe figures behind them, and more context:\n\n| measure | min | median | max |\n|---|---:|---:|---:|\n")
	for _, f := range rep.Context {
		if len(f.Values) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f.What, withUnit(f.Min, f.Unit), withUnit(f.Median, f.Unit), withUnit(f.Max, f.Unit))
	}
	if call, ping := find(rep.Context, "wrap-call-p50-µs"), find(rep.Context, "wrap-ping-p50-µs"); call != nil && ping != nil && len(call.Values) > 0 && len(ping.Values) > 0 {
		fmt.Fprintf(&b, "\nAgainst the first seed's published figures (measured on another machine; absolute times do not carry over, see the text):\n\n")
		b.WriteString("| measure | first seed | here (median) | here ÷ seed |\n|---|---:|---:|---:|\n")
		fmt.Fprintf(&b, "| recorded tools/call | %s ms | %s ms | %s |\n", fmtSeed(seedCallMS), num(call.Median/1000), num(call.Median/1000/seedCallMS))
		fmt.Fprintf(&b, "| relayed non-call message | %s µs | %s µs | %s |\n", fmtSeed(seedFrameUS), num(ping.Median), num(ping.Median/seedFrameUS))
		if r := find(rep.Context, "wrap-call/fsync2"); r != nil && len(r.Values) > 0 {
			fmt.Fprintf(&b, "\nHere a recorded call costs %s× two bare write+fsync of the same disk (median of the runs). "+
				"At that ratio the seed's %s ms would correspond to a disk whose two write+fsync take %s ms; "+
				"the seed did not publish its fsync time, so the ratio cannot be compared directly.\n",
				num(r.Median), fmtSeed(seedCallMS), num(seedCallMS/r.Median))
		}
	}
	if len(rep.Sweep) > 0 {
		b.WriteString("\nLatency and throughput against calls in flight (median of the runs' p50; p99 and calls/s likewise):\n\n")
		b.WriteString("| config | processes | in flight (total) | p50 µs | p50 min–max µs | p99 µs | calls/s |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range rep.Sweep {
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s–%s | %s | %s |\n", s.Config, s.Procs, s.InFlight,
				num(s.P50), num(s.P50Min), num(s.P50Max), num(s.P99), num(s.CallsPerS))
		}
	}
	return b.String()
}

func fmtSeed(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func find(fs []*figure, key string) *figure {
	for _, f := range fs {
		if f.Key == key {
			return f
		}
	}
	return nil
}

const (
	beginMarker = "<!-- benchreport:begin -->"
	endMarker   = "<!-- benchreport:end -->"
)

// updateFile replaces the text between the marker lines of path with md.
func updateFile(path, md string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := bytes.Index(data, []byte(beginMarker))
	j := bytes.Index(data, []byte(endMarker))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s … %s section to update", path, beginMarker, endMarker)
	}
	var out bytes.Buffer
	out.Write(data[:i+len(beginMarker)])
	out.WriteString("\n")
	out.WriteString(md)
	out.Write(data[j:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
