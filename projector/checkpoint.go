package projector

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// Checkpoints. A sealed record file (a segment of a rotated record) gets a
// signed checkpoint: the C2SP tlog-checkpoint body of [schemas.Checkpoint]
// in a C2SP signed note with one Ed25519 signature. The note's key name is
// "aegis-" followed by the signing key's key_id, and its key hash is the one
// golang.org/x/mod/sumdb/note computes for an Ed25519 key of that name, so
// any signed-note verifier given the public key checks it.

// CheckpointKeyName returns the signed-note key name of k: "aegis-<key_id>".
func CheckpointKeyName(k PrivateKey) string { return checkpointKeyName(k.KeyID()) }

func checkpointKeyName(keyID string) string { return "aegis-" + keyID }

// CheckpointOrigin returns the origin of a segment's checkpoint:
// "aegis/<key_id>/<base name of segmentPath>".
func CheckpointOrigin(k PrivateKey, segmentPath string) string {
	return "aegis/" + k.KeyID() + "/" + filepath.Base(segmentPath)
}

// noteSigner is a note.Signer over a [PrivateKey].
type noteSigner struct {
	key  PrivateKey
	name string
	hash uint32
}

func newNoteSigner(k PrivateKey) (*noteSigner, error) {
	if k.IsZero() {
		return nil, ErrZeroKey
	}
	name := CheckpointKeyName(k)
	vkey, err := note.NewEd25519VerifierKey(name, k.PublicKey())
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return &noteSigner{key: k, name: name, hash: v.KeyHash()}, nil
}

func (s *noteSigner) Name() string                    { return s.name }
func (s *noteSigner) KeyHash() uint32                 { return s.hash }
func (s *noteSigner) Sign(msg []byte) ([]byte, error) { return s.key.Sign(msg) }

// SignCheckpoint returns cp as a signed note: its body and one signature by
// key under the name [CheckpointKeyName]. It refuses a body that
// [schemas.ParseCheckpoint] would refuse, and the zero key.
func SignCheckpoint(key PrivateKey, cp schemas.Checkpoint) ([]byte, error) {
	body := cp.Body()
	if _, err := schemas.ParseCheckpoint(body); err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	s, err := newNoteSigner(key)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	msg, err := note.Sign(&note.Note{Text: string(body)}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	return msg, nil
}

// CheckpointVerifier returns a note.Verifier for checkpoints signed by the
// key whose public half is pub (see [SignCheckpoint]).
func CheckpointVerifier(pub ed25519.PublicKey) (note.Verifier, error) {
	vkey, err := note.NewEd25519VerifierKey(checkpointKeyName(schemas.KeyID(pub)), pub)
	if err != nil {
		return nil, fmt.Errorf("checkpoint verifier: %w", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("checkpoint verifier: %w", err)
	}
	return v, nil
}

// TreeHasher computes the RFC 6962 Merkle tree root over a sequence of
// records, one [TreeHasher.Add] at a time, with tlog's StoredHashes and
// TreeHash. It keeps only the hashes that later calls read, the roots of the
// complete subtrees along the tree's right edge: at most one per bit of the
// size, so its memory does not grow with the number of records. The zero
// value is an empty tree.
type TreeHasher struct {
	n      int64
	stored map[int64]tlog.Hash // stored-hash index -> hash, pruned after every Add
}

// Size returns the number of records added.
func (t *TreeHasher) Size() int64 { return t.n }

// ReadHashes implements tlog.HashReader over the kept hashes.
func (t *TreeHasher) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := t.stored[x]
		if !ok {
			return nil, fmt.Errorf("tree hasher: hash %d was not kept", x)
		}
		out[i] = h
	}
	return out, nil
}

// Add appends one record (the leaf hash is tlog.RecordHash(data)).
func (t *TreeHasher) Add(data []byte) error {
	hashes, err := tlog.StoredHashes(t.n, data, t)
	if err != nil {
		return err
	}
	if t.stored == nil {
		t.stored = map[int64]tlog.Hash{}
	}
	// StoredHashes returns the leaf's hash and the subtrees it completes,
	// which are stored at consecutive indexes.
	first := tlog.StoredHashIndex(0, t.n)
	for i, h := range hashes {
		t.stored[first+int64(i)] = h
	}
	t.n++
	var keep [63]int64
	frontier := appendFrontier(keep[:0], t.n)
	for x := range t.stored {
		if !slices.Contains(frontier, x) {
			delete(t.stored, x)
		}
	}
	return nil
}

// appendFrontier appends the stored-hash indexes of the complete subtrees
// that a tree of n records decomposes into: one per set bit of n.
// TreeHash(n) reads exactly these, and StoredHashes(n, …) reads a subset of
// them. A live record feeds every line it writes through here, so it
// allocates nothing.
func appendFrontier(dst []int64, n int64) []int64 {
	for level := 0; level < 63; level++ {
		if n&(1<<level) != 0 {
			dst = append(dst, tlog.StoredHashIndex(level, n>>level-1))
		}
	}
	return dst
}

