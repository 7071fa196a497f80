package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// The newest conformance suite (make conformance22-deps, on Node 22) scores
// MCP 2026-07-28. TestConformance2026SuiteThroughTheGateway runs what of it
// covers that version through aegis gateway --listen --protocol 2026-07-28
// and directly, and requires the same passed and failed checks, scenario by
// scenario:
//
//   - its server scenarios at 2026-07-28 (20 scenarios, 42 checks), against
//     the go-sdk's conformance server over stateless HTTP and against the
//     gateway fronting the same server over stdio (2025-11-25 behind it):
//     stateless requests, per-request _meta, resultType, the standard
//     headers;
//   - four of its client scenarios at 2026-07-28 (see below which and
//     why), with the go-sdk's conformance client against the suite's
//     server, and with the same client as the host of the gateway whose
//     one server (url:) is the suite's, over --listen and over stdio.
//
// The suite's 2025-11-25 scenarios are left to
// TestConformanceSuiteThroughTheHTTPGateway (the 0.1.13 suite, server) and
// TestConformanceAuthScenariosThroughTheGateway (proxy, authorization): the
// newer suite scores that version the same, at twice the cost.
func TestConformance2026SuiteThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite")
	}
	if runtime.GOOS == "windows" {
		t.Skip("the client command is a shell script")
	}
	t.Parallel() // it mostly waits on node and the processes it starts
	suite := mcptest.ConformanceSuite22(t)
	server := mcptest.GoConformanceServer(t)
	client := mcptest.GoConformanceClient(t)
	l := newLive(t, "")

	t.Run("server scenarios", func(t *testing.T) {
		port := freePort(t)
		bare := exec.Command(server, "-http=127.0.0.1:"+port) // stateless: it serves 2026-07-28
		if err := bare.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bare.Process.Kill(); bare.Wait() })
		waitHTTP(t, "http://127.0.0.1:"+port+"/mcp")
		direct, dout := serverScenarios(t, suite, "http://127.0.0.1:"+port+"/mcp")

		h := l.httpGateway(conformanceConfig(server), "--listen-without-token", "--protocol", "2026-07-28")
		through, tout := serverScenarios(t, suite, h.url)
		h.stop()
		dp, df := totals(direct)
		tp, tf := totals(through)
		t.Logf("conformance 2026-07-28 server scenarios: the server itself %d passed, %d failed; through aegis %d passed, %d failed", dp, df, tp, tf)
		if dp < 40 || len(direct) < 20 {
			t.Fatalf("the server itself passed %d checks in %d scenarios; is the suite working?\n%s", dp, len(direct), dout)
		}
		compareScenarios(t, direct, through, tout)
	})

	t.Run("client scenarios", func(t *testing.T) {
		// The host: the go-sdk's conformance client against aegis gateway
		// --listen --protocol 2026-07-28, whose server is the suite's.
		dir := t.TempDir()
		host := filepath.Join(dir, "through-aegis")
		script := fmt.Sprintf(`#!/bin/sh
set -e
run=$(mktemp -d %[1]s/run.XXXXXX)
cat > "$run/aegis.yaml" <<EOF
version: 1
servers:
  s:
    url: $1
    prefix: false
profiles:
  all:
    allow: ["s.*"]
    prompts: ["s.*"]
    resources: ["s.*"]
activation:
  default_profile: all
EOF
%[2]s gateway --config "$run/aegis.yaml" --audit "$run/calls.aarl" --signing-key %[3]s --state-dir "$run/state" \
  --listen 127.0.0.1:0 --listen-without-token --protocol 2026-07-28 2> "$run/stderr" &
gw=$!
trap 'kill $gw 2>/dev/null; wait $gw' EXIT
for i in $(seq 600); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*/mcp' "$run/stderr" | head -n 1)
  [ -n "$url" ] && break
  kill -0 $gw 2>/dev/null || { cat "$run/stderr" >&2; exit 2; }
  sleep 0.05
done
[ -n "$url" ] || { cat "$run/stderr" >&2; exit 2; }
%[4]s "$url"
`, dir, filepath.Join(l.bin, "aegis"), l.key, client)
		if err := os.WriteFile(host, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		// The scenarios that try what the gateway does itself at
		// 2026-07-28: server/discover and the per-request _meta toward its
		// server (request-metadata), a server's input_required carried to
		// the host and back (sep-2322), the standard headers of every
		// request, and tool schemas as the server wrote them. The other
		// four (tools_call, http-custom-headers, http-invalid-tool-headers,
		// json-schema-ref-no-deref) try the go-sdk's client, which is the
		// gateway's: they score the same through aegis (docs/GATEWAY-PARITY.md)
		// at twice this test's cost. The host's side differs between the
		// transports only for the first two, which alone run over stdio.
		scenarios := []string{"request-metadata", "sep-2322-client-request-state", "http-standard-headers", "json-schema-2020-12-preservation"}
		hostSide := scenarios[:2]
		// The host over stdio: the go-sdk's client as the conformance
		// client does, its server aegis gateway --protocol 2026-07-28 over
		// stdin and stdout (testdata/stdiohost).
		stdioDir := t.TempDir()
		stdio := mcptest.Prebuilt(t, "stdiohost")
		if stdio == "" {
			stdio = filepath.Join(stdioDir, "stdiohost")
			if out, err := exec.Command("go", "build", "-o", stdio, "./testdata/stdiohost").CombinedOutput(); err != nil {
				t.Fatalf("go build stdiohost: %v\n%s", err, out)
			}
		}
		env := []string{"STDIOHOST_AEGIS=" + filepath.Join(l.bin, "aegis"), "STDIOHOST_DIR=" + stdioDir, "STDIOHOST_PROTOCOL=2026-07-28"}
		direct, dout := clientScenarios(t, suite, client, scenarios, nil)
		dp, df := totals(direct)
		if dp < 25 {
			t.Fatalf("the go-sdk's client passed only %d checks; is the suite working?\n%s", dp, dout)
		}
		for _, via := range []struct {
			name, command, runs string
			scenarios           []string
		}{
			{"gateway --listen", host, dir, scenarios},
			{"gateway over stdio", stdio, stdioDir, hostSide},
		} {
			through, tout := clientScenarios(t, suite, via.command, via.scenarios, env)
			tp, tf := totals(through)
			t.Logf("conformance 2026-07-28 client scenarios %v: through aegis %s %d passed, %d failed (the go-sdk's client in all four: %d passed, %d failed)", via.scenarios, via.name, tp, tf, dp, df)
			direct := maps.Clone(direct)
			maps.DeleteFunc(direct, func(s string, _ [2]int) bool { return !slices.Contains(via.scenarios, s) })
			// The gateway, a client of its server, lists its prompts and
			// resource templates as well when it starts (to aggregate
			// them), each request with the standard headers: the scenario
			// checks one request more, and passes it.
			const moreLists = "http-standard-headers"
			if got, want := through[moreLists], direct[moreLists]; got == [2]int{want[0] + 1, want[1]} {
				through[moreLists] = want
			}
			compareScenarios(t, direct, through, tout)
			// Every run of the gateway recorded its session and calls.
			runs, _ := filepath.Glob(filepath.Join(via.runs, "run*", "calls.aarl"))
			if len(runs) != len(via.scenarios) {
				t.Errorf("%s: %d records of %d runs", via.name, len(runs), len(via.scenarios))
			}
			calls := 0
			for _, p := range runs {
				b, _ := os.ReadFile(p)
				calls += strings.Count(string(b), `"line_type":"intent"`)
			}
			if calls < len(via.scenarios)-1 { // request-metadata calls nothing
				t.Errorf("%s: %d calls recorded by %d runs", via.name, calls, len(runs))
			}
		}
	})
}

