package verifier

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// leafTree computes the RFC 6962 tree root over a record file's lines as
// they stream by (see [schemas.Checkpoint] for the leaves). It keeps the
// roots of the complete subtrees along the right edge, one per set bit of
// the size, and folds them into the root on demand; it is built on tlog's
// RecordHash and NodeHash and shares no code with the writer's hasher.
type leafTree struct {
	n      int64
	stack  []tlog.Hash // complete subtrees, largest (leftmost) first
	broken bool        // a line was too long to hash; the root means nothing
	// watch, when not nil, sees every line after it was added.
	watch *prefixWatch
}

func (t *leafTree) add(line []byte) {
	h := tlog.RecordHash(line)
	// Each trailing 1 bit of n is a complete subtree that the new leaf's
	// subtree now pairs with.
	for n := t.n; n&1 == 1; n >>= 1 {
		h = tlog.NodeHash(t.stack[len(t.stack)-1], h)
		t.stack = t.stack[:len(t.stack)-1]
	}
	t.stack = append(t.stack, h)
	t.n++
	if t.watch != nil {
		t.watch.seen(t, line)
	}
}

// root returns the tree root: the subtrees folded from the right, which is
// RFC 6962's split at the largest power of two below the size.
func (t *leafTree) root() [32]byte {
	if len(t.stack) == 0 {
		return sha256Empty
	}
	h := t.stack[len(t.stack)-1]
	for i := len(t.stack) - 2; i >= 0; i-- {
		h = tlog.NodeHash(t.stack[i], h)
	}
	return h
}

// sha256Empty is the root of the tree of no lines, SHA-256 of nothing.
var sha256Empty = [32]byte{
	0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
	0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
}

// CheckpointResult is what [VerifySet] found for one record file's
// checkpoint.
type CheckpointResult struct {
	// Name is the checkpoint's name as the caller gave it.
	Name string
	// File is the name of the record file it seals.
	File string
	// Checkpoint is the checkpoint's body; zero when it did not parse.
	Checkpoint schemas.Checkpoint
	// Signer is the key_id of the key whose signature verified, "" when
	// none did.
	Signer string
	// Matches is true when the checkpoint is signed by a key of the record
	// and the file holds exactly what it seals.
	Matches bool
	// Count, for a file of checkpoints of the record file's first lines
	// ([Segment.Checkpoints]), is how many it holds; Checkpoint is then
	// the last, and Matches says that every one matched. 0 for a seal.
	Count int
	// Prefix marks the result of such a file.
	Prefix bool
}

// checkpointKeyName is the signed-note key name of a key: "aegis-<key_id>".
func checkpointKeyName(keyID string) string { return "aegis-" + keyID }

// noteVerifier checks note signatures under one Ed25519 key with this
// package's strict rules, where note's own verifier would accept what
// crypto/ed25519 accepts.
type noteVerifier struct {
	pub   ed25519.PublicKey
	key   *strictKey // pub, parsed once
	keyID string
	name  string
	hash  uint32
}

func newNoteVerifier(pub ed25519.PublicKey) (*noteVerifier, error) {
	key, ok := parseKey(pub)
	if !ok {
		return nil, errors.New("not a strict Ed25519 public key")
	}
	keyID := schemas.KeyID(pub)
	name := checkpointKeyName(keyID)
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return &noteVerifier{pub: pub, key: key, keyID: keyID, name: name, hash: v.KeyHash()}, nil
}

func (v *noteVerifier) Name() string    { return v.name }
func (v *noteVerifier) KeyHash() uint32 { return v.hash }
func (v *noteVerifier) Verify(msg, sig []byte) bool {
	return v.key.verify(msg, sig)
}

