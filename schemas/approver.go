package schemas

// Approvers: the people who may approve a pending call when a proxy runs
// with an approvers file, and the signed claim an approval carries.
//
// # The approvers file
//
// UTF-8 text, one approver per line:
//
//	aegis-approver <public key: 64 lowercase hex> [name]
//
// The name is the rest of the line, spaces trimmed; it is shown in
// prompts and records, never trusted. Blank lines and lines whose first
// non-space character is '#' are ignored; a trailing "\r" is dropped. A
// line of any other shape, a key that is not 64 lowercase hex, the same
// key twice, a name with control or format characters, a file
// larger than [MaxApproversFileBytes] or one with no approver at all is an
// error naming the line: a proxy refuses to start on it (fail closed).
// A key's id is [KeyID] of it, as for the keys that sign records. (32
// bytes that are no curve point pass here and can never verify.)
//
// # What an approver signs
//
// [ApprovalClaim.Message]: the domain string [ApprovalDomain], a newline,
// then the RFC 8785 canonical JSON of the claim: approval_id, args_digest
// (omitted when empty: an escalation has none), session and target (the
// tool id of the pending call as the proxy lists it, or the gateway's
// escalation "aegis.set_profile FROM -> TO"). A signature over one
// approval therefore says nothing about another id, another session,
// another tool or other arguments, and no other message that aegis signs
// (audit lines, checkpoint notes) starts with the domain string.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ApproverLinePrefix starts every line of an approvers file.
const ApproverLinePrefix = "aegis-approver"

// ApprovalDomain separates approval signatures from every other message.
const ApprovalDomain = "aegis approval signature v1"

// MaxApproversFileBytes bounds an approvers file.
const MaxApproversFileBytes = 1 << 20

// maxApproverNameBytes bounds one approver's name.
const maxApproverNameBytes = 200

// Approver is one line of an approvers file.
type Approver struct {
	KeyID     string
	PublicKey ed25519.PublicKey
	Name      string
}

// Label names the approver for people: its name and the start of its key
// id.
func (a Approver) Label() string {
	id := a.KeyID
	if len(id) > 16 {
		id = id[:16]
	}
	if a.Name == "" {
		return "key " + id
	}
	return a.Name + " (key " + id + ")"
}

// ApproverLine is the line of an approvers file for pub and name.
func ApproverLine(pub ed25519.PublicKey, name string) string {
	l := ApproverLinePrefix + " " + PublicKeyHex(pub)
	if name = strings.TrimSpace(name); name != "" {
		l += " " + name
	}
	return l
}

// CheckApproverName says whether name can stand in an approvers file.
func CheckApproverName(name string) error {
	if len(name) > maxApproverNameBytes {
		return fmt.Errorf("approver name longer than %d bytes", maxApproverNameBytes)
	}
	if !utf8.ValidString(name) {
		return errors.New("approver name is not valid UTF-8")
	}
	for _, r := range name {
		if r != ' ' && !unicode.IsPrint(r) {
			return fmt.Errorf("approver name holds the character %U; use letters, digits, spaces and punctuation", r)
		}
	}
	return nil
}

// Approvers is a parsed approvers file. Its zero value holds nobody.
type Approvers struct {
	list []Approver
	byID map[string]int
}

// ApproversError is a line of an approvers file that cannot be read.
type ApproversError struct {
	Line int // 1-based; 0 for the file as a whole
	Msg  string
}

