// Package verifier checks an exported audit record (schema v2, see package
// schemas) offline and returns one of three verdicts: [Verified], [Tampered]
// or [Indeterminate], each non-Verified verdict with a typed [Reason].
//
// The package imports no net, os/exec, NATS or MCP SDK code, reads no clock
// and draws no randomness; TestDeps enforces the imports. It reads a record
// through an io.Reader and never writes.
//
// # What is checked
//
// [Verify] rebuilds everything from the raw lines and compares: it
// re-canonicalizes every line and hashes the canonical form (unknown members
// included), checks that each open has seq 0, the genesis prev_hash and a
// prev_session_tail equal to the hash of the record's previous line (absent
// only for the first session), that seq counts up by one inside a session and
// prev_hash is the previous line's hash, and that every line of the signed set
// carries the session's key_id and a strict Ed25519 signature over its
// canonical form without signature. Verified also needs the record to end in a
// verified close.
//
// A walk stops at the first Tampered reason. Indeterminate reasons do not stop
// it, because a later line may still prove tampering; the first one found is
// reported.
//
// The expensive work, parsing, hashing and Ed25519 checks, runs on every
// core a chunk of lines ahead of the walk; the walk itself is sequential and
// alone decides the verdict, so the result does not depend on the number of
// cores or on scheduling.
//
// # Rotated records and checkpoints
//
// [VerifySet] verifies the files of a rotated record (sealed segments
// oldest first, the live file last) as one record, and checks each file
// that has a signed checkpoint against it with [CheckCheckpoint]: a C2SP
// signed note, signed by a key that the file's sessions publish (or a
// pinned one), whose [schemas.Checkpoint] body must equal the file's line
// count, RFC 6962 tree root and last line. A mismatch is Tampered
// ([CheckpointMismatch]); so is a checkpoint that does not parse or that no
// such key signed ([BadCheckpoint]): whoever can edit a record can delete
// its checkpoint, but cannot forge one. A file that another follows must
// end in '\n'. Messages in a set name the file ("audit.000002.jsonl line
// 17"). A record file whose first open links to an earlier session,
// verified alone, stays Tampered (SessionBoundaryBroken) and says so in
// Result.Continued, so that a caller can point to the earlier segments.
// These sidecar checkpoints are not the reserved checkpoint line type.
//
// # Choices where the specification is silent
//
//   - A first session whose open carries prev_session_tail is
//     SessionBoundaryBroken: the record claims an earlier session that is not
//     in it (the head was cut).
//   - A line before any open, or after a close that no open follows, is
//     SessionBoundaryBroken.
//   - schema_version other than 2 is MalformedLine.
//   - An unknown line type caps the verdict at Indeterminate
//     (UnknownLineType) whether it is unsigned or carries a valid signature:
//     a signature proves who wrote a line, not what it claims, and a verifier
//     that cannot read the claim must not vouch for the record. With a bad
//     signature (or one under another key_id) it is BadSignature. The line
//     still chains and the walk goes on, so a later Tampered line wins.
//   - A signature on an intent line is ignored, as upstream does; the line
//     hash still covers it.
//   - Intents, outcomes and decisions must carry a string call_id or
//     approval_id (MalformedLine otherwise); other payload members are not
//     interpreted. Duplicate decisions are counted per session, because
//     approval ids restart with every proxy process.
//   - A gap line (line_type "gap", written by aegis export --salvage where a
//     damaged state directory lost stream messages) is Tampered
//     (ChainBroken) unless the user says the record is a salvage
//     (Options.AllowGaps): whoever drops lines can write one. With it, it
//     caps the verdict at Indeterminate (RecordGap) and the walk goes on: the first line after a
//     gap is taken as the chain's new start (its prev_hash, or an open's
//     prev_session_tail, cannot be checked), unless it cannot belong to the
//     session before the gap (no session, a closed one, a lower seq): then
//     the gap took its session's open and key, and its lines are passed over
//     unchecked until the next open, which links to them as usual.
//   - "Verified (pinned to <key_id>)" names the key when the trust slice holds
//     one distinct key; with several it is "Verified (pinned)".
//   - Values from the record that are not plain printable text (call ids,
//     line types) are printed Go-quoted, so they cannot forge output lines.
//
// # Strict signatures
//
// Signatures are checked like upstream's verify_strict, with
// filippo.io/edwards25519 (the arithmetic of Go's crypto/ed25519): a
// non-canonical S is refused, and so are public keys and R values that are
// non-canonical encodings or points of small order. Each key is decoded and
// checked once, and each worker keeps the last key it used, so the lines
// of a session pay only for the verification equation.
//
// # Threat model
//
// A record proves what the holder of each session key wrote, in order, and
// that nothing between an open and its close was changed, dropped or
// reordered. By itself it cannot prove that whole sessions at the end of
// the file were not removed; pinning proves who wrote it, not that it is
// complete. Checkpoints anchor the end: a sealed segment's, and the live
// checkpoints of RECORD.checkpoints, each of which the file must hold as
// its first lines (prefix.go). Whoever can cut the file can cut its
// sidecar too, so the anchor is a checkpoint kept elsewhere and given with
// --checkpoint. [CheckProof] checks an RFC 6962 proof against a signed
// checkpoint without the record.
//
// Whoever holds the signing key can re-sign checkpoints of a cut record.
// [CheckBundle] checks an anchor bundle (aegis prove anchor) offline: the
// lines are in the record checkpoint, the record checkpoint is a leaf of
// the state directory's anchor log, and that log's checkpoint is signed by
// the pinned key under the origin aegis/anchor/<key_id> and cosigned
// (C2SP tlog-cosignature) by a quorum of a witness policy. A proof that
// fails is Tampered; a quorum not met is Indeterminate ([NotWitnessed]),
// never Verified; two anchor checkpoints of one size with different roots
// are Tampered ([AnchorFork], [CheckForks]).
package verifier
