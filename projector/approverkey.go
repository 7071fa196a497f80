package projector

// Approver keys: the Ed25519 keys with which a human signs an approval
// (see schemas/approver.go for what is signed and the approvers file).
//
// An approver key file is an age file (filippo.io/age, https://age-
// encryption.org/v1), ASCII-armored, encrypted to one scrypt recipient:
// the passphrase. Its plaintext is the key's seed in the format of a
// signing key file ([WriteKeyFile]): 64 lowercase hex characters and a
// newline. So `age -d FILE` with the passphrase shows the seed, and no
// format is aegis's own but that one line. The file is written with mode
// 0600 and read only when no one else can access it, like every secret of
// aegis; without the passphrase it is an opaque blob.

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/aegis-dev/aegis/schemas"
)

// ApproverWorkFactor is the scrypt work factor (log2 N) of approver key
// files that aegis keygen writes: age's default, about a second of work.
const ApproverWorkFactor = 18

// maxApproverWorkFactor bounds the work a key file may ask of a reader
// (age's own bound).
const maxApproverWorkFactor = 22

// maxApproverKeyFile bounds how much of an approver key file is read; a
// real one is about 500 bytes.
const maxApproverKeyFile = 16 << 10

// MinPassphraseChars is the shortest passphrase an approver key takes.
const MinPassphraseChars = 8

// ErrWrongPassphrase: the passphrase does not open the approver key file.
var ErrWrongPassphrase = errors.New("wrong passphrase")

// ApproverKey is an approver's private key.
type ApproverKey struct {
	priv ed25519.PrivateKey
}

// GenerateApproverKey makes a new approver key from rand.
func GenerateApproverKey(r io.Reader) (ApproverKey, error) {
	_, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return ApproverKey{}, fmt.Errorf("generate approver key: %w", err)
	}
	return ApproverKey{priv: priv}, nil
}

// PublicKey is the key's public half.
func (k ApproverKey) PublicKey() ed25519.PublicKey { return k.priv.Public().(ed25519.PublicKey) }

// KeyID is the key's id: [schemas.KeyID] of its public key.
func (k ApproverKey) KeyID() string { return schemas.KeyID(k.PublicKey()) }

// Sign signs an approval claim.
func (k ApproverKey) Sign(c schemas.ApprovalClaim) (*schemas.ApproverSignature, error) {
	if k.priv == nil {
		return nil, errors.New("sign approval: no approver key")
	}
	return schemas.SignApproval(k.priv, c)
}

// String never shows the private key.
func (k ApproverKey) String() string { return "ApproverKey(" + k.KeyID() + ")" }

// Format never shows the private key.
func (k ApproverKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// WriteApproverKeyFile encrypts k with passphrase (scrypt at workFactor;
// [ApproverWorkFactor] unless a test asks for less) and writes it to path
// with mode 0600. It refuses an existing file unless force.
func WriteApproverKeyFile(path string, k ApproverKey, passphrase []byte, workFactor int, force bool) (err error) {
	if k.priv == nil {
		return fmt.Errorf("write approver key %q: %w", path, ErrZeroKey)
	}
	if len([]rune(string(passphrase))) < MinPassphraseChars {
		return fmt.Errorf("write approver key: the passphrase must have at least %d characters", MinPassphraseChars)
	}
	rcp, err := age.NewScryptRecipient(string(passphrase))
	if err != nil {
		return fmt.Errorf("write approver key: %w", err)
	}
	rcp.SetWorkFactor(workFactor)
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, rcp)
	if err != nil {
		return fmt.Errorf("write approver key: %w", err)
	}
	seed := make([]byte, 0, 2*ed25519.SeedSize+1)
	seed = fmt.Appendf(seed, "%x\n", k.priv.Seed())
	if _, err := w.Write(seed); err != nil {
		return fmt.Errorf("write approver key: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write approver key: %w", err)
	}
	if err := aw.Close(); err != nil {
		return fmt.Errorf("write approver key: %w", err)
	}
	if err := writeSecretFile(path, buf.Bytes(), force); err != nil {
		if errors.Is(err, ErrKeyFileExists) {
			return fmt.Errorf("write approver key %q: %w", path, err)
		}
		return fmt.Errorf("write approver key: %w", err)
	}
	return nil
}

// ReadApproverKeyFile reads an approver key file's encrypted bytes,
// refusing one that others can access ([ReadPrivateFile]). It asks for no
// passphrase: callers read the file first, so that a missing or unsafe
// file is reported before anyone is asked to type.
func ReadApproverKeyFile(path string) ([]byte, error) {
	b, err := ReadPrivateFile(path, maxApproverKeyFile)
	var pe *PrivateFileError
	switch {
	case errors.As(err, &pe):
		return nil, fmt.Errorf("approver key %w", err)
	case err != nil:
		return nil, fmt.Errorf("approver key: %w", err)
	}
	if len(b) > maxApproverKeyFile {
		return nil, fmt.Errorf("approver key %q: larger than %d KiB; not an approver key", path, maxApproverKeyFile>>10)
	}
	return b, nil
}

// OpenApproverKey decrypts an approver key file's bytes with passphrase.
// A wrong passphrase is [ErrWrongPassphrase].
func OpenApproverKey(data, passphrase []byte) (ApproverKey, error) {
	id, err := age.NewScryptIdentity(string(passphrase))
	if err != nil {
		return ApproverKey{}, fmt.Errorf("open approver key: %w", err)
	}
	id.SetMaxWorkFactor(maxApproverWorkFactor)
	var src io.Reader = bytes.NewReader(data)
	if bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte(armor.Header)) {
		src = armor.NewReader(bytes.NewReader(data))
	}
	r, err := age.Decrypt(src, id)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return ApproverKey{}, fmt.Errorf("open approver key: %w", ErrWrongPassphrase)
		}
		return ApproverKey{}, fmt.Errorf("open approver key: not an age file encrypted with a passphrase: %w", err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, maxKeyFile+1))
	if err != nil {
		return ApproverKey{}, fmt.Errorf("open approver key: %w", err)
	}
	seed, err := parseKeyFile(plain)
	if err != nil {
		return ApproverKey{}, fmt.Errorf("open approver key: %w", err)
	}
	return ApproverKey{priv: ed25519.NewKeyFromSeed(seed)}, nil
}
