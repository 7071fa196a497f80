package projector

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// Proofs. aegis prove makes RFC 6962 proofs over a record file with tlog's
// ProveRecord and ProveTree, which read the tree's stored hashes: the
// prover streams the file's lines once, up to the checkpoint's size, and
// keeps those hashes in a temporary file (64 bytes a line or so), so that
// a proof over a record of any length holds only a line and a buffer in
// memory.

// ErrProve is wrapped when the record does not hold what a checkpoint
// covers, so no proof of it can be made.
var ErrProve = errors.New("record does not hold what the checkpoint covers")

// hashFile is a tlog.HashReader over stored hashes appended to a
// temporary file; the last ones are still in memory.
type hashFile struct {
	f       *os.File
	flushed int64 // hashes in the file
	pending []tlog.Hash
}

func (h *hashFile) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var b [tlog.HashSize]byte
	for i, x := range indexes {
		if x >= h.flushed {
			if x-h.flushed >= int64(len(h.pending)) {
				return nil, fmt.Errorf("stored hash %d is not there yet", x)
			}
			out[i] = h.pending[x-h.flushed]
			continue
		}
		if _, err := h.f.ReadAt(b[:], x*tlog.HashSize); err != nil {
			return nil, fmt.Errorf("read stored hash %d: %w", x, err)
		}
		out[i] = b
	}
	return out, nil
}

func (h *hashFile) append(hs []tlog.Hash) error {
	h.pending = append(h.pending, hs...)
	if len(h.pending) < 4096 {
		return nil
	}
	buf := make([]byte, 0, len(h.pending)*tlog.HashSize)
	for _, x := range h.pending {
		buf = append(buf, x[:]...)
	}
	if _, err := h.f.WriteAt(buf, h.flushed*tlog.HashSize); err != nil {
		return err
	}
	h.flushed += int64(len(h.pending))
	h.pending = h.pending[:0]
	return nil
}

// recordTree is the stored hashes of a record file's first lines.
type recordTree struct {
	hashes *hashFile
	size   int64
	line   []byte // the line asked for, if any
}

func (t *recordTree) close() {
	t.hashes.f.Close()
}

