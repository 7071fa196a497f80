package events

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aegis-dev/aegis/schemas"
)

// readerStore is a store with its approval channel bound to a session,
// and the credentials a console would read.
func readerStore(t *testing.T) (*Store, string, Creds) {
	t.Helper()
	ctx := context.Background()
	st, err := Open(ctx, Config{Dir: filepath.Join(t.TempDir(), "state"), Approvals: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	session, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.ListenApprovals(session, func(ApprovalRequest) ApprovalReply { return ApprovalReply{OK: true} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return st, session, l.Creds()
}

// appendSessionNotes appends n notes to session, one commit each.
func appendSessionNotes(t testing.TB, st *Store, session string, n int) {
	t.Helper()
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

// The reader reads what the store's own replay reads, message digests
// included, and is woken by each message stored, without polling.
func TestStreamReaderFollowsTheStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, session, creds := readerStore(t)
	appendSessionNotes(t, st, session, 700) // more than one batch
	r, err := DialReader(ctx, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	var want, got []Record
	if err := st.Replay(ctx, Position{}, func(rec Record) error { want = append(want, rec); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Replay(ctx, Position{}, func(rec Record) error { got = append(got, rec); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) < 700 {
		t.Fatalf("reader read %d events, the store %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Pos != want[i].Pos || got[i].Event.ID != want[i].Event.ID {
			t.Fatalf("event %d: reader %v %s, store %v %s", i, got[i].Pos, got[i].Event.ID, want[i].Pos, want[i].Event.ID)
		}
	}
	last := want[len(want)-1].Pos.Seq
	for _, seq := range []uint64{1, last / 2, last} {
		a, err := st.MessageDigest(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.MessageDigest(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("message %d: reader digest %s, store %s", seq, b, a)
		}
	}
	// From a later position: only what follows.
	n := 0
	if err := r.Replay(ctx, Position{Seq: last - 9}, func(Record) error { n++; return nil }); err != nil || n != 10 {
		t.Errorf("replay of the last 10 messages gave %d events, %v", n, err)
	}
	// One session's subject.
	n = 0
	if err := r.ReplaySubjectFrom(ctx, "aegis."+session+".>", Position{}, func(rec Record) error {
		if rec.Event.Session != session {
			t.Errorf("event of session %s in a read of %s", rec.Event.Session, session)
		}
		n++
		return nil
	}); err != nil || n != 700 {
		t.Errorf("session read gave %d events, %v", n, err)
	}

	wake, stop, err := r.Watch("aegis.>")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case <-wake:
		t.Fatal("woken with nothing stored since Watch")
	case <-time.After(200 * time.Millisecond):
	}
	appendSessionNotes(t, st, session, 1)
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a message was stored")
	}
	n = 0
	if err := r.Replay(ctx, Position{Seq: last + 1}, func(Record) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("after the wake-up the reader read %d new events, %v; want 1", n, err)
	}

	// The process goes: the reader says so.
	st.Close(ctx)
	select {
	case <-r.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not notice its server go")
	}
	if err := r.Replay(ctx, Position{}, func(Record) error { return nil }); !errors.Is(err, ErrReaderClosed) {
		t.Errorf("replay after the server went = %v, want ErrReaderClosed", err)
	}
}

// The reader identity reads; it cannot write into the stream, make a
// consumer (which it could point anywhere), change or delete the stream,
// approve, or read the store's and the approver's inboxes.
func TestStreamReaderCannotWrite(t *testing.T) {
	ctx := context.Background()
	st, session, creds := readerStore(t)
	appendSessionNotes(t, st, session, 3)
	nc, err := nats.Connect(creds.URL, nats.UserInfo(creds.Reader, creds.ReaderPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	errs := make(chan error, 64)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	for _, subj := range []string{
		"aegis." + session + ".note",
		"$JS.API.CONSUMER.CREATE.AEGIS",
		"$JS.API.CONSUMER.CREATE.AEGIS.x.aegis.>",
		"$JS.API.CONSUMER.DURABLE.CREATE.AEGIS.x",
		"$JS.API.STREAM.UPDATE.AEGIS",
		"$JS.API.STREAM.DELETE.AEGIS",
		"$JS.API.STREAM.MSG.DELETE.AEGIS",
		"$JS.API.STREAM.INFO.AEGIS",
		"aegis-approve." + session,
		"aegis-stored." + session + ".note",
		"_INBOX.x",
	} {
		nc.Publish(subj, []byte(`{"op":"approve","approval_id":"x"}`))
		nc.Flush()
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "Permissions Violation for Publish") {
				t.Errorf("publish to %s: %v", subj, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("publish to %s was not refused", subj)
		}
	}
	for _, subj := range []string{"aegis.>", "_INBOX.>", "$JS.>", "aegis-approve-reply.>", "aegis-approve." + session, ">"} {
		nc.SubscribeSync(subj)
		nc.Flush()
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "Permissions Violation for Subscription") {
				t.Errorf("subscribe to %s: %v", subj, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("subscription to %s was not refused", subj)
		}
	}
	var got int
	if err := st.Replay(ctx, Position{}, func(Record) error { got++; return nil }); err != nil || got != 3 {
		t.Errorf("the stream holds %d events (%v), want the 3 written", got, err)
	}
	// The approver's identity cannot read the stream by direct gets.
	ap, err := nats.Connect(creds.URL, nats.UserInfo(creds.User, creds.Password))
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := ap.RequestWithContext(cctx, "$JS.API.DIRECT.GET.AEGIS", []byte(`{"seq":1}`)); err == nil {
		t.Error("the approver identity read the stream")
	}
	// A reader of credentials without the identity is refused plainly.
	old := creds
	old.Reader, old.ReaderPassword = "", ""
	if _, err := DialReader(ctx, old); err == nil || !strings.Contains(err.Error(), "offers no stream reader") {
		t.Errorf("DialReader without a reader identity = %v", err)
	}
}
