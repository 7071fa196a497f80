package projector

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// The anchor log (see schemas/anchor.go for its format). A state
// directory has one per signing key, origin "aegis/anchor/<key_id>", that
// never changes: record origins change with every file and rotation, and
// a witness needs one that does not. Its leaves are the record
// checkpoints as the sessions sign them and the checkpoints a rotation
// seals segments with, in the order they became durable.
//
// It is kept in the stream like everything else, in the events that
// carry those checkpoints: a record.checkpoint event holds the leaf's
// index and the signed anchor checkpoint of the log up to and including
// it ([AnchorEntry]), so the leaf and the anchor's growth are one event,
// durable together or not at all; a rotation's store.rotated event holds
// the leaf hashes of the whole log up to its seals ([AnchorSeal]), since
// the stream before it moves to an archive. [LoadAnchor] rebuilds the log
// from those and checks it against the last signed anchor checkpoint.
// The appends of one process are serialized ([Anchor.Append] holds its
// lock until the event is durable), so stream order is leaf order.

// AnchorEntry is a leaf of the anchor log in a record.checkpoint event.
type AnchorEntry struct {
	// Index is the leaf's index: the record checkpoint (the event's Note)
	// is leaf Index of the anchor log.
	Index int64 `json:"index"`
	// Note is the signed anchor checkpoint of the log's first Index+1
	// leaves.
	Note string `json:"note"`
}

// AnchorSeal is the anchor log in a rotation: the segments' checkpoints
// appended to it.
type AnchorSeal struct {
	// Hashes is base64 of the leaf hashes of the whole log, 32 bytes
	// each, up to and including the seals.
	Hashes string `json:"leaf_hashes"`
	// Note is the signed anchor checkpoint over them.
	Note string `json:"note"`
}

// AnchorCosigned is the payload of an anchor.cosigned event: a witness's
// cosignature of a checkpoint of the anchor log.
type AnchorCosigned struct {
	Origin string `json:"origin"`
	Size   int64  `json:"size"`
	// Witness is the witness's key name.
	Witness string `json:"witness"`
	// Note is the anchor checkpoint as the log signed it, with the
	// witness's cosignature lines after the log's signature.
	Note string `json:"note"`
}

// hashStore holds a tree's stored hashes, in tlog's layout (every leaf's
// hash and the subtrees it completes, in order): in memory (memHashes) or
// in a file of the index folder (fileHashes, anchorsnap.go).
type hashStore interface {
	tlog.HashReader
	// count is how many stored hashes it holds.
	count() int64
	// add appends stored hashes.
	add(hs []tlog.Hash) error
	// keep drops every stored hash from n on.
	keep(n int64) error
}

// memHashes holds stored hashes in memory.
type memHashes struct{ h []tlog.Hash }

func (m *memHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(m.h)) {
			return nil, fmt.Errorf("anchor log: stored hash %d is not there", x)
		}
		out[i] = m.h[x]
	}
	return out, nil
}

func (m *memHashes) count() int64             { return int64(len(m.h)) }
func (m *memHashes) add(hs []tlog.Hash) error { m.h = append(m.h, hs...); return nil }
func (m *memHashes) keep(n int64) error       { m.h = m.h[:n]; return nil }

// AnchorTree is an anchor log as rebuilt from a stream: its stored
// hashes, its last signed checkpoint, and what it was folded from. It
// makes the proofs of aegis prove and of a witness submission. The tree
// [LoadAnchor] returns holds its hashes in memory, with an index of its
// leaves; the one a recording process keeps ([OpenAnchor]) holds them in
// a file of the index folder and nothing per leaf in memory; the one
// [ReadAnchor] returns reads them from that file and holds in memory only
// those of the leaves added after the snapshot.
type AnchorTree struct {
	Origin string
	stored hashStore
	size   int64
	index  map[tlog.Hash]int64 // leaf hash -> first index; nil: LeafIndex reads the stored leaf hashes
	note   []byte
	// Cosigned holds, per anchor size, the cosigned checkpoints by
	// witness key name, of the sizes no larger one cosigned by as many
	// witnesses or more covers (filled by LoadAnchor and ReadAnchor only;
	// see cosigned).
	Cosigned map[int64]map[string]string

	// ReadAnchor's: the snapshot's hashes file, why the snapshot was not
	// used, and the events folded after it; why its cosignatures were not
	// used, and the anchor.cosigned events folded.
	file      *os.File
	snapErr   error
	folded    int
	cosErr    error
	cosFolded int
}