func (e *ApproversError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ParseApprovers reads an approvers file (see the package comment above).
func ParseApprovers(data []byte) (*Approvers, error) {
	if len(data) > MaxApproversFileBytes {
		return nil, &ApproversError{Msg: fmt.Sprintf("approvers file of %d bytes is larger than the %d KiB limit", len(data), MaxApproversFileBytes>>10)}
	}
	if !utf8.Valid(data) {
		return nil, &ApproversError{Msg: "approvers file is not UTF-8 text"}
	}
	a := &Approvers{byID: map[string]int{}}
	for i, line := range strings.Split(string(data), "\n") {
		no := i + 1
		line = strings.TrimSuffix(line, "\r")
		t := strings.TrimLeft(line, " \t")
		if t == "" || t[0] == '#' {
			continue
		}
		prefix, rest := cutBlank(t)
		if prefix != ApproverLinePrefix {
			return nil, &ApproversError{Line: no, Msg: fmt.Sprintf("want %q, a public key and a name; got %s", ApproverLinePrefix+" <64 hex> [name]", strconv.Quote(short(t, 40)))}
		}
		rest = strings.TrimLeft(rest, " \t")
		keyHex, name := cutBlank(rest)
		if len(keyHex) != 2*ed25519.PublicKeySize || strings.ToLower(keyHex) != keyHex {
			return nil, &ApproversError{Line: no, Msg: "the public key must be 64 lowercase hex characters (as 'aegis keygen --approver' prints it)"}
		}
		raw, err := hex.DecodeString(keyHex)
		if err != nil {
			return nil, &ApproversError{Line: no, Msg: "the public key must be 64 lowercase hex characters (as 'aegis keygen --approver' prints it)"}
		}
		pub := ed25519.PublicKey(raw)
		name = strings.Trim(name, " \t")
		if err := CheckApproverName(name); err != nil {
			return nil, &ApproversError{Line: no, Msg: err.Error()}
		}
		id := KeyID(pub)
		if j, dup := a.byID[id]; dup {
			return nil, &ApproversError{Line: no, Msg: fmt.Sprintf("key %s is listed twice (also as %s)", id[:16], strconv.Quote(a.list[j].Name))}
		}
		a.byID[id] = len(a.list)
		a.list = append(a.list, Approver{KeyID: id, PublicKey: pub, Name: name})
	}
	if len(a.list) == 0 {
		return nil, &ApproversError{Msg: "approvers file lists no approver, so no call could ever be approved; add a line from 'aegis keygen --approver'"}
	}
	return a, nil
}

// cutBlank cuts s at its first space or tab.
func cutBlank(s string) (before, after string) {
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Len is the number of approvers.
func (a *Approvers) Len() int {
	if a == nil {
		return 0
	}
	return len(a.list)
}

// List returns the approvers in file order.
func (a *Approvers) List() []Approver {
	if a == nil {
		return nil
	}
	return append([]Approver(nil), a.list...)
}

// Lookup returns the approver with key id.
func (a *Approvers) Lookup(keyID string) (Approver, bool) {
	if a == nil {
		return Approver{}, false
	}
	i, ok := a.byID[keyID]
	if !ok {
		return Approver{}, false
	}
	return a.list[i], true
}

// ApprovalClaim is what an approver's signature binds an approval to.
type ApprovalClaim struct {
	ApprovalID string `json:"approval_id"`
	Session    string `json:"session"`
	Target     string `json:"target"`
	ArgsDigest string `json:"args_digest,omitempty"`
}

// Message is the byte string an approver signs for c: [ApprovalDomain],
// '\n', and the canonical JSON of c.
func (c ApprovalClaim) Message() ([]byte, error) {
	m := map[string]any{"approval_id": c.ApprovalID, "session": c.Session, "target": c.Target}
	if c.ArgsDigest != "" {
		m["args_digest"] = c.ArgsDigest
	}
	for k, v := range m {
		if !utf8.ValidString(v.(string)) {
			return nil, fmt.Errorf("approval claim: %s is not valid UTF-8", k)
		}
	}
	b, err := EncodeValue(m)
	if err != nil {
		return nil, fmt.Errorf("approval claim: %w", err)
	}
	return append([]byte(ApprovalDomain+"\n"), b...), nil
}

// ApproverSignature is an approver's signature of a claim, as an approval
// request carries it: the claim the approver saw, the signing key's id and
// the Ed25519 signature of [ApprovalClaim.Message] (standard base64).
type ApproverSignature struct {
	ApprovalClaim
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

// SignApproval signs c with priv.
func SignApproval(priv ed25519.PrivateKey, c ApprovalClaim) (*ApproverSignature, error) {
	msg, err := c.Message()
	if err != nil {
		return nil, err
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	return &ApproverSignature{ApprovalClaim: c, KeyID: KeyID(pub), Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))}, nil
}

// Check verifies that s is a valid signature, by an approver of a, of
// exactly want, and returns that approver. The error says what is wrong,
// in words for the record: no signature, a key not in the file, a claim
// for another approval, session, target or arguments, or a signature that
// does not verify.
func (a *Approvers) Check(want ApprovalClaim, s *ApproverSignature) (Approver, error) {
	if s == nil || (s.KeyID == "" && s.Signature == "") {
		return Approver{}, errors.New("approvers are configured and the approval carries no approver signature: run aegis approve --approver-key FILE")
	}
	ap, ok := a.Lookup(s.KeyID)
	if !ok {
		return Approver{}, fmt.Errorf("the approval is signed by key %s, which is not in the approvers file", strconv.Quote(short(s.KeyID, 64)))
	}
	switch {
	case s.ApprovalID != want.ApprovalID:
		return ap, fmt.Errorf("the approver signature is for approval %s, not %s", strconv.Quote(short(s.ApprovalID, 64)), strconv.Quote(want.ApprovalID))
	case s.Session != want.Session:
		return ap, fmt.Errorf("the approver signature is for session %s, not this session %s", strconv.Quote(short(s.Session, 64)), want.Session)
	case s.Target != want.Target:
		return ap, fmt.Errorf("the approver signature is for %s, not %s", strconv.Quote(short(s.Target, 80)), strconv.Quote(short(want.Target, 80)))
	case s.ArgsDigest != want.ArgsDigest:
		return ap, fmt.Errorf("the approver signature is for other arguments (args_digest %s, not %s)", strconv.Quote(short(s.ArgsDigest, 64)), want.ArgsDigest)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return ap, errors.New("the approver signature is not 64 bytes of base64")
	}
	msg, err := want.Message()
	if err != nil {
		return ap, err
	}
	if !ed25519.Verify(ap.PublicKey, msg, sig) {
		return ap, fmt.Errorf("the approver signature by %s does not verify for this approval", ap.Label())
	}
	return ap, nil
}

// Equal reports whether two parsed files hold the same approvers in the
// same order.
func (a *Approvers) Equal(b *Approvers) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i := range a.list {
		x, y := a.list[i], b.list[i]
		if x.KeyID != y.KeyID || x.Name != y.Name || !bytes.Equal(x.PublicKey, y.PublicKey) {
			return false
		}
	}
	return true
}
