package events

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events/hubtest"
)

// hubLoads are the loads of BenchmarkHubMirror: how many leaves, and how
// many durable events per second each (the rates the mirror's lag goals
// are stated at: 250 ms p99 for three leaves at 200 a second).
var hubLoads = []struct {
	name         string
	leaves, rate int
}{{"leaves=1", 1, 1000}, {"leaves=4", 4, 1000}, {"leaves=3-at-200", 3, 200}}

// hubLoad is how long each run of BenchmarkHubMirror loads the leaves.
const hubLoad = 5 * time.Second

// BenchmarkHubMirror loads leaves of a real three-node hub (on this
// machine) with durable events at a steady rate each (hubLoads; 8
// appenders per leaf, each waiting for its own ack, as calls in flight
// do) for hubLoad, and reports how long each event took from its local
// ack to its arrival in the hub's mirror (p50, p99, max), the events per
// second mirrored per leaf, and how busy the hub's nodes and this process
// (the leaves, the load and the readers of the mirrors) were, in cores.
func BenchmarkHubMirror(b *testing.B) {
	for _, load := range hubLoads {
		leaves, rate := load.leaves, load.rate
		b.Run(load.name, func(b *testing.B) {
			h := hubtest.New(b, 3)
			ctx := context.Background()
			nc, js := h.JetStream(ctx)
			defer nc.Close()
			stores := make([]*Store, leaves)
			for i := range stores {
				host := fmt.Sprintf("bench-%d", i)
				st, err := Open(ctx, Config{Dir: filepath.Join(b.TempDir(), "state"), Hub: &HubConfig{URLs: h.LeafURLs(), Host: host}})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close(ctx)
				stores[i] = st
				appendNotes(b, st, 1)
			}
			// Linked and pulled before the clock starts. Made once its host
			// is linked, a mirror pulls at once; one made before waits out
			// the hub's retry backoff.
			time.Sleep(time.Second)
			for i := range stores {
				if _, err := js.CreateStream(ctx, MirrorConfig(fmt.Sprintf("bench-%d", i), 3)); err != nil {
					b.Fatal(err)
				}
			}
			for i := range stores {
				waitMirror(b, js, fmt.Sprintf("bench-%d", i), 1, 5*time.Minute)
			}
			var (
				mu   sync.Mutex
				lags []time.Duration
				got  int
			)
			for b.Loop() {
				acked := make([]sync.Map, leaves) // seq -> ack time
				appended := make([]atomic.Int64, leaves)
				var watch sync.WaitGroup
				stop := make(chan struct{})
				start := time.Now()
				hubCPU, selfCPU := h.CPU(), processCPU()
				for i, st := range stores {
					watch.Add(1)
					go func() {
						defer watch.Done()
						arrived := followMirror(b, js, fmt.Sprintf("bench-%d", i), stop)
						mu.Lock()
						defer mu.Unlock()
						got += len(arrived)
						for seq, at := range arrived {
							if t, ok := acked[i].Load(seq); ok {
								lags = append(lags, max(at.Sub(t.(time.Time)), 0))
							}
						}
					}()
					go loadLeaf(b, st, rate, &acked[i], &appended[i], stop)
				}
				time.Sleep(hubLoad)
				busy := time.Since(start).Seconds()
				hubCPU, selfCPU = h.CPU()-hubCPU, processCPU()-selfCPU
				close(stop)
				// Every event was acked while the load ran; the mirrors
				// are read for a second longer, to take the last ones in.
				elapsed := time.Since(start)
				watch.Wait()
				var loaded int64
				for i := range appended {
					loaded += appended[i].Load()
				}
				fig := map[string]float64{
					"lag-p50-ms":             ms(quantile(lags, 0.5)),
					"lag-p99-ms":             ms(quantile(lags, 0.99)),
					"lag-max-ms":             ms(quantile(lags, 1)),
					"hub-cores":              hubCPU.Seconds() / busy,
					"leaves-cores":           selfCPU.Seconds() / busy,
					"mirrored-events/s/leaf": float64(got) / elapsed.Seconds() / float64(leaves),
					"acked-events/s/leaf":    float64(loaded) / elapsed.Seconds() / float64(leaves),
				}
				for k, v := range fig {
					b.ReportMetric(v, k)
				}
				recordBench(b, fig)
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadLeaf appends rate events a second to st from 8 appenders, each
// waiting for its own ack, noting each event's ack time by the sequence of
// the message that holds it (the first ack of a message's events is its
// time) and counting the events in n, until stop.
func loadLeaf(b *testing.B, st *Store, rate int, acked *sync.Map, n *atomic.Int64, stop chan struct{}) {
	session, err := st.NewSession()
	if err != nil {
		b.Error(err)
		return
	}
	// A ticker of a millisecond drops the ticks a busy machine is late
	// for, so the load is paced by the clock instead: each wake-up hands
	// out every event due by now.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	work := make(chan struct{}, rate)
	start, sent := time.Now(), 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				ev := event300(b, st, session)
				r, err := st.Enqueue(ev)
				if err != nil {
					b.Error(err)
					return
				}
				pos, err := r.Wait(context.Background())
				if err != nil {
					b.Error(err)
					return
				}
				acked.LoadOrStore(pos.Seq, time.Now())
				n.Add(1)
			}
		}()
	}
	for {
		select {
		case <-stop:
			// What the appenders had not taken yet is not appended: the
			// figures are of the load while it ran.
		drain:
			for {
				select {
				case <-work:
				default:
					break drain
				}
			}
			close(work)
			wg.Wait()
			return
		case now := <-tick.C:
			due := int(now.Sub(start).Seconds() * float64(rate))
		give:
			for ; sent < due; sent++ {
				select {
				case work <- struct{}{}:
				default: // the appenders are a second behind: the load is what they take
					sent = due
					break give
				}
			}
		}
	}
}

// followMirror reads the mirror of host as it grows, from its end when it
// is called until nothing more comes within a second of stop, and returns
// when each message arrived, by sequence.
func followMirror(b *testing.B, js jetstream.JetStream, host string, stop chan struct{}) map[uint64]time.Time {
	ctx := context.Background()
	arrived := map[uint64]time.Time{}
	s, err := js.Stream(ctx, MirrorName(host))
	if err != nil {
		b.Error(err)
		return arrived
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Error(err)
		return arrived
	}
	cons, err := js.OrderedConsumer(ctx, MirrorName(host), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: info.State.LastSeq + 1,
	})
	if err != nil {
		b.Error(err)
		return arrived
	}
	it, err := cons.Messages()
	if err != nil {
		b.Error(err)
		return arrived
	}
	defer it.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		now := time.Now()
		if err != nil {
			select {
			case <-stop:
				return arrived
			default:
				continue
			}
		}
		if meta, err := m.Metadata(); err == nil {
			arrived[meta.Sequence.Stream] = now
		}
	}
}

