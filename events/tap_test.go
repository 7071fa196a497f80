package events

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// withoutFrame is what a tap hands out for a record of the stream: the
// same, but a frame event's payload holds no frame.
func withoutFrame(r Record) Record {
	switch r.Event.Kind {
	case schemas.KindFrameC2S, schemas.KindFrameS2C, schemas.KindFrameRefusal:
		r.Event.Payload = json.RawMessage(`{"bytes":""}`)
	}
	return r
}

// A tap hands out what the store committed exactly as the stream holds
// it (frames aside), message by message, and stops where a message that
// another publisher put on the stream lies between two of its commits,
// so that a reader who reads on from there with Replay sees every event
// once, in stream order: a message slipped in between cannot be skipped.
func TestCommitTapStopsAtAMessageItDidNotCommit(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, stateDir(t))
	sess, _ := s.NewSession()
	if _, err := s.Append(ctx, newEvent(t, s, sess, schemas.KindSessionOpened, map[string]string{"line": "{}"})); err != nil {
		t.Fatal(err)
	}
	tap := s.TapCommits()
	defer tap.Close()
	commit := func() {
		t.Helper()
		// A lazy frame built by the commit, a frame event built here, a
		// fact and a note, waited on together: one batch message.
		if err := s.EnqueueFrame(sess, schemas.KindFrameC2S, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)); err != nil {
			t.Fatal(err)
		}
		fev := newEvent(t, s, sess, schemas.KindFrameS2C, json.RawMessage(schemas.AppendFramePayload(nil, []byte("\xff\r not json"))))
		rs, err := s.EnqueueAwaited(fev, newEvent(t, s, sess, schemas.KindChildStarted, map[string]int{"pid": 7}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs[len(rs)-1].Wait(ctx); err != nil {
			t.Fatal(err)
		}
		// And one event alone.
		if _, err := s.Append(ctx, newEvent(t, s, sess, schemas.KindNote, map[string]string{"note": "x"})); err != nil {
			t.Fatal(err)
		}
	}
	commit()
	commit()
	start := Position{Seq: 2}

	all := replayAll(t, s)
	var want []Record
	for _, r := range all {
		if r.Pos.Seq >= start.Seq {
			want = append(want, withoutFrame(r))
		}
	}
	var got []Record
	// A tapped record says when its commit was acknowledged: after the
	// event was made, never before the commit before it. The stream's
	// own reading does not know it.
	var lastAcked time.Time
	collect := func(r Record) error {
		if !r.Acked.IsZero() {
			if r.Acked.Before(r.Event.Time) || r.Acked.Before(lastAcked) {
				t.Errorf("%v acknowledged at %v, made at %v, after a commit acknowledged at %v", r.Pos, r.Acked, r.Event.Time, lastAcked)
			}
			lastAcked = r.Acked
			r.Acked = time.Time{}
		}
		got = append(got, r)
		return nil
	}
	next, err := tap.Replay(ctx, start, collect)
	if err != nil {
		t.Fatal(err)
	}
	if lastAcked.IsZero() {
		t.Error("no tapped record said when its commit was acknowledged")
	}
	if next.Seq != all[len(all)-1].Pos.Seq+1 || !reflect.DeepEqual(got, want) {
		t.Fatalf("the tap handed out %d events up to %v, want the %d the stream holds:\n got %+v\nwant %+v", len(got), next, len(want), got, want)
	}

	// The digest of the last message handed out is the stream's, a
	// batch's as well as a lone event's; with nothing but the tap's own
	// commits after it, nothing is left to read from the stream.
	checkDigest := func(at Position) {
		t.Helper()
		want, err := s.MessageDigest(ctx, at.Seq-1)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := tap.Digest(at.Seq - 1); !ok || got != want {
			t.Fatalf("tap digest of message %d = %q, %v; the stream's is %q", at.Seq-1, got, ok, want)
		}
		if _, ok := tap.Digest(at.Seq - 2); ok {
			t.Fatalf("the tap gave a digest of message %d, which it did not hand out last", at.Seq-2)
		}
	}
	checkDigest(next)
	rs, err := s.EnqueueAwaited(newEvent(t, s, sess, schemas.KindChildStarted, map[string]int{"pid": 8}), newEvent(t, s, sess, schemas.KindNote, map[string]string{"note": "y"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs[1].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if rest, err := tap.Rest(ctx, next); err != nil || rest {
		t.Fatalf("Rest = %v, %v with only the tap's commits in the stream", rest, err)
	}
	if next, err = tap.Replay(ctx, next, func(Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	checkDigest(next)

	// Another publisher's message between two commits: the tap hands out
	// the commit before it and stops there; Replay reads the rest.
	commit()
	js, err := s.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	foreign := newEvent(t, s, sess, schemas.KindNote, map[string]string{"note": "from elsewhere"})
	data, err := foreign.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(foreign.Subject(), data); err != nil {
		t.Fatal(err)
	}
	commit()
	from := next
	if rest, err := tap.Rest(ctx, from); err != nil || !rest {
		t.Fatalf("Rest = %v, %v with another publisher's message in the stream", rest, err)
	}
	got = nil
	next, err = tap.Replay(ctx, from, collect)
	if err != nil {
		t.Fatal(err)
	}
	var gap uint64
	for _, r := range replayAll(t, s) {
		if r.Event.ID == foreign.ID {
			gap = r.Pos.Seq
		}
	}
	if gap == 0 || next.Seq != gap {
		t.Fatalf("the tap stopped at %v, want the foreign message's sequence %d", next, gap)
	}
	if err := s.Replay(ctx, next, collect); err != nil {
		t.Fatal(err)
	}
	want = nil
	for _, r := range replayAll(t, s) {
		if r.Pos.Seq >= from.Seq {
			if r.Pos.Seq < gap {
				r = withoutFrame(r)
			}
			want = append(want, r)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tap then Replay handed out\n %+v\nwant every event once, in stream order:\n %+v", got, want)
	}

	// What the tap held it let go of, and a closed tap gets nothing.
	if n, _ := tap.Replay(ctx, next, collect); n != next {
		t.Fatalf("a drained tap handed out messages up to %v", n)
	}
	tap.Close()
	commit()
	last := replayAll(t, s)
	if n, _ := tap.Replay(ctx, Position{Seq: last[len(last)-1].Pos.Seq}, collect); n.Seq != last[len(last)-1].Pos.Seq {
		t.Fatalf("a closed tap handed out messages up to %v", n)
	}
}

// The message of the commit in flight is in the stream before its ack
// reaches the store and the tap: Rest waits for that commit rather than
// send the reader to the stream for it (a read of the block being written
// keeps the embedded server's write cache growing), and still sends it
// there when the commit ends without handing the tap its message.
func TestCommitTapRestWaitsForTheCommitInFlight(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, stateDir(t))
	sess, _ := s.NewSession()
	tap := s.TapCommits()
	defer tap.Close()
	if _, err := s.Append(ctx, newEvent(t, s, sess, schemas.KindSessionOpened, map[string]string{"line": "{}"})); err != nil {
		t.Fatal(err)
	}
	next, err := tap.Replay(ctx, Position{Seq: 1}, func(Record) error { return nil })
	if err != nil || next.Seq != 2 {
		t.Fatalf("tap.Replay = %v, %v; want the session's first message", next, err)
	}
	js, err := s.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	// inFlight stands for a commit whose message the server stored and
	// whose ack the store has not read yet: the commit in flight, and
	// its message in the stream.
	inFlight := func(note string) (end func(tapIt bool)) {
		t.Helper()
		s.mu.Lock()
		if s.committing {
			s.mu.Unlock()
			t.Fatal("a commit is in flight already")
		}
		s.committing, s.commitEnd = true, make(chan struct{})
		s.mu.Unlock()
		ev := newEvent(t, s, sess, schemas.KindNote, map[string]string{"note": note})
		data, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ev.Subject(), data)
		if err != nil {
			t.Fatal(err)
		}
		return func(tapIt bool) {
			if tapIt {
				s.tapped(ack.Sequence, ev.Subject(), &tapCommit{events: [][]byte{data}})
			}
			s.mu.Lock()
			s.committing = false
			close(s.commitEnd)
			s.mu.Unlock()
		}
	}
	type result struct {
		rest bool
		err  error
	}
	rest := func() (chan result, func() result) {
		ch := make(chan result, 1)
		go func() {
			r, err := tap.Rest(ctx, next)
			ch <- result{r, err}
		}()
		return ch, func() result {
			select {
			case r := <-ch:
				return r
			case <-time.After(10 * time.Second):
				t.Fatal("Rest did not return once the commit ended")
				return result{}
			}
		}
	}

	end := inFlight("acked")
	ch, wait := rest()
	select {
	case r := <-ch:
		end(true)
		t.Fatalf("Rest = %v, %v before the commit in flight ended; it must wait for it", r.rest, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	end(true)
	if r := wait(); r.err != nil || r.rest {
		t.Fatalf("Rest = %v, %v once the commit in flight handed the tap its message", r.rest, r.err)
	}
	if next, err = tap.Replay(ctx, next, func(Record) error { return nil }); err != nil || next.Seq != 3 {
		t.Fatalf("tap.Replay = %v, %v; want the commit's message", next, err)
	}

	// A commit that ends without its message in the tap (its ack was
	// lost): the stream holds what the tap lacks.
	end = inFlight("ack lost")
	_, wait = rest()
	end(false)
	if r := wait(); r.err != nil || !r.rest {
		t.Fatalf("Rest = %v, %v with a stored message the tap never got", r.rest, r.err)
	}
}
