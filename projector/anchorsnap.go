package projector

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// The snapshot of a recording process's anchor log, kept with the
// store's index (the index folder: a cache, rebuilt from the stream when
// it does not match it). Two files per signing key:
//
//   - anchor.v1.<key>.hashes, the log's stored hashes (tlog's layout, 32
//     bytes each, about two per leaf), appended as leaves are added. The
//     log reads from it what an append needs (the right edge: log2 n
//     hashes) and what a proof needs (2 log2 n); memory holds nothing
//     per leaf.
//   - anchor.v1.<key>.head, written after the hashes it names (an atomic
//     replace): the log's size, its last signed checkpoint, and the stream
//     position of the event that added its last leaf; and, in the same
//     write, the cosignatures prove anchor chooses from (see cosigned: at
//     most one size per number of witnesses) with the stream position of
//     the last anchor.cosigned event folded into them.
//
// A start uses the snapshot only if the stream's message at that position
// is the event that added that leaf with that signed checkpoint (which
// names the log's size and root: a stream that holds it holds the history
// the snapshot was folded from), the checkpoint verifies under the key,
// and the hashes file gives its root;
// it then folds only the events after that position. Anything else is
// logged and the log rebuilt from the stream. The head's cosignatures are
// used only if the stream's message at their position is the last
// anchor.cosigned event they name, and each is a checkpoint that verifies
// under the key with the root the log has at its size, with its
// witness's line; then only the anchor.cosigned events after both
// positions are read, else all of them (the log's leaves still start
// from the snapshot). A save takes the log's last leaf first and then the
// cosignatures, whose folding holds their lock from the event's enqueue
// on: every anchor.cosigned event before either position is in what it
// saves. The head is saved in the
// background after appends (coalesced, never on a call's path) and at
// [Anchor.Close]: a start after a kill -9 folds the events since the last
// save, at most those of the appends that were in flight. A save reads
// nothing back from the stream (reading the message just written makes
// the embedded server load the block being written again).

const anchorSnapVersion = 1

type anchorHead struct {
	Version int             `json:"version"`
	Origin  string          `json:"origin"`
	Size    int64           `json:"size"`
	Note    string          `json:"note"`
	At      events.Position `json:"at"`
	// Cosigned is missing in a head saved by an aegis that did not keep
	// them, or that lost track of one (Anchor.cosLost).
	Cosigned *anchorHeadCosigned `json:"cosigned,omitempty"`
}

// anchorHeadCosigned is the head's cosignatures.
type anchorHeadCosigned struct {
	// At is the stream position of the last anchor.cosigned event folded
	// (0: none yet), Last its digest (cosignedDigest).
	At   events.Position  `json:"at"`
	Last string           `json:"last,omitempty"`
	List []AnchorCosigned `json:"list"`
}

// anchorSnapName names the snapshot files of key's log in the index
// folder (ext "head" or "hashes").
func anchorSnapName(keyID, ext string) string {
	return "anchor.v1." + keyID[:min(len(keyID), 32)] + "." + ext
}

// AnchorSnapshotFile reports whether name is a file of an anchor log's
// snapshot in the index folder.
func AnchorSnapshotFile(name string) bool { return strings.HasPrefix(name, "anchor.v1.") }

// fileHashes holds stored hashes in a file.
type fileHashes struct {
	f *os.File
	n int64
}

func (h *fileHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	if span, ok := hashSpan(indexes, h.n); ok {
		// Ascending and close together (a run of leaves): one read.
		lo := indexes[0]
		buf := make([]byte, span*tlog.HashSize)
		if _, err := h.f.ReadAt(buf, lo*tlog.HashSize); err != nil {
			return nil, fmt.Errorf("anchor log: read stored hashes %d-%d: %w", lo, lo+span-1, err)
		}
		for i, x := range indexes {
			copy(out[i][:], buf[(x-lo)*tlog.HashSize:])
		}
		return out, nil
	}
	for i, x := range indexes {
		if x < 0 || x >= h.n {
			return nil, fmt.Errorf("anchor log: stored hash %d is not there", x)
		}
		if _, err := h.f.ReadAt(out[i][:], x*tlog.HashSize); err != nil {
			return nil, fmt.Errorf("anchor log: read stored hash %d: %w", x, err)
		}
	}
	return out, nil
}