// Snapshot reports why [ReadAnchor] did not start from the snapshot
// (wrapping [events.ErrNoIndex] when there is none): nil when it did.
func (t *AnchorTree) Snapshot() error { return t.snapErr }

// Folded is the number of events (record checkpoints that add a leaf,
// rotations that set the leaves) [ReadAnchor] folded from the stream:
// none when the snapshot was saved after the last of them.
func (t *AnchorTree) Folded() int { return t.folded }

// CosignedSnapshot reports why [ReadAnchor] did not start from the
// cosignatures kept with the snapshot and read every anchor.cosigned
// event of the stream instead (wrapping [events.ErrNoIndex] when the
// snapshot keeps none, as one saved by an older aegis): nil when it did.
// It is not nil whenever [AnchorTree.Snapshot] is not.
func (t *AnchorTree) CosignedSnapshot() error { return t.cosErr }

// CosignedFolded is the number of anchor.cosigned events [ReadAnchor] (or
// [LoadAnchor]) folded from the stream: none when the snapshot was saved
// after the last of them.
func (t *AnchorTree) CosignedFolded() int { return t.cosFolded }

// Close closes the snapshot's hashes file [ReadAnchor] reads from.
func (t *AnchorTree) Close() error {
	if t.file == nil {
		return nil
	}
	err := t.file.Close()
	t.file = nil
	return err
}

func newMemTree(origin string) *AnchorTree {
	return &AnchorTree{Origin: origin, stored: &memHashes{}, index: map[tlog.Hash]int64{}, Cosigned: map[int64]map[string]string{}}
}

// Size is the number of leaves.
func (t *AnchorTree) Size() int64 { return t.size }

// Note is the last signed checkpoint of the log (nil when empty).
func (t *AnchorTree) Note() []byte { return t.note }

// Root returns the root of the log's first n leaves.
func (t *AnchorTree) Root(n int64) (tlog.Hash, error) { return tlog.TreeHash(n, t.stored) }

// leaf returns the hash of leaf i.
func (t *AnchorTree) leaf(i int64) (tlog.Hash, error) {
	hs, err := t.stored.ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
	if err != nil {
		return tlog.Hash{}, err
	}
	return hs[0], nil
}

// LeafIndex returns the index of the leaf whose text is body.
func (t *AnchorTree) LeafIndex(body []byte) (int64, bool) {
	h := tlog.RecordHash(body)
	if t.index != nil {
		i, ok := t.index[h]
		return i, ok
	}
	found := int64(-1)
	for i := t.size - 1; i >= 0; i-- {
		if l, err := t.leaf(i); err == nil && l == h {
			found = i
		}
	}
	return found, found >= 0
}

// LeafIndexes returns, for each body that is the text of a leaf, the
// index of its last leaf, by leaf hash. It reads the leaf hashes from the
// end back, a batch at a time, and stops when it has found them all: a
// log's newest leaves cost the least to find.
func (t *AnchorTree) LeafIndexes(bodies [][]byte) (map[tlog.Hash]int64, error) {
	return t.LeafIndexesDownTo(bodies, -1)
}

