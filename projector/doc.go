// Package projector holds the audit chain that a proxy session appends
// through and the folds from events to state and to the JSONL export.
//
// # Audit chain
//
// [Chain] is the single writer of one session's chain (DESIGN rule 4). In one
// critical section it assigns seq and prev_hash, signs the lines of the signed
// set with the session key, computes the line_hash and hands the canonical
// bytes to a commit step ([Chain.AppendFunc]) that makes them durable. It
// advances only when the commit succeeds, so a failed write never leaves a
// line in the chain that is not in the store, and concurrent callers can
// never fork it. The chain is pure: no clock, no randomness and no I/O of its
// own; the key comes from [LoadKeyFile] or [GenerateKey] with a caller's
// random source.
//
// Invariants of every chain:
//   - the first line is open (seq 0, genesis prev_hash, the public key and the
//     previous session's tail from [TailOf] unless the record was empty);
//   - seq counts lines from 0 without gaps, and prev_hash is the previous
//     line's hash;
//   - nothing follows close;
//   - key_id never changes within the chain.
//
// # Keys
//
// A key file is one line of 64 lowercase hex characters (the Ed25519 seed),
// mode 0600. [LoadKeyFile] refuses a file that group or others can access and
// never falls back to another key. [PrivateKey] never prints its seed and
// compares in constant time. The published development key
// ([InsecureDevKey]) is for tests only; key files refuse it.
package projector
