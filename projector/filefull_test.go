package projector

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// A record file on a full disk was reported only when the session closed,
// hours later for a long one. The first failed write is now said on stderr
// at once.
func TestAFullDiskUnderTheRecordFileIsSaidAtOnce(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	ctx := context.Background()
	st, err := events.Open(ctx, events.Config{Dir: filepath.Join(t.TempDir(), "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	sess, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	e, err := st.NewEvent(sess, schemas.KindNote, map[string]int{"i": 1})
	if err != nil {
		t.Fatal(err)
	}
	rcpt, err := st.Enqueue(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rcpt.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p := newFileProjection(f, slog.New(slog.NewTextHandler(&logs, nil)))
	p.push(bytes.Repeat([]byte("x"), 100<<10), rcpt) // more than the file's buffer
	p.flush()
	if !strings.Contains(logs.String(), "the disk under the record file is full") {
		t.Fatalf("nothing said of the full disk before close; log:\n%s", &logs)
	}
	if err := p.close(); err == nil {
		t.Fatal("close reported no error for a record file on a full disk")
	}
}
