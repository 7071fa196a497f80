package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// stateDir returns a fresh state directory path; Open creates it 0700.
func stateDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "state")
}

func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Dir: dir, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newEvent(t testing.TB, s *Store, session string, kind schemas.Kind, payload any) schemas.Event {
	t.Helper()
	e, err := s.NewEvent(session, kind, payload)
	if err != nil {
		t.Fatalf("NewEvent = %v", err)
	}
	return e
}

func replayAll(t testing.TB, s *Store) []Record {
	t.Helper()
	var out []Record
	if err := s.Replay(context.Background(), Position{}, func(r Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("Replay = %v", err)
	}
	return out
}

func TestAppendReplayInOrder(t *testing.T) {
	s := openStore(t, stateDir(t))
	ctx := context.Background()
	sess, _ := s.NewSession()
	var want []Position
	for i := 0; i < 20; i++ {
		pos, err := s.Append(ctx, newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": i}))
		if err != nil {
			t.Fatalf("Append %d = %v", i, err)
		}
		if len(want) > 0 && !want[len(want)-1].Less(pos) {
			t.Fatalf("Append %d at %v, not after %v", i, pos, want[len(want)-1])
		}
		want = append(want, pos)
	}
	got := replayAll(t, s)
	if len(got) != len(want) {
		t.Fatalf("Replay gave %d events, want %d", len(got), len(want))
	}
	for i, r := range got {
		var p struct{ I int }
		json.Unmarshal(r.Event.Payload, &p)
		if r.Pos != want[i] || p.I != i {
			t.Errorf("event %d at %v with i=%d, want %v i=%d", i, r.Pos, p.I, want[i], i)
		}
	}
	// Replay from the middle starts exactly there.
	var mid []Record
	s.Replay(ctx, want[7], func(r Record) error { mid = append(mid, r); return nil })
	if len(mid) != 13 || mid[0].Pos != want[7] {
		t.Errorf("Replay(from %v) gave %d events starting %v", want[7], len(mid), mid[0].Pos)
	}
}

func TestReplayEmptyStream(t *testing.T) {
	s := openStore(t, stateDir(t))
	if got := replayAll(t, s); len(got) != 0 {
		t.Fatalf("Replay of empty stream gave %d events", len(got))
	}
}

// Concurrent appenders share fsyncs, and each appender's events stay in its
// own order.
func TestConcurrentAppendsGroupCommitInOrder(t *testing.T) {
	s := openStore(t, stateDir(t))
	ctx := context.Background()
	sess, _ := s.NewSession()
	const appenders, each = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			var prev Position
			for i := 0; i < each; i++ {
				e, err := s.NewEvent(sess, schemas.KindNote, map[string]int{"a": a, "i": i})
				if err != nil {
					errs <- err
					return
				}
				pos, err := s.Append(ctx, e)
				if err != nil {
					errs <- err
					return
				}
				if i > 0 && !prev.Less(pos) {
					errs <- fmt.Errorf("appender %d: event %d at %v not after %v", a, i, pos, prev)
					return
				}
				prev = pos
			}
		}(a)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := replayAll(t, s)
	if len(got) != appenders*each {
		t.Fatalf("Replay gave %d events, want %d", len(got), appenders*each)
	}
	next := make([]int, appenders)
	for _, r := range got {
		var p struct{ A, I int }
		json.Unmarshal(r.Event.Payload, &p)
		if p.I != next[p.A] {
			t.Fatalf("appender %d: event %d replayed where %d was due", p.A, p.I, next[p.A])
		}
		next[p.A]++
	}
	info, err := s.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs >= uint64(appenders*each) {
		t.Errorf("%d events took %d messages: no group commit", appenders*each, info.State.Msgs)
	}
	t.Logf("%d events in %d commits", appenders*each, info.State.Msgs)
}

func TestReopenAfterCloseReplaysIdentical(t *testing.T) {
	dir := stateDir(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := s.NewSession()
	for i := 0; i < 50; i++ {
		r, err := s.Enqueue(newEvent(t, s, sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: []byte(fmt.Sprintf("frame %d\x00\xff", i))}))
		if err != nil {
			t.Fatal(err)
		}
		if i == 49 {
			if _, err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := replayAll(t, s)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	s2 := openStore(t, dir)
	after := replayAll(t, s2)
	if len(before) != 50 || !sameRecords(before, after) {
		t.Fatalf("replay after reopen differs: %d vs %d events", len(before), len(after))
	}
}

func sameRecords(a, b []Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ea, _ := a[i].Event.Encode()
		eb, _ := b[i].Event.Encode()
		if a[i].Pos != b[i].Pos || string(ea) != string(eb) {
			return false
		}
	}
	return true
}

func TestAppendAfterCloseFails(t *testing.T) {
	s := openStore(t, stateDir(t))
	sess, _ := s.NewSession()
	e := newEvent(t, s, sess, schemas.KindNote, map[string]string{})
	s.Close(context.Background())
	if _, err := s.Append(context.Background(), e); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

// Events that would smuggle something onto the stream are refused before
// they reach it.
func TestInvalidEventRefusedBeforeStream(t *testing.T) {
	s := openStore(t, stateDir(t))
	sess, _ := s.NewSession()
	good := newEvent(t, s, sess, schemas.KindNote, map[string]string{})
	cases := []struct {
		name string
		mut  func(e *schemas.Event)
	}{
		{"subject injection in session", func(e *schemas.Event) { e.Session = "evil.>" }},
		{"unknown kind", func(e *schemas.Event) { e.Kind = "approval.forged" }},
		{"payload not an object", func(e *schemas.Event) { e.Payload = json.RawMessage(`"x"`) }},
		{"payload not JSON", func(e *schemas.Event) { e.Payload = json.RawMessage(`{`) }},
		{"frame without bytes", func(e *schemas.Event) { e.Kind = schemas.KindFrameC2S }},
		{"no time", func(e *schemas.Event) { e.Time = time.Time{} }},
		{"wrong version", func(e *schemas.Event) { e.V = 2 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := good
			tc.mut(&e)
			if _, err := s.Append(context.Background(), e); !errors.Is(err, schemas.ErrInvalidEvent) {
				t.Errorf("Append = %v, want ErrInvalidEvent", err)
			}
		})
	}
	if got := replayAll(t, s); len(got) != 0 {
		t.Fatalf("%d refused events reached the stream", len(got))
	}
}

func TestOversizedEventRefused(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), MaxEventBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	e := newEvent(t, s, sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: make([]byte, 1<<16)})
	if _, err := s.Append(context.Background(), e); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append = %v, want ErrTooLarge", err)
	}
}

