// Package rpc is the one reading of a JSON-RPC frame that the wrap relay,
// the pins and the gate decide on: the calls, answers, requests and
// cancellations in a frame, their ids exactly and loosely, and how a frame
// continues a JSON value that an earlier one left unfinished. It reads
// JSON only through package reading, and is pure: no I/O, no clock, no
// state between calls but the [Stream] its caller carries.
//
// Invariants:
//
//   - One reading. [Classify] reads a frame once with package reading
//     (a plain envelope, a ping or an answer, by a quick scan that
//     FuzzClassify holds to the same result) and derives every decision
//     from that reading: no byte pre-filter, no second decoder.
//   - Ambiguity fails closed. An object whose deciding members (id,
//     method, params, result, error; params.name and params.arguments of
//     a tools/call) are given twice or in another case, or whose method
//     or tool name readers decode differently, is read every way a reader
//     could take it: each answer any reading sees is reported, and a
//     tools/call under any reading is an ambiguous [Call], which the
//     relay refuses.
//   - Nothing names tools/call unseen. A frame that names tools/call in
//     any spelling (escapes included, [MentionsToolsCall]) and cannot be
//     read as a followable call yields a malformed call; a frame that
//     names it in none yields no call (FuzzClassify).
//   - Streams as well as lines. [ReadHostFrame] and [ReadServerFrame]
//     read a line as a line reader and as a continuous stream reader
//     would ([Stream]), so a call that a stream-reading server completes
//     in this line is found in it (FuzzHostStream).
//   - Ids match as hosts match them: [IDKey] exactly (numbers by value,
//     every digit kept), [LooseID] as the TypeScript SDK does (Number(id)).
//   - Bounded. A value left unfinished longer than [MaxFrame] is no longer
//     followed; an id with a vast exponent keys by its text.
package rpc
