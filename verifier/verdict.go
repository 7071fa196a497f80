package verifier

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Verdict is the outcome of a verification. The zero value is not a verdict;
// [ExitCode] treats it as a failure.
type Verdict int

// The three verdicts.
const (
	// Verified: every line parsed, chained and (where signed) verified, and
	// the record ends with a verified close.
	Verified Verdict = iota + 1
	// Tampered: the record contradicts itself; see the reason.
	Tampered
	// Indeterminate: nothing contradicts the record, but it cannot be vouched
	// for in full; see the reason.
	Indeterminate
)

func (v Verdict) String() string {
	switch v {
	case Verified:
		return "Verified"
	case Tampered:
		return "Tampered"
	case Indeterminate:
		return "Indeterminate"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Code is the stable identifier of a reason. Each code belongs to exactly one
// verdict ([Code.Verdict]).
type Code string

// Reasons for Tampered.
const (
	// ChainBroken: a line's prev_hash is not the hash of the line before it.
	ChainBroken Code = "chain_broken"
	// SeqOutOfOrder: a seq repeats or goes backwards.
	SeqOutOfOrder Code = "seq_out_of_order"
	// BadSignature: a line of the signed set has no signature, a key_id that
	// is not the session's, or a signature that does not verify; or an open
	// publishes an unusable public key.
	BadSignature Code = "bad_signature"
	// SessionBoundaryBroken: an open's prev_session_tail is missing or does
	// not match the line before it, a session is missing its open, or a line
	// follows a close.
	SessionBoundaryBroken Code = "session_boundary_broken"
	// MalformedLine: a line that is not the final one does not parse, or any
	// line is not an object, is outside the value space or has a bad header.
	MalformedLine Code = "malformed_line"
	// UntrustedKey: under a pin, an open publishes a key outside the trust
	// slice.
	UntrustedKey Code = "untrusted_key"
	// DuplicateDecision: a second decision line for one approval_id in a
	// session.
	DuplicateDecision Code = "duplicate_decision"
	// CheckpointMismatch: a record file does not hold what its signed
	// checkpoint seals: fewer or more lines, another tree root or another
	// last line.
	CheckpointMismatch Code = "checkpoint_mismatch"
	// BadCheckpoint: a checkpoint given for a record file is not a signed
	// note, its body does not parse, or no key of the record (or of the
	// trust slice) signed it. Whoever can edit a record can delete its
	// checkpoint, but cannot forge one.
	BadCheckpoint Code = "bad_checkpoint"
	// BadProof: a proof document does not hold: its numbers are not those
	// of its checkpoint, or the RFC 6962 proof fails.
	BadProof Code = "bad_proof"
)

// Reasons for Indeterminate.
const (
	// UnknownLineType: a line of a type this verifier does not know, unsigned
	// or carrying a valid signature (a bad one is BadSignature).
	UnknownLineType Code = "unknown_line_type"
	// ReservedCheckpoint: a checkpoint line, which no emitter writes yet.
	ReservedCheckpoint Code = "reserved_checkpoint"
	// TornFinalLine: the last line does not parse as JSON.
	TornFinalLine Code = "torn_final_line"
	// UnanchoredTail: the last session has no close.
	UnanchoredTail Code = "unanchored_tail"
	// MissingLine: seq jumps forward while prev_hash chains.
	MissingLine Code = "missing_line"
	// EmptyChain: the record holds no line.
	EmptyChain Code = "empty_chain"
	// RecordGap: a gap line (aegis export --salvage) marks lines lost from
	// a damaged state directory.
	RecordGap Code = "record_gap"
)

// Codes lists every reason code, Tampered first.
func Codes() []Code {
	return []Code{
		ChainBroken, SeqOutOfOrder, BadSignature, SessionBoundaryBroken, MalformedLine, UntrustedKey, DuplicateDecision,
		CheckpointMismatch, BadCheckpoint, BadProof,
		UnknownLineType, ReservedCheckpoint, TornFinalLine, UnanchoredTail, MissingLine, EmptyChain, RecordGap,
	}
}

// Verdict returns the verdict that c leads to.
func (c Code) Verdict() Verdict {
	switch c {
	case ChainBroken, SeqOutOfOrder, BadSignature, SessionBoundaryBroken, MalformedLine, UntrustedKey, DuplicateDecision,
		CheckpointMismatch, BadCheckpoint, BadProof:
		return Tampered
	case UnknownLineType, ReservedCheckpoint, TornFinalLine, UnanchoredTail, MissingLine, EmptyChain, RecordGap:
		return Indeterminate
	}
	return 0
}

// Reason explains a verdict other than Verified. It implements error.
type Reason struct {
	Code Code
	// Message is the display string printed after "Tampered: " or
	// "Indeterminate: ".
	Message string
	// Line is the 1-based line number in the record (in a rotated set, in
	// File) where the reason was found, counting empty lines; 0 when it
	// concerns the record, or the file, as a whole.
	Line int
	// File names the record file of a rotated set that the reason concerns
	// ([VerifySet]); "" for a single record or the set as a whole.
	File string
}

func (r *Reason) Error() string { return r.Message }

// Position addresses a line: the session counted from 0 at the first open in
// the record, and the line's seq.
type Position struct {
	Session int
	Seq     uint64
}

func (p Position) String() string { return fmt.Sprintf("session %d seq %d", p.Session, p.Seq) }

// Result is what [Verify] found.
type Result struct {
	Verdict Verdict
	// Reason is nil exactly when Verdict is Verified (or Err is set).
	Reason *Reason
	// Pinned is true when the verification was pinned to a trust slice.
	Pinned bool
	// TrustedKeyIDs are the distinct key_ids of the trust slice, in the order
	// supplied.
	TrustedKeyIDs []string
	// KeyIDs are the key_ids of the public keys published by open lines, in
	// first-seen order without repeats; filled on failure too.
	KeyIDs []string
	// Coverage is the position of the last line that passed every check, or
	// nil when none did.
	Coverage *Position
	// InFlight holds the call_ids of intents without an outcome in the last
	// session, in record order; set only for UnanchoredTail.
	InFlight []string
	// Warnings note oddities that do not change the verdict, such as an
	// outcome without an intent. They are not part of [Render].
	Warnings []string
	// Continued is set when the record's first open links to an earlier
	// session (prev_session_tail): the record is a later segment of a
	// rotated record, verified without the segments before it. The verdict
	// is then Tampered (SessionBoundaryBroken), since nothing in the record
	// shows what it links to; [VerifySet] with the earlier segments first
	// checks the link.
	Continued bool
	// Checkpoints report the checkpoints checked by [VerifySet], one per
	// record file that had one, in file order, as far as the walk got.
	Checkpoints []CheckpointResult
	// Err is set when the record could not be read; every other field is then
	// meaningless, [Render] returns "" and [ExitCode] returns 2.
	Err error
}

// Label returns the first output line: "Verified (unpinned)", "Verified
// (pinned to <key_id>)" when the trust slice holds one distinct key,
// "Verified (pinned)" when it holds several, or "Tampered: <reason>" and
// "Indeterminate: <reason>".
func Label(r Result) string {
	switch r.Verdict {
	case Verified:
		switch {
		case !r.Pinned:
			return "Verified (unpinned)"
		case len(r.TrustedKeyIDs) == 1:
			return "Verified (pinned to " + r.TrustedKeyIDs[0] + ")"
		default:
			return "Verified (pinned)"
		}
	case Tampered, Indeterminate:
		msg := "unknown reason"
		if r.Reason != nil {
			msg = r.Reason.Message
		}
		return r.Verdict.String() + ": " + msg
	}
	return "Tampered: no verdict"
}

// Render returns what aegis verify prints on stdout: the label, one
// "key_id <hex>" line per observed key, one "checkpoint <name>: <n> lines,
// root <base64>, matches" line per checkpoint that matched (for a file of
// checkpoints of first lines: "checkpoints <name>: <count>, the last of
// <n> lines, root <base64>, all match", or "checkpoints <name>: none"), "coverage
// session <i> seq <n>" when any line passed, and for an unanchored tail one
// "in_flight <call_id>" line per call in flight. Every line ends in '\n'. The output holds no time and
// no path other than the names the caller gave a rotated set's files and
// checkpoints, so it is the same on every run. It is "" when r.Err is set.
func Render(r Result) string {
	if r.Err != nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(Label(r))
	b.WriteByte('\n')
	for _, k := range r.KeyIDs {
		b.WriteString("key_id " + k + "\n")
	}
	for _, c := range r.Checkpoints {
		switch {
		case !c.Matches:
		case c.Prefix && c.Count > 0:
			fmt.Fprintf(&b, "checkpoints %s: %d, the last of %d lines, root %s, all match\n",
				display(c.Name), c.Count, c.Checkpoint.Size, base64.StdEncoding.EncodeToString(c.Checkpoint.Root[:]))
		case c.Prefix:
			fmt.Fprintf(&b, "checkpoints %s: none\n", display(c.Name))
		default:
			fmt.Fprintf(&b, "checkpoint %s: %d lines, root %s, matches\n",
				display(c.Name), c.Checkpoint.Size, base64.StdEncoding.EncodeToString(c.Checkpoint.Root[:]))
		}
	}
	if r.Coverage != nil {
		fmt.Fprintf(&b, "coverage %s\n", r.Coverage)
	}
	if r.Reason != nil && r.Reason.Code == UnanchoredTail {
		for _, id := range r.InFlight {
			b.WriteString("in_flight " + display(id) + "\n")
		}
	}
	return b.String()
}

// ExitCode maps a result to the exit code of aegis verify: 0 Verified,
// 1 Tampered, 2 unreadable, 3 Indeterminate. A result without a verdict is 1.
func ExitCode(r Result) int {
	if r.Err != nil {
		return 2
	}
	switch r.Verdict {
	case Verified:
		return 0
	case Indeterminate:
		return 3
	}
	return 1
}

// Options select how [Verify] trusts keys. With no Keys and a nil TrustStore
// the walk is unpinned: every session's signatures verify against the key
// the session publishes, whoever that is. Otherwise it is pinned: every open
// must publish a key in Keys or TrustStore, and a non-nil TrustStore pins
// even when it holds no key (so an empty or truncated trust store fails
// closed). Pinning only checks identity; signatures always verify against
// the key each session publishes.
type Options struct {
	// Keys are public keys given on the command line (--key).
	Keys []ed25519.PublicKey
	// TrustStore is the parsed --trust-store file, nil when none was given.
	TrustStore *TrustStore
	// AllowGaps (--allow-gaps) reads gap lines, which aegis export
	// --salvage writes where a damaged state directory lost audit lines,
	// as marks of lines lost: Indeterminate (RecordGap), and the lines
	// around them checked. Without it a gap line is what it proves, lines
	// dropped from the chain: Tampered (ChainBroken). Anyone who can drop
	// lines can also write a gap line, so only the user may say that a
	// record is a salvage.
	AllowGaps bool
}

func (o Options) pinned() bool { return len(o.Keys) > 0 || o.TrustStore != nil }

// trustedKeys returns Keys and the trust store's keys, in that order.
func (o Options) trustedKeys() []ed25519.PublicKey {
	keys := o.Keys
	if o.TrustStore != nil {
		keys = append(keys[:len(keys):len(keys)], o.TrustStore.Keys...)
	}
	return keys
}

// display returns s as is when it is plain printable text, and Go-quoted
// otherwise, so that a hostile value cannot break the line-oriented output.
func display(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) || r == '`' || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}
