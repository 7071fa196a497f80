// What a recorded tools/call costs, measured end to end with real processes.
//
// Run both benchmarks (about 20 s on a 2-core machine; the binaries are
// built once per run, into a temporary directory):
//
//	go test -run '^$' -bench BenchmarkWrap -benchtime 1x ./proxy/
//
// ('BenchmarkWrap$' or 'BenchmarkWrapConcurrent' runs one of them.)
// Each benchmark does a fixed amount of work per b.Loop iteration; with
// -benchtime 1x it runs exactly once. Absolute times on a small VM are
// noisy: compare the figures of one run with each other, not across runs.

package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"
)

const (
	wrapRounds   = 5   // rounds; the order of the series rotates each round
	wrapPerRound = 300 // calls per series per round
	wrapWarmup   = 50  // calls per series before the first round, not measured
)

// latencySeries is one measured configuration.
type latencySeries struct {
	name string
	one  func() (time.Duration, error)
	d    []time.Duration
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
//
// and (fsync2) two bare 300-byte write+fsync in the directory holding the
// state directory. The series run interleaved in rounds so that noise hits them
// alike. It reports the median of each and
//
//	call-overhead-minus-2fsync-µs = wrap-call − direct − fsync2
//	frame-overhead-µs             = wrap-ping − pipe-ping
//
// and commits/call: how many JetStream commits (each one fsync) a recorded
// call waited for, read back from the stream after the run.
func BenchmarkWrap(b *testing.B) {
	aegis, server := benchBinaries(b)
	dir := b.TempDir()

	direct := startRPC(b, "direct", []string{server}, nil)
	rargv, renv := relayArgv(b, []string{server})
	pipe := startRPC(b, "pipe", rargv, renv)
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
		{name: "pipe-ping", one: rpcCall(pipe, pingFrame)},
		{name: "wrap-ping", one: rpcCall(wrap, pingFrame)},
		{name: "wrap-call", one: rpcCall(wrap, echoFrame)},
		{name: "fsync2", one: fsync2(probe)},
	}
	for _, s := range all {
		for range wrapWarmup {
			if _, err := s.one(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		for r := range wrapRounds {
			for k := range all {
				s := all[(k+r)%len(all)]
				for range wrapPerRound {
					d, err := s.one()
					if err != nil {
						b.Fatal(err)
					}
					s.d = append(s.d, d)
				}
			}
		}
	}
	direct.close(b)
	pipe.close(b)
	wrap.close(b)

	med := map[string]time.Duration{}
	for _, s := range all {
		med[s.name] = quantile(s.d, 0.5)
	}
	callOver := med["wrap-call"] - med["direct"]
	minus2 := callOver - med["fsync2"]
	frameOver := med["wrap-ping"] - med["pipe-ping"]
	commits, calls, cerr := commitsPerCall(aegis, filepath.Join(dir, "state"))
	note := map[string]string{
		"pipe":      fmt.Sprintf("+%.1f over direct", us(med["pipe"]-med["direct"])),
		"pipe-ping": fmt.Sprintf("+%.1f over direct-ping", us(med["pipe-ping"]-med["direct-ping"])),
		"wrap-ping": fmt.Sprintf("+%.1f over pipe-ping (frame-overhead)", us(frameOver)),
		"wrap-call": fmt.Sprintf("+%.1f over direct, %+.1f beyond fsync2", us(callOver), us(minus2)),
		"fsync2":    "2 × write+fsync of 300 B beside the state dir",
	}
	// Benchmark logs are cut after 10 lines: keep the table to 9.
	var tab strings.Builder
	if cerr != nil {
		fmt.Fprintf(&tab, "%d rounds × %d calls per series; commits per recorded call unknown: %v\n", wrapRounds, wrapPerRound, cerr)
	} else {
		fmt.Fprintf(&tab, "%d rounds × %d calls per series; a recorded call waited for %.2f commits (2 at best) over %d calls\n", wrapRounds, wrapPerRound, commits, calls)
	}
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "series\tp50 µs\tp90 µs\tp99 µs\t\n")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t", s.name, us(med[s.name]), us(quantile(s.d, 0.9)), us(quantile(s.d, 0.99)))
		if n := note[s.name]; n != "" {
			fmt.Fprintf(tw, "  %s", n)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	b.Log(strings.TrimSuffix(tab.String(), "\n"))

	for _, s := range all {
		b.ReportMetric(us(med[s.name]), s.name+"-p50-µs")
	}
	b.ReportMetric(us(minus2), "call-overhead-minus-2fsync-µs")
	b.ReportMetric(us(frameOver), "frame-overhead-µs")
	if cerr == nil {
		b.ReportMetric(commits, "commits/call")
	}
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
	base := p.nextID
	p.nextID += int64(n)
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = echoFrame(base + int64(i))
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
	for range n {
		line, err := p.out.ReadSlice('\n')
		now := time.Since(start)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w\nstderr:\n%s", p.name, err, p.stderr)
		}
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
// the group commit lets concurrent calls share fsyncs.
func BenchmarkWrapConcurrent(b *testing.B) {
	aegis, server := benchBinaries(b)
	wrap := startRPC(b, "aegis wrap", wrapArgv(b, aegis, server, b.TempDir()), nil)
	if _, _, err := inflight(wrap, conc64, 500); err != nil {
		b.Fatal(err)
	}
	type phase struct {
		k, n  int
		calls int
		el    time.Duration
		lat   []time.Duration
	}
	phases := []*phase{{k: 1, n: conc1Calls}, {k: conc64, n: conc64Call}}
	for b.Loop() {
		for r := range concRounds {
			for j := range phases {
				ph := phases[(j+r)%len(phases)]
				el, lat, err := inflight(wrap, ph.k, ph.n)
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

	rate := func(ph *phase) float64 { return float64(ph.calls) / ph.el.Seconds() }
	var tab strings.Builder
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "in flight\tcalls\tcalls/s\tp50 µs\tp99 µs\t\n")
	for _, ph := range phases {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.1f\t%.1f\t\n", ph.k, ph.calls, rate(ph), us(quantile(ph.lat, 0.5)), us(quantile(ph.lat, 0.99)))
	}
	tw.Flush()
	ratio := rate(phases[1]) / rate(phases[0])
	fmt.Fprintf(&tab, "%d in flight ÷ 1 in flight: %.2f× the calls/s\n", conc64, ratio)
	b.Logf("recorded tools/call echo through aegis wrap, %d rounds\n%s", concRounds, tab.String())
	b.ReportMetric(rate(phases[0]), "inflight1-calls/s")
	b.ReportMetric(rate(phases[1]), fmt.Sprintf("inflight%d-calls/s", conc64))
	b.ReportMetric(ratio, fmt.Sprintf("inflight%d/inflight1", conc64))
	b.ReportMetric(us(quantile(phases[0].lat, 0.5)), "inflight1-p50-µs")
	b.ReportMetric(us(quantile(phases[1].lat, 0.5)), fmt.Sprintf("inflight%d-p50-µs", conc64))
}
