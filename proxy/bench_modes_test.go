package proxy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// BenchmarkModes measures what each kind of enforcement adds to a recorded
// tools/call, interleaved in one run on one disk: aegis wrap plain, with a
// --policy, with --confine, and the same server behind aegis gateway; and
// the confine helper's one-time start cost (aegis wrap --confine -- true
// against aegis wrap -- true).
func BenchmarkModes(b *testing.B) {
	aegis, server := benchBinaries(b)
	dir := b.TempDir()
	mk := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		return d
	}
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\ndefault: deny\nrules:\n  - id: echo-ok\n    action: allow\n    tool: echo\n  - id: no-rm\n    action: deny\n    tool: rm\n"), 0o600)

	plainArgv := wrapArgv(b, aegis, server, mk("plain"))
	policyArgv := wrapArgv(b, aegis, server, mk("policy"))
	policyArgv = append(policyArgv[:len(policyArgv)-2:len(policyArgv)-2], "--policy", pol, "--", server)
	confArgv := wrapArgv(b, aegis, server, mk("confine"))
	confArgv = append(confArgv[:len(confArgv)-2:len(confArgv)-2], "--confine", "--allow-exec-support", "--allow-read", filepath.Dir(server), "--", server)
	gwDir := mk("gateway")
	gwArgv := wrapArgv(b, aegis, server, gwDir)
	cfg := filepath.Join(gwDir, "aegis.yaml")
	os.WriteFile(cfg, []byte("version: 1\nservers:\n  example:\n    command: "+server+"\nprofiles:\n  p:\n    allow: [example.echo]\nactivation:\n  default_profile: p\n"), 0o600)
	gwArgv = []string{aegis, "gateway", "--config", cfg, "--audit", gwArgv[3], "--signing-key", gwArgv[5], "--state-dir", gwArgv[7]}

	wrap := startRPC(b, "wrap", plainArgv, nil)
	withPolicy := startRPC(b, "wrap --policy", policyArgv, nil)
	confined := startRPC(b, "wrap --confine", confArgv, nil)
	gateway := startRPC(b, "gateway", gwArgv, nil)
	gwEcho := func(id int64) []byte {
		return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"benchmark"}}}`+"\n", id)
	}
	all := []*latencySeries{
		{name: "wrap-call", one: rpcCall(wrap, echoFrame)},
		{name: "policy-call", one: rpcCall(withPolicy, echoFrame)},
		{name: "confined-call", one: rpcCall(confined, echoFrame)},
		{name: "gateway-call", one: rpcCall(gateway, gwEcho)},
	}
	warmUp(b, all, wrapWarmup)
	// One-time start cost of the confine helper: whole wrap runs of /bin/true.
	start := func(confine bool) func() (time.Duration, error) {
		d := mk(fmt.Sprintf("start-%v", confine))
		argv := wrapArgv(b, aegis, "/bin/true", d)
		if confine {
			argv = append(argv[:len(argv)-2:len(argv)-2], "--confine", "--allow-exec-support", "--", "/bin/true")
		}
		return func() (time.Duration, error) {
			d, out, err := runTimed(argv)
			if err != nil {
				return 0, fmt.Errorf("%v: %v\n%s", argv, err, out)
			}
			return d, nil
		}
	}
	starts := []*latencySeries{{name: "wrap-true", one: start(false)}, {name: "confined-true", one: start(true)}}
	for b.Loop() {
		for r := range wrapRounds {
			runRound(b, all, r, wrapPerRound/2)
			runRound(b, starts, r, 4)
		}
	}
	wrap.close(b)
	withPolicy.close(b)
	confined.close(b)
	gateway.close(b)

	med := map[string]time.Duration{}
	fig := map[string]float64{}
	for _, s := range append(all, starts...) {
		med[s.name] = quantile(s.d, 0.5)
		fig[s.name+"-p50-µs"] = us(med[s.name])
		b.ReportMetric(us(med[s.name]), s.name+"-p50-µs")
	}
	over := map[string]float64{
		"policy-overhead-µs":    us(med["policy-call"] - med["wrap-call"]),
		"confined-overhead-µs":  us(med["confined-call"] - med["wrap-call"]),
		"gateway-overhead-µs":   us(med["gateway-call"] - med["wrap-call"]),
		"confine-start-cost-ms": ms(med["confined-true"] - med["wrap-true"]),
	}
	for k, v := range over {
		fig[k] = v
		b.ReportMetric(v, k)
	}
	var tab strings.Builder
	w := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "series\tp50\t\t")
	for _, s := range all {
		fmt.Fprintf(w, "%s\t%.1f µs\t%+.1f µs over wrap-call\t\n", s.name, us(med[s.name]), us(med[s.name]-med["wrap-call"]))
	}
	for _, s := range starts {
		fmt.Fprintf(w, "%s\t%.1f ms\t%+.1f ms over wrap -- true\t\n", s.name, ms(med[s.name]), ms(med[s.name]-med["wrap-true"]))
	}
	w.Flush()
	b.Logf("recorded tools/call echo by mode, %d rounds\n%s", wrapRounds, tab.String())
	recordBench(b, fig)
}
