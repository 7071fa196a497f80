package schemas

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
)

// AuditSchemaVersion is the value of every audit line's schema_version.
const AuditSchemaVersion = 2

// GenesisHash is the prev_hash of every open line: 64 zeros.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// WrapPassthroughPolicySetHash is the policy_set_hash recorded when no policy
// governs a call: SHA-256 of the ASCII string "aegis-wrap-passthrough-v0".
const WrapPassthroughPolicySetHash = "7b30695c7a4df1b6a226bdd591c6d75b9917bb3af078af2d01be295e4df96974"

// InsecureDevKeySeed is the published Ed25519 seed of the upstream
// development key (32 ASCII bytes). Records signed with it prove nothing; it
// exists for tests and for the specification's vectors.
const InsecureDevKeySeed = "aegis-insecure-dev-key-not-real!"

// Line types of schema v2.
const (
	LineOpen       = "open"
	LineIntent     = "intent"
	LineOutcome    = "outcome"
	LineDecision   = "decision"
	LineClose      = "close"
	LineCheckpoint = "checkpoint" // reserved: never emitted, caps a verdict at Indeterminate
	// LineGap is not a type of schema v2: aegis export --salvage writes it
	// where lines of the record were lost from a damaged state directory.
	// It is unsigned and carries FieldLostStreamSeqs; aegis verify caps a
	// record that holds one at Indeterminate and goes on checking after it.
	LineGap = "gap"
)

// FieldLostStreamSeqs names, in a gap line, the stream sequences that
// were lost there ("25" or "25-30").
const FieldLostStreamSeqs = "lost_stream_seqs"

// GapLine returns the canonical gap line for the lost stream sequences,
// linked to the line before it (prevHash; GenesisHash if none).
func GapLine(prevHash, lost string) ([]byte, error) {
	l := NewLine(LineGap)
	for k, v := range map[string]any{FieldSeq: uint64(0), FieldPrevHash: prevHash, FieldLostStreamSeqs: lost} {
		if err := l.Set(k, v); err != nil {
			return nil, err
		}
	}
	return l.Canonical()
}

// Member names with a meaning in the chain rule.
const (
	FieldSchemaVersion   = "schema_version"
	FieldLineType        = "line_type"
	FieldSeq             = "seq"
	FieldPrevHash        = "prev_hash"
	FieldSignature       = "signature"
	FieldKeyID           = "key_id"
	FieldPublicKey       = "public_key"
	FieldPrevSessionTail = "prev_session_tail"
)

// Signed reports whether lines of type lineType carry a signature: open,
// outcome, decision, close and the reserved checkpoint. Intent lines are
// authenticated only through the chain.
func Signed(lineType string) bool {
	switch lineType {
	case LineOpen, LineOutcome, LineDecision, LineClose, LineCheckpoint:
		return true
	}
	return false
}

// KnownLineType reports whether lineType is one of the six types of schema v2.
func KnownLineType(lineType string) bool {
	return lineType == LineIntent || Signed(lineType)
}

// Line is one audit line as a tree of members (see [DecodeValue]). It keeps
// every member, including ones this version does not know, so that the hash
// of a decoded line covers exactly what was written. A Line shares its
// members with its copies; use [Line.Clone] before changing a line that
// someone else holds.
type Line struct {
	m map[string]any
}

// NewLine returns a line holding only schema_version and line_type.
func NewLine(lineType string) Line {
	return Line{m: map[string]any{
		FieldSchemaVersion: uint64(AuditSchemaVersion),
		FieldLineType:      lineType,
	}}
}

// DecodeLine parses raw as a JSON object inside the audit value space. It does
// not check the header; see [Line.Header]. Errors are *[ParseError], or wrap
// [ErrValueSpace] when raw is a JSON value that is not an object.
func DecodeLine(raw []byte) (Line, error) {
	v, err := DecodeValue(raw)
	if err != nil {
		return Line{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Line{}, spaceErrorf(0, "line is not a json object")
	}
	return Line{m: m}, nil
}

// Clone returns a deep copy of l.
func (l Line) Clone() Line {
	v, _ := cloneValue(l.m).(map[string]any)
	if v == nil {
		v = map[string]any{}
	}
	return Line{m: v}
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(t))
		for k, e := range t {
			c[k] = cloneValue(e)
		}
		return c
	case []any:
		c := make([]any, len(t))
		for i, e := range t {
			c[i] = cloneValue(e)
		}
		return c
	}
	return v
}

// Members returns a shallow copy of the line's members.
func (l Line) Members() map[string]any { return maps.Clone(l.m) }

// Get returns the member called name.
func (l Line) Get(name string) (any, bool) {
	v, ok := l.m[name]
	return v, ok
}

// Str returns the member called name if it is a JSON string.
func (l Line) Str(name string) (string, bool) {
	s, ok := l.m[name].(string)
	return s, ok
}

// Integer returns the member called name if it is an integer.
func (l Line) Integer(name string) (uint64, bool) {
	n, ok := l.m[name].(uint64)
	return n, ok
}

// Type returns line_type, or "" when it is missing or not a string.
func (l Line) Type() string {
	s, _ := l.Str(FieldLineType)
	return s
}

