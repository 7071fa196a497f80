package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// Sessions that record at once (the HTTP sessions of one gateway) share
// the commits: events of two sessions queued interleaved go to disk as
// one message per session, each session's events in their order, where
// taking the queue's head as it was committed them one by one (one fsync
// each).
func TestInterleavedSessionsShareCommits(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), AckTimeout: 5 * time.Second, LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	a, _ := s.NewSession()
	b, _ := s.NewSession()
	var last *Receipt
	for i := range 3 {
		for _, sess := range []string{a, b} {
			rs, err := s.EnqueueLazy(newEvent(t, s, sess, schemas.KindNote, map[string]string{"n": fmt.Sprint(sess[:4], i)}))
			if err != nil {
				t.Fatal(err)
			}
			last = rs[0]
		}
	}
	if _, err := last.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := replayAll(t, s)
	if len(recs) != 6 {
		t.Fatalf("%d events in the stream, want 6", len(recs))
	}
	msgs := map[uint64][]Record{}
	for _, r := range recs {
		msgs[r.Pos.Seq] = append(msgs[r.Pos.Seq], r)
	}
	if len(msgs) != 2 {
		t.Fatalf("6 interleaved events of 2 sessions took %d messages (commits), want 2", len(msgs))
	}
	for seq, rs := range msgs {
		for i, r := range rs {
			if r.Event.Session != rs[0].Event.Session {
				t.Errorf("message %d holds events of two sessions", seq)
			}
			if want := fmt.Sprintf(`{"n":"%s%d"}`, r.Event.Session[:4], i); string(r.Event.Payload) != want || r.Pos.Index != i {
				t.Errorf("message %d, event %d: %s at index %d, want %s in the session's order", seq, i, r.Event.Payload, r.Pos.Index, want)
			}
		}
	}
	if recs[0].Event.Session != a {
		t.Error("the session at the head of the queue was not committed first")
	}
}
