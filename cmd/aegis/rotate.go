package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

const rotateUsage = `Usage:
  aegis rotate --signing-key KEY [--state-dir DIR] [--if-larger SIZE] [--if-older AGE] [--prune]

Seals a state directory's history so that it stops growing, and keeps
every piece of evidence. Run it when nothing uses the directory (it takes
the directory's lock like any aegis, and says so if another holds it):

  1. Every record file the stream knows of (each --audit path a session
     recorded to) is brought up to date with the stream and checked whole
     against it. A file that does not hold what the stream says was
     written to it stops the rotation before anything is changed.
  2. Each is moved to a numbered segment beside it, calls.aarl becoming
     calls.000001.aarl, with a signed checkpoint (the number of lines and
     the RFC 6962 Merkle root over them, as a C2SP tlog-checkpoint signed
     with KEY) in calls.000001.aarl.checkpoint.
  3. The event stream, whole, moves into DIR/archive/stream-FIRST-LAST: a
     state directory of its own that 'aegis sessions', 'replay' and
     'export' read with --state-dir, and that nothing can record into.
     The index goes with it, so they answer there as fast as here.
  4. A new stream begins at the next sequence. Its first event,
     store.rotated, records what was sealed: each segment, its line count,
     tail and checkpoint, and the archived stream's range and last message.

The next session written to a record file starts it anew, its open line
linked (prev_session_tail) to the segment's last line, so the segments and
the live file, oldest first, verify as one record:
  aegis verify calls.000001.aarl calls.000002.aarl calls.aarl

Nothing is deleted on its own. With --prune the archived stream is deleted
once the new stream's first event says what it held: the record segments
and their checkpoints stay, but the frames, which the record does not
hold, go with it ('aegis replay' of the old sessions is then impossible).
Copy DIR/archive elsewhere first if you may need them. aegis never
deletes a record segment.

KEY must be the signing key the sessions used (verify checks a checkpoint
against the keys the record publishes).

--if-larger SIZE rotates only when the event stream or a record file holds
more than SIZE (such as 1GiB); --if-older AGE (such as 7d or 36h) only
when the stream's oldest event is older than AGE; with both, when either
holds. A daily timer can so rotate by size or by time.

A rotation cut short (a crash, a power loss) is finished by running aegis
rotate again; until then every other aegis command refuses the directory
and says so.

Example:
  $ aegis rotate --state-dir ~/.local/state/aegis --signing-key key --if-larger 1GiB --if-older 30d
`

func (m *Main) runRotate(ctx context.Context, args []string) error {
	fs := m.newFlagSet("rotate")
	dirFlag := fs.String("state-dir", "", "state directory")
	keyPath := fs.String("signing-key", "", "signing key file the sessions used")
	var ifLarger sizeFlag
	fs.Var(&ifLarger, "if-larger", "rotate only when the event stream or a record file holds more than this, such as 1GiB")
	ifOlder := fs.String("if-older", "", "rotate only when the stream's oldest event is older than this, such as 7d")
	prune := fs.Bool("prune", false, "delete the archived stream once the new stream records what it held")
	var err error
	if err = m.parseFlags(fs, rotateUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'aegis help rotate'", "rotate: unexpected argument %q", fs.Arg(0))
	}
	if *keyPath == "" {
		return usagef("aegis rotate --signing-key KEY", "rotate needs --signing-key: the checkpoints of the sealed segments are signed with it")
	}
	when := &rotateWhen{larger: int64(ifLarger)}
	if *ifOlder != "" {
		if when.older, err = parseAge(*ifOlder); err != nil {
			return err
		}
	}
	key, err := m.loadKey(*keyPath)
	if err != nil {
		return err
	}
	dir, err := m.stateDir(*dirFlag)
	if err != nil {
		return err
	}
	plan, err := events.ReadRollPlan(dir)
	if err != nil {
		return withHint(err, "the plan of an interrupted rotation is unreadable; restore the state directory from a backup")
	}
	if plan != nil {
		fmt.Fprintf(m.Stderr, "aegis: finishing the rotation of %s that did not finish\n", dir)
	} else {
		if plan, err = m.planRotation(ctx, *dirFlag, key, when, *prune, args); err != nil || plan == nil {
			return err
		}
	}
	rot, err := projector.RotationDetail(plan)
	if err != nil {
		return err
	}
	if err := projector.ApplySeals(rot); err != nil {
		return withHint(fmt.Errorf("rotate: %w", err), "nothing was deleted; fix what the error names and run aegis rotate again to finish")
	}
	store, plan, err := events.FinishRoll(ctx, events.Config{Dir: dir, Logger: m.logger()})
	if err != nil {
		return withHint(fmt.Errorf("rotate: %w", err), "nothing was deleted; run aegis rotate again to finish")
	}
	defer store.Close(context.Background())
	for _, s := range rot.Records {
		if s.SealedAs == "" {
			fmt.Fprintf(m.Stdout, "%s: nothing since the last rotation; its chain goes on from %.16s…\n", s.Path, s.Tail)
			continue
		}
		fmt.Fprintf(m.Stdout, "sealed %s: %d lines → %s (checkpoint %s)\n", s.Path, s.Lines, s.SealedAs, filepath.Base(s.SealedAs)+projector.CheckpointSuffix)
	}
	st := plan.Stream
	if st.Prune {
		fmt.Fprintf(m.Stdout, "stream sequences %d-%d: pruned\n", st.FirstSeq, st.LastSeq)
	} else {
		fmt.Fprintf(m.Stdout, "stream sequences %d-%d → %s\n", st.FirstSeq, st.LastSeq, filepath.Join(dir, st.Archive))
	}
	fmt.Fprintf(m.Stdout, "the new stream begins at %d with the store.rotated event\n", st.LastSeq+1)
	return nil
}

