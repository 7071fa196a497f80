package proxy_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gatewayRounds × gatewayPerRound calls per series; the series take turns
// within every round, so the machine's noise hits them alike.
const (
	gatewayWarmup   = 50
	gatewayRounds   = 20
	gatewayPerRound = 25
)

// gatewayEchoFrame is echoFrame for the example server's echo behind the
// gateway, where it is example__echo.
func gatewayEchoFrame(id int64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"benchmark"}}}`+"\n", id)
}

// rpcCallSkipping is rpcCall for a peer that may send notifications
// (the gateway tells the host when its lists change): lines that are not
// the answer are read past.
func rpcCallSkipping(p *rpcProc, frame func(int64) []byte) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		id := p.nextID
		p.nextID++
		t0 := time.Now()
		if _, err := p.in.Write(frame(id)); err != nil {
			return 0, err
		}
		for {
			line, err := p.out.ReadSlice('\n')
			if err != nil {
				return 0, fmt.Errorf("%s: %w\nstderr:\n%s", p.name, err, p.stderr)
			}
			if !bytes.Contains(line, []byte(`"id"`)) {
				continue // a notification
			}
			d := time.Since(t0)
			if err := checkResponse(line, id); err != nil {
				return 0, fmt.Errorf("%s: %w", p.name, err)
			}
			return d, nil
		}
	}
}

// benchGatewayConfig writes, in dir, the gateway file of the gateway
// benchmarks: the example server behind one profile that allows its echo.
func benchGatewayConfig(b *testing.B, dir, server string) string {
	config := filepath.Join(dir, "aegis.yaml")
	yaml := fmt.Sprintf(`version: 1
servers:
  example:
    command: %q
profiles:
  bench:
    allow: [example.echo]
activation:
  default_profile: bench
error_disclosure: minimal
`, server)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	return config
}

// seriesFigures returns each series' median, and its figures: p50, p90
// and the CPU per operation of the aegis process it ran on; it reports
// each p50.
func seriesFigures(b *testing.B, all []*latencySeries) (map[string]time.Duration, map[string]float64) {
	med := map[string]time.Duration{}
	fig := map[string]float64{}
	for _, s := range all {
		med[s.name] = quantile(s.d, 0.5)
		fig[s.name+"-p50-µs"] = us(med[s.name])
		fig[s.name+"-p90-µs"] = us(quantile(s.d, 0.9))
		u, sy := s.cpu.perOp(len(s.d))
		fig[s.name+"-aegis-cpu-µs"] = u + sy
		b.ReportMetric(us(med[s.name]), s.name+"-p50-µs")
	}
	return med, fig
}

// BenchmarkGateway measures a recorded tools/call through aegis gateway
// against the same call through aegis wrap, on the same example server,
// in one run: the gateway's own cost per call (routing, namespacing, the
// profile check) beyond what recording costs both.
func BenchmarkGateway(b *testing.B) {
	aegis, server := benchBinaries(b)
	dir := b.TempDir()
	wargv, _ := wrapArgvKey(b, aegis, server, filepath.Join(dir))
	key := filepath.Join(dir, "signing.key")
	config := benchGatewayConfig(b, dir, server)
	gargv := []string{aegis, "gateway", "--config", config, "--audit", filepath.Join(dir, "gateway.aarl"),
		"--signing-key", key, "--state-dir", filepath.Join(dir, "gateway-state")}
	// XDG_RUNTIME_DIR gives the gateway's approval channel a private home.
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+run)
	wrap := startRPC(b, "aegis wrap", wargv, env)
	gw := startRPC(b, "aegis gateway", gargv, env)

	all := []*latencySeries{
		{name: "wrap-call", one: rpcCallSkipping(wrap, echoFrame), cpu: &cpuMeter{pid: wrap.cmd.Process.Pid}},
		{name: "gateway-call", one: rpcCallSkipping(gw, gatewayEchoFrame), cpu: &cpuMeter{pid: gw.cmd.Process.Pid}},
	}
	warmUp(b, all, gatewayWarmup)
	for b.Loop() {
		for r := range gatewayRounds {
			runRound(b, all, r, gatewayPerRound)
		}
	}
	wrap.close(b)
	gw.close(b)

	med, fig := seriesFigures(b, all)
	over := med["gateway-call"] - med["wrap-call"]
	fig["gateway-minus-wrap-µs"] = us(over)
	b.ReportMetric(us(over), "gateway-minus-wrap-µs")
	var tab strings.Builder
	fmt.Fprintf(&tab, "series (%d × %d): p50 µs, p90 µs, aegis CPU µs/op\n", gatewayRounds, gatewayPerRound)
	for _, s := range all {
		fmt.Fprintf(&tab, "%-13s %8.1f %8.1f %8.0f\n", s.name, us(med[s.name]), us(quantile(s.d, 0.9)), fig[s.name+"-aegis-cpu-µs"])
	}
	fmt.Fprintf(&tab, "gateway − wrap (p50): %+.1f µs", us(over))
	b.Log(tab.String())
	recordBench(b, fig)
}
