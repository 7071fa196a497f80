package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// soak: the steady load of TestHTTPGatewayMemoryStaysFlatUnderASteadyLoad,
// CI-sized: the RSS (the median of the 4 s after warm-up) may rise by at
// most soakRise at any later sample.
const (
	soakSessions = 4
	soakInflight = 4
	soakSeconds  = 28
	soakWarmup   = 6 // seconds of the load before the baseline is taken
	soakRise     = 0.10
)

// A steady load of TypeScript SDK clients over streamable HTTP (4
// sessions, 4 calls in flight each, answers of 2 kB) keeps the gateway's
// resident memory flat once warmed up: every request's stream used to be
// kept for resumption until its session ended, so a steady client grew
// the process without end (72 to 111 MB in 3 minutes).
func TestHTTPGatewayMemoryStaysFlatUnderASteadyLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of aegis gateway --listen")
	}
	t.Parallel()
	node, sdk := mcptest.TypeScriptSDK(t)
	l := newLive(t, "")
	h := l.httpGateway(gatewayConfig(l.bin))
	script, err := filepath.Abs(filepath.Join("testdata", "tsload.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "MCP_SDK_DIR="+sdk, "URL="+h.url, "TOKEN="+h.token, "TOOL=example__echo",
		fmt.Sprintf("SESSIONS=%d", soakSessions), fmt.Sprintf("INFLIGHT=%d", soakInflight), fmt.Sprintf("SECONDS=%d", soakSeconds),
		`ARGS={"message":"`+strings.Repeat("m", 2000)+`"}`)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type sample struct {
		t   float64
		rss int64 // KiB
	}
	var samples []sample
	var last struct {
		Done      bool
		Calls     int
		Errors    int
		LastError string
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var line struct {
			T         float64
			Done      bool
			Calls     int
			Errors    int
			LastError string
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("tsload: %q: %v", sc.Text(), err)
		}
		if line.Done {
			last.Done, last.Calls, last.Errors, last.LastError = true, line.Calls, line.Errors, line.LastError
			continue
		}
		rss, err := statusKiB(h.cmd.Process.Pid, "VmRSS")
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, sample{line.T, rss})
	}
	if err := cmd.Wait(); err != nil || !last.Done {
		t.Fatalf("tsload: %v\n%s\naegis:\n%s", err, stderr, h.stderr)
	}
	if last.Errors > 0 {
		t.Fatalf("%d of %d calls failed under the load; the last: %s", last.Errors, last.Errors+last.Calls, last.LastError)
	}
	median := func(s []sample) int64 {
		v := make([]int64, len(s))
		for i, x := range s {
			v[i] = x.rss
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var base []sample
	peak := sample{}
	for _, s := range samples {
		switch {
		case s.t >= soakWarmup && s.t < soakWarmup+4:
			base = append(base, s)
		case s.t >= soakWarmup+4 && s.rss > peak.rss:
			peak = s
		}
	}
	if len(base) == 0 || len(samples) < soakSeconds-4 {
		t.Fatalf("too few samples (%d) for a baseline", len(samples))
	}
	b := median(base)
	var trace strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&trace, " %.0fs:%dM", s.t, s.rss>>10)
	}
	t.Logf("%d calls in %d s; RSS after warm-up %d MiB, at most %d MiB later;%s", last.Calls, soakSeconds, b>>10, peak.rss>>10, trace.String())
	if float64(peak.rss) > float64(b)*(1+soakRise) {
		t.Errorf("the gateway's RSS rose from %d MiB after warm-up to %d MiB at %.0f s of a steady load (more than %.0f%%):%s",
			b>>10, peak.rss>>10, peak.t, soakRise*100, trace.String())
	}
}

// statusKiB reads a kB field of /proc/PID/status.
func statusKiB(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}
