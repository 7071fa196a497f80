package schemas

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A proof document is what aegis prove prints and aegis verify --proof
// checks: an RFC 6962 inclusion proof (a record line is leaf LeafIndex of
// the tree of TreeSize lines whose root a signed checkpoint gives) or
// consistency proof (the tree of OldSize lines is a prefix of the tree of
// NewSize lines), with the signed checkpoints it is anchored to. Hashes
// are base64 (standard, padded) of 32 bytes, as in a checkpoint; Path is
// in RFC 6962 order, the leaf's neighbour first, as
// golang.org/x/mod/sumdb/tlog (ProveRecord, ProveTree) makes it, so that
// any RFC 6962 implementation can check it from the numbers and hashes
// alone.
//
//	{"proof":"rfc6962-inclusion","checkpoint":NOTE,"tree_size":N,"root":H,
//	 "line_number":L,"leaf_index":L-1,"line":TEXT,"leaf_hash":H,"path":[H…]}
//	{"proof":"rfc6962-consistency","old_checkpoint":NOTE,"checkpoint":NOTE,
//	 "old_size":M,"old_root":H,"tree_size":N,"root":H,"path":[H…]}

// Proof kinds.
const (
	ProofInclusion   = "rfc6962-inclusion"
	ProofConsistency = "rfc6962-consistency"
)

// MaxProofDocument bounds a proof document [ParseProof] reads: a line of
// a record is at most 16 MiB, and a path at most 64 hashes.
const MaxProofDocument = 48 << 20

// ErrProof is wrapped by every error of [ParseProof].
var ErrProof = errors.New("malformed proof")

// Proof is a proof document (see above).
type Proof struct {
	Kind string `json:"proof"`
	// Checkpoint is the signed note of the tree the proof is in (for a
	// consistency proof, the newer one).
	Checkpoint string `json:"checkpoint"`
	TreeSize   int64  `json:"tree_size"`
	Root       string `json:"root"`

	LineNumber int64 `json:"line_number,omitempty"`
	// LeafIndex is LineNumber-1, present in an inclusion proof only.
	LeafIndex *int64 `json:"leaf_index,omitempty"`
	Line      string `json:"line,omitempty"`
	LeafHash  string `json:"leaf_hash,omitempty"`

	OldCheckpoint string `json:"old_checkpoint,omitempty"`
	OldSize       int64  `json:"old_size,omitempty"`
	OldRoot       string `json:"old_root,omitempty"`

	Path []string `json:"path"`
}

// ParseProof parses a proof document strictly: one JSON object of the
// members above for its kind, and nothing after it.
func ParseProof(r io.Reader) (Proof, error) {
	fail := func(format string, args ...any) (Proof, error) {
		return Proof{}, fmt.Errorf("%w: "+format, append([]any{ErrProof}, args...)...)
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxProofDocument+1))
	if err != nil {
		return Proof{}, err
	}
	if len(b) > MaxProofDocument {
		return fail("longer than %d bytes", MaxProofDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p Proof
	if err := dec.Decode(&p); err != nil {
		return fail("%v", err)
	}
	if dec.More() {
		return fail("more than one JSON value")
	}
	hashes := []string{p.Root}
	switch p.Kind {
	case ProofInclusion:
		if p.LeafIndex == nil || *p.LeafIndex < 0 || *p.LeafIndex >= p.TreeSize || p.LineNumber != *p.LeafIndex+1 {
			return fail("line %d is not a leaf of a tree of %d lines", p.LineNumber, p.TreeSize)
		}
		if p.OldCheckpoint != "" || p.OldSize != 0 || p.OldRoot != "" {
			return fail("an inclusion proof has no old tree")
		}
		hashes = append(hashes, p.LeafHash)
	case ProofConsistency:
		if p.OldSize <= 0 || p.OldSize > p.TreeSize {
			return fail("a tree of %d lines is not a prefix of one of %d", p.OldSize, p.TreeSize)
		}
		if p.OldCheckpoint == "" || p.Line != "" || p.LeafHash != "" || p.LineNumber != 0 || p.LeafIndex != nil {
			return fail("a consistency proof has an old checkpoint and no line")
		}
		hashes = append(hashes, p.OldRoot)
	default:
		return fail("unknown proof %q", p.Kind)
	}
	if p.Checkpoint == "" {
		return fail("no checkpoint")
	}
	if len(p.Path) > 64 {
		return fail("a path of %d hashes", len(p.Path))
	}
	for _, h := range append(hashes, p.Path...) {
		if _, err := DecodeProofHash(h); err != nil {
			return fail("%v", err)
		}
	}
	return p, nil
}

// DecodeProofHash decodes a hash of a proof document.
func DecodeProofHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != len(h) || base64.StdEncoding.EncodeToString(b) != s {
		return h, fmt.Errorf("%q is not the base64 of a 32-byte hash", s)
	}
	copy(h[:], b)
	return h, nil
}

// ProofHash encodes a hash for a proof document.
func ProofHash(h [32]byte) string { return base64.StdEncoding.EncodeToString(h[:]) }
