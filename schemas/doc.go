// Package schemas holds the wire formats that the rest of aegis shares: the
// versioned JSON event envelope (see envelope.go and envelope.schema.json) and
// the lines of the signed audit record, schema v2.
//
// The package is pure: it imports no net, os/exec, NATS or MCP SDK code, reads
// no clock and draws no randomness (time and randomness come in as
// parameters); TestDeps enforces the imports.
//
// # Canonical JSON
//
// [Canonicalize] implements RFC 8785 (JCS) over the constrained value space of
// the audit record. Accepted: objects with unique member names, arrays,
// strings that are valid UTF-8 (no unpaired surrogate escapes), true, false,
// and integers in [0, 2^53) written as plain decimals. Refused: null anywhere,
// floats (even 1.0 or 1e2), negative numbers, larger integers, duplicate
// member names. The output sorts members by UTF-16 code units, writes no
// insignificant whitespace, keeps array order, and escapes only '"', '\\' and
// control characters (short forms \b \t \n \f \r, otherwise lowercase
// \u00xx). Canonicalizing canonical bytes returns them unchanged.
//
// # Wire format of audit lines
//
// A record file is JSON Lines: one canonical [Line] per line, '\n' after
// each. Every line carries schema_version ([AuditSchemaVersion]), line_type,
// seq and prev_hash ([Line.Header]). A session is a run of lines that starts
// with an open line (seq 0, prev_hash [GenesisHash], the session's public key
// and, unless the file was empty, prev_session_tail = the line_hash of the
// file's previous line). Within a session seq counts lines from 0 and
// prev_hash is the line_hash of the line before.
//
//   - line_hash = lowercase hex SHA-256 of the canonical form of the whole
//     line, signature included ([Line.Hash]).
//   - Lines of the signed set ([Signed]: open, outcome, decision, close and
//     the reserved checkpoint) carry key_id = hex SHA-256 of the 32-byte
//     Ed25519 public key ([KeyID]) and signature = Ed25519 over the canonical
//     form without the signature member but with key_id ([Line.SigningInput]).
//   - Intent lines are never signed; the next signed line covers them through
//     the chain.
//
// [Line] keeps every member, known or not, so that a verifier hashes exactly
// what was written. The typed payloads [Open], [Intent], [Outcome],
// [Decision] and [CloseLine] write exactly the members of schema v2: absent
// optional members are omitted, never null, and decision_axes is always
// present. [WrapCall] builds the outcome of each path a relayed tools/call
// can take, with the reasons the record format fixes.
//
// An intent line may carry traceparent ([FieldTraceParent]): the host's
// W3C trace context for the call, exactly as sent, when it is a
// well-formed version-00 one ([ParseTraceParent]). Schema v2 does not name
// it; verifiers ignore unknown members and hash the whole line, so the
// line verifies under any implementation, and a line without it is
// exactly as before. Likewise protocol_version: the protocol version a
// stateless host (MCP 2026-07-28 and later) named in the call's own
// request; a call of a session's host has none.
//
// Beside the record: [Checkpoint] is the C2SP tlog-checkpoint body of a
// record file's first lines, [ReadNote] splits a file of signed notes (the
// RECORD.checkpoints sidecar) one note at a time, and [Proof] is the
// document of an RFC 6962 inclusion or consistency proof, which
// [ParseProof] reads strictly. None of them is a record line.
package schemas
