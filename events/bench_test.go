package events

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis-benchreport/benchjson"
	"github.com/aegis-dev/aegis/schemas"
)

// event300 returns an event whose envelope is 300 bytes.
func event300(tb testing.TB, s *Store, sess string) schemas.Event {
	e := newEvent(tb, s, sess, schemas.KindNote, map[string]string{"pad": ""})
	b, _ := e.Encode()
	pad := 300 - len(b)
	if pad < 0 {
		pad = 0
	}
	return newEvent(tb, s, sess, schemas.KindNote, map[string]string{"pad": strings.Repeat("x", pad)})
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

// benchN is the work of one b.Loop iteration: appends (and bare fsyncs)
// per benchmark, so that make bench's -benchtime 1x measures as many.
const benchN = 2000

// idleWait is the pause before each idle-started operation: about what a
// relay waits for the example server's answer to a call.
const idleWait = 300 * time.Microsecond

// BenchmarkAppendVsFsync interleaves a sequential durable Append of a
// 300-byte event with a bare write+fsync of 300 bytes in the same
// directory, so both see the same disk in the same run, and reports the
// median and p99 of each and their ratio. Each b.Loop iteration does
// benchN of each back to back, then benchN/4 of each after an idle wait of
// idleWait, as a relay's commit starts after it waited on a pipe: on a VM
// whose idle vCPUs halt, every hand-off between threads then pays a
// wake-up, and a durable Append has more of them than a bare fsync (the
// server's client reader, the stream's writer, the client writer).
func BenchmarkAppendVsFsync(b *testing.B) {
	dir := stateDir(b)
	s := openStore(b, dir)
	sess, _ := s.NewSession()
	f, err := os.OpenFile(filepath.Join(dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 300)
	ctx := context.Background()
	fsync := func() time.Duration {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	appendOne := func(e schemas.Event) time.Duration {
		t0 := time.Now()
		if _, err := s.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var app, fsy, idleApp, idleFsy []time.Duration
	for b.Loop() {
		events := make([]schemas.Event, benchN+benchN/4)
		for i := range events {
			events[i] = event300(b, s, sess)
		}
		for i := range benchN {
			fsy = append(fsy, fsync())
			app = append(app, appendOne(events[i]))
		}
		for i := range benchN / 4 {
			time.Sleep(idleWait)
			idleFsy = append(idleFsy, fsync())
			time.Sleep(idleWait)
			idleApp = append(idleApp, appendOne(events[benchN+i]))
		}
	}
	fig := map[string]float64{
		"append-p50-µs":              us(quantile(app, 0.5)),
		"append-p99-µs":              us(quantile(app, 0.99)),
		"fsync-p50-µs":               us(quantile(fsy, 0.5)),
		"fsync-p99-µs":               us(quantile(fsy, 0.99)),
		"append-minus-fsync-µs":      us(quantile(app, 0.5) - quantile(fsy, 0.5)),
		"idle-append-p50-µs":         us(quantile(idleApp, 0.5)),
		"idle-fsync-p50-µs":          us(quantile(idleFsy, 0.5)),
		"idle-append-minus-fsync-µs": us(quantile(idleApp, 0.5) - quantile(idleFsy, 0.5)),
		"idle-fsync-minus-fsync-µs":  us(quantile(idleFsy, 0.5) - quantile(fsy, 0.5)),
		"appends":                    float64(len(app) + len(idleApp)),
	}
	if f50 := quantile(fsy, 0.5); f50 > 0 {
		fig["append/fsync-p50"] = float64(quantile(app, 0.5)) / float64(f50)
	}
	for _, k := range []string{"append-p50-µs", "append-p99-µs", "fsync-p50-µs", "fsync-p99-µs", "append/fsync-p50", "idle-append-p50-µs", "idle-fsync-p50-µs", "idle-append-minus-fsync-µs", "idle-fsync-minus-fsync-µs"} {
		if v, ok := fig[k]; ok {
			b.ReportMetric(v, k)
		}
	}
	recordBench(b, fig)
}

// BenchmarkAppendConcurrent measures durable appends per second with 1, 8
// and 64 appenders, each waiting for its own ack before the next append
// (one blocked tools/call per appender). Each b.Loop iteration makes
// benchN appends in all.
func BenchmarkAppendConcurrent(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run("appenders="+strconv.Itoa(n), func(b *testing.B) {
			s := openStore(b, stateDir(b))
			sess, _ := s.NewSession()
			ev := event300(b, s, sess)
			ctx := context.Background()
			var el time.Duration
			total := 0
			for b.Loop() {
				var next atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for range n {
					wg.Go(func() {
						for next.Add(1) <= benchN {
							if _, err := s.Append(ctx, ev); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				el += time.Since(start)
				total += benchN
			}
			fig := map[string]float64{"events/s": float64(total) / el.Seconds(), "appends": float64(total)}
			b.ReportMetric(fig["events/s"], "events/s")
			info, err := s.stream.Info(ctx)
			if err == nil && info.State.Msgs > 0 {
				// The stream also holds what openStore wrote; it is
				// negligible next to benchN.
				fig["events/commit"] = float64(total) / float64(info.State.Msgs)
				b.ReportMetric(fig["events/commit"], "events/commit")
			}
			recordBench(b, fig)
		})
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// recordBench merges v, the figures of the benchmark b, into the JSON file
// named by AEGIS_BENCH_JSON (nothing if it is unset), under
// "benchmarks"/b.Name(): the file make bench hands to cmd/aegis-benchreport.
// (The proxy benchmarks write the same file, and describe the machine in
// it.) Benchmarks run one at a time, so a read-modify-rename is enough.
func recordBench(b *testing.B, v any) {
	b.Helper()
	path := os.Getenv("AEGIS_BENCH_JSON")
	if path == "" {
		return
	}
	if err := benchjson.Merge(path, b.Name(), v, nil); err != nil {
		b.Errorf("AEGIS_BENCH_JSON: %v", err)
	}
}
