package projector

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/events"
)

// SharedIndex is one store's index kept for all the sessions of one
// process that record at once (the HTTP sessions of aegis gateway
// --listen). Each session keeping its own ([SessionConfig.IndexEvery])
// would hold a copy of the whole index, fold every commit of every
// session and save the index once a second: with n sessions, n copies, n
// folds of each commit and n saves a second. A SharedIndex folds the
// commits once, through one tap, and saves every `every`; the sessions
// that use it ([SessionConfig.Shared]) catch their record files up and
// stamp them on it, under its lock.
type SharedIndex struct {
	store *events.Store
	log   *slog.Logger

	mu  sync.Mutex // guards ix; held by a fold, a save, a session's start and stamp
	ix  *Index
	tap *events.CommitTap

	stop context.CancelFunc
	done chan struct{}
}

// NewSharedIndex loads the store's index ([LoadIndex]) and keeps it: it
// folds the store's commits and saves the index every `every` until
// [SharedIndex.Close].
func NewSharedIndex(ctx context.Context, st *events.Store, log *slog.Logger, every time.Duration) (*SharedIndex, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tap := st.TapCommits()
	ix, err := LoadIndex(ctx, st, log, nil)
	if err != nil {
		tap.Close()
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	k := &SharedIndex{store: st, log: log, ix: ix, tap: tap, stop: cancel, done: make(chan struct{})}
	go k.keep(kctx, every)
	return k, nil
}

// keep folds and saves the index every `every`, as a session's indexer
// does (a flood is not read back while it lasts).
func (k *SharedIndex) keep(ctx context.Context, every time.Duration) {
	defer close(k.done)
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var grown uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := k.store.StoredBytes(ctx)
		flood := err == nil && grown > 0 && n-grown > indexPause
		grown = n
		if !flood {
			k.save(ctx, indexBudget)
		}
	}
}

// save folds up to budget bytes (0: all) of the stream's new events and
// saves the index.
func (k *SharedIndex) save(ctx context.Context, budget int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, err := k.ix.updateTapped(ctx, k.store, k.tap, budget); err != nil {
		if ctx.Err() == nil {
			k.log.Debug("index not updated", "err", err)
		}
		return
	}
	if err := k.ix.saveTapped(ctx, k.store, k.tap); err != nil && ctx.Err() == nil {
		k.log.Debug("index not saved", "err", err)
	}
}

// Close stops keeping the index, folds what is left (within the budget of
// a session's close) and saves it.
func (k *SharedIndex) Close() {
	k.stop()
	<-k.done
	ctx, cancel := context.WithTimeout(context.Background(), indexCloseLimit)
	defer cancel()
	k.save(ctx, indexCloseBudget)
	k.tap.Close()
}

// lockFolded locks the index folded to the stream's end, for a session's
// start.
func (k *SharedIndex) lockFolded(ctx context.Context) (*Index, error) {
	k.mu.Lock()
	if _, err := k.ix.updateTapped(ctx, k.store, k.tap, 0); err != nil {
		k.mu.Unlock()
		return nil, err
	}
	return k.ix, nil
}