// hashSpan returns how many stored hashes a single read of indexes
// takes, if they ascend within the n there are and the read is not much
// larger than they are.
func hashSpan(indexes []int64, n int64) (int64, bool) {
	if len(indexes) < 2 || indexes[0] < 0 || indexes[len(indexes)-1] >= n {
		return 0, false
	}
	for i := 1; i < len(indexes); i++ {
		if indexes[i] <= indexes[i-1] {
			return 0, false
		}
	}
	span := indexes[len(indexes)-1] - indexes[0] + 1
	return span, span <= 4*int64(len(indexes))
}

func (h *fileHashes) count() int64 { return h.n }

func (h *fileHashes) add(hs []tlog.Hash) error {
	b := make([]byte, 0, len(hs)*tlog.HashSize)
	for _, x := range hs {
		b = append(b, x[:]...)
	}
	if _, err := h.f.WriteAt(b, h.n*tlog.HashSize); err != nil {
		return fmt.Errorf("write stored hashes: %w", err)
	}
	h.n += int64(len(hs))
	return nil
}

func (h *fileHashes) keep(n int64) error {
	if err := h.f.Truncate(n * tlog.HashSize); err != nil {
		return fmt.Errorf("truncate stored hashes: %w", err)
	}
	h.n = n
	return nil
}

// Replayed returns how many events (record checkpoints that add a leaf,
// rotations that set the leaves) the start folded from the stream: none
// when the snapshot was saved after the last of them.
func (a *Anchor) Replayed() int {
	<-a.ready
	return a.replayed
}

