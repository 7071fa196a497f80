package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// liveIndex is the session index of the stream of the process that holds
// the state directory, folded through its reader up to the last message
// the server said it stored.
type liveIndex struct {
	ix  *projector.Index
	pid int // the holder
}

// feedDelay spaces the folds of a busy stream: the page shows at most
// this much later what was stored.
const feedDelay = 100 * time.Millisecond

// feed follows the stream of the process that holds the state directory
// while one does, keeping s.live folded up to the last stored message and
// sending on changed after each fold. With no such process it looks for
// one again each second (the lock file and the runtime directory; not the
// stream's files).
func (s *consoleSource) feed(ctx context.Context, changed chan<- struct{}) {
	for ctx.Err() == nil {
		r, creds, err := s.m.liveReader(ctx, s.stateDir)
		s.setLiveErr(err)
		if r != nil {
			s.followIndex(ctx, r, creds, changed)
			r.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *consoleSource) setLiveErr(err error) {
	s.mu.Lock()
	s.liveErr = err
	s.mu.Unlock()
}

func signal1(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// followIndex keeps s.live folded from r until r's process goes or ctx
// ends.
func (s *consoleSource) followIndex(ctx context.Context, r *events.StreamReader, creds events.Creds, changed chan<- struct{}) {
	wake, stop, err := r.Watch("aegis.>")
	if err != nil {
		s.setLiveErr(err)
		return
	}
	defer stop()
	ix, err := projector.LoadIndex(ctx, r, s.m.logger(), nil)
	if err != nil {
		s.setLiveErr(fmt.Errorf("read the stream of aegis process %d: %w", creds.PID, err))
		return
	}
	s.mu.Lock()
	s.live = &liveIndex{ix: ix, pid: creds.PID}
	s.mu.Unlock()
	signal1(changed)
	defer func() {
		s.mu.Lock()
		s.live = nil
		s.mu.Unlock()
		signal1(changed)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Closed():
			return
		case <-wake:
		}
		s.mu.Lock()
		err := ix.Update(ctx, r, nil)
		s.mu.Unlock()
		if err != nil {
			if !errors.Is(err, events.ErrReaderClosed) && ctx.Err() == nil {
				s.setLiveErr(fmt.Errorf("read the stream of aegis process %d: %w", creds.PID, err))
			}
			return
		}
		signal1(changed)
		select {
		case <-ctx.Done():
			return
		case <-time.After(feedDelay):
		}
	}
}

// liveSessions returns the sessions from the followed stream, if one is
// followed. s.mu is held.
func (s *consoleSource) liveSessions() ([]console.SessionRow, []string, bool) {
	if s.live == nil {
		return nil, nil, false
	}
	return sessionRows(s.live.ix.Sessions(s.live.pid)),
		[]string{fmt.Sprintf("sessions live from the stream of aegis process %d, which holds %s", s.live.pid, s.stateDir)}, true
}
