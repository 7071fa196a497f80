// Package reading is the one reading of a JSON-RPC frame that every part of
// aegis's proxy decides on: bytes in, the value every conforming reader
// takes them for out, and, where readers could take them differently, a
// mark saying so. It is pure: no I/O, no clock, no state between calls.
//
// Hosts and servers read frames with different parsers (Node's JSON.parse,
// Python's json, Go's encoding/json and the go-sdk). They agree on plain
// JSON and disagree at its edges, and each edge is a way to show the host
// one thing while aegis decides on another. Invariants:
//
//   - One value per reading. [Read] follows the grammar of RFC 8259
//     strictly. Escapes are resolved, so a member named "tool\u0073" is
//     the member tools, as every reader takes it. Member names are
//     compared only after that.
//   - Ambiguity is marked, never guessed away. A value is [Value.Ambiguous]
//     when some plausible reader would take it differently from another:
//     a member name given twice in one object (readers keep the first or
//     the last); nesting deeper than [MaxDepth] (readers stop at different
//     depths, encoding/json at 10 000, Python near 1 000); a number beyond
//     the double range (1e400: Infinity in JavaScript and Python, an error
//     in Go) or an integer beyond 2^53 (exact in Python, rounded in
//     JavaScript and Go); NaN, Infinity and -Infinity (Python takes them,
//     the others refuse); a lone UTF-16 surrogate escape or invalid UTF-8
//     (kept, replaced or refused, by reader); a byte order mark; a text
//     holding more than one value (a line reader refuses it, a stream
//     reader reads each). The mark travels up: a container is ambiguous
//     when anything inside it is.
//   - Case is a reading too. Go's encoding/json matches struct fields in
//     any case, so {"Tools":[…]} is a listing to a Go host and nothing to
//     a JavaScript one. [Value.Get] therefore reports a name as ambiguous
//     when another member of the object equals it under case folding, and
//     whoever decides on a member reads it through Get.
//   - Whoever decides on an ambiguous value fails closed. This package only
//     reports; the caller refuses, holds or records, as its invariants say.
//
// Fuzzing holds the reading to three real parsers (encoding/json, Node's
// JSON.parse, Python's json): wherever the reading is unambiguous, each of
// them that accepts the text takes it for the same value, and every text
// on whose value they disagree is marked ambiguous or not read.
package reading
