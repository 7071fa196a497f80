// Package proxy relays MCP between a host and server processes and makes
// every tool call accountable.
//
// # The recording relay (aegis wrap)
//
// [Wrap] runs one server and relays its stdio with the host. Invariants:
//
//   - Byte-exact. Frames are split on '\n' by the relay itself (never by an
//     SDK decoder, which one bad line would end); the bytes read are the
//     bytes written, terminator and all, including invalid UTF-8, '\r',
//     blank lines and a last line without '\n'. Parsed values are never
//     re-encoded onto either wire.
//   - Every frame is an event (frame.c2s, frame.s2c) holding its exact bytes.
//     Frames that carry no call or answer do not wait for their own fsync;
//     they are durable with the next commit, and stream order keeps them
//     before anything enqueued later. Their events are built by that
//     commit, not between reading and writing the frame.
//   - Intent before relay. A host frame holding tools/calls is written to the
//     server only after the intent line of every call in it is durable. A
//     batch array is relayed whole; its calls share the frame's
//     request_digest.
//   - Outcome before answer. A server frame that answers pending calls is
//     written to the host only after their outcome lines are durable; the
//     calls of one answer frame share its response_digest. An answer whose
//     id, method, result or error appears twice or in another case closes
//     every pending call that any reading of it answers (encoding/json's,
//     and the exact-name readings that keep the first or the last
//     duplicate), whichever parser the host uses.
//   - Nothing slips past the record. [Classify] reads a frame the way any
//     plausible server parser might: complete JSON values are classified
//     even when a line holds several, and any frame that names tools/call
//     in any spelling without being a followable request becomes a
//     malformed call, which gets an intent and a denied outcome before the
//     frame is relayed (it is the server's to answer). A call whose
//     deciding members appear twice or in another case is ambiguous: no
//     reading can say which call the server would run, so the relay
//     refuses its frame, in every mode, instead of relaying it. The
//     relay skips Classify only where it cannot matter: a host frame that
//     does not name tools/call in any spelling (FuzzClassify holds that such
//     a frame never yields a call), and a server frame read while no call
//     is pending (there is nothing for it to answer).
//   - Every call gets exactly one outcome: answered; superseded by a reused
//     id; "child exited before responding"; or, when the host left and the
//     server stayed silent through the grace, "client closed stdin; …".
//   - Bounded memory. A reader stops reading its side while what it read is
//     not yet on its way: the events store bounds the frames queued for a
//     commit (events.Config.MaxQueueBytes), and each direction bounds the
//     bytes of the frames waiting for their writer (maxQueuedBytes). Each
//     bound admits at least one frame of [MaxFrame], so a frame of any
//     size passes; the small frames of a normal session never reach them,
//     and checking costs a counter under a lock the path already holds.
//     A line is read into a slice of exactly its size.
//   - Fail closed. If the store stops acknowledging, or a frame exceeds
//     [MaxFrame] (it could not be one event), the server is killed and
//     nothing further is relayed.
//
// With a policy ([WrapConfig.Policy]) every tools/call is decided before
// its frame may be relayed, and a frame that names tools/call but cannot
// be read as a call ([Call.Unreadable]) is refused, since no rule can
// decide it; a refused frame never reaches the server and
// the host gets the -32042 refusal frame once the outcomes are durable (a
// batch is refused whole). Approvals resolve through [ApprovalOp]s from
// another process; each decision is a signed decision line, and an approved
// call goes through exactly once. Without a policy every well-formed call is
// allowed and recorded with the pass-through policy_set_hash.
//
// With Confine set, the server runs through the sandbox helper, and its
// enforcement fact is signed into the open line before it may exec.
//
// # The gateway (aegis gateway)
//
// [Gateway] is an MCP server to the host and a client to each downstream
// (go-sdk on both sides; frames to and from the host are still recorded,
// byte for byte as they pass). It shows only what the active profile allows
// and records every tools/call, meta-tools included, as an intent before it
// is forwarded and an outcome before the answer returns; a hidden or
// unknown tool is recorded and refused, never forwarded. The request digest
// there is SHA-256 over {"name","arguments"} as decoded, since the SDK owns
// the framing. The active profile and the escalations are a fold
// (policy.ProfileState) of the profile events the gateway records; each
// change is checked, made durable, then applied.
package proxy
