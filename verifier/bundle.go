package verifier

import (
	"crypto/ed25519"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// Codes of the anchor bundle's checks.
const (
	// NotWitnessed: the anchor checkpoint is not cosigned by a quorum of
	// the witness policy (Indeterminate: nothing shows tampering, but no
	// one independent vouches for this history).
	NotWitnessed Code = "not_witnessed"
	// AnchorFork: two checkpoints of one anchor log of the same size with
	// different roots (Tampered: a split view).
	AnchorFork Code = "anchor_fork"
)

// BundleResult is what [CheckBundle] found.
type BundleResult struct {
	// Record is the record checkpoint the lines are proven in.
	Record schemas.Checkpoint
	// Anchor is the anchor checkpoint the record checkpoint is a leaf of.
	Anchor schemas.AnchorCheckpoint
	// Signer is the key_id of the host key; Witnesses the policy's
	// witnesses whose cosignatures verify.
	Signer    string
	Witnesses []string
}

// CheckBundle checks an anchor bundle offline: each line is in the
// record checkpoint's tree, the record checkpoint (signed by one of keys)
// is leaf AnchorIndex of the anchor log, whose checkpoint is signed by
// the same key as that log (origin aegis/anchor/<key_id>) and cosigned by
// a quorum of policy. The *Reason is BadCheckpoint or BadProof for a
// check that fails (Tampered), NotWitnessed for a missing quorum.
func CheckBundle(b schemas.AnchorBundle, policy *schemas.WitnessPolicy, keys []ed25519.PublicKey) (BundleResult, *Reason) {
	var res BundleResult
	bad := func(code Code, format string, args ...any) (BundleResult, *Reason) {
		return res, &Reason{Code: code, Message: fmt.Sprintf(format, args...)}
	}
	cp, signer, reason := checkCheckpointSig([]byte(b.RecordCheckpoint), keys, "", "of the bundle")
	if reason != nil {
		return res, reason
	}
	res.Record, res.Signer = cp, signer
	for _, l := range b.Lines {
		if l.LineNumber > cp.Size {
			return bad(BadProof, "line %d is not among the %d lines the record checkpoint covers", l.LineNumber, cp.Size)
		}
		if err := tlog.CheckRecord(hashesOf(l.Path), cp.Size, cp.Root, l.LineNumber-1, tlog.RecordHash([]byte(l.Line))); err != nil {
			return bad(BadProof, "line %d is not in the tree of %d lines of the record checkpoint: the inclusion proof does not hold (%v)", l.LineNumber, cp.Size, err)
		}
	}
	var pub ed25519.PublicKey
	for _, k := range keys {
		if schemas.KeyID(k) == signer {
			pub = k
		}
	}
	origin := schemas.AnchorOrigin(signer)
	vkey, err := note.NewEd25519VerifierKey(origin, pub)
	if err != nil {
		return bad(BadCheckpoint, "anchor verifier: %v", err)
	}
	logV, err := note.NewVerifier(vkey)
	if err != nil {
		return bad(BadCheckpoint, "anchor verifier: %v", err)
	}
	vs := []note.Verifier{logV}
	for _, w := range policy.Witnesses {
		vs = append(vs, w.Verifier)
	}
	n, err := note.Open([]byte(b.AnchorCheckpoint), note.VerifierList(vs...))
	if err != nil {
		return bad(BadCheckpoint, "the anchor checkpoint does not verify under %s and the policy's witnesses: %v", origin, err)
	}
	cosigned := map[string]bool{}
	logSigned := false
	for _, s := range n.Sigs {
		if s.Name == logV.Name() && s.Hash == logV.KeyHash() {
			logSigned = true
		}
		for _, w := range policy.Witnesses {
			if s.Name == w.Verifier.Name() && s.Hash == w.Verifier.KeyHash() && !cosigned[w.Name] {
				cosigned[w.Name] = true
				res.Witnesses = append(res.Witnesses, w.Name)
			}
		}
	}
	if !logSigned {
		return bad(BadCheckpoint, "the anchor checkpoint is not signed by the anchor log's key %s", origin)
	}
	a, err := schemas.ParseAnchorCheckpoint([]byte(n.Text))
	if err != nil {
		return bad(BadCheckpoint, "%v", err)
	}
	if a.Origin != origin {
		return bad(BadCheckpoint, "the anchor checkpoint is of %q, not of the record key's anchor log %q", a.Origin, origin)
	}
	res.Anchor = a
	leaf := tlog.RecordHash(schemas.NoteText([]byte(b.RecordCheckpoint)))
	if b.AnchorIndex >= a.Size {
		return bad(BadProof, "anchor leaf %d is not in a log of %d leaves", b.AnchorIndex, a.Size)
	}
	if err := tlog.CheckRecord(hashesOf(b.AnchorPath), a.Size, a.Root, b.AnchorIndex, leaf); err != nil {
		return bad(BadProof, "the record checkpoint is not leaf %d of the anchor log of %d leaves: the inclusion proof does not hold (%v)", b.AnchorIndex, a.Size, err)
	}
	if !policy.Satisfied(cosigned) {
		return bad(NotWitnessed, "the anchor checkpoint of %d leaves is cosigned by %d witness(es) of the policy (%v), short of its quorum %s", a.Size, len(res.Witnesses), res.Witnesses, policy.Quorum())
	}
	return res, nil
}

// CheckForks returns an AnchorFork reason when two anchor checkpoints of
// one log have the same size and different roots.
func CheckForks(cps []schemas.AnchorCheckpoint) *Reason {
	seen := map[string]schemas.AnchorCheckpoint{}
	for _, c := range cps {
		k := fmt.Sprintf("%s\n%d", c.Origin, c.Size)
		if o, ok := seen[k]; ok && o.Root != c.Root {
			return &Reason{Code: AnchorFork, Message: fmt.Sprintf("two checkpoints of the anchor log %s of %d leaves have different roots (%s and %s): a forked history, shown differently to different parties",
				c.Origin, c.Size, schemas.ProofHash(o.Root), schemas.ProofHash(c.Root))}
		}
		seen[k] = c
	}
	return nil
}

func hashesOf(p []string) tlog.RecordProof {
	out := make(tlog.RecordProof, len(p))
	for i, h := range p {
		out[i], _ = schemas.DecodeProofHash(h)
	}
	return out
}
