package events

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// fillStore appends n notes to a fresh store in dir and closes it.
func fillStore(t *testing.T, dir string, n int) {
	t.Helper()
	s := openStore(t, dir)
	ctx := context.Background()
	sess, _ := s.NewSession()
	for i := range n {
		if _, err := s.Append(ctx, newEvent(t, s, sess, schemas.KindNote, map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// planRoll opens dir, plans a rotation and closes the store.
func planRoll(t *testing.T, dir string, prune bool) *RollPlan {
	t.Helper()
	s := openStore(t, dir)
	p, err := s.BeginRoll(context.Background(), map[string]string{"what": "test"}, prune)
	if err != nil {
		t.Fatalf("BeginRoll = %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

func finishRoll(t *testing.T, dir string) *Store {
	t.Helper()
	s, _, err := FinishRoll(context.Background(), Config{Dir: dir, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("FinishRoll = %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func TestRollOverStartsANewStreamThatSaysWhatItSealed(t *testing.T) {
	dir := stateDir(t)
	fillStore(t, dir, 10)
	p := planRoll(t, dir, false)
	if p.Stream.FirstSeq != 1 || p.Stream.LastSeq != 10 || p.Stream.LastDigest == "" {
		t.Fatalf("plan %+v", p.Stream)
	}
	// Until the rotation finishes, nothing else opens the directory.
	_, err := Open(context.Background(), Config{Dir: dir})
	var pe *RollPendingError
	if !errors.As(err, &pe) {
		t.Fatalf("Open during a rotation = %v, want RollPendingError", err)
	}
	s := finishRoll(t, dir)
	recs := replayAll(t, s)
	if len(recs) != 1 || recs[0].Pos.Seq != 11 || recs[0].Event.Kind != schemas.KindStoreRotated {
		t.Fatalf("new stream holds %+v, want one store.rotated at 11", recs)
	}
	var got RollPlan
	if err := json.Unmarshal(recs[0].Event.Payload, &got); err != nil || got.Stream != p.Stream || string(got.Detail) != `{"what":"test"}` {
		t.Fatalf("store.rotated payload %s (%v)", recs[0].Event.Payload, err)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check of the new stream = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, rollFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("plan left behind: %v", err)
	}
	// The stream goes on from there, and survives a restart.
	ctx := context.Background()
	if _, err := s.Append(ctx, newEvent(t, s, p.Session, schemas.KindNote, map[string]int{"after": 1})); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	s = openStore(t, dir)
	if recs := replayAll(t, s); len(recs) != 2 || recs[1].Pos.Seq != 12 {
		t.Fatalf("after restart %+v", recs)
	}
	s.Close(ctx)

	// The archive is a state directory that reads, and refuses appends.
	a := openStore(t, filepath.Join(dir, p.Stream.Archive))
	if got := replayAll(t, a); len(got) != 10 || got[9].Pos.Seq != 10 {
		t.Fatalf("archive holds %d events", len(got))
	}
	if a.Archived() == nil || a.Archived().Stream != p.Stream {
		t.Fatalf("archive tag %+v", a.Archived())
	}
	if _, err := a.Append(ctx, newEvent(t, a, p.Session, schemas.KindNote, map[string]int{"x": 1})); !errors.Is(err, ErrArchived) {
		t.Fatalf("append to an archive = %v, want ErrArchived", err)
	}
}

// A crash at any step of the roll leaves a plan that the next FinishRoll
// completes: the old stream is never lost and never appended to, and the
// new stream gets exactly one store.rotated.
func TestInterruptedRollIsFinishedNotRunAround(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, dir string, p *RollPlan)
	}{
		{"crash before the move", func(t *testing.T, dir string, p *RollPlan) {}},
		{"crash after the move", func(t *testing.T, dir string, p *RollPlan) {
			if err := applyRoll(dir, p); err != nil {
				t.Fatal(err)
			}
		}},
		{"crash after the new stream's first event", func(t *testing.T, dir string, p *RollPlan) {
			s := finishRoll(t, dir)
			s.Close(context.Background())
			b, _ := json.Marshal(p)
			if err := WriteFileAtomic(filepath.Join(dir, rollFile), b); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := stateDir(t)
			fillStore(t, dir, 5)
			p := planRoll(t, dir, false)
			tc.stop(t, dir, p)
			s := finishRoll(t, dir)
			recs := replayAll(t, s)
			if len(recs) != 1 || recs[0].Pos.Seq != 6 || recs[0].Event.Kind != schemas.KindStoreRotated {
				t.Fatalf("new stream %+v", recs)
			}
			s.Close(context.Background())
			a := openStore(t, filepath.Join(dir, p.Stream.Archive))
			if got := replayAll(t, a); len(got) != 5 {
				t.Fatalf("archive holds %d events, want 5", len(got))
			}
		})
	}
}

func TestRollWithPruneDeletesTheArchiveOnlyAfterTheNewStreamSaysSo(t *testing.T) {
	dir := stateDir(t)
	fillStore(t, dir, 5)
	p := planRoll(t, dir, true)
	s := finishRoll(t, dir)
	if _, err := os.Stat(filepath.Join(dir, p.Stream.Archive)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("archive kept after prune: %v", err)
	}
	recs := replayAll(t, s)
	var got RollPlan
	if len(recs) != 1 || json.Unmarshal(recs[0].Event.Payload, &got) != nil || !got.Stream.Prune {
		t.Fatalf("new stream %+v", recs)
	}
}

// After a rotation the stream begins at its base; a block lost from its
// head is still loss, named from the base on.
func TestLostHeadOfARolledStreamIsDamage(t *testing.T) {
	dir := stateDir(t)
	fillStore(t, dir, 3)
	planRoll(t, dir, false)
	s := finishRoll(t, dir)
	if s.Base() != 4 {
		t.Fatalf("Base = %d, want 4", s.Base())
	}
	s.Close(context.Background())
	// Without its base file the stream's head looks cut: refuse.
	if err := os.Remove(filepath.Join(dir, BaseFile)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	var de *DamageError
	if err := s.Check(context.Background()); !errors.As(err, &de) || de.Missing[0] != (SeqRange{1, 3}) {
		t.Fatalf("Check without the base = %v, want sequences 1-3 gone", err)
	}
}

func TestRollOfAnEmptyOrDamagedStreamIsRefused(t *testing.T) {
	s := openStore(t, stateDir(t))
	if _, err := s.BeginRoll(context.Background(), nil, false); err == nil {
		t.Fatal("BeginRoll of an empty stream succeeded")
	}
	d := damageStore(t, 4, func(t *testing.T, blk string) {
		editFile(t, blk, func(b []byte) []byte { return b[:len(b)-10] })
	})
	if _, err := d.BeginRoll(context.Background(), nil, false); !errors.Is(err, ErrDamaged) {
		t.Fatalf("BeginRoll of a damaged stream = %v, want ErrDamaged", err)
	}
	if _, err := os.Stat(filepath.Join(d.Dir(), rollFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a plan was written for a damaged stream")
	}
}

// A crash between the write and the rename of an atomic write leaves a
// temporary file; the next Open removes it.
func TestOpenRemovesTheTemporaryFilesOfACrashedWrite(t *testing.T) {
	dir := stateDir(t)
	fillStore(t, dir, 1)
	if err := os.MkdirAll(filepath.Join(dir, IndexDir), 0o700); err != nil {
		t.Fatal(err)
	}
	left := []string{filepath.Join(dir, ".put-123"), filepath.Join(dir, IndexDir, ".put-456")}
	for _, p := range left {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	openStore(t, dir)
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}