// LeafIndexesDownTo is [AnchorTree.LeafIndexes] that also stops at the
// first of them it finds below index below, and looks for none under it:
// of a record's checkpoints, which join the log in order, aegis prove
// anchor needs the newest in the checkpoint it prefers, and the older
// ones only when there is none.
func (t *AnchorTree) LeafIndexesDownTo(bodies [][]byte, below int64) (map[tlog.Hash]int64, error) {
	want := map[tlog.Hash]bool{}
	for _, b := range bodies {
		want[tlog.RecordHash(b)] = true
	}
	found := map[tlog.Hash]int64{}
	const batch = 4096
	for hi := t.size; hi > 0 && len(found) < len(want); hi -= batch {
		lo := max(hi-batch, 0)
		idx := make([]int64, 0, hi-lo)
		for i := lo; i < hi; i++ {
			idx = append(idx, tlog.StoredHashIndex(0, i))
		}
		hs, err := t.stored.ReadHashes(idx)
		if err != nil {
			return nil, err
		}
		for j := len(hs) - 1; j >= 0; j-- {
			if _, seen := found[hs[j]]; want[hs[j]] && !seen {
				found[hs[j]] = lo + int64(j)
				if lo+int64(j) < below {
					return found, nil
				}
			}
		}
	}
	return found, nil
}

// ProveLeaf returns the inclusion proof of leaf i in the log of n leaves.
func (t *AnchorTree) ProveLeaf(i, n int64) (tlog.RecordProof, error) {
	return tlog.ProveRecord(n, i, t.stored)
}

// ProveConsistency returns the consistency proof of the log of m leaves
// in that of n.
func (t *AnchorTree) ProveConsistency(m, n int64) (tlog.TreeProof, error) {
	return tlog.ProveTree(n, m, t.stored)
}

func (t *AnchorTree) add(h tlog.Hash) error {
	n := t.size
	hs, err := tlog.StoredHashesForRecordHash(n, h, t.stored)
	if err != nil {
		return err
	}
	if err := t.stored.add(hs); err != nil {
		return fmt.Errorf("anchor log: %w", err)
	}
	t.size++
	if t.index != nil {
		if _, ok := t.index[h]; !ok {
			t.index[h] = n
		}
	}
	return nil
}

// truncate drops the leaves from n on (an append whose event failed).
func (t *AnchorTree) truncate(n int64) error {
	if t.index != nil {
		for i := n; i < t.size; i++ {
			if h, err := t.leaf(i); err == nil && t.index[h] >= n {
				delete(t.index, h)
			}
		}
	}
	if err := t.stored.keep(tlog.StoredHashCount(n)); err != nil {
		return fmt.Errorf("anchor log: %w", err)
	}
	t.size = n
	return nil
}

// ErrAnchor is wrapped when the anchor log a stream holds does not add up.
var ErrAnchor = errors.New("anchor log")

// LoadAnchor rebuilds the anchor log of origin from the stream: the
// leaf hashes of the rotation that began it, if it holds the log's, then
// every record checkpoint event with an entry of it, in stream order. It
// checks that the leaves are contiguous and that the last signed anchor
// checkpoint (verified under pub) has the root they give; anything else
// is an error wrapping [ErrAnchor]. A stream with no leaf of the log gives
// an empty log. The tree it returns is held in memory, with the
// cosignatures the stream holds; a recording process keeps its log from a
// snapshot instead ([OpenAnchor]), and a reader starts from that snapshot
// ([ReadAnchor]).
func LoadAnchor(ctx context.Context, st *events.Store, origin string, v note.Verifier) (*AnchorTree, error) {
	t := newMemTree(origin)
	if _, err := foldAnchor(ctx, st, t, events.Position{}, v); err != nil {
		return nil, err
	}
	c := newCosigned()
	n, err := foldCosigned(ctx, st, origin, c, events.Position{})
	if err != nil {
		return nil, err
	}
	t.Cosigned, t.cosFolded = c.by, n
	return t, nil
}

// cosigned holds the cosignatures of an anchor log that aegis prove
// anchor chooses from, as folded from the anchor.cosigned events in stream
// order: per anchor size, the cosigned checkpoint by witness key name
// (the last one each witness gave for that size). A size is kept only
// while no larger size is cosigned by as many witnesses or more: prove
// anchor takes the checkpoint cosigned by the most witnesses, the largest
// of those, among the ones that hold the leaf, and a smaller one with no
// more witnesses is never that. It holds at most one size per number of
// witnesses, whatever the history: what a snapshot keeps
// (anchorsnap.go).
type cosigned struct {
	by   map[int64]map[string]string
	at   events.Position // the last anchor.cosigned event folded
	last string          // its digest (cosignedDigest)
}

