// What a recorded tools/call costs, measured end to end with real processes.
//
//	BenchmarkWrap            P1, P2: a recorded call and a relayed ping
//	BenchmarkWrapConcurrent  P3: calls/s with 64 in flight ÷ 1 in flight
//	BenchmarkWrapStartup     P4: start to the first initialize answer
//	BenchmarkWrapIdleRSS     P5: resident memory of an idle aegis wrap
//	BenchmarkExportVerify    P6: aegis export and aegis verify, lines/s
//	BenchmarkWrapInflight    latency and calls/s against calls in flight
//	BenchmarkGateway         a recorded call through aegis gateway − through aegis wrap
//
// Run them all (about a minute on a 2-core machine; the binaries are built
// once per run, into a temporary directory):
//
//	go test -run '^$' -bench . -benchtime 1x ./proxy/
//
// or one, as -bench 'BenchmarkWrap$'. Each benchmark does a fixed amount of
// work per b.Loop iteration; with -benchtime 1x it runs exactly once. With
// AEGIS_BENCH_JSON=FILE each also merges its figures into FILE, which make
// bench hands to cmd/aegis-benchreport (docs/BENCHMARKS.md). Absolute times
// on a small VM are noisy: compare the figures of one run with each other,
// not across runs.

package proxy_test

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis-benchreport/benchjson"
)

const (
	wrapRounds   = 30 // rounds; each runs the series in a fresh order
	wrapPerRound = 50 // calls per series per round
	wrapWarmup   = 50 // calls per series before the first round, not measured
)

// latencySeries is one measured configuration.
type latencySeries struct {
	name string
	one  func() (time.Duration, error)
	d    []time.Duration
	cpu  *cpuMeter // if set, the CPU time of aegis over the series
}

