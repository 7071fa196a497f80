package events

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
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
	for i := range n {
		ev, err := st.NewEvent(session, schemas.KindNote, map[string]any{"text": fmt.Sprint("note ", i)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.Enqueue(ev)
		if err == nil {
			_, err = r.Wait(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitMirror waits until the hub's mirror of host holds n messages.
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
	t.Fatalf("the mirror of %s holds %d messages, not %d", host, last, n)
}

// The embedded stream, linked to a real three-node hub as a leaf, is
// mirrored there; the mirror keeps its replicas when a hub node is killed,
// and catches up, once each message and in order, after the whole hub
// was down while events were acknowledged locally.
func TestHubMirrorsTheStream(t *testing.T) {
	h := hubtest.New(t, 3)
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	st, err := Open(ctx, Config{Dir: filepath.Join(t.TempDir(), "state"), Hub: &HubConfig{URLs: h.LeafURLs(), Host: "laptop-1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	appendNotes(t, st, 50)
	if _, err := js.CreateStream(ctx, MirrorConfig("laptop-1", 3)); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	waitMirror(t, js, "laptop-1", 50, 30*time.Second)

	// kill -9 one node: the other two keep the mirror and take more.
	h.Kill(h.Nodes[0])
	appendNotes(t, st, 50)
	waitMirror(t, js, "laptop-1", 100, 60*time.Second)
	h.Start(h.Nodes[0])

	// The whole hub down: events are still acknowledged here, and wait.
	for _, nd := range h.Nodes {
		h.Kill(nd)
	}
	appendNotes(t, st, 100)
	for _, nd := range h.Nodes {
		h.Start(nd)
	}
	nc.Close()
	nc, js = h.JetStream(ctx)
	defer nc.Close()
	waitMirror(t, js, "laptop-1", 200, 60*time.Second)

	// Each message once, in order, as the host holds it.
	mirror, err := js.Stream(ctx, MirrorName("laptop-1"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := mirror.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Cluster.Replicas)+1 != 3 {
		t.Errorf("the mirror has %d replicas besides its leader, want 2", len(info.Cluster.Replicas))
	}
	var seq uint64
	if err := st.Replay(ctx, Position{}, func(r Record) error {
		seq++
		m, err := mirror.GetMsg(ctx, r.Pos.Seq)
		if err != nil {
			return fmt.Errorf("mirror message %d: %w", r.Pos.Seq, err)
		}
		evs, err := decodeMessage(m.Data, m.Header)
		if err != nil || r.Pos.Index >= len(evs) || evs[r.Pos.Index].ID != r.Event.ID {
			return fmt.Errorf("mirror message %d does not hold the host's event %s at %d (%v)", r.Pos.Seq, r.Event.ID, r.Pos.Index, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seq != 200 {
		t.Fatalf("the host's stream holds %d events", seq)
	}
}

// A host's link credentials, configured as LeafUser says, carry its
// stream to its mirror and nothing else: through them the host cannot
// delete or purge its own mirror, read or write another host's, or reach
// the hub's JetStream API at all, and they are refused on the client
// port.
func TestHubLeafCredentialsReachOnlyTheirMirror(t *testing.T) {
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
