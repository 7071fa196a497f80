package verifier

import (
	"crypto/ed25519"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// ProofResult is what [CheckProof] found.
type ProofResult struct {
	// Checkpoint is the (newer) checkpoint the proof is anchored to, Old
	// the older one of a consistency proof.
	Checkpoint, Old schemas.Checkpoint
	// Signer is the key_id that signed the checkpoints.
	Signer string
}

// CheckProof checks a proof document (see [schemas.Proof]) offline: its
// checkpoints must be signed by one of keys (a key that is not a valid
// strict Ed25519 key is left out) and carry the sizes and roots the proof
// states, and the proof must hold by RFC 6962 (tlog's CheckRecord,
// CheckTree): for an inclusion proof, of the leaf hash of the line it
// carries. The *Reason is BadCheckpoint for a checkpoint, BadProof for the
// proof itself.
func CheckProof(p schemas.Proof, keys []ed25519.PublicKey) (ProofResult, *Reason) {
	var res ProofResult
	bad := func(format string, args ...any) (ProofResult, *Reason) {
		return res, &Reason{Code: BadProof, Message: fmt.Sprintf(format, args...)}
	}
	cp, signer, reason := checkCheckpointSig([]byte(p.Checkpoint), keys, "", "of the proof")
	if reason != nil {
		return res, reason
	}
	res.Checkpoint, res.Signer = cp, signer
	root, _ := schemas.DecodeProofHash(p.Root)
	if cp.Size != p.TreeSize || cp.Root != root {
		return bad("the proof is for a tree of %d lines with root %s, but its checkpoint covers %d lines with root %s",
			p.TreeSize, p.Root, cp.Size, schemas.ProofHash(cp.Root))
	}
	path := make(tlog.RecordProof, len(p.Path))
	for i, h := range p.Path {
		path[i], _ = schemas.DecodeProofHash(h)
	}
	switch p.Kind {
	case schemas.ProofInclusion:
		leaf, _ := schemas.DecodeProofHash(p.LeafHash)
		if tlog.RecordHash([]byte(p.Line)) != leaf {
			return bad("the line the proof carries does not hash to its leaf hash %s", p.LeafHash)
		}
		if err := tlog.CheckRecord(path, cp.Size, cp.Root, *p.LeafIndex, leaf); err != nil {
			return bad("line %d is not in the tree of %d lines its checkpoint covers: the inclusion proof does not hold (%v)", p.LineNumber, cp.Size, err)
		}
	case schemas.ProofConsistency:
		old, oldSigner, reason := checkCheckpointSig([]byte(p.OldCheckpoint), keys, "", "old of the proof")
		if reason != nil {
			return res, reason
		}
		res.Old = old
		oldRoot, _ := schemas.DecodeProofHash(p.OldRoot)
		if old.Size != p.OldSize || old.Root != oldRoot {
			return bad("the proof's old tree is of %d lines with root %s, but its old checkpoint covers %d lines with root %s",
				p.OldSize, p.OldRoot, old.Size, schemas.ProofHash(old.Root))
		}
		if old.Origin != cp.Origin {
			return bad("the old checkpoint is of %q, the new one of %q: not the same record", old.Origin, cp.Origin)
		}
		if oldSigner != signer {
			res.Signer = oldSigner + ", " + signer
		}
		if err := tlog.CheckTree(tlog.TreeProof(path), cp.Size, cp.Root, old.Size, old.Root); err != nil {
			return bad("the tree of %d lines is not a prefix of the tree of %d lines: the consistency proof does not hold (%v): lines the old checkpoint covered were changed or removed", old.Size, cp.Size, err)
		}
	default:
		return bad("unknown proof %q", p.Kind)
	}
	return res, nil
}
