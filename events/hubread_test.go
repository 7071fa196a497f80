package events

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/schemas"
)

// A reader of a host's mirror reads it from any position, a message's
// middle included, exactly as the host's Replay reads its own stream, and
// names each message by the same digest as the host: a read from the last
// position folded costs what came after it, and an index folded from the
// mirror is checked against the mirror as one folded on the host is
// against the host's stream.
func TestMirrorReadsFromAPositionAsTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.New(t, 3)
	ctx := context.Background()
	st := openLeaf(t, h, "laptop-1")
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	time.Sleep(time.Second) // linked first: a mirror made then pulls at once
	if _, err := js.CreateStream(ctx, MirrorConfig("laptop-1", 1)); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	appendNotes(t, st, 3)
	// Events queued together are committed as one message: a position
	// inside it is a place to read from too.
	session, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var batch []schemas.Event
	for i := range 4 {
		ev, err := st.NewEvent(session, schemas.KindNote, map[string]any{"text": fmt.Sprint("batched ", i)})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, ev)
	}
	rs, err := st.EnqueueMany(batch...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs[len(rs)-1].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	appendNotes(t, st, 2)

	read := func(replay func(Position, func(Record) error) error, from Position) []string {
		t.Helper()
		var got []string
		if err := replay(from, func(r Record) error {
			got = append(got, fmt.Sprintf("%d.%d %s", r.Pos.Seq, r.Pos.Index, r.Event.ID))
			return nil
		}); err != nil {
			t.Fatalf("read from %+v: %v", from, err)
		}
		return got
	}
	host := func(from Position, fn func(Record) error) error { return st.Replay(ctx, from, fn) }
	all := read(host, Position{})
	var last uint64
	var inside Position // the second event of a message that holds several
	if err := st.Replay(ctx, Position{}, func(r Record) error {
		last = r.Pos.Seq
		if r.Pos.Index == 1 && inside.Seq == 0 {
			inside = r.Pos
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside.Seq == 0 {
		t.Fatalf("no message holds more than one event: %v", all)
	}
	waitMirror(t, js, "laptop-1", last, 90*time.Second)

	mirror, err := OpenMirror(ctx, HubAdmin{URLs: h.ClientURLs()}, "laptop-1")
	if err != nil {
		t.Fatal(err)
	}
	defer mirror.Close()
	hub := func(from Position, fn func(Record) error) error { return mirror.Replay(ctx, from, fn) }
	for _, from := range []Position{{}, {Seq: 1}, {Seq: 2}, inside, {Seq: inside.Seq, Index: 3}, {Seq: last}, {Seq: last + 1}, {Seq: last + 100}} {
		want, got := read(host, from), read(hub, from)
		if !slices.Equal(got, want) {
			t.Errorf("the mirror from %+v reads\n%v\nthe host\n%v", from, got, want)
		}
	}
	for seq := uint64(1); seq <= last; seq++ {
		want, err := st.MessageDigest(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		got, err := mirror.MessageDigest(ctx, seq)
		if err != nil || got != want {
			t.Errorf("message %d: the mirror's digest %s (%v), the host's %s", seq, got, err, want)
		}
	}
	if d, err := mirror.MessageDigest(ctx, last+1); err == nil {
		t.Errorf("a message past the mirror's end has digest %s", d)
	}
}
