package projector_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// The record file trails the stream while the session runs (an operator
// may tail it), holds only lines whose events are durable, and is complete
// and identical to the export once the session closes.
func TestRecordFileTrailsTheStream(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := events.Open(ctx, events.Config{Dir: filepath.Join(dir, "state"), LazyFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	audit := filepath.Join(dir, "calls.aarl")
	sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
	if err != nil {
		t.Fatal(err)
	}
	c := schemas.WrapCall{CallID: sess.NextCallID(), ToolID: "echo", RequestDigest: schemas.HashHex([]byte("x")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
	in, err := sess.Intent(c.Intent())
	if err != nil {
		t.Fatal(err)
	}
	// Not waited for: with an hour's lazy flush the intent is not durable,
	// so it must not reach the file.
	time.Sleep(100 * time.Millisecond)
	if b, _ := os.ReadFile(audit); bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("the file holds %d lines before the intent was durable, want the open line only", bytes.Count(b, []byte("\n")))
	}
	if _, err := in.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(audit)
		if bytes.Count(b, []byte("\n")) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the durable intent line never reached the file:\n%s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := sess.Outcome(c.Answered(schemas.HashHex([]byte("y")), 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(audit)
	rec, err := projector.ReadRecord(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if _, err := rec.WriteSessions(&want, []string{sess.ID()}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) || bytes.Count(got, []byte("\n")) != 4 {
		t.Fatalf("closed record file differs from the export:\n%s\nwant:\n%s", got, want.Bytes())
	}
}
