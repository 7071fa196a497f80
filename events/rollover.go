package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/schemas"
)

// A rotation rolls the stream over: the whole stream, sealed, moves out of
// the way into an archive folder of the state directory, and a new stream
// starts at the next sequence with a store.rotated event that says what
// was rolled over and what the caller sealed with it. The stream itself
// still denies delete and purge; nothing leaves it but whole, in an
// archive that is a state directory of its own (read commands open it
// with --state-dir; recording into it is refused). Nothing is deleted
// unless the plan says to prune the archive, and then only after the new
// stream's first event, which says what it held, is on disk.
//
// The plan is written to the state directory before anything moves and
// removed after the new stream's first event is durable. While it is
// there, [Open] refuses the directory ([*RollPendingError]) and only
// [FinishRoll] opens it: a rotation that a crash interrupted is finished,
// never half-applied and never run around.
const (
	rollFile    = "rotation"
	archivedTag = "archived"
	// BaseFile, in the state directory, holds the stream's first sequence
	// when a rotation began it later than 1; a copy of the stream needs it.
	BaseFile = "stream-base"
	// ArchiveDir, in the state directory, holds the streams that
	// rotations rolled over, one state directory each.
	ArchiveDir = "archive"
)

// StreamRoll says which stream a rotation rolled over.
type StreamRoll struct {
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	LastDigest string `json:"last_digest"` // MessageDigest of its last message
	// Archive is the folder it moved to, relative to the state directory.
	Archive string `json:"archive"`
	// Prune says the archive is deleted once the new stream holds this
	// plan as its first event.
	Prune bool `json:"prune"`
}

// RollPlan is a rotation: the payload of the new stream's store.rotated
// event, and the plan file while the rotation runs.
type RollPlan struct {
	// Session is the id the store.rotated event is filed under.
	Session string     `json:"session"`
	Stream  StreamRoll `json:"stream"`
	// Detail is what the caller sealed with the stream (opaque here).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// RollPendingError is returned by [Open] for a state directory whose
// rotation did not finish.
type RollPendingError struct {
	Dir  string
	Plan RollPlan
}

func (e *RollPendingError) Error() string {
	return fmt.Sprintf("a rotation of %s did not finish (the stream up to sequence %d is being sealed into %s)",
		e.Dir, e.Plan.Stream.LastSeq, filepath.Join(e.Dir, e.Plan.Stream.Archive))
}

// ErrArchived is wrapped by appends to a state directory that is the
// archive of a rotation.
var ErrArchived = errors.New("this state directory is an archive sealed by a rotation; it can be read but not recorded to")

// ReadRollPlan returns the plan of the rotation that has not finished in
// dir, or nil if there is none.
func ReadRollPlan(dir string) (*RollPlan, error) {
	b, err := os.ReadFile(filepath.Join(dir, rollFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rotation plan: %w", err)
	}
	var p RollPlan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("rotation plan %s: %w", filepath.Join(dir, rollFile), err)
	}
	if err := p.valid(); err != nil {
		return nil, fmt.Errorf("rotation plan %s: %w", filepath.Join(dir, rollFile), err)
	}
	return &p, nil
}

func (p RollPlan) valid() error {
	if !schemas.ValidID(p.Session) {
		return errors.New("no valid session id")
	}
	if p.Stream.LastSeq == 0 || p.Stream.FirstSeq == 0 || p.Stream.FirstSeq > p.Stream.LastSeq+1 {
		return fmt.Errorf("stream %d-%d", p.Stream.FirstSeq, p.Stream.LastSeq)
	}
	if p.Stream.Archive != archiveName(p.Stream.FirstSeq, p.Stream.LastSeq) {
		return fmt.Errorf("archive %q", p.Stream.Archive)
	}
	return nil
}

func archiveName(first, last uint64) string {
	return filepath.Join(ArchiveDir, fmt.Sprintf("stream-%d-%d", first, last))
}

// streamDir is where the embedded server keeps the stream's files.
func streamDir(stateDir string) string {
	return filepath.Join(stateDir, "jetstream", "jetstream", "$G", "streams", StreamName)
}

// BeginRoll plans the rotation of the stream: it checks that the stream
// is whole, and writes the plan, with detail (what the caller seals with
// it, as JSON). From then on no Open of the directory succeeds but
// [FinishRoll]'s. The caller closes the store and calls FinishRoll, after
// doing whatever the detail says, which it must be able to do again (a
// crash can interrupt it).
func (s *Store) BeginRoll(ctx context.Context, detail any, prune bool) (*RollPlan, error) {
	if s.archived {
		return nil, ErrArchived
	}
	if s.readOnly {
		return nil, ErrReadOnly
	}
	st, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.damage(st, ""); err != nil {
		return nil, err
	}
	first, last := st.State.FirstSeq, st.State.LastSeq
	if st.State.Msgs == 0 || last == 0 {
		return nil, errors.New("the event stream is empty: nothing to rotate")
	}
	digest, err := s.MessageDigest(ctx, last)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(detail)
	if err != nil {
		return nil, fmt.Errorf("rotation plan: %w", err)
	}
	id, err := s.NewSession()
	if err != nil {
		return nil, err
	}
	p := &RollPlan{Session: id, Detail: raw, Stream: StreamRoll{
		FirstSeq: first, LastSeq: last, LastDigest: digest, Archive: archiveName(first, last), Prune: prune,
	}}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rotation plan: %w", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, p.Stream.Archive)); err == nil {
		return nil, fmt.Errorf("rotation: %s already exists", filepath.Join(s.dir, p.Stream.Archive))
	}
	if err := WriteFileAtomic(filepath.Join(s.dir, rollFile), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("write rotation plan: %w", err)
	}
	return p, nil
}

