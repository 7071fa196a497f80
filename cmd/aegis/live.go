package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// liveReader connects to the stream of the aegis process that holds
// stateDir, as the read-only identity of its credentials file. It returns
// nil, with no error, when no process holds the directory or the holder
// offers no reader (it runs without an approval channel, or predates the
// reader): the caller then reads snapshot copies.
func (m *Main) liveReader(ctx context.Context, stateDir string) (*events.StreamReader, events.Creds, error) {
	holder := lockHolder(stateDir)
	if holder <= 0 {
		return nil, events.Creds{}, nil
	}
	q := &Main{Stdin: m.Stdin, Stdout: io.Discard, Stderr: io.Discard, Getenv: m.Getenv}
	procs, err := q.approvalProcesses(stateDir)
	if err != nil {
		return nil, events.Creds{}, nil
	}
	for _, c := range procs {
		if c.PID != holder || c.Reader == "" || !sameDir(c.StateDir, stateDir) {
			continue
		}
		r, err := events.DialReader(ctx, c)
		if err != nil {
			return nil, events.Creds{}, err
		}
		return r, c, nil
	}
	return nil, events.Creds{}, nil
}

// followLive prints one session as the stream of the process that holds
// the state directory grows, read through r: each read is woken by the
// server's word that a message of the session is stored, never by a
// clock. The session ends when its close line arrives, or when it is not
// the holder's (an earlier process's session that never closed); a
// session of the holder ends when the holder exits, since its record's
// last checkpoint follows the close line. What the holder wrote last is
// then read once from a snapshot copy.
func (m *Main) followLive(ctx context.Context, stateDir string, r *events.StreamReader, creds events.Creds, id string, o replayOpts) error {
	w := bufio.NewWriterSize(m.Stdout, 64<<10)
	defer w.Flush()
	subject := "aegis." + id + ".>"
	wake, stop, err := r.Watch(subject)
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	defer stop()
	tl := projector.NewTimeline(id)
	var ix projector.SessionIndex
	var last events.Record
	next := events.Position{}
	fold := func(rec events.Record) error {
		next = events.Position{Seq: rec.Pos.Seq, Index: rec.Pos.Index + 1}
		ix.Fold(rec)
		step, ok := tl.Fold(rec)
		if !ok {
			return nil
		}
		last = rec
		return writeStep(w, step, rec, o)
	}
	holder := creds.PID
	for first := true; ; first = false {
		err := r.ReplaySubjectFrom(ctx, subject, next, fold)
		if errors.Is(err, events.ErrReaderClosed) {
			if !released(ctx, stateDir, creds.PID) {
				return fmt.Errorf("follow: lost the connection to aegis process %d, which still runs: %w", creds.PID, err)
			}
			if err := m.readRest(ctx, stateDir, subject, next, fold); err != nil {
				return err
			}
			holder = 0
		} else if err != nil {
			return fmt.Errorf("follow: read the event stream: %w", err)
		}
		s, ok := ix.Get(id, holder)
		if first && !ok {
			return withHint(fmt.Errorf("no session %s in the stream", id), "list them with: aegis sessions")
		}
		// A closed session of the holder still gets its record's last
		// checkpoint, signed after the close line: it ends with the
		// process, as it does for a reader of snapshot copies.
		if ok && s.State != projector.StateRunning && (s.PID != holder || holder == 0) {
			for _, st := range tl.Finish(id, s.State, last) {
				if err := writeStep(w, st, last, o); err != nil {
					return err
				}
			}
			return w.Flush()
		}
		if err := w.Flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-r.Closed():
		}
	}
}

// readRest reads the events of subject from from on, once, from a
// snapshot copy of the stream: what a process that has just exited wrote
// after a reader's last read.
func (m *Main) readRest(ctx context.Context, stateDir, subject string, from events.Position, fn func(events.Record) error) error {
	snap, err := newSnapshot(stateDir)
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	defer snap.remove()
	if _, err := snap.refresh(); err != nil {
		return fmt.Errorf("follow: copy the stream: %w", err)
	}
	st, err := snap.open(ctx, &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: m.Getenv})
	if err != nil {
		return fmt.Errorf("follow: read a snapshot of the stream: %w", err)
	}
	defer st.Close(context.Background())
	if err := st.ReplaySubjectFrom(ctx, subject, from, fn); err != nil {
		return fmt.Errorf("follow: read the event stream: %w", err)
	}
	return nil
}

// released waits, ten seconds at most, for process pid to let go of the
// state directory: a store closes its server before it releases the lock,
// so a reader sees its connection go a moment before the process lets go.
func released(ctx context.Context, stateDir string, pid int) bool {
	for deadline := time.Now().Add(10 * time.Second); lockHolder(stateDir) == pid; {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}