// warmUp runs every series n times, unmeasured.
func warmUp(b *testing.B, all []*latencySeries, n int) {
	for _, s := range all {
		for range n {
			if _, err := s.one(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// runRound runs each series per times, recording every duration and, where
// metered, the aegis process's CPU time. The order is a permutation drawn
// afresh for each round r (seeded by r, so runs repeat it): noise then hits
// the series alike, and no series always follows the same one. That
// matters: a series that follows another on the same process (pipe-ping
// after pipe) starts warm, one that follows another process starts cold,
// and a fixed rotation kept those pairs for every round, which favoured the
// bare relay's ping over aegis's by 15-20 µs.
func runRound(b *testing.B, all []*latencySeries, r, per int) {
	order := rand.New(rand.NewPCG(uint64(r), 0)).Perm(len(all))
	for _, k := range order {
		s := all[k]
		s.cpu.start()
		for range per {
			d, err := s.one()
			if err != nil {
				b.Fatal(err)
			}
			s.d = append(s.d, d)
		}
		s.cpu.stop()
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// rpcCall returns a measurement of one request/answer round trip over p:
// the frame is encoded before the clock starts, and the answer checked after
// it stops.
func rpcCall(p *rpcProc, frame func(int64) []byte) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		id := p.nextID
		p.nextID++
		f := frame(id)
		t0 := time.Now()
		line, err := p.roundTrip(f)
		d := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("%s: %w\nstderr:\n%s", p.name, err, p.stderr)
		}
		if err := checkResponse(line, id); err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		return d, nil
	}
}

// fsync2 returns a measurement of two bare write+fsync of 300 bytes: the
// disk work a recorded call cannot avoid (its intent, then its outcome).
func fsync2(f *os.File) func() (time.Duration, error) {
	buf := bytes.Repeat([]byte{'x'}, 300)
	return func() (time.Duration, error) {
		t0 := time.Now()
		for range 2 {
			if _, err := f.Write(buf); err != nil {
				return 0, err
			}
			if err := f.Sync(); err != nil {
				return 0, err
			}
		}
		return time.Since(t0), nil
	}
}

// BenchmarkWrap measures, in one run on one disk, the round trip of a
// tools/call echo and of a ping
//
//   - direct: to the example server;
//   - pipe: through a relay that only copies bytes (a lower bound for any
//     relay);
//   - wrap: through aegis wrap, where a ping is a relayed frame that no
//     call record depends on, and a tools/call waits for its intent and its
//     outcome to be durable;
//   - pipe-rec (calls only): through the same bare relay, which this time
//     appends 300 bytes to a file beside the state directory and fsyncs it
//     before it passes on each line: the least a relay that appends and
//     fsyncs its record, as JetStream's file store does, can do;
//   - pipe-js (calls only): through the same bare relay, appending a 1 KB
//     event to its own event store (embedded JetStream, as aegis's) before
//     it passes on each line: aegis's spine without aegis's relay logic;
//
// and (fsync2) two bare 300-byte write+fsync in the directory holding the
// state directory. The series run interleaved in rounds so that noise hits them
// alike. It reports the median of each and
//
//	call-overhead-minus-2fsync-µs     = wrap-call − direct − fsync2
//	frame-overhead-µs                 = wrap-ping − pipe-ping
//	recording-floor-minus-2fsync-µs   = pipe-rec − direct − fsync2
//	call-overhead-beyond-recording-µs = wrap-call − pipe-rec
//	jetstream-floor-minus-2fsync-µs   = pipe-js − direct − fsync2
//	call-overhead-beyond-jetstream-µs = wrap-call − pipe-js
//
// The third is what P1's formula leaves even for that relay: its fsyncs
// follow a wait on a pipe, with the CPUs idle, and on a VM such an fsync
// can take longer than fsync2's back-to-back ones. The last two
// split the rest between the event spine and aegis's own work.
//
// and commits/call: how many JetStream commits (each one fsync) a recorded
// call waited for, read back from the stream after the run; and the CPU
// time (user+sys, from /proc/PID/stat) the aegis process spent per wrap-ping
// and per wrap-call.
func BenchmarkWrap(b *testing.B) {
	aegis, server := benchBinaries(b)
	dir := b.TempDir()

	direct := startRPC(b, "direct", []string{server}, nil)
	rargv, renv := relayArgv(b, []string{server})
	pipe := startRPC(b, "pipe", rargv, renv)
	pipeRec := startRPC(b, "pipe-rec", rargv, append(slices.Clip(renv), recordEnv+"="+filepath.Join(dir, "relay-record")))
	pipeJS := startRPC(b, "pipe-js", rargv, append(slices.Clip(renv), recordEnv+"=jetstream:"+filepath.Join(dir, "relay-state")))
	wrap := startRPC(b, "aegis wrap", wrapArgv(b, aegis, server, dir), nil)
	probe, err := os.OpenFile(filepath.Join(dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()

	all := []*latencySeries{
		{name: "direct", one: rpcCall(direct, echoFrame)},
		{name: "direct-ping", one: rpcCall(direct, pingFrame)},
		{name: "pipe", one: rpcCall(pipe, echoFrame)},
		{name: "pipe-ping", one: rpcCall(pipe, pingFrame), cpu: &cpuMeter{pid: pipe.cmd.Process.Pid}},
		{name: "pipe-rec", one: rpcCall(pipeRec, echoFrame), cpu: &cpuMeter{pid: pipeRec.cmd.Process.Pid}},
		{name: "pipe-js", one: rpcCall(pipeJS, echoFrame), cpu: &cpuMeter{pid: pipeJS.cmd.Process.Pid}},
		{name: "wrap-ping", one: rpcCall(wrap, pingFrame), cpu: &cpuMeter{pid: wrap.cmd.Process.Pid}},
		{name: "wrap-call", one: rpcCall(wrap, echoFrame), cpu: &cpuMeter{pid: wrap.cmd.Process.Pid}},
		{name: "fsync2", one: fsync2(probe)},
	}
	warmUp(b, all, wrapWarmup)
	for b.Loop() {
		for r := range wrapRounds {
			runRound(b, all, r, wrapPerRound)
		}
	}
	direct.close(b)
	pipe.close(b)
	pipeRec.close(b)
	pipeJS.close(b)
	wrap.close(b)

	med := map[string]time.Duration{}
	for _, s := range all {
		med[s.name] = quantile(s.d, 0.5)
	}
	callOver := med["wrap-call"] - med["direct"]
	minus2 := callOver - med["fsync2"]
	frameOver := med["wrap-ping"] - med["pipe-ping"]
	recFloor := med["pipe-rec"] - med["direct"] - med["fsync2"]
	beyondRec := med["wrap-call"] - med["pipe-rec"]
	jsFloor := med["pipe-js"] - med["direct"] - med["fsync2"]
	beyondJS := med["wrap-call"] - med["pipe-js"]
	commits, calls, cerr := commitsPerCall(aegis, filepath.Join(dir, "state"))
	note := map[string]string{
		"pipe":      fmt.Sprintf("+%.1f over direct", us(med["pipe"]-med["direct"])),
		"pipe-ping": fmt.Sprintf("+%.1f over direct-ping (p50 %.1f)", us(med["pipe-ping"]-med["direct-ping"]), us(med["direct-ping"])),
		"wrap-ping": fmt.Sprintf("+%.1f over pipe-ping (frame-overhead)", us(frameOver)),
		"wrap-call": fmt.Sprintf("+%.1f over direct, %+.1f beyond fsync2", us(callOver), us(minus2)),
		"fsync2":    "2 × write+fsync of 300 B beside the state dir",
		"pipe-rec":  fmt.Sprintf("%+.1f beyond direct+fsync2; wrap-call %+.1f beyond it", us(recFloor), us(beyondRec)),
		"pipe-js":   fmt.Sprintf("%+.1f beyond direct+fsync2; wrap-call %+.1f beyond it", us(jsFloor), us(beyondJS)),
	}
	fig := map[string]float64{}
	for _, s := range all {
		b.ReportMetric(us(med[s.name]), s.name+"-p50-µs")
		fig[s.name+"-p50-µs"] = us(med[s.name])
		fig[s.name+"-p90-µs"] = us(quantile(s.d, 0.9))
		fig[s.name+"-p99-µs"] = us(quantile(s.d, 0.99))
	}
	b.ReportMetric(us(minus2), "call-overhead-minus-2fsync-µs")
	b.ReportMetric(us(frameOver), "frame-overhead-µs")
	fig["call-overhead-µs"] = us(callOver)
	fig["call-overhead-minus-2fsync-µs"] = us(minus2)
	fig["frame-overhead-µs"] = us(frameOver)
	fig["recording-floor-minus-2fsync-µs"] = us(recFloor)
	fig["call-overhead-beyond-recording-µs"] = us(beyondRec)
	fig["jetstream-floor-minus-2fsync-µs"] = us(jsFloor)
	fig["call-overhead-beyond-jetstream-µs"] = us(beyondJS)
	fig["calls-per-series"] = float64(wrapRounds * wrapPerRound)
	for _, s := range all {
		if s.cpu != nil {
			// What the relaying process burns per operation, both cores
			// counted: on a 2-core machine shared with the client and the
			// server, CPU on the critical path is latency. For the pipe
			// series it is the bare relay's: pipe-ping's is the floor of
			// P7, pipe-js's of P8 with one call in flight.
			who := "-aegis"
			if strings.HasPrefix(s.name, "pipe") {
				who = "-relay"
			}
			u, sy := s.cpu.perOp(len(s.d))
			fig[s.name+who+"-cpu-µs"] = u + sy
			fig[s.name+who+"-sys-µs"] = sy
		}
	}
	if f := med["fsync2"]; f > 0 {
		// Ratios to the disk of this run: comparable across machines.
		fig["wrap-call/fsync2"] = float64(med["wrap-call"]) / float64(f)
		fig["wrap-ping/fsync2"] = float64(med["wrap-ping"]) / float64(f)
	}
	if cerr == nil {
		b.ReportMetric(commits, "commits/call")
		fig["commits/call"] = commits
	}
	// Benchmark logs are cut at their tenth newline: keep the table to 9
	// lines (a header and a row per series but direct-ping, whose p50 is in
	// pipe-ping's note).
	if cerr != nil {
		note["wrap-call"] += fmt.Sprintf("; commits per call unknown: %v", cerr)
	} else {
		note["wrap-call"] += fmt.Sprintf("; waited for %.2f commits (2 at best) over %d calls", commits, calls)
	}
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "series (%d × %d)\tp50 µs\tp90 µs\tp99 µs\tCPU µs/op\t\n", wrapRounds, wrapPerRound)
	for _, s := range all {
		if s.name == "direct-ping" {
			continue
		}
		cpu := ""
		if v, ok := fig[s.name+"-aegis-cpu-µs"]; ok {
			cpu = fmt.Sprintf("%.0f", v)
		} else if v, ok := fig[s.name+"-relay-cpu-µs"]; ok {
			cpu = fmt.Sprintf("(relay) %.0f", v)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\t", s.name, us(med[s.name]), us(quantile(s.d, 0.9)), us(quantile(s.d, 0.99)), cpu)
		if n := note[s.name]; n != "" {
			fmt.Fprintf(tw, "  %s", n)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	b.Log(strings.TrimSuffix(tab.String(), "\n"))

	recordBench(b, fig)
}

// commitsPerCall reads the stream in stateDir back with 'aegis events list'
// and counts, for each recorded call, the commits the relay waited for: the
// call's intent is durable with or after the commit of the frame that
// carried it (one commit or two), and likewise its outcome and the answer
// frame. It assumes one call in flight at a time.
func commitsPerCall(aegis, stateDir string) (float64, int, error) {
	out, err := exec.Command(aegis, "events", "list", "--state-dir", stateDir).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("aegis events list: %v", err)
	}
	// Lines read "SEQ.INDEX TIME ID KIND …".
	var lastFrame = map[string]string{} // frame kind -> seq of the latest one
	commits, calls := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		seq, _, ok := strings.Cut(f[0], ".")
		if !ok {
			return 0, 0, fmt.Errorf("unexpected line %q", sc.Text())
		}
		var frameKind string
		switch f[3] {
		case "frame.c2s", "frame.s2c":
			lastFrame[f[3]] = seq
			continue
		case "call.intent":
			frameKind = "frame.c2s"
			calls++
		case "call.outcome":
			frameKind = "frame.s2c"
		default:
			continue
		}
		commits++
		if lastFrame[frameKind] != seq {
			commits++
		}
	}
	if calls == 0 {
		return 0, 0, fmt.Errorf("no calls in the stream")
	}
	return float64(commits) / float64(calls), calls, sc.Err()
}

const (
	concRounds = 3    // rounds alternating 1 and 64 calls in flight
	conc1Calls = 300  // calls per round with 1 in flight
	conc64     = 64   // calls in flight in the concurrent phase
	conc64Call = 4000 // calls per round with 64 in flight
)

// inflight sends n tools/call echo over p, keeping k outstanding: a writer
// goroutine sends a frame whenever fewer than k are unanswered, and the
// reader matches answers (in any order) to ids. It returns the elapsed time
// and each call's latency.
func inflight(p *rpcProc, k, n int) (time.Duration, []time.Duration, error) {
	return inflightFrames(p, k, n, echoFrame)
}

// inflightFrames is inflight with the call frames that frame makes; lines
// without an id (notifications) are read past.
func inflightFrames(p *rpcProc, k, n int, frame func(int64) []byte) (time.Duration, []time.Duration, error) {
	base := p.nextID
	p.nextID += int64(n)
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = frame(base + int64(i))
	}
	sent := make([]atomic.Int64, n)
	lat := make([]time.Duration, n)
	seen := make([]bool, n)
	slots := make(chan struct{}, k)
	stop := make(chan struct{})
	defer close(stop)
	werr := make(chan error, 1)
	start := time.Now()
	go func() {
		for i := range n {
			select {
			case slots <- struct{}{}:
			case <-stop:
				werr <- nil
				return
			}
			sent[i].Store(int64(time.Since(start)))
			if _, err := p.in.Write(frames[i]); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	for got := 0; got < n; {
		line, err := p.out.ReadSlice('\n')
		now := time.Since(start)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w\nstderr:\n%s", p.name, err, p.stderr)
		}
		if !bytes.Contains(line, []byte(`"id"`)) {
			continue // a notification
		}
		got++
		id, err := responseID(line)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", p.name, err)
		}
		i := id - base
		if i < 0 || i >= int64(n) || seen[i] {
			return 0, nil, fmt.Errorf("%s: unexpected or repeated answer id %d", p.name, id)
		}
		seen[i] = true
		lat[i] = now - time.Duration(sent[i].Load())
		<-slots
	}
	el := time.Since(start)
	if err := <-werr; err != nil {
		return 0, nil, fmt.Errorf("%s: write: %w", p.name, err)
	}
	return el, lat, nil
}

// BenchmarkWrapConcurrent measures recorded tools/calls per second on one
// aegis wrap stdio connection with 1 and with 64 calls in flight (64
// outstanding JSON-RPC ids), alternating in rounds, and the ratio: how much
// the group commit lets concurrent calls share fsyncs; and the aegis
// process's CPU time per call in each phase. A third phase, in the same
// rotation, sends the same calls with 64 in flight straight to the example
// server on a connection of its own: what aegis's throughput is set
// against (P9).
func BenchmarkWrapConcurrent(b *testing.B) {
	aegis, server := benchBinaries(b)
	wrap := startRPC(b, "aegis wrap", wrapArgv(b, aegis, server, b.TempDir()), nil)
	direct := startRPC(b, "direct", []string{server}, nil)
	for _, p := range []*rpcProc{wrap, direct} {
		if _, _, err := inflight(p, conc64, 500); err != nil {
			b.Fatal(err)
		}
	}
	type phase struct {
		p     *rpcProc
		k, n  int
		calls int
		el    time.Duration
		lat   []time.Duration
		cpu   *cpuMeter
	}
	pid := wrap.cmd.Process.Pid
	phases := []*phase{
		{p: wrap, k: 1, n: conc1Calls, cpu: &cpuMeter{pid: pid}},
		{p: wrap, k: conc64, n: conc64Call, cpu: &cpuMeter{pid: pid}},
		{p: direct, k: conc64, n: conc64Call},
	}
	for b.Loop() {
		for r := range concRounds {
			for j := range phases {
				ph := phases[(j+r)%len(phases)]
				ph.cpu.start()
				el, lat, err := inflight(ph.p, ph.k, ph.n)
				ph.cpu.stop()
				if err != nil {
					b.Fatal(err)
				}
				ph.calls += ph.n
				ph.el += el
				ph.lat = append(ph.lat, lat...)
			}
		}
	}
	wrap.close(b)
	direct.close(b)
	dph := phases[2]
	phases = phases[:2]

	rate := func(ph *phase) float64 { return float64(ph.calls) / ph.el.Seconds() }
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "in flight\tcalls\tcalls/s\tp50 µs\tp99 µs\taegis CPU µs/call\t\n")
	for _, ph := range phases {
		u, sy := ph.cpu.perOp(ph.calls)
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.1f\t%.1f\t%.0f\t\n", ph.k, ph.calls, rate(ph), us(quantile(ph.lat, 0.5)), us(quantile(ph.lat, 0.99)), u+sy)
	}
	fmt.Fprintf(tw, "%d (server alone)\t%d\t%.0f\t%.1f\t%.1f\t\t\n", dph.k, dph.calls, rate(dph), us(quantile(dph.lat, 0.5)), us(quantile(dph.lat, 0.99)))
	tw.Flush()
	ratio := rate(phases[1]) / rate(phases[0])
	fmt.Fprintf(&tab, "%d in flight ÷ 1 in flight: %.2f× the calls/s; through aegis ÷ the server alone, %d in flight: %.2f\n", conc64, ratio, conc64, rate(phases[1])/rate(dph))
	b.Logf("recorded tools/call echo through aegis wrap, %d rounds\n%s", concRounds, tab.String())
	b.ReportMetric(rate(phases[0]), "inflight1-calls/s")
	b.ReportMetric(rate(phases[1]), fmt.Sprintf("inflight%d-calls/s", conc64))
	b.ReportMetric(ratio, fmt.Sprintf("inflight%d/inflight1", conc64))
	b.ReportMetric(us(quantile(phases[0].lat, 0.5)), "inflight1-p50-µs")
	b.ReportMetric(us(quantile(phases[1].lat, 0.5)), fmt.Sprintf("inflight%d-p50-µs", conc64))
	fig := map[string]float64{
		fmt.Sprintf("inflight%d/inflight1", conc64):                 ratio,
		fmt.Sprintf("direct-inflight%d-calls/s", conc64):            rate(dph),
		fmt.Sprintf("direct-inflight%d-p50-µs", conc64):             us(quantile(dph.lat, 0.5)),
		fmt.Sprintf("inflight%d/direct-inflight%d", conc64, conc64): rate(phases[1]) / rate(dph),
	}
	b.ReportMetric(rate(phases[1])/rate(dph), fmt.Sprintf("inflight%d/direct", conc64))
	for _, ph := range phases {
		name := fmt.Sprintf("inflight%d", ph.k)
		fig[name+"-calls/s"] = rate(ph)
		fig[name+"-p50-µs"] = us(quantile(ph.lat, 0.5))
		fig[name+"-p99-µs"] = us(quantile(ph.lat, 0.99))
		u, sy := ph.cpu.perOp(ph.calls)
		fig[name+"-aegis-cpu-µs"] = u + sy
	}
	recordBench(b, fig)
}

// timeToInitialize starts argv, writes an initialize request at once, and
// returns the time from just before the start to the arrival of the
// answer's line: what a host waits before it can speak MCP. It then closes
// the process's stdin and waits for it to exit (not timed), so that the
// next start on the same state directory finds it unlocked.
func timeToInitialize(argv []string) (time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	br := bufio.NewReader(out)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	_, werr := io.WriteString(in, initializeFrame)
	line, rerr := br.ReadSlice('\n')
	d := time.Since(t0)
	in.Close()
	done := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, br)
		done <- cmd.Wait()
	}()
	var exit error
	select {
	case exit = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		exit = errors.New("did not exit 30s after stdin was closed")
	}
	switch {
	case werr != nil:
		return 0, fmt.Errorf("%s: write initialize: %w\nstderr:\n%s", argv[0], werr, stderr)
	case rerr != nil:
		return 0, fmt.Errorf("%s: read initialize answer: %w\nstderr:\n%s", argv[0], rerr, stderr)
	case exit != nil:
		return 0, fmt.Errorf("%s: exit: %w\nstderr:\n%s", argv[0], exit, stderr)
	}
	if err := checkResponse(line, 0); err != nil {
		return 0, fmt.Errorf("%s: initialize: %w", argv[0], err)
	}
	return d, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

const (
	startupReps   = 15 // timed starts per series, interleaved
	startupWarmup = 2  // untimed starts per series first (page cache, state dir)
)

// BenchmarkWrapStartup measures the time from starting a process to the
// arrival of its answer to initialize (written at once, as a host does):
//
//   - direct: the example server;
//   - wrap: aegis wrap around it, on a state directory and record that
//     earlier sessions used (a host's usual start; each start adds one);
//   - wrap-fresh: aegis wrap on a new state directory and record each time
//     (the first start ever: the stream is created);
//
// interleaved, startupReps times each, and reports the medians and
//
//	startup-overhead-ms = wrap − direct
func BenchmarkWrapStartup(b *testing.B) {
	aegis, server := benchBinaries(b)
	warmDir, freshDir := b.TempDir(), b.TempDir()
	warm := wrapArgv(b, aegis, server, warmDir)
	fresh := wrapArgv(b, aegis, server, freshDir) // for its key
	nfresh := 0
	freshArgv := func() []string {
		nfresh++
		argv := slices.Clone(fresh)
		for i := range argv {
			switch argv[i] {
			case "--audit":
				argv[i+1] = filepath.Join(freshDir, fmt.Sprintf("calls-%d.aarl", nfresh))
			case "--state-dir":
				argv[i+1] = filepath.Join(freshDir, fmt.Sprintf("state-%d", nfresh))
			}
		}
		return argv
	}
	all := []*latencySeries{
		{name: "direct", one: func() (time.Duration, error) { return timeToInitialize([]string{server}) }},
		{name: "wrap", one: func() (time.Duration, error) { return timeToInitialize(warm) }},
		{name: "wrap-fresh", one: func() (time.Duration, error) { return timeToInitialize(freshArgv()) }},
	}
	warmUp(b, all, startupWarmup)
	for b.Loop() {
		for r := range startupReps {
			runRound(b, all, r, 1)
		}
	}
	fig := map[string]float64{"reps": float64(len(all[0].d))}
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "series\tmin ms\tp50 ms\tmax ms\t\n")
	for _, s := range all {
		fig[s.name+"-p50-ms"] = ms(quantile(s.d, 0.5))
		fig[s.name+"-min-ms"] = ms(quantile(s.d, 0))
		fig[s.name+"-max-ms"] = ms(quantile(s.d, 1))
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", s.name, fig[s.name+"-min-ms"], fig[s.name+"-p50-ms"], fig[s.name+"-max-ms"])
	}
	tw.Flush()
	fig["startup-overhead-ms"] = fig["wrap-p50-ms"] - fig["direct-p50-ms"]
	fig["startup-overhead-fresh-ms"] = fig["wrap-fresh-p50-ms"] - fig["direct-p50-ms"]
	b.Logf("start to initialize answer, %d starts per series\n%swrap − direct: %+.1f ms (fresh state dir: %+.1f ms)",
		startupReps, tab.String(), fig["startup-overhead-ms"], fig["startup-overhead-fresh-ms"])
	b.ReportMetric(fig["direct-p50-ms"], "direct-p50-ms")
	b.ReportMetric(fig["wrap-p50-ms"], "wrap-p50-ms")
	b.ReportMetric(fig["wrap-fresh-p50-ms"], "wrap-fresh-p50-ms")
	b.ReportMetric(fig["startup-overhead-ms"], "startup-overhead-ms")
	recordBench(b, fig)
}

const (
	rssProcs = 3               // idle aegis wrap processes measured at once
	rssIdle  = 2 * time.Second // how long they sit idle after the handshake
)

func mib(kb int64) float64 { return float64(kb) / 1024 }

// BenchmarkWrapIdleRSS measures the resident memory (VmRSS of
// /proc/PID/status, in MiB) of idle aegis wrap processes, each with its
// embedded NATS server, rssIdle after the MCP handshake: the aegis process
// only, not the MCP server it runs (reported apart, as server-rss-MiB).
// Then it drives calls through one of them and measures it again.
func BenchmarkWrapIdleRSS(b *testing.B) {
	aegis, server := benchBinaries(b)
	fig := map[string]float64{}
	for b.Loop() {
		ps := make([]*rpcProc, rssProcs)
		for i := range ps {
			ps[i] = startRPC(b, fmt.Sprintf("aegis wrap %d", i), wrapArgv(b, aegis, server, b.TempDir()), nil)
		}
		time.Sleep(rssIdle)
		var rss, hwm, srv []float64
		for _, p := range ps {
			pid := p.cmd.Process.Pid
			r, err := procKB(pid, "VmRSS")
			if err != nil {
				b.Fatal(err)
			}
			h, err := procKB(pid, "VmHWM")
			if err != nil {
				b.Fatal(err)
			}
			rss, hwm = append(rss, mib(r)), append(hwm, mib(h))
			for _, kid := range childPIDs(pid) {
				if k, err := procKB(kid, "VmRSS"); err == nil {
					srv = append(srv, mib(k))
				}
			}
		}
		const loadCalls = 2000
		if _, _, err := inflight(ps[0], 16, loadCalls); err != nil {
			b.Fatal(err)
		}
		time.Sleep(rssIdle / 2)
		loaded, err := procKB(ps[0].cmd.Process.Pid, "VmRSS")
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range ps {
			p.close(b)
		}
		med := func(v []float64) float64 {
			if len(v) == 0 {
				return 0
			}
			v = slices.Clone(v)
			slices.Sort(v)
			return v[len(v)/2]
		}
		fig = map[string]float64{
			"idle-rss-MiB":     med(rss),
			"idle-rss-max-MiB": slices.Max(rss),
			"idle-hwm-MiB":     med(hwm),
			"server-rss-MiB":   med(srv),
			"loaded-rss-MiB":   mib(loaded),
			"load-calls":       loadCalls,
		}
	}
	b.Logf("VmRSS of %d idle aegis wrap processes %v after the handshake: median %.1f MiB, max %.1f MiB (peak VmHWM %.1f MiB); their example servers %.1f MiB each\n"+
		"after %.0f recorded calls (16 in flight) and %v idle: %.1f MiB",
		rssProcs, rssIdle, fig["idle-rss-MiB"], fig["idle-rss-max-MiB"], fig["idle-hwm-MiB"], fig["server-rss-MiB"],
		fig["load-calls"], rssIdle/2, fig["loaded-rss-MiB"])
	b.ReportMetric(fig["idle-rss-MiB"], "idle-rss-MiB")
	b.ReportMetric(fig["loaded-rss-MiB"], "loaded-rss-MiB")
	recordBench(b, fig)
}

const (
	recordCalls = 10_000 // recorded calls: an intent and an outcome line each
	recordLines = 20_000 // the least the record must hold
	exportReps  = 5      // timed runs of export and of verify, interleaved
)

// runTimed runs argv to its end and returns its wall time and stdout.
func runTimed(argv []string) (time.Duration, []byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, stdout.Bytes(), stderr)
	}
	return d, stdout.Bytes(), nil
}