func newCosigned() *cosigned { return &cosigned{by: map[int64]map[string]string{}} }

// add folds the cosignature c, the event at pos.
func (s *cosigned) add(c AnchorCosigned, pos events.Position) {
	if s.by[c.Size] == nil {
		s.by[c.Size] = map[string]string{}
	}
	s.by[c.Size][c.Witness] = c.Note
	s.prune()
	s.at, s.last = pos, cosignedDigest(c)
}

// prune drops every size that a larger one cosigned by as many witnesses
// or more covers.
func (s *cosigned) prune() {
	sizes := make([]int64, 0, len(s.by))
	for n := range s.by {
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	most := 0
	for i := len(sizes) - 1; i >= 0; i-- {
		if k := len(s.by[sizes[i]]); k > most {
			most = k
		} else {
			delete(s.by, sizes[i])
		}
	}
}

// list returns the cosignatures held, by size then witness.
func (s *cosigned) list(origin string) []AnchorCosigned {
	var out []AnchorCosigned
	for n, by := range s.by {
		for w, msg := range by {
			out = append(out, AnchorCosigned{Origin: origin, Size: n, Witness: w, Note: msg})
		}
	}
	slices.SortFunc(out, func(a, b AnchorCosigned) int {
		if a.Size != b.Size {
			return cmp.Compare(a.Size, b.Size)
		}
		return strings.Compare(a.Witness, b.Witness)
	})
	return out
}

// cosignedDigest names an anchor.cosigned event by what it holds.
func cosignedDigest(c AnchorCosigned) string {
	return schemas.HashHex([]byte(fmt.Sprintf("%s\n%d\n%s\n%s", c.Origin, c.Size, c.Witness, c.Note)))
}

// foldCosigned folds into s the anchor.cosigned events of origin's log in
// st from `from` on, and returns how many it read.
func foldCosigned(ctx context.Context, st *events.Store, origin string, s *cosigned, from events.Position) (int, error) {
	n := 0
	err := st.ReplaySubjectFrom(ctx, "aegis.*."+string(schemas.KindAnchorCosigned), from, func(rec events.Record) error {
		var c AnchorCosigned
		if json.Unmarshal(rec.Event.Payload, &c) != nil || c.Origin != origin {
			return nil
		}
		s.add(c, events.Position{Seq: rec.Pos.Seq})
		n++
		return nil
	})
	return n, err
}

// anchorFold is what [foldAnchor] read.
type anchorFold struct {
	events int             // the events that set or added leaves
	at     events.Position // the last of them
}

// foldAnchor folds into t the events of st from `from` on that set its
// leaves (a rotation's) or add one (a record checkpoint's), and checks the
// result against the last signed anchor checkpoint, which becomes t's.
func foldAnchor(ctx context.Context, st *events.Store, t *AnchorTree, from events.Position, v note.Verifier) (anchorFold, error) {
	origin := t.Origin
	var f anchorFold
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: "+format, append([]any{ErrAnchor, origin}, args...)...)
	}
	var lastNote []byte
	err := st.ReplaySubjectFrom(ctx, "aegis.*."+string(schemas.KindStoreRotated), from, func(rec events.Record) error {
		var p events.RollPlan
		if json.Unmarshal(rec.Event.Payload, &p) != nil {
			return nil
		}
		r, err := RotationDetail(&p)
		if err != nil || r.Anchor == nil {
			return nil
		}
		if c, ok := anchorBody(r.Anchor.Note); !ok || c.Origin != origin {
			return nil
		}
		raw, err := base64.StdEncoding.DecodeString(r.Anchor.Hashes)
		if err != nil || len(raw)%tlog.HashSize != 0 {
			return bad("the rotation's leaf hashes are not base64 of 32-byte hashes")
		}
		if err := t.truncate(0); err != nil {
			return err
		}
		for i := 0; i < len(raw); i += tlog.HashSize {
			if err := t.add(tlog.Hash(raw[i : i+tlog.HashSize])); err != nil {
				return err
			}
		}
		lastNote = []byte(r.Anchor.Note)
		f.events++
		f.at = events.Position{Seq: rec.Pos.Seq}
		return nil
	})
	if err != nil {
		return f, err
	}
	err = st.ReplaySubjectFrom(ctx, "aegis.*."+string(schemas.KindRecordCheckpoint), from, func(rec events.Record) error {
		var cp recordCheckpointAnchor
		if json.Unmarshal(rec.Event.Payload, &cp) != nil || cp.Anchor == nil {
			return nil
		}
		if c, ok := anchorBody(cp.Anchor.Note); !ok || c.Origin != origin {
			return nil
		}
		if cp.Anchor.Index != t.Size() {
			return bad("leaf %d at stream position %s follows %d leaves", cp.Anchor.Index, rec.Pos, t.Size())
		}
		text := schemas.NoteText([]byte(cp.Note))
		if text == nil {
			return bad("leaf %d is not a signed note", cp.Anchor.Index)
		}
		if err := t.add(tlog.RecordHash(text)); err != nil {
			return err
		}
		lastNote = []byte(cp.Anchor.Note)
		f.events++
		f.at = events.Position{Seq: rec.Pos.Seq}
		return nil
	})
	if err != nil {
		return f, err
	}
	if lastNote == nil {
		return f, nil // nothing new: t stands as it was
	}
	n, err := note.Open(lastNote, note.VerifierList(v))
	if err != nil {
		return f, bad("its last checkpoint does not verify: %v", err)
	}
	c, err := schemas.ParseAnchorCheckpoint([]byte(n.Text))
	if err != nil {
		return f, bad("%v", err)
	}
	root, err := t.Root(t.Size())
	if err != nil {
		return f, err
	}
	if c.Size != t.Size() || c.Root != root {
		return f, bad("its last checkpoint covers %d leaves with root %s, the stream holds %d with root %s",
			c.Size, schemas.ProofHash(c.Root), t.Size(), schemas.ProofHash(root))
	}
	t.note = lastNote
	return f, nil
}