// FinishRoll finishes the rotation planned in cfg.Dir: it moves the
// stream into its archive (unless a run before did), starts the new stream
// at the next sequence, appends the plan as its first event
// (store.rotated) and waits until that is on disk; then it removes the
// plan and, if the plan says so, the archive. It returns the store open on
// the new stream. The directory must hold a plan ([ReadRollPlan]).
func FinishRoll(ctx context.Context, cfg Config) (*Store, *RollPlan, error) {
	cfg.finishRoll = true
	s, err := Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	p := s.roll
	fail := func(err error) (*Store, *RollPlan, error) {
		s.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	st, err := s.state(ctx)
	if err != nil {
		return fail(err)
	}
	if st.State.LastSeq == p.Stream.LastSeq {
		ev, err := s.NewEvent(p.Session, schemas.KindStoreRotated, p)
		if err != nil {
			return fail(err)
		}
		if _, err := s.Append(ctx, ev); err != nil {
			return fail(fmt.Errorf("record the rotation: %w", err))
		}
	}
	if err := os.Remove(filepath.Join(s.dir, rollFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("finish rotation: %w", err))
	}
	syncDir(s.dir)
	s.roll = nil
	if p.Stream.Prune {
		if err := os.RemoveAll(filepath.Join(s.dir, p.Stream.Archive)); err != nil {
			return fail(fmt.Errorf("prune %s: %w", filepath.Join(s.dir, p.Stream.Archive), err))
		}
		syncDir(filepath.Join(s.dir, ArchiveDir))
	}
	return s, p, nil
}

// applyRoll moves the stream into its archive, before the server starts.
// Each step is skipped if a run before did it.
func applyRoll(dir string, p *RollPlan) error {
	src := streamDir(dir)
	root := filepath.Join(dir, p.Stream.Archive)
	dst := streamDir(root)
	_, srcErr := os.Stat(src)
	_, dstErr := os.Stat(dst)
	switch {
	case srcErr == nil && errors.Is(dstErr, os.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.Chmod(root, 0o700); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		syncDir(filepath.Dir(src))
		syncDir(filepath.Dir(dst))
	case dstErr == nil:
		// Moved by a run before; the new stream may already exist.
	default:
		return fmt.Errorf("the stream to roll over is neither in %s nor in %s", src, dst)
	}
	// The archive is a state directory of the old stream: its length, its
	// first sequence, and the tag that refuses recording into it.
	if err := WriteFileAtomic(filepath.Join(root, markFile), []byte(strconv.FormatUint(p.Stream.LastSeq, 10)+"\n")); err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(root, BaseFile), []byte(strconv.FormatUint(p.Stream.FirstSeq, 10)+"\n")); err != nil {
		return err
	}
	tag, _ := json.MarshalIndent(p, "", "  ")
	if err := WriteFileAtomic(filepath.Join(root, archivedTag), append(tag, '\n')); err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, BaseFile), []byte(strconv.FormatUint(p.Stream.LastSeq+1, 10)+"\n")); err != nil {
		return err
	}
	// The index was folded from the old stream: it goes with it, so that
	// the archive answers from it as the live directory did (a reader
	// checks it against the archive's stream like any index). The new
	// stream starts without one.
	if err := moveIndex(dir, root); err != nil {
		return err
	}
	return nil
}