// A 16 MiB frame, the largest the relay accepts, fits in one event.
func TestSixteenMiBFrameRoundTrips(t *testing.T) {
	// Its commit is 16 MiB through a JetStream under the race detector:
	// beside other packages' tests on 2 cores that took more than
	// openStore's 5 s. What it holds is the size, not the time.
	s, err := Open(context.Background(), Config{Dir: stateDir(t), AckTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	sess, _ := s.NewSession()
	frame := []byte(strings.Repeat("x", 16<<20))
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindFrameS2C, schemas.FramePayload{Bytes: frame})); err != nil {
		t.Fatalf("Append 16 MiB frame = %v", err)
	}
	got := replayAll(t, s)
	var p schemas.FramePayload
	if len(got) != 1 || json.Unmarshal(got[0].Event.Payload, &p) != nil || len(p.Bytes) != len(frame) {
		t.Fatalf("16 MiB frame did not round trip")
	}
}

func TestFollowSeesLiveEvents(t *testing.T) {
	s := openStore(t, stateDir(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, _ := s.NewSession()
	s.Append(ctx, newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 0}))
	seen := make(chan Record, 10)
	done := make(chan error, 1)
	fctx, fcancel := context.WithCancel(ctx)
	go func() { done <- s.Follow(fctx, Position{}, func(r Record) error { seen <- r; return nil }) }()
	for i := 1; i <= 3; i++ {
		if _, err := s.Append(ctx, newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i <= 3; i++ {
		select {
		case r := <-seen:
			var p struct{ I int }
			json.Unmarshal(r.Event.Payload, &p)
			if p.I != i {
				t.Fatalf("Follow delivered i=%d, want %d", p.I, i)
			}
		case <-ctx.Done():
			t.Fatalf("Follow delivered %d of 4 events", i)
		}
	}
	fcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow returned %v, want context.Canceled", err)
	}
}

func TestSecondOpenInSameProcessIsRefused(t *testing.T) {
	dir := stateDir(t)
	openStore(t, dir)
	_, err := Open(context.Background(), Config{Dir: dir})
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open = %v, want LockedError naming %s and pid %d", err, dir, os.Getpid())
	}
}

