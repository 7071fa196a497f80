package events

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// fakePeer answers one publish on the server end of a pipe with reply. It
// stands in for the server only where the real one cannot be made to
// misbehave: the happy path is every other test in this package.
func fakePeer(t *testing.T, reply string) (*commitConn, <-chan string) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	c := &commitConn{conn: client, br: bufio.NewReader(client), inbox: commitInbox, timeout: 5 * time.Second}
	got := make(chan string, 1)
	go func() {
		br := bufio.NewReader(server)
		line, err := br.ReadString('\n')
		if err != nil {
			got <- ""
			return
		}
		f := strings.Fields(line)
		size, _ := strconv.Atoi(f[len(f)-1])
		body := make([]byte, size+2)
		io.ReadFull(br, body)
		got <- line + string(body)
		server.Write([]byte(reply))
		// Swallow a PONG, if the client sends one.
		server.SetReadDeadline(time.Now().Add(time.Second))
		br.ReadString('\n')
	}()
	return c, got
}

func TestCommitConnRefusesWhatIsNotADurableAck(t *testing.T) {
	ack := func(body string) string {
		return "MSG " + commitInbox + " 1 " + itoa(len(body)) + "\r\n" + body + "\r\n"
	}
	cases := []struct {
		name, reply, want string
	}{
		{"stream refused the message", ack(`{"error":{"code":503,"err_code":10077,"description":"insufficient resources"}}`), "insufficient resources"},
		{"acked by another stream", ack(`{"stream":"OTHER","seq":7}`), `"OTHER"`},
		{"sequence zero", ack(`{"stream":"AEGIS","seq":0}`), "sequence 0"},
		{"garbage ack", ack(`not json`), "bad acknowledgement"},
		{"no responders status", "HMSG " + commitInbox + " 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n", "no responders"},
		{"other status", "HMSG " + commitInbox + " 1 24 24\r\nNATS/1.0 408 Timeout\r\n\r\n\r\n", "status"},
		{"server error", "-ERR 'Maximum Payload Violation'\r\n", "Maximum Payload"},
		{"reply on a foreign subject", "MSG elsewhere 1 2\r\n{}\r\n", "unexpected message"},
		{"oversized body", "MSG " + commitInbox + " 1 99999999\r\n", "bad message size"},
		{"negative body", "MSG " + commitInbox + " 1 -1\r\n", "bad message size"},
		{"header larger than message", "HMSG " + commitInbox + " 1 9 4\r\nNATS\r\n", "bad header size"},
		{"unterminated body", "MSG " + commitInbox + " 1 2\r\n{}xx", "not terminated"},
		{"unknown protocol line", "WHAT\r\n", "unexpected protocol line"},
		{"connection closed", "", "closed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fakePeer(t, tc.reply)
			if tc.reply == "" {
				go func() { time.Sleep(50 * time.Millisecond); c.conn.Close() }()
			}
			seq, err := c.publish("aegis.s.note", nil, []byte(`{}`))
			if err == nil {
				t.Fatalf("publish accepted %q as seq %d", tc.reply, seq)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A keep-alive PING that arrives while a commit is read is answered, and
// the acknowledgement after it still counts.
func TestCommitConnAnswersPingDuringCommit(t *testing.T) {
	body := `{"stream":"AEGIS","seq":3}`
	c, got := fakePeer(t, "PING\r\n+OK\r\nMSG "+commitInbox+" 1 "+itoa(len(body))+"\r\n"+body+"\r\n")
	hdr := []byte("NATS/1.0\r\nAegis-Events: 2\r\n\r\n")
	seq, err := c.publish("aegis.s.batch", hdr, []byte("a\nb"))
	if err != nil || seq != 3 {
		t.Fatalf("publish = %d, %v", seq, err)
	}
	want := "HPUB aegis.s.batch " + commitInbox + " 29 32\r\n" + string(hdr) + "a\nb\r\n"
	if g := <-got; g != want {
		t.Fatalf("sent %q, want %q", g, want)
	}
	// A later ack must not go backwards.
	c2, _ := fakePeer(t, "MSG "+commitInbox+" 1 "+itoa(len(body))+"\r\n"+body+"\r\n")
	c2.seq = 3
	if _, err := c2.publish("aegis.s.note", nil, []byte("{}")); err == nil || !strings.Contains(err.Error(), "after 3") {
		t.Fatalf("a repeated sequence was accepted: %v", err)
	}
}

// A commit that is never acknowledged fails after the timeout, and
// interrupt ends one at once.
func TestCommitConnTimeoutAndInterrupt(t *testing.T) {
	c, _ := fakePeer(t, "")
	c.timeout = 100 * time.Millisecond
	if _, err := c.publish("aegis.s.note", nil, []byte("{}")); err == nil {
		t.Fatal("an unacknowledged publish succeeded")
	}
	c, _ = fakePeer(t, "")
	c.timeout = time.Hour
	go func() { time.Sleep(50 * time.Millisecond); c.interrupt() }()
	done := make(chan error, 1)
	go func() { _, err := c.publish("aegis.s.note", nil, []byte("{}")); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an interrupted publish succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("interrupt did not end the publish")
	}
	if _, err := c.publish("aegis.s.note", nil, []byte("{}")); err == nil {
		t.Fatal("a publish after interrupt succeeded")
	}
}

// FuzzCommitConnReply feeds arbitrary server output to a publish: it
// returns a sequence or an error, never panics, and never accepts a
// sequence without an ack naming the stream.
func FuzzCommitConnReply(f *testing.F) {
	body := `{"stream":"AEGIS","seq":1}`
	f.Add("MSG " + commitInbox + " 1 " + itoa(len(body)) + "\r\n" + body + "\r\n")
	f.Add("HMSG " + commitInbox + " 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n")
	f.Add("PING\r\n-ERR 'x'\r\n")
	f.Add("MSG " + commitInbox + " 1 5 x\r\n")
	f.Fuzz(func(t *testing.T, reply string) {
		client, server := net.Pipe()
		defer client.Close()
		c := &commitConn{conn: client, br: bufio.NewReader(client), inbox: commitInbox, timeout: 200 * time.Millisecond}
		var wg sync.WaitGroup
		wg.Go(func() {
			br := bufio.NewReader(server)
			br.ReadString('\n')
			io.ReadFull(br, make([]byte, 4))
			server.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			server.Write([]byte(reply))
			server.Close()
		})
		seq, err := c.publish("aegis.s.note", nil, []byte("{}"))
		client.Close()
		wg.Wait()
		if err == nil && (seq == 0 || !strings.Contains(reply, `"AEGIS"`)) {
			t.Fatalf("accepted seq %d from %q", seq, reply)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// An awaited event starts no commit by itself, but the goroutine that
// waits for it commits it, with everything queued before it, in order; and
// one that nobody waits for is still committed within LazyFlush.
func TestAwaitedEventsAreCommittedByTheirWaiter(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	lazy, _ := s.EnqueueLazy(newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 1}))
	rs, err := s.EnqueueAwaited(newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 2}), newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 3}))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case <-rs[1].Done():
		t.Fatal("an awaited event was committed before anyone waited")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pos, err := rs[1].Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lp, lerr := lazy[0].Wait(ctx)
	p0, err0 := rs[0].Wait(ctx)
	if lerr != nil || err0 != nil || lp.Seq != pos.Seq || p0.Seq != pos.Seq || lp.Index != 0 || p0.Index != 1 || pos.Index != 2 {
		t.Fatalf("one commit in order expected: lazy %v %v, awaited %v %v and %v", lp, lerr, p0, err0, pos)
	}

	s2, err := Open(context.Background(), Config{Dir: stateDir(t), LazyFlush: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	rs, _ = s2.EnqueueAwaited(newEvent(t, s2, sess, schemas.KindNote, map[string]int{"i": 4}))
	select {
	case <-rs[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("an awaited event nobody waited for was never committed")
	}
}

// Many goroutines waiting on their own events take turns at leading
// commits; every event is acknowledged once, at a distinct position, in
// the order of its session's appends.
func TestWaitersLeadCommitsInTurn(t *testing.T) {
	s := openStore(t, stateDir(t))
	ctx := context.Background()
	const n, per = 16, 40
	var wg sync.WaitGroup
	seen := make([][]Position, n)
	sessions := make([]string, n)
	for g := range n {
		sessions[g], _ = s.NewSession()
		wg.Go(func() {
			for i := range per {
				rs, err := s.EnqueueAwaited(newEvent(t, s, sessions[g], schemas.KindNote, map[string]int{"g": g, "i": i}))
				if err != nil {
					t.Error(err)
					return
				}
				p, err := rs[0].Wait(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				seen[g] = append(seen[g], p)
			}
		})
	}
	wg.Wait()
	at := map[Position]bool{}
	for g := range n {
		for i, p := range seen[g] {
			if at[p] {
				t.Fatalf("position %v acknowledged twice", p)
			}
			at[p] = true
			if i > 0 && !seen[g][i-1].Less(p) {
				t.Fatalf("session %d: event %d at %v, before the earlier %v", g, i, p, seen[g][i-1])
			}
		}
	}
	recs := replayAll(t, s)
	if len(recs) != n*per {
		t.Fatalf("replayed %d events, want %d", len(recs), n*per)
	}
}

// A batch may be larger than the largest single event: the server and the
// stream accept the larger of the two limits, so a configuration with
// small events and large batches does not fail the store.
func TestBatchLargerThanOneEventCommits(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), MaxEventBytes: 8 << 10, MaxBatchBytes: 256 << 10, LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	var evs []schemas.Event
	for i := range 100 {
		evs = append(evs, newEvent(t, s, sess, schemas.KindNote, map[string]any{"i": i, "pad": strings.Repeat("x", 6<<10)}))
	}
	rs, err := s.EnqueueAwaited(evs...)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := rs[len(rs)-1].Wait(context.Background())
	if err != nil {
		t.Fatalf("a 600 KiB batch of 6 KiB events failed: %v", err)
	}
	if pos.Seq != 3 {
		// About 40 such events fit in 256 KiB: three messages.
		t.Fatalf("last event at %v, want it in the third message", pos)
	}
	if got := len(replayAll(t, s)); got != 100 {
		t.Fatalf("replayed %d events, want 100", got)
	}
}

// A frame queued raw takes its place in the stream when it is enqueued,
// holds its bytes exactly and the time it was enqueued at, and rides with
// the next commit that someone waits for (or the lazy flush).
func TestDeferredFramesKeepTheirPlace(t *testing.T) {
	clock := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	s, err := Open(context.Background(), Config{Dir: stateDir(t), LazyFlush: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	frames := [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), {}, {0xff, '\r', 0}, bytes.Repeat([]byte("x"), 70_000)}
	var want []schemas.Kind
	for i, f := range frames {
		if _, err := s.EnqueueLazy(newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
		kind := []schemas.Kind{schemas.KindFrameC2S, schemas.KindFrameS2C}[i%2]
		if err := s.EnqueueFrame(sess, kind, f); err != nil {
			t.Fatalf("EnqueueFrame %d: %v", i, err)
		}
		want = append(want, schemas.KindNote, kind)
	}
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 99})); err != nil {
		t.Fatal(err)
	}
	want = append(want, schemas.KindNote)
	got := replayAll(t, s)
	if len(got) != len(want) {
		t.Fatalf("%d events in the stream, want %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for i, r := range got {
		e := r.Event
		if e.Kind != want[i] || e.Session != sess || seen[e.ID] {
			t.Fatalf("event %d: kind %s session %s id %s, want kind %s, a fresh id", i, e.Kind, e.Session, e.ID, want[i])
		}
		seen[e.ID] = true
		if i > 0 && !got[i-1].Event.Time.Before(e.Time) {
			t.Fatalf("event %d: time %v not after %v: not the time it was enqueued at", i, e.Time, got[i-1].Event.Time)
		}
		if i%2 == 1 {
			var p schemas.FramePayload
			if err := json.Unmarshal(e.Payload, &p); err != nil || !bytes.Equal(p.Bytes, frames[i/2]) {
				t.Fatalf("event %d: frame %q, want %q (%v)", i, p.Bytes, frames[i/2], err)
			}
		}
	}
}

// A deferred frame is held to the same limits as any event: the size limit
// on its exact envelope (a frame whose bound is over the limit but whose
// envelope fits is still taken), a valid session, a frame kind, and a
// failed store.
func TestDeferredFramesAreRefusedLikeEvents(t *testing.T) {
	const limit = 4096
	s, err := Open(context.Background(), Config{Dir: stateDir(t), MaxEventBytes: limit, LazyFlush: time.Hour,
		Now: func() time.Time { return time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	// The whole-second time is 10 bytes shorter than the bound assumes.
	n := 0
	for schemas.FrameEventBound(schemas.KindFrameC2S, n+1)-10 <= limit {
		n++
	}
	if schemas.FrameEventBound(schemas.KindFrameC2S, n) <= limit {
		t.Fatalf("frame of %d bytes: bound within the limit, the test needs one beyond it", n)
	}
	if err := s.EnqueueFrame(sess, schemas.KindFrameC2S, make([]byte, n)); err != nil {
		t.Fatalf("frame whose envelope fits the limit: %v", err)
	}
	if err := s.EnqueueFrame(sess, schemas.KindFrameC2S, make([]byte, n+3)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("frame over the limit: %v, want ErrTooLarge", err)
	}
	var verr *schemas.ValidationError
	if err := s.EnqueueFrame("not-a-session", schemas.KindFrameC2S, nil); !errors.As(err, &verr) || verr.Field != "session" {
		t.Fatalf("bad session: %v", err)
	}
	if err := s.EnqueueFrame(sess, schemas.KindNote, nil); !errors.As(err, &verr) || verr.Field != "kind" {
		t.Fatalf("not a frame kind: %v", err)
	}
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{})); err != nil {
		t.Fatal(err)
	}
	if got := replayAll(t, s); len(got) != 2 || got[0].Event.Kind != schemas.KindFrameC2S {
		t.Fatalf("stream holds %d events, want the fitting frame and the note", len(got))
	}
	s.Close(context.Background())
	if err := s.EnqueueFrame(sess, schemas.KindFrameC2S, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// Batches of deferred frames stay within MaxBatchBytes: each is counted
// at its bound before it is built.
func TestDeferredFramesRespectTheBatchLimit(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: stateDir(t), MaxEventBytes: 8 << 10, MaxBatchBytes: 16 << 10, LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	frame := make([]byte, 3000)
	for range 40 {
		if err := s.EnqueueFrame(sess, schemas.KindFrameS2C, frame); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{})); err != nil {
		t.Fatal(err)
	}
	got := replayAll(t, s)
	if len(got) != 41 {
		t.Fatalf("%d events, want 41", len(got))
	}
	perMsg := map[uint64]int{}
	for _, r := range got {
		data, err := r.Event.Encode() // what was published, byte for byte
		if err != nil {
			t.Fatal(err)
		}
		if perMsg[r.Pos.Seq] > 0 {
			perMsg[r.Pos.Seq]++ // the newline between events
		}
		perMsg[r.Pos.Seq] += len(data)
	}
	for seq, n := range perMsg {
		if n > 16<<10 {
			t.Fatalf("message %d holds %d bytes of events, over the 16 KiB batch limit", seq, n)
		}
	}
}

// Enqueueing no events queues nothing and fails nothing.
func TestEnqueueNothing(t *testing.T) {
	s := openStore(t, stateDir(t))
	for _, enqueue := range []func(...schemas.Event) ([]*Receipt, error){s.EnqueueMany, s.EnqueueLazy, s.EnqueueAwaited} {
		if rs, err := enqueue(); err != nil || len(rs) != 0 {
			t.Fatalf("enqueue() = %d receipts, %v", len(rs), err)
		}
	}
	sess, _ := s.NewSession()
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{})); err != nil {
		t.Fatal(err)
	}
	if got := replayAll(t, s); len(got) != 1 {
		t.Fatalf("%d events in the stream, want 1", len(got))
	}
}

// The server must send the committer's connection nothing while no commit
// is in flight: nothing reads it then, and a PING left unread past the
// server's 10 s write deadline got the connection dropped, failing the next
// commit of any session that sat idle for a dozen seconds after start.
// (The server sends its first PING to a client after 2 to 2.4 s unless told
// not to.)
func TestIdleCommitConnectionReceivesNothing(t *testing.T) {
	s := openStore(t, stateDir(t))
	sess, _ := s.NewSession()
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 1})); err != nil {
		t.Fatal(err)
	}
	// Past the first-PING window; the committer is idle and reads nothing.
	time.Sleep(3 * time.Second)
	s.cc.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if line, err := s.cc.br.ReadString('\n'); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle committer connection received %q (%v)", line, err)
	}
	s.cc.conn.SetReadDeadline(time.Time{})
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": 2})); err != nil {
		t.Fatalf("commit after idling: %v", err)
	}
}