// readTree stores the tree of the record file at path's first size lines
// and keeps line number want (1-based; 0 for none). A file with fewer
// lines is an error wrapping [ErrProve].
func readTree(ctx context.Context, path string, size, want int64) (*recordTree, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tmp, err := os.CreateTemp("", "aegis-prove-*")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name()) // unnamed from now on; gone when closed
	t := &recordTree{hashes: &hashFile{f: tmp}}
	if size == 0 {
		return t, nil
	}
	_, err = eachLine(ctx, f, func(line []byte) error {
		hs, err := tlog.StoredHashes(t.size, line, t.hashes)
		if err == nil {
			err = t.hashes.append(hs)
		}
		if err != nil {
			return err
		}
		t.size++
		if t.size == want {
			t.line = append([]byte(nil), line...)
		}
		if t.size == size {
			return errStopLines
		}
		return nil
	})
	if err == nil && t.size < size || errors.Is(err, errTornLine) {
		err = fmt.Errorf("%w: %s holds %d whole lines, fewer than the %d it covers", ErrProve, path, t.size, size)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// noteCheckpoint parses the checkpoint a signed note carries, without
// checking its signature (the verifier does).
func noteCheckpoint(note []byte) (schemas.Checkpoint, error) {
	text := schemas.NoteText(note)
	if text == nil {
		return schemas.Checkpoint{}, fmt.Errorf("%w: not a signed note", schemas.ErrCheckpoint)
	}
	return schemas.ParseCheckpoint(text)
}

// treeMatching reads the tree of the record's first cp.Size lines and
// checks that its root is cp's.
func treeMatching(ctx context.Context, path string, cp schemas.Checkpoint, want int64) (*recordTree, error) {
	t, err := readTree(ctx, path, cp.Size, want)
	if err != nil {
		return nil, err
	}
	root, err := tlog.TreeHash(t.size, t.hashes)
	if err != nil {
		t.close()
		return nil, err
	}
	if root != cp.Root {
		t.close()
		return nil, fmt.Errorf("%w: the first %d lines of %s hash to root %s, the checkpoint says %s",
			ErrProve, cp.Size, path, schemas.ProofHash(root), schemas.ProofHash(cp.Root))
	}
	return t, nil
}

// ProveInclusion returns the proof that line number lineNo (1-based) of
// the record file at path is in the tree that the signed checkpoint note
// covers. The record must hold, as its first lines, what the checkpoint
// covers.
func ProveInclusion(ctx context.Context, path string, lineNo int64, note []byte) (schemas.Proof, error) {
	cp, err := noteCheckpoint(note)
	if err != nil {
		return schemas.Proof{}, err
	}
	if lineNo < 1 || lineNo > cp.Size {
		return schemas.Proof{}, fmt.Errorf("line %d is not among the %d lines the checkpoint covers", lineNo, cp.Size)
	}
	t, err := treeMatching(ctx, path, cp, lineNo)
	if err != nil {
		return schemas.Proof{}, err
	}
	defer t.close()
	path0, err := tlog.ProveRecord(cp.Size, lineNo-1, t.hashes)
	if err != nil {
		return schemas.Proof{}, err
	}
	idx := lineNo - 1
	return schemas.Proof{
		Kind: schemas.ProofInclusion, Checkpoint: string(note), TreeSize: cp.Size, Root: schemas.ProofHash(cp.Root),
		LineNumber: lineNo, LeafIndex: &idx, Line: string(t.line), LeafHash: schemas.ProofHash(tlog.RecordHash(t.line)),
		Path: proofHashes(path0),
	}, nil
}

// ProveConsistency returns the proof that the tree the signed checkpoint
// oldNote covers is a prefix of the one newNote covers, both over the
// record file at path, which must hold what each covers.
func ProveConsistency(ctx context.Context, path string, oldNote, newNote []byte) (schemas.Proof, error) {
	oldCP, err := noteCheckpoint(oldNote)
	if err != nil {
		return schemas.Proof{}, fmt.Errorf("old checkpoint: %w", err)
	}
	newCP, err := noteCheckpoint(newNote)
	if err != nil {
		return schemas.Proof{}, fmt.Errorf("new checkpoint: %w", err)
	}
	if oldCP.Size <= 0 || oldCP.Size > newCP.Size {
		return schemas.Proof{}, fmt.Errorf("the old checkpoint covers %d lines, the new one %d: the old must cover at least one and no more than the new", oldCP.Size, newCP.Size)
	}
	t, err := treeMatching(ctx, path, newCP, 0)
	if err != nil {
		return schemas.Proof{}, err
	}
	defer t.close()
	if oldRoot, err := tlog.TreeHash(oldCP.Size, t.hashes); err != nil {
		return schemas.Proof{}, err
	} else if oldRoot != oldCP.Root {
		return schemas.Proof{}, fmt.Errorf("%w: the first %d lines of %s hash to root %s, the old checkpoint says %s",
			ErrProve, oldCP.Size, path, schemas.ProofHash(oldRoot), schemas.ProofHash(oldCP.Root))
	}
	p, err := tlog.ProveTree(newCP.Size, oldCP.Size, t.hashes)
	if err != nil {
		return schemas.Proof{}, err
	}
	return schemas.Proof{
		Kind: schemas.ProofConsistency, Checkpoint: string(newNote), TreeSize: newCP.Size, Root: schemas.ProofHash(newCP.Root),
		OldCheckpoint: string(oldNote), OldSize: oldCP.Size, OldRoot: schemas.ProofHash(oldCP.Root),
		Path: proofHashes(p),
	}, nil
}

func proofHashes[T ~[]tlog.Hash](p T) []string {
	out := make([]string, len(p))
	for i, h := range p {
		out[i] = schemas.ProofHash(h)
	}
	return out
}
