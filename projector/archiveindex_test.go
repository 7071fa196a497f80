package projector_test

import (
	"context"
	mrand "math/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// A rotation takes the index with the stream it rolls over: the archive
// answers from it at once, without folding a single event of its stream
// (which, for a long history, would be every call ever recorded), and what
// it answers is the whole fold of the archive. The new stream starts an
// index of its own.
func TestRotatedArchiveAnswersFromTheIndexThatWentWithIt(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	ctx := context.Background()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	st, err := events.Open(ctx, events.Config{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := mrand.New(mrand.NewSource(seed))
	for range 6 {
		sess, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: filepath.Join(dir, "calls.aarl")})
		if err != nil {
			t.Fatal(err)
		}
		if err := crashSession(ctx, rnd, sess, []string{"dev"}); err != nil {
			t.Fatal(err)
		}
	}
	// What a reader or the rotation's planning leaves: the index saved at
	// the stream's end.
	ix, _ := loadIndex(t, st)
	if err := ix.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	want := pictureOf(t, ix)
	whole, events0 := wholeFold(t, st)
	if pictureOf(t, whole) != want || events0 == 0 {
		t.Fatalf("the saved index is not the whole fold of %d events", events0)
	}
	p, err := st.BeginRoll(ctx, map[string]string{"what": "test"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	live, _, err := events.FinishRoll(ctx, events.Config{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	if _, folded := loadIndex(t, live); folded != 1 {
		t.Errorf("the new stream's index folded %d events, want its one store.rotated: it must not start from the archive's", folded)
	}
	live.Close(ctx)

	arch, err := events.Open(ctx, events.Config{Dir: filepath.Join(state, p.Stream.Archive), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer arch.Close(ctx)
	got, folded := loadIndex(t, arch)
	if folded != 0 {
		t.Fatalf("the archive's index folded %d of its %d events; it should have come with the stream", folded, events0)
	}
	if pictureOf(t, got) != want {
		t.Fatalf("the archive answers otherwise than the index it was rolled over with:\n got %s\nwant %s", pictureOf(t, got), want)
	}
	samePicture(t, arch, got)
}
