package events

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/schemas"
)

func appendNotes(t *testing.T, st *Store, n int) {
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
func waitMirror(t *testing.T, js jetstream.JetStream, host string, n uint64, limit time.Duration) {
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
