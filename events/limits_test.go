package events

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/schemas"
)

// queuedBytes is what the queue holds: the bytes of its events as the store
// counts them.
func queuedBytes(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, it := range s.queue {
		n += it.size
	}
	return n
}

// A flood of frames that nobody waits for (a server writing large
// notifications in a loop) cannot pile up in memory: the queue stays under
// its bound, the enqueuer committing to make room, and every frame still
// lands, in order.
func TestFloodOfLazyFramesKeepsTheQueueBounded(t *testing.T) {
	const bound = 32 << 20 // DefaultMaxQueueBytes
	// LazyFlush: nothing but the bound makes these frames go to disk.
	s, err := Open(context.Background(), Config{Dir: stateDir(t), LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	const n, size = 36, 1 << 20
	peak := 0
	for i := range n {
		frame := make([]byte, size)
		frame[0] = byte(i)
		if err := s.EnqueueFrame(sess, schemas.KindFrameS2C, frame); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		peak = max(peak, queuedBytes(s))
	}
	if peak > bound {
		t.Errorf("%d frames of %d MiB left %d MiB queued and not committed; the bound is %d MiB", n, size>>20, peak>>20, bound>>20)
	}
	rc, err := s.Enqueue(newEvent(t, s, sess, schemas.KindNote, map[string]int{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each frame is a message of its own (it exceeds MaxBatchBytes).
	info, err := s.stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n+1 {
		t.Fatalf("the stream holds %d messages, want %d", info.State.Msgs, n+1)
	}
	for i, seq := range []uint64{1, n / 2, n} {
		m, err := s.stream.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		e, err := schemas.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var fp schemas.FramePayload
		if err := json.Unmarshal(e.Payload, &fp); err != nil || len(fp.Bytes) != size || fp.Bytes[0] != byte(seq-1) {
			t.Fatalf("message %d (check %d) is not frame %d (%v)", seq, i, seq-1, err)
		}
	}
}

// A frame larger than the bound still passes: it is queued alone.
func TestFrameLargerThanTheQueueBoundPasses(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), MaxQueueBytes: 1 << 20, LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	for i := range 3 {
		if err := s.EnqueueFrame(sess, schemas.KindFrameC2S, make([]byte, 4<<20)); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	rc, _ := s.Enqueue(newEvent(t, s, sess, schemas.KindNote, map[string]int{}))
	if _, err := rc.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(replayAll(t, s)); got != 4 {
		t.Fatalf("replayed %d events, want 4", got)
	}
}

// At its cap the store fails closed: the append that does not fit fails
// with ErrFull (and ErrFailed, as every failed commit), every later one
// fails, nothing acknowledged is lost, and the error says what happened.
// A reopen with the same cap is refused; a higher cap lets appends go on.
func TestStateDirCapFailsClosedAndKeepsEveryAcknowledgedEvent(t *testing.T) {
	dir := stateDir(t)
	const cap = 2 << 20
	s, err := Open(context.Background(), Config{Dir: dir, MaxBytes: cap})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := s.NewSession()
	big := make([]byte, 100<<10)
	var acked []schemas.Event
	var failed error
	for i := 0; i < 100 && failed == nil; i++ {
		e := newEvent(t, s, sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: big})
		if _, err := s.Append(context.Background(), e); err != nil {
			failed = err
			break
		}
		acked = append(acked, e)
	}
	if failed == nil {
		t.Fatalf("appended %d × 100 KiB under a 2 MiB cap without an error", len(acked))
	}
	if !errors.Is(failed, ErrFull) || !errors.Is(failed, ErrFailed) {
		t.Fatalf("append at the cap = %v, want ErrFull and ErrFailed", failed)
	}
	for _, want := range []string{"reached its size cap of 2 MiB", dir, "nothing was dropped or deleted"} {
		if !strings.Contains(failed.Error(), want) {
			t.Errorf("error %q does not say %q", failed, want)
		}
	}
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{})); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after the cap = %v, want ErrFailed", err)
	}
	if err := s.EnqueueFrame(sess, schemas.KindFrameS2C, []byte("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("frame after the cap = %v, want ErrFull", err)
	}
	s.Close(context.Background())

	// The same cap: refused at once, with the same error.
	if s2, err := Open(context.Background(), Config{Dir: dir, MaxBytes: cap}); err == nil {
		s2.Close(context.Background())
		t.Fatal("Open of a full state directory under the same cap succeeded")
	} else if !errors.Is(err, ErrFull) {
		t.Fatalf("Open of a full state directory = %v, want ErrFull", err)
	}

	// A higher cap: everything acknowledged is there, and appends go on.
	s3, err := Open(context.Background(), Config{Dir: dir, MaxBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close(context.Background())
	recs := replayAll(t, s3)
	if len(recs) != len(acked) {
		t.Fatalf("replayed %d events, %d were acknowledged", len(recs), len(acked))
	}
	for i, r := range recs {
		if r.Event.ID != acked[i].ID {
			t.Fatalf("event %d is %s, want %s", i, r.Event.ID, acked[i].ID)
		}
	}
	if _, err := s3.Append(context.Background(), newEvent(t, s3, sess, schemas.KindNote, map[string]int{})); err != nil {
		t.Fatalf("append under a raised cap = %v", err)
	}
}

// A cap below what a stream already holds deletes nothing, even on a
// stream that an older aegis created with JetStream's default discard
// policy (DiscardOld, which would make room by deleting the oldest
// messages): the open is refused and every event stays.
func TestLowerCapNeverDeletesEvents(t *testing.T) {
	dir := stateDir(t)
	s := openStore(t, dir)
	sess, _ := s.NewSession()
	for range 20 {
		if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: make([]byte, 100<<10)})); err != nil {
			t.Fatal(err)
		}
	}
	// As an older aegis left it.
	cfg := s.stream.CachedInfo().Config
	cfg.Discard = jetstream.DiscardOld
	if _, err := s.js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())

	for _, cap := range []int64{1 << 20, 2<<20 + 64<<10} {
		if s2, err := Open(context.Background(), Config{Dir: dir, MaxBytes: cap}); err == nil {
			s2.Close(context.Background())
			t.Fatalf("Open under a %d-byte cap of a 2 MiB stream succeeded", cap)
		} else if !errors.Is(err, ErrFull) {
			t.Fatalf("Open under a lower cap = %v, want ErrFull", err)
		}
	}
	s3 := openStore(t, dir)
	if got := len(replayAll(t, s3)); got != 20 {
		t.Fatalf("after opens under a lower cap the stream holds %d events, want 20", got)
	}
	if d := s3.stream.CachedInfo().Config.Discard; d != jetstream.DiscardNew {
		t.Fatalf("stream discard policy %v after Open, want DiscardNew", d)
	}
}