// recordCheckpointAnchor reads what the anchor needs of a record.checkpoint
// event.
type recordCheckpointAnchor struct {
	Note   string       `json:"note"`
	Anchor *AnchorEntry `json:"anchor"`
}

// anchorBody parses the body of a signed anchor checkpoint, unverified.
func anchorBody(msg string) (schemas.AnchorCheckpoint, bool) {
	text := schemas.NoteText([]byte(msg))
	if text == nil {
		return schemas.AnchorCheckpoint{}, false
	}
	c, err := schemas.ParseAnchorCheckpoint(text)
	return c, err == nil
}

// anchorSigner is a note.Signer whose key name is the anchor origin.
type anchorSigner struct {
	key  PrivateKey
	name string
	hash uint32
}

func newAnchorSigner(k PrivateKey) (*anchorSigner, error) {
	name := schemas.AnchorOrigin(k.KeyID())
	v, err := AnchorVerifierOf(name, k.PublicKey())
	if err != nil {
		return nil, err
	}
	return &anchorSigner{key: k, name: name, hash: v.KeyHash()}, nil
}

func (s *anchorSigner) Name() string                    { return s.name }
func (s *anchorSigner) KeyHash() uint32                 { return s.hash }
func (s *anchorSigner) Sign(msg []byte) ([]byte, error) { return s.key.Sign(msg) }

// SignAnchorCheckpoint signs c as key's anchor log (its origin must be
// key's anchor origin).
func SignAnchorCheckpoint(key PrivateKey, c schemas.AnchorCheckpoint) ([]byte, error) {
	s, err := newAnchorSigner(key)
	if err != nil {
		return nil, err
	}
	if c.Origin != s.name {
		return nil, fmt.Errorf("sign anchor checkpoint: origin %q is not %q", c.Origin, s.name)
	}
	return note.Sign(&note.Note{Text: string(c.Body())}, s)
}

// AnchorVerifierOf returns the note verifier of the anchor log of origin
// signed by pub.
func AnchorVerifierOf(origin string, pub []byte) (note.Verifier, error) {
	vkey, err := note.NewEd25519VerifierKey(origin, pub)
	if err != nil {
		return nil, fmt.Errorf("anchor verifier: %w", err)
	}
	return note.NewVerifier(vkey)
}

