package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	httpSessions    = 4    // HTTP sessions, each with httpPerSession calls in flight
	httpPerSession  = 16   // so that httpSessions × httpPerSession = conc64
	httpRounds      = 3    // rounds, the phases rotating
	httpRoundCalls  = 3000 // calls per phase and round
	httpWarmupCalls = 500  // calls per phase before the first round
)

// sdkInflight makes n recorded echo calls through sessions, k calls in
// flight on each (a worker per call slot, all drawing from one count):
// the time from the first call sent to the last answered, and each call's
// latency.
func sdkInflight(ctx context.Context, sessions []*mcp.ClientSession, tool string, k, n int) (time.Duration, []time.Duration, error) {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	start := time.Now()
	for _, cs := range sessions {
		for range k {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					t0 := time.Now()
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "benchmark"}})
					lat[i] = time.Since(t0)
					if err == nil && res.IsError {
						err = fmt.Errorf("echo refused: %v", res.Content)
					}
					if err != nil {
						once.Do(func() { first = err })
						next.Store(int64(n))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return time.Since(start), lat, first
}

// BenchmarkGatewayHTTPInflight measures recorded tools/calls per second
// with 64 in flight through aegis gateway --listen (4 streamable HTTP
// sessions of the go-sdk's client, 16 calls in flight on each) against
// aegis wrap over stdio around the same example server (one connection, 64
// outstanding JSON-RPC ids, the raw client of BenchmarkWrapConcurrent), in
// rotating rounds of one run: the ratio H1 is what serving many HTTP
// clients costs against the relay behind it. Beside them, for where the
// difference goes: aegis gateway over stdio with the raw client (the
// gateway without HTTP), and aegis wrap driven by the go-sdk's client over
// its pipes, 64 calls in flight on one session (the same client library
// as the HTTP sessions: http/wrap-sdk is the ratio with the client's own
// cost on both sides).
func BenchmarkGatewayHTTPInflight(b *testing.B) {
	aegis, server := benchBinaries(b)
	ctx := context.Background()
	wrap := startRPC(b, "aegis wrap", wrapArgv(b, aegis, server, b.TempDir()), nil)
	g := startBenchGateways(b, aegis, server)
	gwArgv := g.cmd("stdio").Args
	gw := startRPC(b, "aegis gateway", gwArgv, g.env)
	lg := g.listen(b, "http")
	// AEGIS_BENCH_BASE_AEGIS=BINARY adds a fifth series: aegis gateway
	// --listen of another aegis binary (a baseline build), its sessions
	// and phase as those of the first, for an A/B of the HTTP front in one
	// run.
	var lgBase *listenGateway
	if base := os.Getenv("AEGIS_BENCH_BASE_AEGIS"); base != "" {
		gb := *g
		gb.aegis = base
		lgBase = gb.listen(b, "httpbase")
	}
	wrapSDKCmd := exec.Command(aegis, wrapArgv(b, aegis, server, b.TempDir())[1:]...)
	wrapSDKCmd.Stderr = &syncBuffer{}
	wrapSDK, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: wrapSDKCmd}, nil)
	if err != nil {
		b.Fatalf("connect to aegis wrap over stdio: %v", err)
	}
	defer wrapSDK.Close()
	// One HTTP client per session, each keeping a connection per call in
	// flight, as a host with its own pool does.
	connect := func(l *listenGateway) []*mcp.ClientSession {
		var sessions []*mcp.ClientSession
		for range httpSessions {
			hc := &http.Client{Transport: &bearerTransport{token: benchToken, rt: &http.Transport{MaxIdleConnsPerHost: 2 * httpPerSession}}}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: l.url, HTTPClient: hc}, nil)
			if err != nil {
				b.Fatalf("connect over HTTP: %v\n%s", err, l.stderr.String())
			}
			b.Cleanup(func() { cs.Close() })
			sessions = append(sessions, cs)
		}
		return sessions
	}
	sessions := connect(lg)

	type phase struct {
		name  string
		run   func(n int) (time.Duration, []time.Duration, error)
		cpu   *cpuMeter
		calls int
		el    time.Duration
		lat   []time.Duration
	}
	gwFrame := func(p *rpcProc) func(n int) (time.Duration, []time.Duration, error) {
		return func(n int) (time.Duration, []time.Duration, error) {
			return inflightFrames(p, conc64, n, gatewayEchoFrame)
		}
	}
	phases := []*phase{
		{name: "wrap", run: func(n int) (time.Duration, []time.Duration, error) { return inflight(wrap, conc64, n) }, cpu: &cpuMeter{pid: wrap.cmd.Process.Pid}},
		{name: "http", run: func(n int) (time.Duration, []time.Duration, error) {
			return sdkInflight(ctx, sessions, "example__echo", httpPerSession, n)
		}, cpu: &cpuMeter{pid: lg.pid}},
		{name: "gateway", run: gwFrame(gw), cpu: &cpuMeter{pid: gw.cmd.Process.Pid}},
		{name: "wrap-sdk", run: func(n int) (time.Duration, []time.Duration, error) {
			return sdkInflight(ctx, []*mcp.ClientSession{wrapSDK}, "echo", conc64, n)
		}, cpu: &cpuMeter{pid: wrapSDKCmd.Process.Pid}},
	}
	if lgBase != nil {
		baseSessions := connect(lgBase)
		phases = append(phases, &phase{name: "http-base", run: func(n int) (time.Duration, []time.Duration, error) {
			return sdkInflight(ctx, baseSessions, "example__echo", httpPerSession, n)
		}, cpu: &cpuMeter{pid: lgBase.pid}})
	}
	for _, ph := range phases {
		if _, _, err := ph.run(httpWarmupCalls); err != nil {
			b.Fatalf("%s: %v", ph.name, err)
		}
	}
	for b.Loop() {
		for r := range httpRounds {
			for j := range phases {
				ph := phases[(j+r)%len(phases)]
				ph.cpu.start()
				el, lat, err := ph.run(httpRoundCalls)
				ph.cpu.stop()
				if err != nil {
					b.Fatalf("%s: %v\n%s", ph.name, err, lg.stderr.String())
				}
				ph.calls += httpRoundCalls
				ph.el += el
				ph.lat = append(ph.lat, lat...)
			}
		}
	}
	rate := func(ph *phase) float64 { return float64(ph.calls) / ph.el.Seconds() }
	fig := map[string]float64{}
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "64 in flight\tcalls\tcalls/s\tp50 µs\tp99 µs\taegis CPU µs/call\t\n")
	for _, ph := range phases {
		u, sy := ph.cpu.perOp(ph.calls)
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t\n", ph.name, ph.calls, rate(ph), us(quantile(ph.lat, 0.5)), us(quantile(ph.lat, 0.99)), u+sy)
		fig[ph.name+"-inflight64-calls/s"] = rate(ph)
		fig[ph.name+"-inflight64-p50-µs"] = us(quantile(ph.lat, 0.5))
		fig[ph.name+"-inflight64-p99-µs"] = us(quantile(ph.lat, 0.99))
		fig[ph.name+"-inflight64-aegis-cpu-µs"] = u + sy
	}
	tw.Flush()
	ratio := rate(phases[1]) / rate(phases[0])
	fig["http/wrap-inflight64"] = ratio
	fig["http/wrap-sdk-inflight64"] = rate(phases[1]) / rate(phases[3])
	fmt.Fprintf(&tab, "HTTP (%d sessions × %d) ÷ wrap over stdio, calls/s: %.2f (÷ wrap with the go-sdk client: %.2f)", httpSessions, httpPerSession, ratio, rate(phases[1])/rate(phases[3]))
	b.Logf("recorded tools/call echo, %d rounds of %d calls per phase\n%s", httpRounds, httpRoundCalls, tab.String())
	b.ReportMetric(ratio, "http/wrap")
	b.ReportMetric(rate(phases[1]), "http-calls/s")
	b.ReportMetric(rate(phases[0]), "wrap-calls/s")
	recordBench(b, fig)
}

// bearerTransport sends token as a bearer token with every request.
type bearerTransport struct {
	token string
	rt    http.RoundTripper
}

func (t *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.rt.RoundTrip(r)
}