// planRotation checks the store and writes a rotation plan; nil (and no
// error) when --if-larger says there is nothing to do.
func (m *Main) planRotation(ctx context.Context, dirFlag string, key projector.PrivateKey, when *rotateWhen, prune bool, args []string) (*events.RollPlan, error) {
	store, err := m.openStore(ctx, dirFlag)
	if err != nil {
		return nil, err
	}
	defer store.Close(context.Background())
	if store.Archived() != nil {
		return nil, withHint(fmt.Errorf("rotate: %s: %w", store.Dir(), events.ErrArchived), "rotate the live state directory it was rolled out of")
	}
	ix, err := sessionIndex(ctx, store, m.newProgress("index"), m.logger())
	if err != nil {
		if errors.Is(err, events.ErrDamaged) {
			return nil, withHint(fmt.Errorf("rotate: %w", err), damageHint)
		}
		return nil, err
	}
	if when.set() {
		why, err := when.due(ctx, store, ix, time.Now())
		if err != nil {
			return nil, err
		}
		if why == "" {
			fmt.Fprintf(m.Stdout, "nothing rotated: %s\n", when.notDue)
			return nil, nil
		}
		fmt.Fprintf(m.Stdout, "rotating: %s\n", why)
	}
	rot, err := ix.PlanRotation(ctx, store, key)
	if err != nil {
		if errors.Is(err, projector.ErrRecordDiverged) {
			return nil, withHint(fmt.Errorf("rotate: nothing was changed: %w", err), "a record file must hold exactly what the stream says was written to it before it is sealed; restore it, or export the record from the stream (aegis export --audit PATH --out FILE) and compare")
		}
		return nil, fmt.Errorf("rotate: nothing was changed: %w", err)
	}
	// The segments' checkpoints join the anchor log, which the new
	// stream's first event carries whole.
	if err := projector.SealAnchor(ctx, store, key, &rot); err != nil {
		return nil, fmt.Errorf("rotate: nothing was changed: %w", err)
	}
	rot.Argv = append([]string{"aegis", "rotate"}, args...)
	rot.Version = Version
	plan, err := store.BeginRoll(ctx, rot, prune)
	if err != nil {
		return nil, fmt.Errorf("rotate: nothing was changed: %w", err)
	}
	if err := store.Close(ctx); err != nil {
		return nil, fmt.Errorf("rotate: %w", err)
	}
	return plan, nil
}

// rotateWhen is --if-larger and --if-older: a rotation is due when the
// event stream or a record file holds more than larger, or the oldest
// event of the stream is older than older.
type rotateWhen struct {
	larger int64
	older  time.Duration
	notDue string // why it was not due, once due said so
}

func (w *rotateWhen) set() bool { return w.larger > 0 || w.older > 0 }

// due returns why a rotation is due, or "" (and notDue) if it is not.
func (w *rotateWhen) due(ctx context.Context, st *events.Store, ix *projector.Index, now time.Time) (string, error) {
	var not []string
	if w.larger > 0 {
		n, err := st.StoredBytes(ctx)
		if err != nil {
			return "", err
		}
		if int64(n) > w.larger {
			return fmt.Sprintf("the event stream holds %s, more than %s", events.FormatBytes(int64(n)), events.FormatBytes(w.larger)), nil
		}
		biggest, size := "", int64(0)
		for _, sp := range ix.Spans() {
			if end := sp.Offset + sp.Bytes; end > size {
				biggest, size = sp.Path, end
			}
		}
		if size > w.larger {
			return fmt.Sprintf("%s holds %s, more than %s", biggest, events.FormatBytes(size), events.FormatBytes(w.larger)), nil
		}
		not = append(not, fmt.Sprintf("the event stream (%s) and every record file hold at most %s", events.FormatBytes(int64(n)), events.FormatBytes(w.larger)))
	}
	if w.older > 0 {
		var oldest time.Time
		if r := ix.Rotation(); r != nil {
			oldest = r.Time
		} else if list := ix.Sessions(0); len(list) > 0 {
			oldest = list[0].Started
		}
		if !oldest.IsZero() && now.Sub(oldest) > w.older {
			return fmt.Sprintf("the stream began %s, more than %s ago", oldest.UTC().Format(time.RFC3339), w.older), nil
		}
		not = append(not, fmt.Sprintf("the stream is not older than %s", w.older))
	}
	w.notDue = strings.Join(not, ", and ")
	return "", nil
}

// parseAge reads --if-older: a Go duration, or a number of days (7d).
func parseAge(v string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(d)
		if err == nil && n > 0 && n < 100_000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, nil
	}
	return 0, usagef("for example --if-older 7d or --if-older 36h", "--if-older %q is not an age", v)
}
