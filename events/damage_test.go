package events

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// damageStore writes n events to a fresh store, closes it, damages its
// only message block with hurt, and reopens it.
func damageStore(t *testing.T, n int, hurt func(t *testing.T, blk string)) *Store {
	t.Helper()
	dir := stateDir(t)
	s, err := Open(context.Background(), Config{Dir: dir, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sess, _ := s.NewSession()
	for i := range n {
		kind := schemas.KindNote
		if i == 0 {
			kind = schemas.KindSessionOpened
		}
		if _, err := s.Append(ctx, newEvent(t, s, sess, kind, map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	blks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "jetstream", "*", "streams", StreamName, "msgs", "*.blk"))
	if len(blks) != 1 {
		t.Fatalf("message blocks %v, want one", blks)
	}
	hurt(t, blks[0])
	return openStore(t, dir)
}

func editFile(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Every way a block can be hurt ends every read with an error that names
// the lost sequences, within seconds: never a hang, never a shorter
// history passed off as the whole.
func TestDamagedStreamIsNeverReadAsAShorterHistory(t *testing.T) {
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	for _, tc := range []struct {
		name string
		hurt func(t *testing.T, blk string)
		gone SeqRange // a range the error must cover (zero: any)
	}{
		{"a flipped byte in the last message", func(t *testing.T, blk string) {
			editFile(t, blk, func(b []byte) []byte { b[len(b)-40] ^= 0xff; return b })
		}, SeqRange{50, 50}},
		{"a flipped byte mid-block", func(t *testing.T, blk string) {
			editFile(t, blk, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
		}, SeqRange{}},
		{"a torn tail", func(t *testing.T, blk string) {
			editFile(t, blk, func(b []byte) []byte { return b[:len(b)-30] })
		}, SeqRange{50, 50}},
		{"the block truncated to nothing", func(t *testing.T, blk string) {
			editFile(t, blk, func([]byte) []byte { return nil })
		}, SeqRange{1, 50}},
		{"the block cut short and its index deleted, so the store forgets its tail", func(t *testing.T, blk string) {
			editFile(t, blk, func(b []byte) []byte { return b[:len(b)/2] })
			if err := os.Remove(filepath.Join(filepath.Dir(blk), "index.db")); err != nil {
				t.Fatal(err)
			}
		}, SeqRange{40, 50}},
		{"the block deleted", func(t *testing.T, blk string) {
			if err := os.Remove(blk); err != nil {
				t.Fatal(err)
			}
		}, SeqRange{1, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := damageStore(t, 50, tc.hurt)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for name, read := range map[string]func() error{
				"Replay": func() error {
					return s.Replay(ctx, Position{}, func(Record) error { return nil })
				},
				"ReplaySubject": func() error {
					return s.ReplaySubject(ctx, "aegis.*.>", func(Record) error { return nil })
				},
			} {
				err := read()
				var de *DamageError
				if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
					t.Fatalf("%s = %v, want a DamageError", name, err)
				}
				if len(de.Missing) == 0 || tc.gone != (SeqRange{}) && (!de.Covers(tc.gone.From) || !de.Covers(tc.gone.To)) {
					t.Fatalf("%s: %v; want it to name sequences %v as gone", name, err, tc.gone)
				}
				t.Logf("%s: %v", name, err)
			}
			// A salvage reads every message that loads and names every
			// other one as a gap: together they are the whole stream, in
			// order, and the gaps cover what the error named.
			next := uint64(1)
			var gaps []SeqRange
			err := s.ReplaySalvage(ctx, func(r Record) error {
				if r.Pos.Seq < next {
					return fmt.Errorf("event at %v after sequence %d", r.Pos, next-1)
				}
				if r.Pos.Seq > next {
					return fmt.Errorf("event at %v, but sequence %d was neither read nor named a gap", r.Pos, next)
				}
				next++
				return nil
			}, func(g SeqRange) error {
				if g.From != next || g.To < g.From {
					return fmt.Errorf("gap %v, want one from %d", g, next)
				}
				gaps = append(gaps, g)
				next = g.To + 1
				return nil
			})
			if err != nil {
				t.Fatalf("ReplaySalvage: %v", err)
			}
			if next != 51 || len(gaps) == 0 {
				t.Fatalf("ReplaySalvage ended at %d with gaps %v; want the 50 sequences and a gap", next-1, gaps)
			}
			covered := func(q uint64) bool {
				for _, g := range gaps {
					if q >= g.From && q <= g.To {
						return true
					}
				}
				return false
			}
			if tc.gone != (SeqRange{}) && (!covered(tc.gone.From) || !covered(tc.gone.To)) {
				t.Fatalf("ReplaySalvage gaps %v do not cover %v", gaps, tc.gone)
			}
			t.Logf("ReplaySalvage: gaps %v", gaps)
		})
	}
}

func TestCheckOfAnIntactStream(t *testing.T) {
	s := damageStore(t, 5, func(*testing.T, string) {})
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check = %v on an intact stream", err)
	}
	if got := replayAll(t, s); len(got) != 5 {
		t.Fatalf("Replay gave %d events, want 5", len(got))
	}
}
