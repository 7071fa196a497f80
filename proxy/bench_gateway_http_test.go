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
	g := startBenchGateways(b, aegis, server)
	ctx := context.Background()

	// stdio: the SDK client launches aegis gateway and talks over its pipes.
	stdioCmd := g.cmd("stdio")
	stdioCmd.Stderr = &syncBuffer{}
	stdio, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: stdioCmd}, nil)
	if err != nil {
		b.Fatalf("connect over stdio: %v", err)
	}
	defer stdio.Close()

	// HTTP: aegis gateway --listen, and the SDK's streamable client.
	lg := g.listen(b, "http")
	httpS, err := lg.connect(ctx)
	if err != nil {
		b.Fatalf("connect over HTTP: %v\n%s", err, lg.stderr.String())
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
		{name: "http-call", one: call(httpS), cpu: &cpuMeter{pid: lg.pid}},
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

// benchGateways starts aegis gateway processes for a benchmark: one
// signing key, the example server behind one profile, a token file, each
// gateway on a state directory and record of its own.
type benchGateways struct {
	aegis, dir, config, key, token string
	env                            []string
}

const benchToken = "benchmark-token-0123456789"

func startBenchGateways(b *testing.B, aegis, server string) *benchGateways {
	dir := b.TempDir()
	key := filepath.Join(dir, "signing.key")
	if out, err := exec.Command(aegis, "keygen", "--out", key).CombinedOutput(); err != nil {
		b.Fatalf("keygen: %v\n%s", err, out)
	}
	config := benchGatewayConfig(b, dir, server)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(benchToken+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		b.Fatal(err)
	}
	return &benchGateways{aegis: aegis, dir: dir, config: config, key: key, token: token,
		env: append(os.Environ(), "XDG_RUNTIME_DIR="+run)}
}

// cmd is aegis gateway on the state directory and record named name.
func (g *benchGateways) cmd(name string, extra ...string) *exec.Cmd {
	c := exec.Command(g.aegis, append([]string{"gateway", "--config", g.config, "--audit", filepath.Join(g.dir, name+".aarl"),
		"--signing-key", g.key, "--state-dir", filepath.Join(g.dir, name+"-state")}, extra...)...)
	c.Env = g.env
	return c
}

// listenGateway is a running aegis gateway --listen.
type listenGateway struct {
	url    string
	pid    int
	stderr *syncBuffer
}

// listen starts aegis gateway --listen with the token file on a free
// loopback port and waits until it serves; it is stopped when the
// benchmark ends.
func (g *benchGateways) listen(b *testing.B, name string, extra ...string) *listenGateway {
	c := g.cmd(name, append([]string{"--listen", "127.0.0.1:0", "--token-file", g.token}, extra...)...)
	errb := &syncBuffer{}
	c.Stderr = errb
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Process.Signal(os.Interrupt)
		c.Wait()
	})
	re := regexp.MustCompile(`serving streamable HTTP at (http://\S+)`)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(errb.String()); m != nil {
			return &listenGateway{url: m[1], pid: c.Process.Pid, stderr: errb}
		}
	}
	b.Fatalf("aegis gateway --listen did not serve:\n%s", errb.String())
	return nil
}

// connect opens a session with the go-sdk's streamable HTTP client.
func (l *listenGateway) connect(ctx context.Context) (*mcp.ClientSession, error) {
	return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: l.url, HTTPClient: mcptest.BearerClient(benchToken)}, nil)
}