func countLines(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return bytes.Count(data, []byte{'\n'}), nil
}

// BenchmarkExportVerify makes a record of recordCalls calls (64 in flight)
// through aegis wrap, then times the real commands, as processes, from
// start to exit:
//
//   - aegis export: rebuild the record from the event stream (open the
//     store, read every event, re-derive every line, write and fsync);
//   - aegis verify --key: check the record file offline;
//
// exportReps times each, interleaved, and reports record lines per second
// of the median run of each. It checks that the export equals the record
// and that verify says Verified. Last, it times aegis wrap's start to its
// initialize answer on this state directory (startup with a long history).
func BenchmarkExportVerify(b *testing.B) {
	aegis, server := benchBinaries(b)
	dir := b.TempDir()
	argv, pub := wrapArgvKey(b, aegis, server, dir)
	audit, state := filepath.Join(dir, "calls.aarl"), filepath.Join(dir, "state")
	rebuilt := filepath.Join(dir, "rebuilt.aarl")

	wrap := startRPC(b, "aegis wrap", argv, nil)
	t0 := time.Now()
	if _, _, err := inflight(wrap, conc64, recordCalls); err != nil {
		b.Fatal(err)
	}
	fill := time.Since(t0)
	wrap.close(b)
	lines, err := countLines(audit)
	if err != nil {
		b.Fatal(err)
	}
	if lines < recordLines {
		b.Fatalf("the record holds %d lines, want at least %d", lines, recordLines)
	}

	export := []string{aegis, "export", "--state-dir", state, "--out", rebuilt}
	verify := []string{aegis, "verify", "--key", pub, audit}
	want, err := os.ReadFile(audit)
	if err != nil {
		b.Fatal(err)
	}
	all := []*latencySeries{
		{name: "export", one: func() (time.Duration, error) {
			d, _, err := runTimed(export)
			if err != nil {
				return 0, err
			}
			got, err := os.ReadFile(rebuilt)
			if err != nil {
				return 0, err
			}
			if !bytes.Equal(got, want) {
				return 0, fmt.Errorf("aegis export: %s differs from the record %s", rebuilt, audit)
			}
			return d, nil
		}},
		{name: "verify", one: func() (time.Duration, error) {
			d, out, err := runTimed(verify)
			if err != nil {
				return 0, err
			}
			if !bytes.HasPrefix(out, []byte("Verified (pinned")) {
				return 0, fmt.Errorf("aegis verify: %s", out)
			}
			return d, nil
		}},
	}
	for b.Loop() {
		for r := range exportReps {
			runRound(b, all, r, 1)
		}
	}
	var starts []time.Duration
	for range 3 {
		d, err := timeToInitialize(argv)
		if err != nil {
			b.Fatal(err)
		}
		starts = append(starts, d)
	}
	fig := map[string]float64{
		"record-lines":                float64(lines),
		"record-calls":                recordCalls,
		"record-fill-calls/s":         recordCalls / fill.Seconds(),
		"startup-after-record-p50-ms": ms(quantile(starts, 0.5)),
	}
	for _, s := range all {
		med := quantile(s.d, 0.5)
		fig[s.name+"-p50-s"] = med.Seconds()
		fig[s.name+"-min-s"] = quantile(s.d, 0).Seconds()
		fig[s.name+"-max-s"] = quantile(s.d, 1).Seconds()
		fig[s.name+"-lines/s"] = float64(lines) / med.Seconds()
	}
	b.Logf("a record of %d lines (%d calls made at %.0f calls/s, 64 in flight); median of %d runs each:\n"+
		"aegis export: %.3f s (min %.3f, max %.3f) = %.0f lines/s\n"+
		"aegis verify: %.3f s (min %.3f, max %.3f) = %.0f lines/s\n"+
		"aegis wrap start to initialize answer on this state dir: %.1f ms (median of %d)",
		lines, recordCalls, fig["record-fill-calls/s"], exportReps,
		fig["export-p50-s"], fig["export-min-s"], fig["export-max-s"], fig["export-lines/s"],
		fig["verify-p50-s"], fig["verify-min-s"], fig["verify-max-s"], fig["verify-lines/s"],
		fig["startup-after-record-p50-ms"], len(starts))
	b.ReportMetric(float64(lines), "lines")
	b.ReportMetric(fig["export-lines/s"], "export-lines/s")
	b.ReportMetric(fig["verify-lines/s"], "verify-lines/s")
	recordBench(b, fig)
}

