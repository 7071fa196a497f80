package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"
)

// BenchmarkWrapTelemetry measures what exporting costs a recorded call
// (docs/telemetry.md): two aegis wraps of the example server side by side,
// one plain and one exporting (--metrics-listen on loopback, and
// --otlp-endpoint to an OTLP/HTTP sink of the benchmark's own that takes
// every export, with the metrics exported every second and spans batched
// every 200 ms: busier than the defaults), interleaved in every round.
// It reports, as exporting ÷ plain, the sequential call's p50 (what P1
// measures) and the aegis process's CPU per call with 1 and 64 calls in
// flight (what P8 measures), each phase's CPU counted until the export
// has taken its last calls. A third wrap, plain too, is measured the same
// way beside them: plain ÷ plain is the noise of the same run, which
// exporting ÷ plain is judged against (a ratio within it means the
// export stays off the call's path).
// telemetrySettle is how long a phase's CPU is still counted after its
// last answer: two of the export's reads of the commits and a span batch's
// delay.
const telemetrySettle = 700 * time.Millisecond

func BenchmarkWrapTelemetry(b *testing.B) {
	aegis, server := benchBinaries(b)
	var traces, metrics atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/v1/traces":
			traces.Add(1)
		case "/v1/metrics":
			metrics.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()

	plain := startRPC(b, "aegis wrap", wrapArgv(b, aegis, server, b.TempDir()), nil)
	plainB := startRPC(b, "aegis wrap (the control)", wrapArgv(b, aegis, server, b.TempDir()), nil)
	argv := wrapArgv(b, aegis, server, b.TempDir())
	dash := slices.Index(argv, "--")
	argv = slices.Insert(argv, dash, "--metrics-listen", "127.0.0.1:0", "--otlp-endpoint", sink.URL)
	env := append(os.Environ(), "OTEL_METRIC_EXPORT_INTERVAL=1000", "OTEL_BSP_SCHEDULE_DELAY=200")
	otel := startRPC(b, "aegis wrap exporting", argv, env)

	seq := []*latencySeries{
		{name: "plain", one: rpcCall(plain, echoFrame), cpu: &cpuMeter{pid: plain.cmd.Process.Pid}},
		{name: "exporting", one: rpcCall(otel, echoFrame), cpu: &cpuMeter{pid: otel.cmd.Process.Pid}},
		{name: "control", one: rpcCall(plainB, echoFrame), cpu: &cpuMeter{pid: plainB.cmd.Process.Pid}},
	}
	warmUp(b, seq, wrapWarmup)
	for _, p := range []*rpcProc{plain, otel, plainB} {
		if _, _, err := inflight(p, conc64, 500); err != nil {
			b.Fatal(err)
		}
	}
	type phase struct {
		name  string
		p     *rpcProc
		k, n  int
		calls int
		cpu   *cpuMeter
	}
	phases := []*phase{
		{name: "plain", p: plain, k: 1, n: conc1Calls}, {name: "exporting", p: otel, k: 1, n: conc1Calls}, {name: "control", p: plainB, k: 1, n: conc1Calls},
		{name: "plain", p: plain, k: conc64, n: conc64Call}, {name: "exporting", p: otel, k: conc64, n: conc64Call}, {name: "control", p: plainB, k: conc64, n: conc64Call},
	}
	for _, ph := range phases {
		ph.cpu = &cpuMeter{pid: ph.p.cmd.Process.Pid}
	}
	for b.Loop() {
		for r := range wrapRounds {
			runRound(b, seq, r, wrapPerRound)
		}
		for r := range concRounds {
			for j := range phases {
				ph := phases[(j+r)%len(phases)]
				ph.cpu.start()
				_, _, err := inflight(ph.p, ph.k, ph.n)
				// The export folds and sends a phase's last calls after
				// they were answered (the fold reads the commits every
				// 250 ms, the spans wait up to 200 ms): counted here, in
				// both processes alike.
				time.Sleep(telemetrySettle)
				ph.cpu.stop()
				if err != nil {
					b.Fatal(err)
				}
				ph.calls += ph.n
			}
		}
	}
	plain.close(b)
	otel.close(b)
	plainB.close(b)
	if traces.Load() == 0 || metrics.Load() == 0 {
		b.Fatalf("the exporting wrap sent %d trace and %d metric exports, want some of each\n%s", traces.Load(), metrics.Load(), otel.stderr)
	}

	p50 := func(s *latencySeries) time.Duration { return quantile(s.d, 0.5) }
	cpu := func(ph *phase) float64 { u, s := ph.cpu.perOp(ph.calls); return u + s }
	fig := map[string]float64{
		"plain-p50-µs":                                        us(p50(seq[0])),
		"exporting-p50-µs":                                    us(p50(seq[1])),
		"exporting/plain-p50":                                 float64(p50(seq[1])) / float64(p50(seq[0])),
		"plain-inflight1-cpu-µs":                              cpu(phases[0]),
		"exporting-inflight1-cpu-µs":                          cpu(phases[1]),
		"exporting/plain-inflight1-cpu":                       cpu(phases[1]) / cpu(phases[0]),
		fmt.Sprintf("plain-inflight%d-cpu-µs", conc64):        cpu(phases[3]),
		fmt.Sprintf("exporting-inflight%d-cpu-µs", conc64):    cpu(phases[4]),
		fmt.Sprintf("exporting/plain-inflight%d-cpu", conc64): cpu(phases[4]) / cpu(phases[3]),
		"control/plain-p50":                                   float64(p50(seq[2])) / float64(p50(seq[0])),
		"control/plain-inflight1-cpu":                         cpu(phases[2]) / cpu(phases[0]),
		fmt.Sprintf("control/plain-inflight%d-cpu", conc64):   cpu(phases[5]) / cpu(phases[3]),
		"trace-exports":                                       float64(traces.Load()),
		"metric-exports":                                      float64(metrics.Load()),
	}
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tplain\texporting\texporting ÷ plain\tcontrol ÷ plain (noise)\t\n")
	fmt.Fprintf(tw, "sequential call p50 µs (P1)\t%.1f\t%.1f\t%.3f\t%.3f\t\n", fig["plain-p50-µs"], fig["exporting-p50-µs"], fig["exporting/plain-p50"], fig["control/plain-p50"])
	fmt.Fprintf(tw, "aegis CPU µs/call, 1 in flight (P8)\t%.0f\t%.0f\t%.3f\t%.3f\t\n", cpu(phases[0]), cpu(phases[1]), cpu(phases[1])/cpu(phases[0]), cpu(phases[2])/cpu(phases[0]))
	fmt.Fprintf(tw, "aegis CPU µs/call, %d in flight (P8)\t%.0f\t%.0f\t%.3f\t%.3f\t\n", conc64, cpu(phases[3]), cpu(phases[4]), cpu(phases[4])/cpu(phases[3]), cpu(phases[5])/cpu(phases[3]))
	tw.Flush()
	b.Logf("recorded tools/call echo, plain, exporting, and plain again as the control (%d trace and %d metric exports taken)\n%s", traces.Load(), metrics.Load(), tab.String())
	b.ReportMetric(fig["exporting/plain-p50"], "exporting/plain-p50")
	b.ReportMetric(fig["exporting/plain-inflight1-cpu"], "exporting/plain-inflight1-cpu")
	b.ReportMetric(fig[fmt.Sprintf("exporting/plain-inflight%d-cpu", conc64)], fmt.Sprintf("exporting/plain-inflight%d-cpu", conc64))
	b.ReportMetric(fig[fmt.Sprintf("control/plain-inflight%d-cpu", conc64)], fmt.Sprintf("control/plain-inflight%d-cpu", conc64))
	recordBench(b, fig)
}
