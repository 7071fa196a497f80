// Package relay is aegis wrap: it runs one MCP server and relays its
// stdio with the host, byte for byte, and makes every tool call
// accountable.
//
// # The recording relay
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
//     every pending call that any reading of it answers (case-folded as
//     encoding/json reads it, and the exact-name readings that keep the
//     first or the last duplicate), whichever parser the host uses.
//   - Nothing slips past the record. [rpc.Classify] reads a frame once, with
//     package reading (the plain envelope of a ping or an answer by a
//     quick scan that FuzzClassify holds to the same result), and decides
//     on that reading only; the gate's conditions and the approval digest
//     read a call's arguments with the same reader. It reads a frame the
//     way any plausible server parser might: complete JSON values are classified
//     even when a line holds several, and any frame that names tools/call
//     in any spelling without being a followable request becomes a
//     malformed call, which gets an intent and a denied outcome before the
//     frame is relayed (it is the server's to answer). A call whose
//     deciding members appear twice or in another case, or whose method or
//     tool name is a string readers decode differently (a lone surrogate,
//     invalid UTF-8), is ambiguous: no reading can say which call the
//     server would run, so the relay refuses its frame, in every mode,
//     instead of relaying it. Arguments readers take differently are left
//     to the conditions, which refuse to read them, and to the approval
//     digest, which then covers their exact bytes.
//   - Frames are read as streams too. A server may decode its stdin as one
//     continuous JSON stream (the go-sdk's stdio transport does), joining a
//     value across '\n'. The relay follows each direction's relayed bytes
//     (rpc.Stream): under a policy a host frame that leaves a value
//     unfinished is refused as unreadable, so nothing unfinished ever
//     reaches the server; without one, a value that a later frame completes
//     is read whole, and its calls are recorded before that frame is
//     relayed. rpc.Stream follows structure, not every rule of the
//     grammar, so a lenient reader may give up on a value where it does
//     not and start again at a later line; without a policy, every frame
//     that continues, without completing, a value naming tools/call is
//     therefore read as holding an unreadable call. FuzzHostStream holds
//     this to a stream reader that starts again after the line where a
//     value failed, over frame sequences. Server answers split across
//     lines are read the same way.
//   - Answers are matched as hosts match them. Every host request in flight
//     is tracked, whatever its method, by its exact id and by the number a
//     host that looks answers up by Number(id) takes it for ([rpc.LooseID]). An
//     answer closes every call that any reading of it matches, outcome
//     first; an answer that matches no request in flight (to a refused or
//     unsent id, or a second answer) is recorded, with a frame.dropped
//     event, and never relayed. A request that reuses the id of a
//     tools/call in flight, or a tools/call that reuses any id in flight,
//     under either reading, is refused ([rpc.Call].Reused): its answer could not
//     be told from the other's.
//   - What is read after relaying. Without a policy, a host frame that names
//     tools/call in no spelling, after a stream between values and with no
//     call in flight, holds no call (FuzzClassify) and can reuse no call's
//     id, so nothing its reading finds can change whether or how it is
//     relayed: it is recorded, relayed, and then read, so that a relayed
//     ping costs what it did before the relay read every frame. Its
//     requests are registered by whichever reader comes first, the host's
//     right after relaying it or the server's before it matches an answer,
//     so an answer that overtakes the reading is still matched. Everything
//     else, and every frame under a policy, is read before it is relayed.
//   - Every call gets exactly one outcome: answered; "child exited before
//     responding" (only when it ended on its own: when aegis stopped it,
//     the reason says so, and why); when the host left and the server
//     stayed silent through the grace, "client closed stdin; …"; or, for a
//     call the host cancelled (recorded as call.cancelled) and the server
//     never answered, a trap saying so. "not executed" is said only of a
//     call whose frame never reached the server, and of a malformed call
//     relayed without a policy, as the record format's wrap table fixes it.
//   - Bounded memory. A reader stops reading its side while what it read is
//     not yet on its way: the events store bounds the frames queued for a
//     commit (events.Config.MaxQueueBytes), and each direction bounds the
//     bytes of the frames waiting for their writer (maxQueuedBytes). Each
//     bound admits at least one frame of [proxy.MaxFrame], so a frame of any
//     size passes; the small frames of a normal session never reach them,
//     and checking costs a counter under a lock the path already holds.
//     A line is read into a slice of exactly its size.
//   - Fail closed. If the store stops acknowledging, or a frame exceeds
//     [proxy.MaxFrame] (it could not be one event), the server is killed and
//     nothing further is relayed. child.exited then says aegis ended it
//     (ended_by, reason, and an oversized frame's size as far as read);
//     server_exited_first is true only for a server that ended on its own.
//
// With a policy ([Config.Policy]) every tools/call is decided before
// its frame may be relayed, and a frame that names tools/call but cannot
// be read as a call ([rpc.Call].Unreadable) is refused, since no rule can
// decide it; a refused frame never reaches the server and
// the host gets the -32042 refusal frame once the outcomes are durable (a
// batch is refused whole). The frame keeps upstream's members and order;
// data.aegis holds, keys sorted and in RFC 8785 form, approval_id (for
// PENDING_APPROVAL only), code, hint (what to do, e.g. "run: aegis approve
// apr-gate-deploy-deploy-7.1"), layer and reason (why). Without a policy
// every well-formed call is allowed and recorded with the pass-through
// policy_set_hash.
//
// In-band approvals (approvals.go): only a host whose latest initialize
// declared capabilities.elicitation.url as an object, read the same by
// every reader ([rpc.Request].URLElicitation), and only while
// [Config.ApprovalLink] makes a link (an aegis console runs), gets a
// PENDING_APPROVAL refusal frame that also carries data.elicitations (a
// url-mode elicitation whose id is the approval id); every other host
// gets the frame above byte for byte. The decision, the approval and the
// record are the same either way. When such an approval is decided, the
// host is written notifications/elicitation/complete, recorded as
// frame.refusal and durable first, after the decision is; a denied one's
// retry with the same tool and arguments is refused as denied until the
// approval would have expired (proxy.Elicits).
//
// With Confine set, the server runs through the sandbox helper, and its
// enforcement fact is signed into the open line before it may exec.
//
// # Pins
//
// Wrap registers the host's tools/list requests where it registers every
// host request, from its own reading of the frame (Request.List), and
// reads the server's answers to them, matched as the host matches them
// (LooseID), in the line and where a stream reader joins lines, once it
// has decided to relay a frame and before the frame is written to the
// host (the bytes pass unchanged); an outcome carries its tool's pin in
// decision_axes.tool_pin.
//
// # Where things are
//
// wrap.go ([Wrap], the relay and how it reads lines), steps.go (the steps
// of [Wrap]), host.go (a host frame read, recorded, decided and relayed or
// refused), answers.go (a server frame and the calls it answers), out.go
// (the two paths out and their bounds), server.go (how the server ends),
// approvals.go (the approval channel), pins.go (the server's answers read
// into its pins), errors.go. The gate, approvals and pin books are
// package proxy's; the reading of frames is package rpc's.
package relay