// moveIndex moves the index folder of dir into root, the archive of dir's
// stream; a run before may have moved it already. Should the archive hold
// one already, dir's is only removed: either is a cache.
func moveIndex(dir, root string) error {
	src, dst := filepath.Join(dir, IndexDir), filepath.Join(root, IndexDir)
	if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := os.Lstat(dst); err == nil {
		return os.RemoveAll(src)
	}
	removeTemps(dir) // no half-written value travels
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	syncDir(dir)
	syncDir(root)
	return nil
}

// readBase returns the first sequence of the stream in dir: 1 unless a
// rotation started it later.
func readBase(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, BaseFile))
	if errors.Is(err, os.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s holds %q, not a stream sequence", filepath.Join(dir, BaseFile), strings.TrimSpace(string(b)))
	}
	return n, nil
}

// Archived returns what the rotation that sealed this state directory
// into an archive says of it, or nil for a live state directory.
func (s *Store) Archived() *RollPlan { return s.archive }

// Base returns the stream's first sequence: 1, or where the rotation that
// started it began it.
func (s *Store) Base() uint64 { return s.base }

// WriteFileAtomic replaces path with b: a temporary file beside it (mode
// 0600, named .put-*, which the next Open of a state directory removes if
// a crash left it), fsynced, renamed over it, and the directory fsynced. A
// reader sees the old content or the new, never a mix.
func WriteFileAtomic(path string, b []byte) error {
	return WriteFileAtomicMode(path, b, 0o600)
}

// WriteFileAtomicMode is [WriteFileAtomic] with the file's mode perm.
func WriteFileAtomicMode(path string, b []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".put-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && perm != 0o600 {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := platform.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// removeTemps removes the temporary files of atomic writes that a crash
// left in the state directory and its index folder. Only the lock holder
// writes them, so none of them is in use.
func removeTemps(dir string) {
	for _, d := range []string{dir, filepath.Join(dir, IndexDir)} {
		tmps, _ := filepath.Glob(filepath.Join(d, ".put-*"))
		for _, t := range tmps {
			os.Remove(t)
		}
	}
}

func syncDir(dir string) { platform.SyncDir(dir) }

// prepareRoll, in Open before the server starts, reads the stream's base,
// refuses a directory whose rotation did not finish (unless FinishRoll is
// opening it, which then moves the stream into its archive), and notes
// whether the directory is itself an archive.
func (s *Store) prepareRoll() error {
	p, err := ReadRollPlan(s.dir)
	if err != nil {
		return err
	}
	if p != nil && !s.cfg.finishRoll {
		return &RollPendingError{Dir: s.dir, Plan: *p}
	}
	if p == nil && s.cfg.finishRoll {
		return fmt.Errorf("finish rotation: no rotation is planned in %s", s.dir)
	}
	if p != nil {
		if err := applyRoll(s.dir, p); err != nil {
			return fmt.Errorf("roll the stream over into %s: %w", filepath.Join(s.dir, p.Stream.Archive), err)
		}
		s.roll = p
	}
	if s.base, err = readBase(s.dir); err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, archivedTag)); err == nil {
		var a RollPlan
		if err := json.Unmarshal(b, &a); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(s.dir, archivedTag), err)
		}
		s.archive, s.archived = &a, true
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// createFirst is the first sequence of a stream that a rotation creates,
// and 0 otherwise.
func (s *Store) createFirst() uint64 {
	if s.roll == nil {
		return 0
	}
	if _, err := os.Stat(streamDir(s.dir)); err == nil {
		return 0 // created by a run before
	}
	return s.roll.Stream.LastSeq + 1
}