// The latency-vs-in-flight sweep.
var sweepLevels = []int{1, 2, 4, 8, 16, 32, 64} // calls in flight per connection

const (
	sweepProcs   = 4  // aegis wrap processes in the several-process series
	sweepMaxEach = 16 // the most calls in flight on each of them
	sweepRounds  = 2  // rounds over every point, in a rotating order
)

// sweepCalls is how many calls a connection makes at one point and round:
// enough for a p99 at few in flight, and for many windows at many.
func sweepCalls(k int) int { return 150 + 30*k }

// sweepPoint is one configuration and number of calls in flight, with the
// connections that measure it; its JSON is the SweepPoint that
// cmd/aegis-benchreport plots.
type sweepPoint struct {
	benchjson.SweepPoint

	ps  []*rpcProc
	lat []time.Duration
}

// run makes sweepCalls(PerProc) calls on each of the point's connections
// at once, PerProc in flight on each, and adds them to the point.
func (pt *sweepPoint) run() error {
	n := sweepCalls(pt.PerProc)
	lats := make([][]time.Duration, len(pt.ps))
	errs := make([]error, len(pt.ps))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, p := range pt.ps {
		wg.Go(func() { _, lats[i], errs[i] = inflight(p, pt.PerProc, n) })
	}
	wg.Wait()
	el := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	pt.Calls += n * len(pt.ps)
	pt.Seconds += el.Seconds()
	for _, l := range lats {
		pt.lat = append(pt.lat, l...)
	}
	return nil
}