var summaryRE = regexp.MustCompile(`(?m)^[✓✗] ([a-z0-9_/-]+): (\d+) passed, (\d+) failed`)

// serverScenarios runs the suite's server scenarios at 2026-07-28 against
// url and returns each scenario's passed and failed checks, and the output.
func serverScenarios(t *testing.T, suite []string, url string) (map[string][2]int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, suite[0], append(suite[1:], "server", "--url", url, "--spec-version", "2026-07-28")...)
	c.Dir = t.TempDir()          // it writes results/ there
	out, _ := c.CombinedOutput() // exits 1 when a check fails
	res := map[string][2]int{}
	for _, m := range summaryRE.FindAllStringSubmatch(string(out), -1) {
		var p, f int
		fmt.Sscan(m[2], &p)
		fmt.Sscan(m[3], &f)
		res[m[1]] = [2]int{p, f}
	}
	if len(res) == 0 {
		t.Fatalf("the conformance suite against %s printed no scenario:\n%s", url, out)
	}
	return res, string(out)
}

var passedRE = regexp.MustCompile(`Passed: (\d+)/\d+, (\d+) failed`)

// clientScenarios runs each of the suite's client scenarios at 2026-07-28
// with the client command (its environment with env added), side by side,
// and returns each one's passed and failed checks, and the outputs.
func clientScenarios(t *testing.T, suite []string, command string, scenarios, env []string) (map[string][2]int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := map[string][2]int{}
	outs := make([]string, len(scenarios))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, s := range scenarios {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := exec.CommandContext(ctx, suite[0], append(suite[1:], "client", "--command", command, "--scenario", s, "--spec-version", "2026-07-28")...)
			c.Dir, c.Env = t.TempDir(), append(os.Environ(), env...)
			out, _ := c.CombinedOutput()
			outs[i] = "== " + s + "\n" + string(out)
			if m := passedRE.FindSubmatch(out); m != nil {
				var p, f int
				fmt.Sscan(string(m[1]), &p)
				fmt.Sscan(string(m[2]), &f)
				mu.Lock()
				res[s] = [2]int{p, f}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res, strings.Join(outs, "\n")
}

func totals(r map[string][2]int) (passed, failed int) {
	for _, v := range r {
		passed, failed = passed+v[0], failed+v[1]
	}
	return passed, failed
}

// compareScenarios requires through to score every scenario as direct.
func compareScenarios(t *testing.T, direct, through map[string][2]int, out string) {
	t.Helper()
	for s, d := range direct {
		if got, ok := through[s]; !ok || got != d {
			t.Errorf("%s: directly %d passed, %d failed; through aegis %v (passed, failed; missing when the suite printed none)", s, d[0], d[1], got)
		}
	}
	for s, got := range through {
		if _, ok := direct[s]; !ok {
			t.Errorf("%s: through aegis %v, not run directly", s, got)
		}
	}
	if t.Failed() {
		t.Logf("through aegis:\n%s", out)
	}
}
