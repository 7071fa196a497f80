package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/aegis-dev/aegis/events/witness"
	"github.com/aegis-dev/aegis/schemas"
)

// Witnessing. A recording process with a witness policy submits the anchor
// log's checkpoints to every witness of the policy that has a URL (C2SP
// tlog-witness add-checkpoint, with the consistency proof from the size
// the witness cosigned last) and stores each cosignature it gets as an
// anchor.cosigned event. It runs beside everything else, one goroutine a
// witness: no session, call or checkpoint waits for a witness, and a
// witness that is slow or down delays only its own submissions.
//
// At most one submission a witness every Interval, of the newest
// checkpoint then (the ones in between are covered by it). The size a
// witness holds is learnt from its 409 answer (the first submission says
// old size 0, as the specification allows), and the submission is made
// again at once with the proof from that size. A 409 with a size larger
// than the log, or with the same size (another root), and a 422 mean the
// witness saw another history of this log: that is logged as an error
// and the witness is tried again only with the next checkpoint.

// DefaultWitnessInterval is the least time between two submissions to one
// witness.
const DefaultWitnessInterval = 10 * time.Second

// WitnessingConfig configures [Anchor.StartWitnessing].
type WitnessingConfig struct {
	Policy   *schemas.WitnessPolicy
	Interval time.Duration // 0: DefaultWitnessInterval
	HTTP     *http.Client  // nil: http.DefaultClient
	Logger   *slog.Logger
	// Cosigned, when set, is called after each cosignature is durable
	// (tests).
	Cosigned func(AnchorCosigned)
}