// BenchmarkHubCallCost interleaves sequential durable appends of a
// 300-byte event (what a recorded call waits for) on a store linked to a
// real hub whose mirror pulls it, and on one with no hub, and reports the
// p50 of each and their difference: what the link adds to a call.
func BenchmarkHubCallCost(b *testing.B) {
	h := hubtest.New(b, 3)
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	linked, err := Open(ctx, Config{Dir: filepath.Join(b.TempDir(), "state"), Hub: &HubConfig{URLs: h.LeafURLs(), Host: "cost"}})
	if err != nil {
		b.Fatal(err)
	}
	defer linked.Close(ctx)
	alone := openStore(b, stateDir(b))
	appendNotes(b, linked, 1)
	time.Sleep(time.Second)
	if _, err := js.CreateStream(ctx, MirrorConfig("cost", 3)); err != nil {
		b.Fatal(err)
	}
	waitMirror(b, js, "cost", 1, 5*time.Minute)
	s1, _ := linked.NewSession()
	s2, _ := alone.NewSession()
	appendOne := func(st *Store, sess string) time.Duration {
		e := event300(b, st, sess)
		t0 := time.Now()
		if _, err := st.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var withHub, without []time.Duration
	for b.Loop() {
		for range benchN {
			withHub = append(withHub, appendOne(linked, s1))
			without = append(without, appendOne(alone, s2))
		}
	}
	fig := map[string]float64{
		"hub-append-p50-µs":   us(quantile(withHub, 0.5)),
		"alone-append-p50-µs": us(quantile(without, 0.5)),
		"hub-minus-alone-µs":  us(quantile(withHub, 0.5) - quantile(without, 0.5)),
		"hub-append-p99-µs":   us(quantile(withHub, 0.99)),
		"alone-append-p99-µs": us(quantile(without, 0.99)),
	}
	for k, v := range fig {
		b.ReportMetric(v, k)
	}
	recordBench(b, fig)
}
