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

// BenchmarkAppendVsFsync interleaves a sequential durable Append of a
// 300-byte event with a bare write+fsync of 300 bytes in the same
// directory, so both see the same disk in the same run, and reports the
// median and p99 of each and their ratio.
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
	events := make([]schemas.Event, b.N)
	for i := range events {
		events[i] = event300(b, s, sess)
	}
	app := make([]time.Duration, 0, b.N)
	fsy := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.Append(ctx, events[i]); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		fsy = append(fsy, t1.Sub(t0))
		app = append(app, t2.Sub(t1))
	}
	b.StopTimer()
	b.ReportMetric(float64(quantile(app, 0.5).Microseconds()), "append-p50-µs")
	b.ReportMetric(float64(quantile(app, 0.99).Microseconds()), "append-p99-µs")
	b.ReportMetric(float64(quantile(fsy, 0.5).Microseconds()), "fsync-p50-µs")
	b.ReportMetric(float64(quantile(fsy, 0.99).Microseconds()), "fsync-p99-µs")
	if f50 := quantile(fsy, 0.5); f50 > 0 {
		b.ReportMetric(float64(quantile(app, 0.5))/float64(f50), "append/fsync-p50")
	}
}

// BenchmarkAppendConcurrent measures durable appends per second with 1, 8
// and 64 appenders, each waiting for its own ack before the next append
// (one blocked tools/call per appender).
func BenchmarkAppendConcurrent(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run("appenders="+strconv.Itoa(n), func(b *testing.B) {
			s := openStore(b, stateDir(b))
			sess, _ := s.NewSession()
			ev := event300(b, s, sess)
			ctx := context.Background()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for a := 0; a < n; a++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						e := ev
						if _, err := s.Append(ctx, e); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
			info, err := s.stream.Info(ctx)
			if err == nil && info.State.Msgs > 0 {
				b.ReportMetric(float64(b.N)/float64(info.State.Msgs), "events/commit")
			}
		})
	}
}