// BenchmarkWrapInflight measures the latency of a tools/call echo, and the
// calls per second, against the number of calls in flight:
//
//   - direct: on one connection to the example server, 1 to 64 in flight;
//   - wrap: on one connection through aegis wrap, 1 to 64 in flight
//     (outstanding JSON-RPC ids on one stdio connection);
//   - wrap×4: through 4 aegis wrap processes at once, each with its own
//     state directory on the same disk, 1 to 16 in flight on each (4 to 64
//     in all).
//
// Every point runs once per round, rounds rotating the order. The points go
// to AEGIS_BENCH_JSON for the plot (cmd/aegis-benchreport -svg).
func BenchmarkWrapInflight(b *testing.B) {
	aegis, server := benchBinaries(b)
	direct := []*rpcProc{startRPC(b, "direct", []string{server}, nil)}
	wrap := []*rpcProc{startRPC(b, "aegis wrap", wrapArgv(b, aegis, server, b.TempDir()), nil)}
	var many []*rpcProc
	for i := range sweepProcs {
		many = append(many, startRPC(b, fmt.Sprintf("aegis wrap %d/%d", i+1, sweepProcs), wrapArgv(b, aegis, server, b.TempDir()), nil))
	}
	manyName := fmt.Sprintf("wrap×%d", sweepProcs)
	var pts []*sweepPoint
	for _, cfg := range []struct {
		name string
		ps   []*rpcProc
	}{{"direct", direct}, {"wrap", wrap}, {manyName, many}} {
		for _, k := range sweepLevels {
			if len(cfg.ps) > 1 && k > sweepMaxEach {
				continue
			}
			pts = append(pts, &sweepPoint{SweepPoint: benchjson.SweepPoint{Config: cfg.name, Procs: len(cfg.ps), PerProc: k, InFlight: k * len(cfg.ps)}, ps: cfg.ps})
		}
	}
	for _, p := range slices.Concat(direct, wrap, many) {
		if _, _, err := inflight(p, 8, 100); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		for r := range sweepRounds {
			for k := range pts {
				if err := pts[(k+r*len(pts)/sweepRounds)%len(pts)].run(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for _, p := range slices.Concat(direct, wrap, many) {
		p.close(b)
	}
	byKey := map[string]*sweepPoint{}
	for _, pt := range pts {
		pt.CallsPerS = float64(pt.Calls) / pt.Seconds
		pt.P50, pt.P90, pt.P99 = us(quantile(pt.lat, 0.5)), us(quantile(pt.lat, 0.9)), us(quantile(pt.lat, 0.99))
		pt.Max = us(slices.Max(pt.lat))
		byKey[fmt.Sprint(pt.Config, pt.InFlight)] = pt
	}
	// Benchmark logs are cut after 10 lines: one row per total in flight.
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "in flight\tdirect p50 µs\twrap p50 µs\twrap p99 µs\twrap calls/s\t%s p50 µs\t%s calls/s\t\n", manyName, manyName)
	for _, k := range sweepLevels {
		d, w := byKey[fmt.Sprint("direct", k)], byKey[fmt.Sprint("wrap", k)]
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t", k, d.P50, w.P50, w.P99, w.CallsPerS)
		if m := byKey[fmt.Sprint(manyName, k)]; m != nil {
			fmt.Fprintf(tw, "%.0f\t%.0f\t", m.P50, m.CallsPerS)
		} else {
			fmt.Fprintf(tw, "\t\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	slow := slices.MaxFunc(pts, func(x, y *sweepPoint) int { return cmp.Compare(x.Max, y.Max) })
	b.Logf("tools/call echo, %d rounds of %d+30×k calls per connection\n%sslowest call: %.1f ms (%s, %d in flight)",
		sweepRounds, sweepCalls(0), tab.String(), slow.Max/1000, slow.Config, slow.InFlight)
	top := sweepLevels[len(sweepLevels)-1]
	b.ReportMetric(byKey[fmt.Sprint("wrap", top)].P50, fmt.Sprintf("wrap-inflight%d-p50-µs", top))
	b.ReportMetric(byKey[fmt.Sprint("wrap", top)].CallsPerS, fmt.Sprintf("wrap-inflight%d-calls/s", top))
	if m := byKey[fmt.Sprint(manyName, sweepProcs*sweepMaxEach)]; m != nil {
		b.ReportMetric(m.CallsPerS, fmt.Sprintf("%s-inflight%d-calls/s", strings.ReplaceAll(manyName, "×", "x"), m.InFlight))
	}
	recordBench(b, map[string]any{"rounds": sweepRounds, "points": pts})
}
