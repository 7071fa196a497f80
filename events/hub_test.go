package events

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/schemas"
)

func appendNotes(t testing.TB, st *Store, n int) {
	t.Helper()
	session, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	appendSessionNotes(t, st, session, n)
}

// openLeaf opens a store in a temporary directory, linked to the hub h
// as host; it closes when the test ends.
func openLeaf(t testing.TB, h *hubtest.Hub, host string) *Store {
	t.Helper()
	st, err := Open(context.Background(), Config{Dir: filepath.Join(t.TempDir(), "state"), Hub: &HubConfig{URLs: h.LeafURLs(), Host: host}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

// waitMirror waits until the hub's mirror of host holds n messages. If it
// does not, the failure gives the mirror's sequences: a mirror that is
// behind ends before n, one that skipped messages (a gap: an acknowledged
// event the hub does not hold) ends at n with fewer.
func waitMirror(t testing.TB, js jetstream.JetStream, host string, n uint64, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last uint64
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, MirrorName(host))
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil {
				last = info.State.Msgs
				if last == n {
					cancel()
					return
				}
			}
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	state := "unknown"
	if s, err := js.Stream(context.Background(), MirrorName(host)); err == nil {
		if info, err := s.Info(context.Background()); err == nil && info.Mirror != nil {
			leader := ""
			if info.Cluster != nil {
				leader = info.Cluster.Leader
			}
			state = fmt.Sprintf("sequences %d to %d, %d deleted; leader %q; lag %d, active %v ago, error %v",
				info.State.FirstSeq, info.State.LastSeq, info.State.NumDeleted, leader, info.Mirror.Lag, info.Mirror.Active, info.Mirror.Error)
			if info.State.LastSeq >= n && info.State.Msgs < n {
				state += fmt.Sprintf("; a gap: it skipped %d message(s) the host's stream holds", n-info.State.Msgs)
			}
		}
	}
	t.Fatalf("the mirror of %s holds %d messages, not %d (its source: %s)", host, last, n, state)
}

// loadLeaves appends to each store from 4 appenders, each waiting for its
// own ack, until stop; counts[i] is how many events store i acknowledged.
func loadLeaves(t *testing.T, stores []*Store, counts []atomic.Int64, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, st := range stores {
		session, err := st.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ev, err := st.NewEvent(session, schemas.KindNote, map[string]any{"text": "load"})
					if err == nil {
						var r *Receipt
						if r, err = st.Enqueue(ev); err == nil {
							_, err = r.Wait(context.Background())
						}
					}
					if err != nil {
						t.Error(err)
						return
					}
					counts[i].Add(1)
					// A steady load, not a flat-out one: 4 writers of
					// 50 events a second each keep every link busy, and
					// the test leaves the machine's CPU to the others.
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
		}
	}
	return &wg
}

// Three embedded streams, linked to a real three-node hub as leaves and
// loaded all along, are mirrored there: through a node killed with
// SIGKILL, and through the whole hub down for 10 s, during which every
// leaf goes on acknowledging events. Each mirror then holds its host's
// stream whole, each message once and in order, on three replicas.
func TestHubMirrorsTheStream(t *testing.T) {
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.New(t, 3)
	ctx := context.Background()
	hosts := []string{"laptop-1", "laptop-2", "laptop-3"}
	stores := make([]*Store, len(hosts))
	for i, host := range hosts {
		st, err := Open(ctx, Config{Dir: filepath.Join(t.TempDir(), "state"), Hub: &HubConfig{URLs: h.LeafURLs(), Host: host}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		stores[i] = st
	}
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	time.Sleep(time.Second) // linked first: a mirror made then pulls at once
	for _, host := range hosts {
		if _, err := js.CreateStream(ctx, MirrorConfig(host, 3)); err != nil {
			t.Fatalf("enroll: %v", err)
		}
	}
	counts := make([]atomic.Int64, len(hosts))
	stop := make(chan struct{})
	load := loadLeaves(t, stores, counts, stop)

	time.Sleep(2 * time.Second)
	h.Kill(h.Nodes[0]) // kill -9 one node under load
	time.Sleep(2 * time.Second)
	h.Start(h.Nodes[0])
	time.Sleep(2 * time.Second)
	for _, nd := range h.Nodes { // the whole hub, for 5 s
		h.Kill(nd)
	}
	before := make([]int64, len(hosts))
	for i := range counts {
		before[i] = counts[i].Load()
	}
	time.Sleep(5 * time.Second)
	for i, host := range hosts {
		if n := counts[i].Load() - before[i]; n == 0 {
			t.Errorf("%s acknowledged nothing while the hub was down", host)
		}
	}
	for _, nd := range h.Nodes {
		h.Start(nd)
	}
	time.Sleep(2 * time.Second)
	close(stop)
	load.Wait()

	nc.Close()
	nc, js = h.JetStream(ctx)
	defer nc.Close()
	for i, host := range hosts {
		st := stores[i]
		var (
			last   uint64
			events int64
			ids    = map[uint64][]string{} // the host's events, by message
		)
		if err := st.Replay(ctx, Position{}, func(r Record) error {
			last, events = r.Pos.Seq, events+1
			ids[r.Pos.Seq] = append(ids[r.Pos.Seq], r.Event.ID)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if events < counts[i].Load() {
			t.Fatalf("%s holds %d events, %d were acknowledged", host, events, counts[i].Load())
		}
		waitMirror(t, js, host, last, 3*time.Minute)
		mirror, err := js.Stream(ctx, MirrorName(host))
		if err != nil {
			t.Fatal(err)
		}
		info, err := mirror.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.LastSeq != last || len(info.Cluster.Replicas)+1 != 3 {
			t.Errorf("the mirror of %s ends at %d (the host at %d), with %d replicas besides its leader", host, info.State.LastSeq, last, len(info.Cluster.Replicas))
		}
		// Each message once, in order, as the host holds it.
		for seq := uint64(1); seq <= last; seq++ {
			m, err := mirror.GetMsg(ctx, seq)
			if err != nil {
				t.Fatalf("%s: mirror message %d: %v", host, seq, err)
			}
			evs, err := decodeMessage(m.Data, m.Header)
			if err != nil || len(evs) != len(ids[seq]) {
				t.Fatalf("%s: mirror message %d holds %d events, the host's %d (%v)", host, seq, len(evs), len(ids[seq]), err)
			}
			for k, e := range evs {
				if e.ID != ids[seq][k] {
					t.Fatalf("%s: mirror message %d holds %s at %d, the host %s", host, seq, e.ID, k, ids[seq][k])
				}
			}
		}
	}
}

// A host's link credentials, configured as LeafUser says, carry its
// stream to its mirror and nothing else: through them the host cannot
// delete or purge its own mirror, read or write another host's, or reach
// the hub's JetStream API at all, and they are refused on the client
// port.
func TestHubLeafCredentialsReachOnlyTheirMirror(t *testing.T) {
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	seed1, pub1, err := NewLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	_, pub2, err := NewLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.NewSecured(t, 3, LeafUser("laptop-1", pub1), LeafUser("laptop-2", pub2))
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	for _, host := range []string{"laptop-1", "laptop-2"} {
		if _, err := js.CreateStream(ctx, MirrorConfig(host, 3)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := Open(ctx, Config{Dir: filepath.Join(t.TempDir(), "state"), Hub: &HubConfig{URLs: h.LeafURLs(), Host: "laptop-1", NkeySeed: string(seed1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	appendNotes(t, st, 20)
	waitMirror(t, js, "laptop-1", 20, 90*time.Second)

	// The host, through its own link, tries the hub's JetStream API.
	hubJS, err := jetstream.NewWithDomain(st.nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	try := func(what string, f func(context.Context) error) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := f(c); err == nil {
			t.Errorf("through the host's link: %s succeeded", what)
		}
	}
	try("delete its own mirror", func(c context.Context) error { return hubJS.DeleteStream(c, MirrorName("laptop-1")) })
	try("read another host's mirror", func(c context.Context) error { _, err := hubJS.Stream(c, MirrorName("laptop-2")); return err })
	try("list the hub's streams", func(c context.Context) error { _, err := hubJS.AccountInfo(c); return err })
	try("purge its own mirror", func(c context.Context) error {
		s, err := hubJS.Stream(c, MirrorName("laptop-1"))
		if err != nil {
			return err
		}
		return s.Purge(c)
	})
	// On the client port the host's key is no user at all.
	kp, err := nkeys.FromSeed(seed1)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := nats.Connect(strings.Replace(h.ClientURLs()[0], "admin:admin@", "", 1), nats.Nkey(pub1, kp.Sign)); err == nil {
		c.Close()
		t.Error("the host's key connects as a client")
	}
	for _, host := range []string{"laptop-1", "laptop-2"} {
		s, err := js.Stream(ctx, MirrorName(host))
		if err != nil {
			t.Fatalf("the mirror of %s is gone: %v", host, err)
		}
		info, _ := s.Info(ctx)
		if host == "laptop-1" && info.State.Msgs != 20 {
			t.Errorf("the mirror of laptop-1 holds %d messages", info.State.Msgs)
		}
	}
}

// A mirror is read without reading it whole: the last checkpoint of a
// record file (by the checkpoints' own subject, also when a later one is
// of another file), the last session, and one session's events only.
func TestMirrorReadsBySubject(t *testing.T) {
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.New(t, 3)
	ctx := context.Background()
	st := openLeaf(t, h, "laptop-1")
	var sessions []string
	for _, path := range []string{"/a.aarl", "/b.aarl"} {
		sess, err := st.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, sess)
		for _, ev := range []struct {
			kind    schemas.Kind
			payload any
		}{
			{schemas.KindSessionOpened, map[string]any{"audit_path": path}},
			{schemas.KindNote, map[string]any{"text": path}},
			{schemas.KindRecordCheckpoint, map[string]any{"audit_path": path}},
		} {
			e, err := st.NewEvent(sess, ev.kind, ev.payload)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	time.Sleep(time.Second)
	if _, err := js.CreateStream(ctx, MirrorConfig("laptop-1", 3)); err != nil {
		t.Fatal(err)
	}
	waitMirror(t, js, "laptop-1", 6, 3*time.Minute)

	m, err := OpenMirror(ctx, HubAdmin{URLs: h.ClientURLs()}, "laptop-1")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	of := func(path string) func(schemas.Event) bool {
		return func(e schemas.Event) bool { return strings.Contains(string(e.Payload), path) }
	}
	for i, path := range []string{"/a.aarl", "/b.aarl"} {
		r, ok, err := m.LastCheckpoint(ctx, of(path))
		if err != nil || !ok || r.Event.Session != sessions[i] || r.Event.Kind != schemas.KindRecordCheckpoint {
			t.Errorf("last checkpoint of %s: %+v %v %v", path, r, ok, err)
		}
	}
	if _, ok, err := m.LastCheckpoint(ctx, of("/c.aarl")); ok || err != nil {
		t.Errorf("a checkpoint of a file never recorded: %v %v", ok, err)
	}
	if last, ok, err := m.LastSession(ctx); err != nil || !ok || last != sessions[1] {
		t.Errorf("last session %q %v %v, want %s", last, ok, err, sessions[1])
	}
	var got []string
	if err := m.ReplaySession(ctx, sessions[0], func(r Record) error {
		got = append(got, string(r.Event.Kind)+" "+r.Event.Session)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"session.opened " + sessions[0], "note " + sessions[0], "record.checkpoint " + sessions[0]}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("session %s replays as %q", sessions[0], got)
	}
}