// AnchorVerifierKey returns the vkey of the anchor log signed by k: what a
// witness is configured with (witnessctl add-key -origin … -key …).
func AnchorVerifierKey(pub []byte) (origin, vkey string, err error) {
	origin = schemas.AnchorOrigin(schemas.KeyID(pub))
	vkey, err = note.NewEd25519VerifierKey(origin, pub)
	return origin, vkey, err
}

// Anchor is the anchor log a recording process appends to: one per state
// directory (and signing key), shared by all its sessions.
type Anchor struct {
	store  *events.Store
	key    PrivateKey
	signer *anchorSigner
	log    *slog.Logger

	ready    chan struct{}
	loadErr  error
	replayed int // the events folded at start (anchorsnap.go)

	mu      sync.Mutex
	tree    *AnchorTree
	at      events.Position // the event that added the tree's last leaf
	broken  error           // set when the stored hashes on disk no longer match the tree
	watches []chan struct{}

	// The snapshot's saver (anchorsnap.go).
	closeOnce sync.Once
	closed    chan struct{}
	saved     chan struct{}

	// session files the cosignature events (witnessing.go).
	sessOnce sync.Once
	session  string
	sessErr  error

	// The cosignatures, as the stream holds them: cosMu is held from an
	// anchor.cosigned event's enqueue to its fold into cos, so that cos
	// is folded in stream order and a save sees every such event before
	// the last leaf it saves (anchorsnap.go). cosLost is set when an
	// event's commit failed in a way that may have made it durable all
	// the same: cos is then not saved, and the next start reads them all.
	cosMu   sync.Mutex
	cos     *cosigned
	cosLost error
	cosWake chan struct{}
}

// OpenAnchor starts loading the anchor log of key, in the background:
// nothing waits for it but the first append (a record checkpoint, which
// is off every call's path). It starts from the snapshot kept in the
// store's index folder and folds only the events after it; a snapshot
// that does not match the stream is thrown away and the log rebuilt from
// the stream (anchorsnap.go). [Anchor.Close] saves the snapshot.
func OpenAnchor(st *events.Store, key PrivateKey, log *slog.Logger) (*Anchor, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := newAnchorSigner(key)
	if err != nil {
		return nil, err
	}
	a := &Anchor{store: st, key: key, signer: s, log: log, ready: make(chan struct{}), closed: make(chan struct{}), saved: make(chan struct{}),
		cosWake: make(chan struct{}, 1)}
	go func() {
		defer close(a.ready)
		v, err := AnchorVerifierOf(s.name, key.PublicKey())
		if err == nil {
			err = a.load(context.Background(), v)
		}
		if err != nil {
			a.loadErr = fmt.Errorf("rebuild the anchor log from the stream: %w", err)
			close(a.saved)
			if st.Closing() {
				// aegis is stopping (a refused start among others):
				// nothing is wrong with the stream.
				return
			}
			log.Error("the anchor log cannot be rebuilt from the event stream; record checkpoints stop until this is fixed", "err", err)
			return
		}
		go a.keepSaved()
	}()
	return a, nil
}

// Origin is the anchor log's origin.
func (a *Anchor) Origin() string { return a.signer.name }

