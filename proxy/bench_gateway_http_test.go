package proxy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// BenchmarkGatewayHTTP measures a recorded tools/call through the
// gateway's streamable HTTP front (aegis gateway --listen, with its bearer
// token) against the same call through its stdio front, both driven by
// the go-sdk's client, on the same example server, in one run: the ratio
// is what serving over HTTP costs a call.
func BenchmarkGatewayHTTP(b *testing.B) {
	aegis, server := benchBinaries(b)
	dir := b.TempDir()
	key := filepath.Join(dir, "signing.key")
	if out, err := exec.Command(aegis, "keygen", "--out", key).CombinedOutput(); err != nil {
		b.Fatalf("keygen: %v\n%s", err, out)
	}
	config := benchGatewayConfig(b, dir, server)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("benchmark-token-0123456789\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+run)
	gw := func(name string, extra ...string) *exec.Cmd {
		c := exec.Command(aegis, append([]string{"gateway", "--config", config, "--audit", filepath.Join(dir, name+".aarl"),
			"--signing-key", key, "--state-dir", filepath.Join(dir, name+"-state")}, extra...)...)
		c.Env = env
		return c
	}
	ctx := context.Background()

	// stdio: the SDK client launches aegis gateway and talks over its pipes.
	stdioCmd := gw("stdio")
	stdioCmd.Stderr = &syncBuffer{}
	stdio, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: stdioCmd}, nil)
	if err != nil {
		b.Fatalf("connect over stdio: %v", err)
	}
	defer stdio.Close()

	// HTTP: aegis gateway --listen, and the SDK's streamable client.
	httpCmd := gw("http", "--listen", "127.0.0.1:0", "--token-file", token)
	errb := &syncBuffer{}
	httpCmd.Stderr = errb
	if err := httpCmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		httpCmd.Process.Signal(os.Interrupt)
		httpCmd.Wait()
	}()
	url := ""
	re := regexp.MustCompile(`serving streamable HTTP at (http://\S+)`)
	for deadline := time.Now().Add(time.Minute); url == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(errb.String()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		b.Fatalf("aegis gateway --listen did not serve:\n%s", errb.String())
	}
	hc := mcptest.BearerClient("benchmark-token-0123456789")
	httpS, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		b.Fatalf("connect over HTTP: %v\n%s", err, errb.String())
	}
	defer httpS.Close()

	call := func(cs *mcp.ClientSession) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t0 := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__echo", Arguments: map[string]any{"message": "benchmark"}})
			d := time.Since(t0)
			if err == nil && res.IsError {
				err = fmt.Errorf("echo refused: %v", res.Content)
			}
			return d, err
		}
	}
	all := []*latencySeries{
		{name: "stdio-call", one: call(stdio), cpu: &cpuMeter{pid: stdioCmd.Process.Pid}},
		{name: "http-call", one: call(httpS), cpu: &cpuMeter{pid: httpCmd.Process.Pid}},
	}
	warmUp(b, all, gatewayWarmup)
	for b.Loop() {
		for r := range gatewayRounds {
			runRound(b, all, r, gatewayPerRound)
		}
	}

	med, fig := seriesFigures(b, all)
	ratio := float64(med["http-call"]) / float64(med["stdio-call"])
	fig["http-over-stdio"] = ratio
	b.ReportMetric(ratio, "http/stdio")
	var tab strings.Builder
	fmt.Fprintf(&tab, "series (%d × %d): p50 µs, p90 µs, aegis CPU µs/op\n", gatewayRounds, gatewayPerRound)
	for _, s := range all {
		fmt.Fprintf(&tab, "%-11s %8.1f %8.1f %8.0f\n", s.name, us(med[s.name]), us(quantile(s.d, 0.9)), fig[s.name+"-aegis-cpu-µs"])
	}
	fmt.Fprintf(&tab, "HTTP / stdio (p50): %.2f", ratio)
	b.Log(tab.String())
	recordBench(b, fig)
}