// A state directory that others can read would expose every recorded frame.
func TestSharedStateDirRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	_, err := Open(context.Background(), Config{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("Open of a 0755 dir = %v, want a refusal with a chmod hint", err)
	}
}

// A store directory in which JetStream cannot start (here its path is a
// file) is refused at once and says where to look, with or without the
// approval channel's listener, instead of waiting for a server that will
// never be ready (until the five minutes a recovery may take, before).
func TestOpenRefusesAtOnceWhereJetStreamCannotStart(t *testing.T) {
	for _, approvals := range []bool{false, true} {
		t.Run(fmt.Sprintf("approvals=%v", approvals), func(t *testing.T) {
			dir := stateDir(t)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "jetstream"), []byte("not a directory"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			s, err := Open(ctx, Config{Dir: dir, Approvals: approvals})
			if err == nil {
				s.Close(context.Background())
				t.Fatal("Open succeeded on a store directory that is a file")
			}
			if !strings.Contains(err.Error(), "is the directory writable") {
				t.Errorf("Open = %v, want the JetStream refusal", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Open took %v to refuse", d)
			}
		})
	}
}

func TestStateDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	openStore(t, dir)
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
}

func TestDefaultDir(t *testing.T) {
	cases := []struct {
		name, xdg, home, want string
		err                   bool
	}{
		{"xdg wins", "/x", "/h", "/x/aegis", false},
		{"home fallback", "", "/h", "/h/.local/state/aegis", false},
		{"relative xdg refused", "rel", "/h", "", true},
		{"nothing set", "", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"XDG_STATE_HOME": tc.xdg, "HOME": tc.home}
			got, err := DefaultDir(func(k string) string { return env[k] })
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("DefaultDir = %q, %v; want %q, err=%v", got, err, tc.want, tc.err)
			}
		})
	}
}

// A lazy event nobody waits for still reaches the disk within LazyFlush;
// waiting on one commits it at once.
func TestLazyEventsAreCommittedWithoutAWaiter(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), LazyFlush: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	rs, err := s.EnqueueLazy(newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 1}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-rs[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a lazy event was never committed")
	}
	if pos, err := rs[0].Wait(context.Background()); err != nil || pos.Seq != 1 {
		t.Fatalf("lazy event at %v, %v", pos, err)
	}
	// Waiting on a lazy event does not wait for the timer.
	s2, err := Open(context.Background(), Config{Dir: stateDir(t), LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	rs, _ = s2.EnqueueLazy(newEvent(t, s2, sess, schemas.KindNote, map[string]int{"i": 2}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rs[0].Wait(ctx); err != nil {
		t.Fatalf("Wait on a lazy event with an hour's flush = %v", err)
	}
	// An eager event commits the lazy ones queued before it.
	lazy, _ := s2.EnqueueLazy(newEvent(t, s2, sess, schemas.KindNote, map[string]int{"i": 3}))
	if _, err := s2.Append(ctx, newEvent(t, s2, sess, schemas.KindNote, map[string]int{"i": 4})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lazy[0].Done():
	default:
		t.Fatal("an eager commit left an earlier lazy event behind")
	}
}