// Wait waits until the log is rebuilt and returns its error.
func (a *Anchor) Wait(ctx context.Context) error {
	select {
	case <-a.ready:
		return a.loadErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Append adds the record checkpoint whose signed note is cpNote as the
// next leaf and signs the log's new checkpoint; commit must make the
// record.checkpoint event holding the entry durable, and return its
// position. The log's lock is held until commit returns, so leaves are
// durable in index order; if commit fails the leaf is taken back.
func (a *Anchor) Append(ctx context.Context, cpNote []byte, commit func(AnchorEntry) (events.Position, error)) error {
	if err := a.Wait(ctx); err != nil {
		return err
	}
	text := schemas.NoteText(cpNote)
	if text == nil {
		return errors.New("anchor: the record checkpoint is not a signed note")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.broken != nil {
		return a.broken
	}
	n := a.tree.Size()
	if err := a.tree.add(tlog.RecordHash(text)); err != nil {
		return err
	}
	msg, err := a.sign(n + 1)
	var pos events.Position
	if err == nil {
		pos, err = commit(AnchorEntry{Index: n, Note: string(msg)})
	}
	if err != nil {
		if terr := a.tree.truncate(n); terr != nil {
			// The stored hashes on disk no longer match the log:
			// nothing more is appended until it is loaded again.
			a.broken = terr
		}
		return err
	}
	a.tree.note, a.at = msg, pos
	for _, w := range a.watches {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	return nil
}

// sign signs the checkpoint of the log's first n leaves.
func (a *Anchor) sign(n int64) ([]byte, error) {
	root, err := a.tree.Root(n)
	if err != nil {
		return nil, err
	}
	c := schemas.AnchorCheckpoint{Origin: a.signer.name, Size: n, Root: root}
	return note.Sign(&note.Note{Text: string(c.Body())}, a.signer)
}

// watch returns a channel that gets a value (coalesced) after each
// append.
func (a *Anchor) watch() chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := make(chan struct{}, 1)
	a.watches = append(a.watches, c)
	return c
}

// latest returns the last signed checkpoint and its size.
func (a *Anchor) latest() ([]byte, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tree.note, a.tree.Size()
}

// proveConsistency is [AnchorTree.ProveConsistency] under the lock.
func (a *Anchor) proveConsistency(m, n int64) (tlog.TreeProof, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m > n || n > a.tree.Size() {
		return nil, fmt.Errorf("anchor log: no consistency proof from %d to %d leaves in a log of %d", m, n, a.tree.Size())
	}
	if m == 0 || m == n {
		return nil, nil
	}
	return a.tree.ProveConsistency(m, n)
}

// MaxSealedAnchorLeaves bounds the anchor log a rotation carries: its
// leaf hashes, 44 bytes each in base64, must fit the store.rotated event
// well under the stream's event limit. A rotation of a larger log is
// refused before anything changes.
const MaxSealedAnchorLeaves = 300_000

// SealAnchor appends the checkpoints of the segments r seals to the
// anchor log of key as the stream st (before the rotation) holds it, and
// sets r.Anchor: the new stream's first event then carries the whole log.
// It reads the log as [ReadAnchor] does (from the snapshot, then the
// events after it) and writes nothing to the index folder.
func SealAnchor(ctx context.Context, st *events.Store, key PrivateKey, r *Rotation) error {
	s, err := newAnchorSigner(key)
	if err != nil {
		return err
	}
	t, err := ReadAnchor(ctx, st, key.PublicKey())
	if err != nil {
		return err
	}
	defer t.Close()
	for _, sr := range r.Records {
		if sr.SealedAs == "" {
			continue
		}
		text := schemas.NoteText([]byte(sr.Checkpoint))
		if text == nil {
			return fmt.Errorf("anchor: the checkpoint of %s is not a signed note", sr.SealedAs)
		}
		if err := t.add(tlog.RecordHash(text)); err != nil {
			return err
		}
	}
	if t.Size() == 0 {
		return nil
	}
	a := &Anchor{key: key, signer: s, tree: t}
	msg, err := a.sign(t.Size())
	if err != nil {
		return err
	}
	if t.Size() > MaxSealedAnchorLeaves {
		return fmt.Errorf("anchor: a log of %d leaves is more than a rotation carries (%d)", t.Size(), MaxSealedAnchorLeaves)
	}
	raw := make([]byte, 0, t.Size()*tlog.HashSize)
	const batch = 4096
	for lo := int64(0); lo < t.Size(); lo += batch {
		idx := make([]int64, 0, batch)
		for i := lo; i < min(lo+batch, t.Size()); i++ {
			idx = append(idx, tlog.StoredHashIndex(0, i))
		}
		hs, err := t.stored.ReadHashes(idx)
		if err != nil {
			return err
		}
		for _, h := range hs {
			raw = append(raw, h[:]...)
		}
	}
	r.Anchor = &AnchorSeal{Hashes: base64.StdEncoding.EncodeToString(raw), Note: string(msg)}
	return nil
}
