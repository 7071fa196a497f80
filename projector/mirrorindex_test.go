package projector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/projector"
)

// countingSource counts what an index reads of its source's stream.
type countingSource struct {
	projector.IndexSource
	records int
	froms   []events.Position
}

func (c *countingSource) Replay(ctx context.Context, from events.Position, fn func(events.Record) error) error {
	c.froms = append(c.froms, from)
	return c.IndexSource.Replay(ctx, from, func(r events.Record) error {
		c.records++
		return fn(r)
	})
}

// hubHost is a host's store, linked to a hub that mirrors it.
type hubHost struct {
	name  string
	st    *events.Store
	audit string
}

// addSessions records n sessions of every kind (crashSession) on the host
// and waits until the hub's mirror holds all of its stream.
func (h hubHost) addSessions(t *testing.T, js jetstream.JetStream, rnd *rand.Rand, n int) uint64 {
	t.Helper()
	ctx := context.Background()
	for range n {
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: h.st, Key: projector.InsecureDevKey(), AuditPath: h.audit})
		if err != nil {
			t.Fatal(err)
		}
		if err := crashSession(ctx, rnd, sess, []string{"dev"}); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	if err := h.st.Replay(ctx, events.Position{}, func(r events.Record) error { last = r.Pos.Seq; return nil }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := js.Stream(ctx, events.MirrorName(h.name))
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		if err == nil && info.State.LastSeq == last && info.State.Msgs == last {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror of %s does not reach message %d: %+v (%v)", h.name, last, info, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventsFrom counts the host's events at or after from.
func (h hubHost) eventsFrom(t *testing.T, from events.Position) int {
	t.Helper()
	n := 0
	if err := h.st.Replay(context.Background(), from, func(events.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// An index of a host's mirror on a hub, kept in a cache on the reading
// machine, is folded once: the next reader folds only the messages that
// reached the mirror since, not the mirror from its start, and lists what
// a fold of the host's own stream lists (a session without a close line
// as unclosed: the hub cannot tell whether it still runs). A cache of
// another host's mirror, and a damaged one, are thrown away and the
// mirror folded whole, with the same result.
func TestMirrorIndexFoldsOnlyWhatReachedTheHubSince(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub")
	}
	t.Parallel() // it mostly waits on a hub: beside the others
	ctx := context.Background()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewSource(seed))
	// Each host links with its own key, as enrolled: a link of a hub
	// without permissions would carry each host's events to the other's
	// stream too.
	names := []string{"laptop-1", "laptop-2"}
	var seeds, users []string
	for _, name := range names {
		seed, public, err := events.NewLeafKey()
		if err != nil {
			t.Fatal(err)
		}
		seeds, users = append(seeds, string(seed)), append(users, events.LeafUser(name, public))
	}
	h := hubtest.NewSecured(t, 3, users...)
	var hosts []hubHost
	for i, name := range names {
		dir := t.TempDir()
		st, err := events.Open(ctx, events.Config{Dir: filepath.Join(dir, "state"), Hub: &events.HubConfig{URLs: h.LeafURLs(), Host: name, NkeySeed: seeds[i]}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(ctx) })
		hosts = append(hosts, hubHost{name: name, st: st, audit: filepath.Join(dir, "calls.aarl")})
	}
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	time.Sleep(time.Second) // linked first: a mirror made then pulls at once
	for _, host := range hosts {
		if _, err := js.CreateStream(ctx, events.MirrorConfig(host.name, 1)); err != nil {
			t.Fatalf("enroll: %v", err)
		}
	}
	one, two := hosts[0], hosts[1]
	mirrorOf := func(host hubHost) *events.Mirror {
		m, err := events.OpenMirror(ctx, events.HubAdmin{URLs: h.ClientURLs()}, host.name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	cache := filepath.Join(t.TempDir(), "cache", "laptop-1")
	// load folds host's mirror through the cache at dir, checks it against
	// a fold of the host's stream and returns what it read of the mirror.
	load := func(host hubHost, dir string) *countingSource {
		t.Helper()
		mi, err := events.NewMirrorIndex(mirrorOf(host), dir)
		if err != nil {
			t.Fatal(err)
		}
		src := &countingSource{IndexSource: mi}
		ix, err := projector.LoadIndex(ctx, src, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Save(ctx, src); err != nil {
			t.Fatal(err)
		}
		want, _ := wholeFold(t, host.st)
		if g, w := pictureOf(t, ix), pictureOf(t, want); g != w {
			t.Fatalf("the index of the mirror of %s differs from the fold of its stream:\n got %s\nwant %s", host.name, g, w)
		}
		hostList, hubList := want.Sessions(0), ix.Sessions(projector.ReadElsewhere)
		for i, s := range hubList {
			w := hostList[i]
			if w.State == projector.StateClosed {
				if s.State != projector.StateClosed {
					t.Errorf("session %s closed on the host, %s on the hub", s.ID, s.State)
				}
			} else if s.State != projector.StateUnclosed {
				t.Errorf("session %s without a close line is %s on the hub, want %s", s.ID, s.State, projector.StateUnclosed)
			}
			s.State, w.State = "", ""
			if g, w := mustJSON(t, s), mustJSON(t, w); g != w {
				t.Errorf("session on the hub:\n%s\non the host:\n%s", g, w)
			}
		}
		return src
	}

	last := one.addSessions(t, js, rnd, 5)
	if src := load(one, cache); src.records != one.eventsFrom(t, events.Position{}) {
		t.Fatalf("the first fold read %d events, the mirror holds %d", src.records, one.eventsFrom(t, events.Position{}))
	}
	if src := load(one, cache); src.records != 0 {
		t.Fatalf("nothing reached the mirror, yet the next fold read %d events (from %v)", src.records, src.froms)
	}
	newLast := one.addSessions(t, js, rnd, 3)
	src := load(one, cache)
	if want := one.eventsFrom(t, events.Position{Seq: last + 1}); src.records != want || len(src.froms) != 1 || src.froms[0] != (events.Position{Seq: last + 1}) {
		t.Fatalf("after %d new messages the fold read %d events from %v; want %d from message %d", newLast-last, src.records, src.froms, want, last+1)
	}

	// Another host's mirror, read through laptop-1's cache: its message at
	// the cache's head is another message.
	for two.addSessions(t, js, rnd, 3) <= newLast {
	}
	if src := load(two, cache); src.records != two.eventsFrom(t, events.Position{}) {
		t.Fatalf("a cache of another mirror was used: the fold read %d of %d events", src.records, two.eventsFrom(t, events.Position{}))
	}
	// The cache now holds laptop-2's index; laptop-1's is folded again.
	if src := load(one, cache); src.records != one.eventsFrom(t, events.Position{}) {
		t.Fatalf("a cache of another mirror was used: the fold read %d of %d events", src.records, one.eventsFrom(t, events.Position{}))
	}
	for name, spoil := range map[string]func(head, chunk []byte) (string, []byte){
		"a chunk rewritten after its head": func(_, chunk []byte) (string, []byte) {
			return "index.v1.chunk.0", bytes.Replace(chunk, []byte(`"calls":`), []byte(`"calls":7`), 1)
		},
		"a head that is not JSON": func(head, _ []byte) (string, []byte) { return "index.v1.head", head[:len(head)/2] },
		"a head of another message": func(head, _ []byte) (string, []byte) {
			return "index.v1.head", bytes.Replace(head, []byte(`"digest":"`), []byte(`"digest":"00`), 1)
		},
	} {
		head, _, err := events.ReadIndex(cache, "index.v1.head")
		if err != nil {
			t.Fatal(err)
		}
		chunk, _, err := events.ReadIndex(cache, "index.v1.chunk.0")
		if err != nil {
			t.Fatal(err)
		}
		key, val := spoil(head, chunk)
		if _, err := events.WriteIndex(cache, key, val); err != nil {
			t.Fatal(err)
		}
		if src := load(one, cache); src.records != one.eventsFrom(t, events.Position{}) {
			t.Fatalf("%s: the cache was used: the fold read %d of %d events", name, src.records, one.eventsFrom(t, events.Position{}))
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