// Root returns the tree root over the records added so far.
func (t *TreeHasher) Root() ([32]byte, error) {
	h, err := tlog.TreeHash(t.n, t)
	if err != nil {
		return [32]byte{}, err
	}
	return h, nil
}

// ErrCheckpointRecord is wrapped by [CheckpointFile] when the file cannot
// be sealed as it is: it does not end in '\n', or it holds an empty line.
var ErrCheckpointRecord = errors.New("record file cannot be checkpointed")

// MaxCheckpointLine bounds one line of a record that [CheckpointFile]
// reads; the verifier refuses longer lines too.
const MaxCheckpointLine = 16 << 20

// CheckpointFile reads the record file at path from start to end, streaming
// (it holds one line at a time), and returns the signed checkpoint of it
// with the given origin (normally [CheckpointOrigin]), and its body. It
// refuses ([ErrCheckpointRecord]) a file whose last byte is not '\n', that
// holds an empty line or a line longer than [MaxCheckpointLine]: a sealed
// segment is whole lines, each a record line. It checks ctx between lines.
// Writing the note next to the file is the caller's job
// ([WriteCheckpointFile]).
func CheckpointFile(ctx context.Context, key PrivateKey, path, origin string) (note []byte, cp schemas.Checkpoint, err error) {
	if key.IsZero() {
		return nil, schemas.Checkpoint{}, fmt.Errorf("checkpoint %s: %w", path, ErrZeroKey)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, schemas.Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	cp, err = checkpointOf(ctx, f, path)
	if err != nil {
		return nil, schemas.Checkpoint{}, err
	}
	cp.Origin = origin
	note, err = SignCheckpoint(key, cp)
	if err != nil {
		return nil, schemas.Checkpoint{}, err
	}
	return note, cp, nil
}

// errTornLine is wrapped by [eachLine]'s error for a last line without
// '\n'.
var errTornLine = errors.New("it does not end in a newline")

// errStopLines, returned by the fn of [eachLine], ends the read early.
var errStopLines = errors.New("stop")

// eachLine calls fn for each whole line of r, without its '\n', holding
// one line at a time, and checks ctx every 4096 lines. It returns how many
// lines fn took. A line longer than [MaxCheckpointLine], or a last line
// without '\n' ([errTornLine]), is an error wrapping
// [ErrCheckpointRecord]; fn returning errStopLines ends the read with no
// error. The line passed to fn is valid only during the call.
func eachLine(ctx context.Context, r io.Reader, fn func(line []byte) error) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		n   int64
		buf []byte
	)
	for {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
		buf = buf[:0]
		var err error
		for {
			var frag []byte
			frag, err = br.ReadSlice('\n')
			if len(buf)+len(frag) > MaxCheckpointLine+1 {
				return n, fmt.Errorf("%w: line %d is longer than %d bytes", ErrCheckpointRecord, n+1, MaxCheckpointLine)
			}
			buf = append(buf, frag...)
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		switch {
		case errors.Is(err, io.EOF) && len(buf) == 0:
			return n, nil
		case errors.Is(err, io.EOF):
			return n, fmt.Errorf("%w: %w (line %d is torn)", ErrCheckpointRecord, errTornLine, n+1)
		case err != nil:
			return n, err
		}
		if err := fn(buf[:len(buf)-1]); errors.Is(err, errStopLines) {
			return n + 1, nil
		} else if err != nil {
			return n, err
		}
		n++
		if cap(buf) > 1<<20 {
			buf = nil // do not keep one long line's buffer for the rest
		}
	}
}

// checkpointOf computes size, root and tail of the record in r; name is
// for messages.
func checkpointOf(ctx context.Context, r io.Reader, name string) (schemas.Checkpoint, error) {
	var (
		cp   schemas.Checkpoint
		tree TreeHasher
	)
	_, err := eachLine(ctx, r, func(line []byte) error {
		if len(line) == 0 {
			return fmt.Errorf("%w: line %d is empty", ErrCheckpointRecord, tree.Size()+1)
		}
		if err := tree.Add(line); err != nil {
			return err
		}
		cp.Tail = schemas.HashHex(line)
		return nil
	})
	if err != nil {
		return cp, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	root, err := tree.Root()
	if err != nil {
		return cp, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	cp.Size, cp.Root = tree.Size(), root
	return cp, nil
}

// WriteCheckpointFile writes a signed checkpoint note to path atomically:
// a temporary file in the same directory, mode 0600, written and fsynced,
// then renamed over path, and the directory fsynced. An error before the
// rename leaves path as it was and removes the temporary file.
func WriteCheckpointFile(path string, note []byte) error {
	if err := events.WriteFileAtomic(path, note); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}