// StartWitnessing starts submitting the anchor log's checkpoints to the
// policy's witnesses; the returned func stops it and waits.
func (a *Anchor) StartWitnessing(cfg WitnessingConfig) (stop func()) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultWitnessInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = a.log
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, w := range cfg.Policy.Witnesses {
		if w.URL == "" {
			continue
		}
		ws := &witnessLoop{a: a, cfg: cfg, w: w, wake: a.watch(),
			client: &witness.Client{URL: w.URL, HTTP: cfg.HTTP}, known: -1,
			log: cfg.Logger.With("witness", w.Name, "url", w.URL)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws.run(ctx)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

type witnessLoop struct {
	a      *Anchor
	cfg    WitnessingConfig
	w      schemas.PolicyWitness
	client *witness.Client
	wake   chan struct{}
	log    *slog.Logger
	known  int64 // the size the witness holds; -1 unknown
	done   int64 // the size it cosigned, or refused for good
}

func (l *witnessLoop) run(ctx context.Context) {
	if l.a.Wait(ctx) != nil {
		return
	}
	backoff := l.cfg.Interval
	var last time.Time
	retry := time.NewTimer(0) // the log may hold an uncosigned checkpoint already
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-retry.C:
		}
		if wait := l.cfg.Interval - time.Since(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		err := l.submit(ctx)
		switch {
		case err == nil:
			backoff = l.cfg.Interval
		case ctx.Err() != nil:
			return
		default:
			// Unreachable or failing: try again later, less and less often.
			l.log.Warn("witness submission failed; trying again later", "err", err, "in", backoff)
			retry.Reset(backoff)
			backoff = min(2*backoff, 5*time.Minute)
		}
	}
}

// submit submits the newest checkpoint, if the witness has not cosigned
// it yet. A refusal that only a newer checkpoint can answer is logged
// and returns nil.
func (l *witnessLoop) submit(ctx context.Context) error {
	msg, size := l.a.latest()
	if size == 0 || size == l.done {
		return nil
	}
	for attempt := 0; attempt < 2; attempt++ {
		old := max(l.known, 0)
		if old > size {
			l.log.Error("the witness holds a larger checkpoint of this anchor log than this state directory: the state directory was rolled back, or another one signs with this key", "witness_size", old, "size", size)
			l.done = size
			return nil
		}
		proof, err := l.a.proveConsistency(old, size)
		if err != nil {
			return err
		}
		hs := make([][32]byte, len(proof))
		for i, h := range proof {
			hs[i] = h
		}
		cosig, err := l.client.AddCheckpoint(ctx, old, hs, msg)
		var conflict *witness.ConflictError
		switch {
		case errors.As(err, &conflict):
			if conflict.Size == old || conflict.Size > size {
				l.log.Error("the witness refused this anchor checkpoint: it cosigned another one of this log (a forked history, or a rolled-back state directory)", "witness_size", conflict.Size, "size", size, "err", err)
				l.known, l.done = conflict.Size, size
				return nil
			}
			l.known = conflict.Size
			continue
		case errors.Is(err, witness.ErrProof):
			l.log.Error("the witness refused the consistency proof of this anchor log: it cosigned a history this log does not extend (a forked history)", "old", old, "size", size, "err", err)
			l.known, l.done = -1, size
			return nil
		case errors.Is(err, witness.ErrUnknownLog):
			l.log.Error("the witness does not know this anchor log; add it there (see docs/VERIFY.md)", "origin", l.a.Origin(), "err", err)
			return err
		case err != nil:
			return err
		}
		return l.store(ctx, msg, size, cosig)
	}
	return fmt.Errorf("the witness's size changed twice while submitting")
}

// store checks the cosignature lines and records them.
func (l *witnessLoop) store(ctx context.Context, msg []byte, size int64, cosig []byte) error {
	full := append(append([]byte(nil), msg...), cosig...)
	av, err := AnchorVerifierOf(l.a.Origin(), l.a.key.PublicKey())
	if err != nil {
		return err
	}
	n, err := note.Open(full, note.VerifierList(av, l.w.Verifier))
	if err != nil {
		return fmt.Errorf("the witness's cosignature does not verify: %w", err)
	}
	ok := false
	for _, s := range n.Sigs {
		ok = ok || s.Name == l.w.Verifier.Name() && s.Hash == l.w.Verifier.KeyHash()
	}
	if !ok {
		return fmt.Errorf("the witness answered no cosignature by its key %s", l.w.Verifier.Name())
	}
	// Keep the log's signature and the witness's own lines only.
	keep := msg
	for _, line := range strings.SplitAfter(string(cosig), "\n") {
		if strings.HasPrefix(line, "— "+l.w.Verifier.Name()+" ") {
			keep = append(keep, line...)
		}
	}
	c := AnchorCosigned{Origin: l.a.Origin(), Size: size, Witness: l.w.Verifier.Name(), Note: string(keep)}
	if err := l.a.record(ctx, c); err != nil {
		return err
	}
	l.known, l.done = size, size
	l.log.Info("anchor checkpoint cosigned", "size", size)
	if l.cfg.Cosigned != nil {
		l.cfg.Cosigned(c)
	}
	return nil
}

// record makes an anchor.cosigned event durable and folds it into the
// cosignatures the snapshot keeps.
func (a *Anchor) record(ctx context.Context, c AnchorCosigned) error {
	a.sessOnce.Do(func() { a.session, a.sessErr = a.store.NewSession() })
	if a.sessErr != nil {
		return a.sessErr
	}
	ev, err := a.store.NewEvent(a.session, schemas.KindAnchorCosigned, c)
	if err != nil {
		return err
	}
	a.cosMu.Lock()
	defer a.cosMu.Unlock()
	r, err := a.store.Enqueue(ev)
	if err != nil {
		return fmt.Errorf("record the cosignature: %w", err)
	}
	pos, err := r.Wait(ctx)
	if err != nil {
		// It may be durable all the same: what the snapshot would keep
		// is no longer known to be the stream's.
		a.cosLost = fmt.Errorf("a cosignature's commit failed (%w); the next start reads them from the stream", err)
		return fmt.Errorf("record the cosignature: %w", err)
	}
	a.cos.add(c, pos)
	select {
	case a.cosWake <- struct{}{}:
	default:
	}
	return nil
}
