package events

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events/hubtest"
)

// The hub reader lists the mirrors of hosts and nothing else: a linked
// host's mirror with what it holds and how far behind it is, an enrolled
// host that never linked as never heard from, and no other stream.
func TestHubReaderListsTheMirrors(t *testing.T) {
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
	// Before the hub has a mirror of it, the host's stream is behind by
	// all it holds, and for as long as its first message is old.
	appendNotes(t, st, 2)
	before, err := st.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lag, ok, err := st.MirrorLag(ctx); err != nil || !ok || lag.Host != "laptop-1" || lag.Messages != before || lag.Behind <= 0 {
		t.Fatalf("MirrorLag with no mirror on the hub: %+v, %v, %v; want laptop-1 behind by %d messages", lag, ok, err, before)
	}
	admin := HubAdmin{URLs: h.ClientURLs()}
	for _, host := range []string{"laptop-1", "laptop-2"} {
		if _, err := Enroll(ctx, admin, host, EnrollOptions{Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AEGIS_other", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	appendNotes(t, st, 5)
	last, err := st.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitMirror(t, js, "laptop-1", last, time.Minute)
	// Caught up, the mirror's acknowledgements bring the host's lag to 0.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		lag, _, err := st.MirrorLag(ctx)
		if err == nil && lag.Messages == 0 && lag.Behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("MirrorLag once the mirror holds all %d messages: %+v, %v; want none", last, lag, err)
		}
	}

	r, err := DialHubReader(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []MirrorStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, err = r.Mirrors(ctx); err != nil {
			t.Fatal(err)
		}
		if len(got) == 2 && got[0].Active >= 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(got) != 2 || got[0].Host != "laptop-1" || got[1].Host != "laptop-2" {
		t.Fatalf("mirrors %+v; want laptop-1 and laptop-2 only", got)
	}
	a, b := got[0], got[1]
	if a.LastSeq != last || a.Msgs != last || a.Lag != 0 || a.Active < 0 || a.Active > time.Minute || a.LastTime.IsZero() || a.Error != "" {
		t.Errorf("laptop-1's mirror: %+v; want %d messages, no lag, heard from lately", a, last)
	}
	if b.Msgs != 0 || b.LastSeq != 0 || !b.LastTime.IsZero() {
		t.Errorf("laptop-2's mirror holds %+v; want nothing", b)
	}
	if b.Active >= 0 && b.Error == "" {
		t.Errorf("laptop-2 never linked, yet its mirror was active %v ago with no error", b.Active)
	}
	t.Logf("laptop-1: %+v; laptop-2: active %v, error %q", a, b.Active, b.Error)

}