// Set stores v as the member called name. v must be a value tree (see
// [EncodeValue]) or a Go value that [MarshalCanonical] accepts; it is
// converted to a value tree first.
func (l *Line) Set(name string, v any) error {
	tv, err := toValue(v)
	if err != nil {
		return fmt.Errorf("set %q: %w", name, err)
	}
	if l.m == nil {
		l.m = make(map[string]any)
	}
	l.m[name] = tv
	return nil
}

// Delete removes the member called name, if present.
func (l Line) Delete(name string) { delete(l.m, name) }

func toValue(v any) (any, error) {
	switch t := v.(type) {
	case string, bool:
		return t, nil
	case uint64:
		if t >= MaxInteger {
			return nil, spaceErrorf(0, "integer %d is not below 2^53", t)
		}
		return t, nil
	case int:
		if t < 0 || uint64(t) >= MaxInteger {
			return nil, spaceErrorf(0, "integer %d is outside [0, 2^53)", t)
		}
		return uint64(t), nil
	}
	raw, err := MarshalCanonical(v)
	if err != nil {
		return nil, err
	}
	return DecodeValue(raw)
}

// Canonical returns the RFC 8785 form of the whole line.
func (l Line) Canonical() ([]byte, error) {
	if l.m == nil {
		return nil, errors.New("canonical form of a zero line")
	}
	return EncodeValue(l.m)
}

// SigningInput returns the bytes an Ed25519 signature covers: the canonical
// form of the line without its signature member (key_id stays in).
func (l Line) SigningInput() ([]byte, error) {
	if l.m == nil {
		return nil, errors.New("signing input of a zero line")
	}
	if _, had := l.m[FieldSignature]; !had {
		return EncodeValue(l.m)
	}
	m := maps.Clone(l.m)
	delete(m, FieldSignature)
	return EncodeValue(m)
}

// Hash returns the line_hash: lowercase hex SHA-256 of the canonical form of
// the complete line, signature included.
func (l Line) Hash() (string, error) {
	c, err := l.Canonical()
	if err != nil {
		return "", err
	}
	return HashHex(c), nil
}

// HashHex returns lowercase hex SHA-256 of b.
func HashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Header is the part of every line that the chain rule reads.
type Header struct {
	SchemaVersion uint64
	LineType      string
	Seq           uint64
	PrevHash      string
}

// Header checks and returns the mandatory header members: schema_version
// equal to [AuditSchemaVersion], line_type a string, seq an integer and
// prev_hash a digest. The error describes the first problem found.
func (l Line) Header() (Header, error) {
	var h Header
	v, ok := l.m[FieldSchemaVersion]
	if !ok {
		return h, errors.New("missing schema_version")
	}
	if h.SchemaVersion, ok = v.(uint64); !ok {
		return h, errors.New("schema_version is not an integer")
	}
	if h.SchemaVersion != AuditSchemaVersion {
		return h, fmt.Errorf("schema_version %d is not %d", h.SchemaVersion, AuditSchemaVersion)
	}
	if v, ok = l.m[FieldLineType]; !ok {
		return h, errors.New("missing line_type")
	}
	if h.LineType, ok = v.(string); !ok {
		return h, errors.New("line_type is not a string")
	}
	if v, ok = l.m[FieldSeq]; !ok {
		return h, errors.New("missing seq")
	}
	if h.Seq, ok = v.(uint64); !ok {
		return h, errors.New("seq is not an integer")
	}
	if v, ok = l.m[FieldPrevHash]; !ok {
		return h, errors.New("missing prev_hash")
	}
	if h.PrevHash, ok = v.(string); !ok || !IsDigest(h.PrevHash) {
		return h, errors.New("prev_hash is not 64 lowercase hex characters")
	}
	return h, nil
}

// IsDigest reports whether s is a digest in wire form: exactly 64 lowercase
// hex characters. Uppercase is refused, not normalized.
func IsDigest(s string) bool { return isLowerHex(s, 64) }

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ErrPublicKey is wrapped by [ParsePublicKey] errors.
var ErrPublicKey = errors.New("not a public key")

// ParsePublicKey parses the wire form of an Ed25519 public key: 64 lowercase
// hex characters. It checks only the encoding; a verifier must still check
// that the bytes are a usable point.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	if !isLowerHex(s, 2*ed25519.PublicKeySize) {
		return nil, fmt.Errorf("%w: expected 64 lowercase hex characters, found %d characters", ErrPublicKey, len(s))
	}
	b, _ := hex.DecodeString(s)
	return ed25519.PublicKey(b), nil
}

// PublicKeyHex returns the wire form of an Ed25519 public key.
func PublicKeyHex(pub ed25519.PublicKey) string { return hex.EncodeToString(pub) }

// KeyID returns the key_id of a public key: lowercase hex SHA-256 of its 32
// bytes.
func KeyID(pub ed25519.PublicKey) string { return HashHex(pub) }

// ParseSignature parses the wire form of an Ed25519 signature: 128 lowercase
// hex characters.
func ParseSignature(s string) ([]byte, bool) {
	if !isLowerHex(s, 2*ed25519.SignatureSize) {
		return nil, false
	}
	b, _ := hex.DecodeString(s)
	return b, true
}