// load loads the log: from the snapshot if it can be used, else from
// scratch, then the stream's events after it.
func (a *Anchor) load(ctx context.Context, v note.Verifier) error {
	st := a.store
	dir := filepath.Join(st.Dir(), events.IndexDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("anchor log: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, anchorSnapName(a.key.KeyID(), "hashes")), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("anchor log: %w", err)
	}
	t, head, err := a.openSnapshot(ctx, f, v)
	at := events.Position{}
	if head != nil {
		at = head.At
	}
	if err != nil {
		if !errors.Is(err, events.ErrNoIndex) {
			a.log.Info("anchor log snapshot not used; rebuilding the log from the stream", "reason", err)
		}
		t = &AnchorTree{Origin: a.signer.name, stored: &fileHashes{f: f}}
		if err := t.stored.keep(0); err != nil {
			f.Close()
			return err
		}
		at = events.Position{}
	}
	from := events.Position{}
	if at.Seq > 0 {
		from = events.Position{Seq: at.Seq + 1}
	}
	fold, err := foldAnchor(ctx, st, t, from, v)
	if err != nil {
		f.Close()
		return err
	}
	if fold.events > 0 {
		at = fold.at
	}
	cos, cosFolded, why, err := loadCosigned(ctx, st, t, head, v)
	if err != nil {
		f.Close()
		return err
	}
	if why != nil && head != nil {
		a.log.Info("anchor log snapshot's cosignatures not used; reading them from the stream", "reason", why)
	}
	a.tree, a.at, a.replayed, a.cos = t, at, fold.events, cos
	if fold.events > 0 || cosFolded > 0 || why != nil {
		if err := a.saveHead(ctx); err != nil {
			a.log.Debug("anchor log snapshot not saved", "err", err)
		}
	}
	return nil
}

// openSnapshot returns the log as its snapshot holds it, and its head, if
// the snapshot matches the stream.
func (a *Anchor) openSnapshot(ctx context.Context, f *os.File, v note.Verifier) (*AnchorTree, *anchorHead, error) {
	fh, h, err := openAnchorSnapshot(ctx, a.store, a.signer.name, a.key.KeyID(), f, v)
	if err != nil {
		return nil, nil, err
	}
	// Hashes past the head's (appends whose head was not saved) are
	// dropped: the events after it add them again.
	if err := fh.keep(fh.n); err != nil {
		return nil, nil, err
	}
	return &AnchorTree{Origin: a.signer.name, stored: fh, size: h.Size, note: []byte(h.Note)}, &h, nil
}

// openAnchorSnapshot checks the snapshot of origin's log (key keyID) in
// st's index folder, whose hashes file is f, against the stream, and
// returns its head and its stored hashes (the head's first, read from f;
// it writes nothing, so a reader's copy serves). The head is used only if
// the stream's message at its position is the event that added its last
// leaf with its checkpoint, the checkpoint verifies under v, and f gives
// the checkpoint's root.
func openAnchorSnapshot(ctx context.Context, st *events.Store, origin, keyID string, f *os.File, v note.Verifier) (*fileHashes, anchorHead, error) {
	b, _, err := st.IndexGet(ctx, anchorSnapName(keyID, "head"))
	if err != nil {
		return nil, anchorHead{}, err
	}
	var h anchorHead
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, anchorHead{}, fmt.Errorf("anchor head: %w", err)
	}
	if h.Version != anchorSnapVersion || h.Origin != origin || h.Size < 1 || h.At.Seq == 0 {
		return nil, anchorHead{}, fmt.Errorf("anchor head of version %d, origin %q, %d leaves at %s: not one of this log", h.Version, h.Origin, h.Size, h.At)
	}
	// The message is the event that added the last leaf, with that
	// checkpoint (a message the stream does not hold: none).
	errStop := errors.New("stop")
	found := false
	err = st.ReplaySubjectFrom(ctx, "aegis.>", events.Position{Seq: h.At.Seq}, func(rec events.Record) error {
		if rec.Pos.Seq != h.At.Seq {
			return errStop
		}
		switch rec.Event.Kind {
		case schemas.KindRecordCheckpoint:
			var cp recordCheckpointAnchor
			found = json.Unmarshal(rec.Event.Payload, &cp) == nil && cp.Anchor != nil && cp.Anchor.Index == h.Size-1 && cp.Anchor.Note == h.Note
		case schemas.KindStoreRotated:
			var p events.RollPlan
			if json.Unmarshal(rec.Event.Payload, &p) == nil {
				r, err := RotationDetail(&p)
				found = err == nil && r.Anchor != nil && r.Anchor.Note == h.Note
			}
		}
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, anchorHead{}, fmt.Errorf("read the anchor head's event: %w", err)
	}
	if !found {
		return nil, anchorHead{}, fmt.Errorf("message %d is not the event that added leaf %d of the anchor log", h.At.Seq, h.Size-1)
	}
	n, err := note.Open([]byte(h.Note), note.VerifierList(v))
	if err != nil {
		return nil, anchorHead{}, fmt.Errorf("the anchor head's checkpoint does not verify: %w", err)
	}
	c, err := schemas.ParseAnchorCheckpoint([]byte(n.Text))
	if err != nil || c.Size != h.Size {
		return nil, anchorHead{}, fmt.Errorf("the anchor head's checkpoint is not of %d leaves (%v)", h.Size, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, anchorHead{}, err
	}
	want := tlog.StoredHashCount(h.Size)
	if fi.Size() < want*tlog.HashSize {
		return nil, anchorHead{}, fmt.Errorf("the anchor log's hashes file holds %d bytes, fewer than %d leaves need", fi.Size(), h.Size)
	}
	fh := &fileHashes{f: f, n: want}
	root, err := tlog.TreeHash(h.Size, fh)
	if err != nil || root != c.Root {
		return nil, anchorHead{}, fmt.Errorf("the anchor log's hashes file does not give the root of its checkpoint (%v)", err)
	}
	return fh, h, nil
}

// overHashes is a reader's view of a snapshot's stored hashes: the first
// n read from the hashes file, which it never writes, and the ones the
// events after the snapshot add, held in memory.
type overHashes struct {
	base *fileHashes
	n    int64 // how many of base's it uses
	mem  []tlog.Hash
}

func (o *overHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var from []int64
	for _, x := range indexes {
		if x >= 0 && x < o.n {
			from = append(from, x)
		}
	}
	got, err := o.base.ReadHashes(from)
	if err != nil {
		return nil, err
	}
	for i, x := range indexes {
		switch {
		case x >= 0 && x < o.n:
			out[i], got = got[0], got[1:]
		case x >= o.n && x-o.n < int64(len(o.mem)):
			out[i] = o.mem[x-o.n]
		default:
			return nil, fmt.Errorf("anchor log: stored hash %d is not there", x)
		}
	}
	return out, nil
}

func (o *overHashes) count() int64             { return o.n + int64(len(o.mem)) }
func (o *overHashes) add(hs []tlog.Hash) error { o.mem = append(o.mem, hs...); return nil }

func (o *overHashes) keep(n int64) error {
	if n < o.n {
		o.n, o.mem = n, nil
		return nil
	}
	o.mem = o.mem[:n-o.n]
	return nil
}

// ReadAnchor returns the anchor log signed by pub as the stream st holds
// it, for a reader (aegis prove anchor): it starts from the snapshot a
// recording process keeps in the index folder, checked against the stream
// as a start checks it, and folds only the events after it, keeping those
// leaves' hashes in memory and reading the others from the snapshot's
// hashes file. It writes nothing, so it works on a store opened
// read-only. A snapshot that is missing or does not match the stream is
// left alone and the log folded from the whole stream;
// [AnchorTree.Snapshot] says why. Either way the result is checked
// against the log's last signed checkpoint, as [LoadAnchor]'s is. Its
// cosignatures are the snapshot's and those of the anchor.cosigned
// events after it, or, when the snapshot's do not check
// ([AnchorTree.CosignedSnapshot] says why), those of every such event:
// the same either way. Close it when done.
func ReadAnchor(ctx context.Context, st *events.Store, pub []byte) (*AnchorTree, error) {
	keyID := schemas.KeyID(pub)
	origin := schemas.AnchorOrigin(keyID)
	v, err := AnchorVerifierOf(origin, pub)
	if err != nil {
		return nil, err
	}
	t := &AnchorTree{Origin: origin, stored: &memHashes{}}
	from := events.Position{}
	var head *anchorHead
	f, err := os.Open(filepath.Join(st.Dir(), events.IndexDir, anchorSnapName(keyID, "hashes")))
	if errors.Is(err, os.ErrNotExist) {
		t.snapErr = events.ErrNoIndex
	} else if err != nil {
		t.snapErr = err
	} else {
		fh, h, err := openAnchorSnapshot(ctx, st, origin, keyID, f, v)
		if err != nil {
			f.Close()
			t.snapErr = err
		} else {
			t.file = f
			t.stored = &overHashes{base: fh, n: fh.n}
			t.size, t.note = h.Size, []byte(h.Note)
			from = events.Position{Seq: h.At.Seq + 1}
			head = &h
		}
	}
	fold, err := foldAnchor(ctx, st, t, from, v)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.folded = fold.events
	cos, n, why, err := loadCosigned(ctx, st, t, head, v)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.Cosigned, t.cosFolded, t.cosErr = cos.by, n, why
	if why != nil && head == nil {
		t.cosErr = t.snapErr
	}
	return t, nil
}

// saveHead writes the head of the log as it stands: its hashes are in
// the file already.
func (a *Anchor) saveHead(ctx context.Context) error {
	a.mu.Lock()
	h := anchorHead{Version: anchorSnapVersion, Origin: a.signer.name, Size: a.tree.Size(), Note: string(a.tree.note), At: a.at}
	a.mu.Unlock()
	// The cosignatures after the last leaf: every anchor.cosigned event
	// before it is folded into them by now (record holds cosMu from the
	// enqueue on).
	a.cosMu.Lock()
	if a.cosLost == nil {
		h.Cosigned = &anchorHeadCosigned{At: a.cos.at, Last: a.cos.last, List: a.cos.list(a.signer.name)}
	}
	a.cosMu.Unlock()
	if h.Size == 0 || h.At.Seq == 0 {
		return nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	_, err = a.store.IndexPut(ctx, anchorSnapName(a.key.KeyID(), "head"), b)
	return err
}

// keepSaved saves the head after appends (coalesced) until Close.
func (a *Anchor) keepSaved() {
	defer close(a.saved)
	w := a.watch()
	for {
		select {
		case <-a.closed:
			return
		case <-w:
		case <-a.cosWake:
		}
		if a.store.Closing() {
			return
		}
		if err := a.saveHead(context.Background()); err != nil {
			a.log.Debug("anchor log snapshot not saved", "err", err)
		}
	}
}

// Close stops saving the snapshot in the background and saves it a last
// time; the log takes no append after it. Call it before the store closes.
func (a *Anchor) Close() error {
	var err error
	a.closeOnce.Do(func() {
		close(a.closed)
		<-a.ready
		<-a.saved
		if a.loadErr != nil {
			return
		}
		err = a.saveHead(context.Background())
		a.mu.Lock()
		a.broken = errors.New("anchor log: closed")
		if fh, ok := a.tree.stored.(*fileHashes); ok {
			fh.f.Close()
		}
		a.mu.Unlock()
	})
	return err
}

// loadCosigned returns the cosignatures of t's log (folded to its last
// leaf already) and how many anchor.cosigned events it read: head's
// cosignatures, checked against t and the stream, and those of the
// events after them; or, when head's cannot be used (head nil: the
// snapshot was not), those of every such event of the stream, and why.
func loadCosigned(ctx context.Context, st *events.Store, t *AnchorTree, head *anchorHead, v note.Verifier) (c *cosigned, folded int, why, err error) {
	if head != nil {
		c, why = checkHeadCosigned(ctx, st, t, head, v)
		if why == nil {
			// Every anchor.cosigned event before either position is in
			// them (saveHead).
			from := events.Position{Seq: max(c.at.Seq, head.At.Seq) + 1}
			folded, err = foldCosigned(ctx, st, t.Origin, c, from)
			return c, folded, nil, err
		}
	} else {
		why = errors.New("the anchor log's snapshot was not used")
	}
	c = newCosigned()
	folded, err = foldCosigned(ctx, st, t.Origin, c, events.Position{})
	return c, folded, why, err
}

// checkHeadCosigned returns head's cosignatures if they are t's: each a
// checkpoint of t's log that verifies under v, of a size t has, with its
// root there, and a line of its witness; together what folding them
// keeps; and the stream's message at their position the last
// anchor.cosigned event they name.
func checkHeadCosigned(ctx context.Context, st *events.Store, t *AnchorTree, head *anchorHead, v note.Verifier) (*cosigned, error) {
	hc := head.Cosigned
	if hc == nil {
		return nil, fmt.Errorf("the anchor head keeps no cosignatures (saved by an older aegis, or by one that lost track of a cosignature whose commit failed): %w", events.ErrNoIndex)
	}
	list := slices.Clone(hc.List)
	slices.SortStableFunc(list, func(a, b AnchorCosigned) int { return cmp.Compare(a.Size, b.Size) })
	c := newCosigned()
	for _, x := range list {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("the anchor head's cosignature by %s of %d leaves: "+format, append([]any{x.Witness, x.Size}, args...)...)
		}
		if x.Origin != t.Origin {
			return nil, bad("of the log %q, not %q", x.Origin, t.Origin)
		}
		if x.Size < 1 || x.Size > t.Size() {
			return nil, bad("the log has %d leaves", t.Size())
		}
		n, err := note.Open([]byte(x.Note), note.VerifierList(v))
		if err != nil {
			return nil, bad("its checkpoint does not verify: %v", err)
		}
		cp, err := schemas.ParseAnchorCheckpoint([]byte(n.Text))
		if err != nil || cp.Origin != t.Origin || cp.Size != x.Size {
			return nil, bad("its checkpoint is not of this log at that size (%v)", err)
		}
		if root, err := t.Root(x.Size); err != nil || root != cp.Root {
			return nil, bad("its checkpoint does not have the log's root at that size (%v)", err)
		}
		if !strings.Contains(x.Note, "\n— "+x.Witness+" ") {
			return nil, bad("it holds no cosignature line of the witness")
		}
		c.add(x, events.Position{})
	}
	if len(c.list(t.Origin)) != len(hc.List) {
		return nil, fmt.Errorf("the anchor head's %d cosignatures are not what folding them keeps (%d)", len(hc.List), len(c.list(t.Origin)))
	}
	c.at, c.last = hc.At, hc.Last
	if hc.At.Seq == 0 {
		if len(hc.List) > 0 {
			return nil, fmt.Errorf("the anchor head keeps %d cosignatures and names no event of them", len(hc.List))
		}
		return c, nil
	}
	// The message is the last anchor.cosigned event folded (a message the
	// stream does not hold: none).
	errStop := errors.New("stop")
	found := false
	err := st.ReplaySubjectFrom(ctx, "aegis.>", events.Position{Seq: hc.At.Seq}, func(rec events.Record) error {
		var x AnchorCosigned
		found = rec.Pos.Seq == hc.At.Seq && rec.Event.Kind == schemas.KindAnchorCosigned &&
			json.Unmarshal(rec.Event.Payload, &x) == nil && x.Origin == t.Origin && cosignedDigest(x) == hc.Last
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, fmt.Errorf("read the anchor head's last cosignature event: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("message %d is not the last anchor.cosigned event the anchor head's cosignatures name", hc.At.Seq)
	}
	return c, nil
}