// CheckCheckpoint checks a signed checkpoint (a C2SP signed note with a
// [schemas.Checkpoint] body) against a record file whose lines number size,
// hash to the tree root and end in a line whose bytes hash to tail. keys are
// the keys that may have signed it: those the file's sessions publish and
// any pinned ones; a key that is not a valid strict Ed25519 key is left
// out. It returns the parsed checkpoint, the key_id whose signature
// verified, and an error that is a *[Reason]: [BadCheckpoint] when the note
// does not parse or no key signed it, [CheckpointMismatch] when the file
// differs from what the checkpoint seals.
func CheckCheckpoint(msg []byte, keys []ed25519.PublicKey, size int64, root [32]byte, tail string) (cp schemas.Checkpoint, signer string, err error) {
	return checkCheckpoint(msg, keys, size, root, tail, "", "")
}

// checkCheckpoint is CheckCheckpoint with the names of the record file and
// the checkpoint for its messages ("" for none).
func checkCheckpoint(msg []byte, keys []ed25519.PublicKey, size int64, root [32]byte, tail, file, name string) (cp schemas.Checkpoint, signer string, err error) {
	fileRef, its := "the record file", "its signed checkpoint"
	if name != "" {
		its = "its signed checkpoint " + display(name)
	}
	if file != "" {
		fileRef = display(file)
	}
	cp, signer, reason := checkCheckpointSig(msg, keys, file, name)
	if reason != nil {
		return cp, signer, reason
	}
	mismatch := func(format string, args ...any) (schemas.Checkpoint, string, error) {
		return cp, signer, &Reason{Code: CheckpointMismatch, Message: fileRef + " " + fmt.Sprintf(format, args...), File: file}
	}
	switch {
	case size < cp.Size:
		return mismatch("holds %d lines, fewer than the %d that %s seals: lines were cut from its end", size, cp.Size, its)
	case size > cp.Size:
		return mismatch("holds %d lines, more than the %d that %s seals: lines were added after it was sealed", size, cp.Size, its)
	case root != cp.Root:
		return mismatch("holds %d lines as %s says, but they hash to root %s, not %s: a sealed line was changed",
			size, its, base64.StdEncoding.EncodeToString(root[:]), base64.StdEncoding.EncodeToString(cp.Root[:]))
	case tail != cp.Tail:
		return mismatch("ends in a line hashing to %s, but %s seals one hashing to %s", display(tail), its, cp.Tail)
	}
	return cp, signer, nil
}

// checkCheckpointSig opens a signed checkpoint with keys and parses its
// body; the *Reason is BadCheckpoint. name names the checkpoint in
// messages ("" for none), file the record file.
func checkCheckpointSig(msg []byte, keys []ed25519.PublicKey, file, name string) (cp schemas.Checkpoint, signer string, _ *Reason) {
	cpRef := "checkpoint"
	if name != "" {
		cpRef = "checkpoint " + display(name)
	}
	bad := func(format string, args ...any) (schemas.Checkpoint, string, *Reason) {
		return cp, signer, &Reason{Code: BadCheckpoint, Message: cpRef + " " + fmt.Sprintf(format, args...), File: file}
	}
	var (
		list []note.Verifier
		byID = map[string]*noteVerifier{}
	)
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize || !validPublicKey(k) {
			continue
		}
		v, err := newNoteVerifier(k)
		if err != nil || byID[v.name] != nil {
			continue
		}
		byID[v.name] = v
		list = append(list, v)
	}
	n, err := note.Open(msg, note.VerifierList(list...))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			names := ""
			for i, s := range unverified.Note.UnverifiedSigs {
				if i > 0 {
					names += ", "
				}
				names += display(s.Name)
			}
			return bad("is signed by %s, not by a key of this record: the record's writer did not make it", names)
		case errors.As(err, &invalid):
			return bad("carries a signature by %s that does not verify: it was forged or altered", display(invalid.Name))
		}
		return bad("is not a signed note (%v)", err)
	}
	signer = byID[n.Sigs[0].Name].keyID
	cp, err = schemas.ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return bad("is signed by %s but does not parse: %v", signer, err)
	}
	return cp, signer, nil
}
