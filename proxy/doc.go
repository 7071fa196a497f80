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
//     under either reading, is refused ([rpc.Call.Reused]): its answer could not
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
//     bound admits at least one frame of [MaxFrame], so a frame of any
//     size passes; the small frames of a normal session never reach them,
//     and checking costs a counter under a lock the path already holds.
//     A line is read into a slice of exactly its size.
//   - Fail closed. If the store stops acknowledging, or a frame exceeds
//     [MaxFrame] (it could not be one event), the server is killed and
//     nothing further is relayed. child.exited then says aegis ended it
//     (ended_by, reason, and an oversized frame's size as far as read);
//     server_exited_first is true only for a server that ended on its own.
//
// With a policy ([WrapConfig.Policy]) every tools/call is decided before
// its frame may be relayed, and a frame that names tools/call but cannot
// be read as a call ([rpc.Call.Unreadable]) is refused, since no rule can
// decide it; a refused frame never reaches the server and
// the host gets the -32042 refusal frame once the outcomes are durable (a
// batch is refused whole). The frame keeps upstream's members and order;
// data.aegis holds, keys sorted and in RFC 8785 form, approval_id (for
// PENDING_APPROVAL only), code, hint (what to do, e.g. "run: aegis approve
// apr-gate-deploy-deploy-7.1"), layer and reason (why). Without a policy
// every well-formed call is allowed and recorded with the pass-through
// policy_set_hash.
//
// # Approvals
//
// Approvals resolve through [ApprovalOp]s from another process; each
// decision is a signed decision line. An approval grants one allowance: one
// call of its tool with the same canonical arguments, before the approval's
// expiry. Invariants, in wrap and in the gateway alike:
//
//   - One approval, one execution. The allowance is taken in the step that
//     decides the call, under the gate's lock, so calls decided together
//     (the calls of one batch, concurrent calls in the gateway) never share
//     one; the others are pending again, each with its own approval id.
//     When the frame of a call that took an allowance is then refused
//     whole (a sibling was refused), the call did not run, so the allowance
//     is given back, unchanged, for the next try. Hence an outcome cites an
//     approval (decision_axes.approval_ref) only for a call that was
//     relayed, and at most one outcome cites each approval.
//   - An allowance expires with its approval, judged by the injected clock
//     where it is used: at or after ExpiresAt the call is pending again
//     under a new approval id, and the lapse is recorded once, as an
//     approval.expired event with reason "approved, but not used before it
//     expired" (by whichever of the use and the expiry timer drops it).
//   - Approvers, when configured ([WrapConfig.Approvers],
//     [GatewayConfig.Approvers]), are the only ones who can approve: an
//     approve must carry an approver's Ed25519 signature over the
//     domain-separated claim of this approval (its id, this session, its
//     tool or [EscalationTarget], its args digest; see
//     schemas/approver.go), checked against the pending approval itself
//     under the gate's lock. One that does not is refused with the reason
//     and recorded as approval.refused, and the approval stays pending;
//     the decision line of one that does carries approver_key_id. A deny
//     is never required to be signed: it only fails closed. Without
//     approvers, any process that reaches the approval channel can
//     approve, as before.
//   - The approver sees what they approve: the stderr prompt and `aegis
//     approvals` show the tool, and the canonical JSON of the arguments cut
//     to [ArgsPreviewBytes] with their length and digest ([ShowArgs]); the
//     reply to an approve or deny carries the approval it resolved
//     ([ApprovalReply].Decided: session, tool, args digest), which `aegis
//     approve` prints. Every host-chosen text shown to the operator (tool,
//     approval id, arguments) goes through [projector.Printable], so no
//     control or format character reaches the terminal raw.
//   - An approval id never repeats within a state directory. Every approval
//     of a session (a pending_approval rule's, a changed tool's re-pin
//     apr-pin-…, a gateway escalation's esc-…) takes the next number of
//     one counter, the session's [policy.ApprovalIDs], behind the session's
//     number in the state directory ([projector.Session.Seq]): ids end in
//     "-<session>.<n>", so an id printed by one session (an ended one, an
//     earlier run, another HTTP client of the same gateway) never names
//     another session's call, and its approve is refused there.
//   - An approval id is shell-safe: the names in it (rule, server, tool)
//     keep only [A-Za-z0-9._-] and 32 bytes each, whatever a server named
//     its tool, so the id is at most 128 bytes and `aegis approve ID`
//     takes it as printed. Every hint that gives a command to run (the
//     -32042 refusal, the gateway's refusals, the stderr prompts) quotes
//     what a shell would not take as it is.
//
// With Confine set, the server runs through the sandbox helper, and its
// enforcement fact is signed into the open line before it may exec.
//
// # Tool pins
//
// Every tools/list answer is read into the server's pins (pins.go states
// the invariants, pinread.go how a listing is read, gateway_pins.go the
// gateway's part): first sight pins a tool to the digest of its whole
// definition, a later difference, an added tool or a removed one is a
// tool.changed event, and, under a policy in wrap and always in the
// gateway, a call to a changed tool is refused (on_tool_change) until a
// human approves its new definition; the gateway also hides it. Listings
// are read through package reading, never a decoder or byte filter of
// their own: a definition that readers could take two ways, or a tool
// listed twice, is refused whatever on_tool_change says, and a listing
// that cannot be read one way holds every call to its server. Prompts,
// resource templates and (in wrap) the server's instructions are pinned
// the same way, by kind: the gateway hides and refuses what changed; wrap
// records it, and holds every call while the instructions changed.
// Wrap registers the host's tools/list requests where it registers every
// host request, from its own reading of the frame (Request.List), and
// reads the server's answers to them, matched as the host matches them
// (LooseID), in the line and where a stream reader joins lines, once it
// has decided to relay a frame and before the frame is written to the
// host (the bytes pass unchanged); an outcome carries its tool's pin in
// decision_axes.tool_pin.
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
// change is checked, made durable, then applied, one at a time. A human's
// decision on an escalation is one approval.resolved event that carries
// both the signed decision line and the profile event; a second approval
// of it is refused (approval.refused), while a denial of an approved
// escalation not yet applied revokes it. A human may approve whatever
// profile the agent is in by then; the approval stays bound to the profile
// it was requested from, checked when aegis.approval_status applies it, and
// an apply from another profile is refused without spending it. The
// default profile is recorded in session.opened, so the record names the
// active profile from the start.
//
// Prompts and resource templates are under the profile like tools (see
// gateway_prompts.go): hidden ones are absent from the lists and refused
// if asked for, and every prompts/get and resources/read has a durable
// call.verdict before it runs or is refused. Protocol-level refusals are
// the -32042 error of wrap, with data.aegis.layer "gateway"; no error
// reaches the host with code 0 (gateway_refusal.go, docs/ERRORS.md).
//
// Everything else a host and a server say to each other passes through
// the gateway with names namespaced and nothing else changed: sampling,
// elicitation and roots go from a server to the host session whose call
// they belong to; progress and cancellation go both ways; logging,
// resource subscriptions and completion are routed to the servers that
// serve them; a server's list_changed makes the gateway list it again and
// check the new list as at start. forward.go and relist.go state the
// invariants; docs/GATEWAY-PARITY.md has the table.
//
// The host is stdio (Stdin, Stdout) or a message connection
// (GatewayConfig.Host: one HTTP client's session of package httpfront).
// Both pass the same layers, value by value or message by message
// (gateway_hostconn.go): the record of every frame, the one reading of it
// (refusing an ambiguous frame), the cancel guard and the task layer; over HTTP, what a server sends during a call goes out
// with that call's context, so it reaches the client on the call's stream.
//
// The servers start at once but are initialized only after the host's
// initialize has been read, and are told the host's capabilities
// (gateway_hello.go). What the SDK cannot carry, tasks both ways, the
// gateway carries at the JSON-RPC level on the same pipes
// (gateway_tasks.go, gateway_hosttasks.go): a task-augmented tools/call is
// decided and recorded as every call is, a task's result is recorded
// before the host sees it, and a task id reaches only the peer that
// created it: the host knows a server's task by an id of the gateway's,
// mapped to that server and its own id (gateway_taskids.go), so two
// servers' equal task ids never meet. A frame filter (frames.go) shows
// the layers whole values, as the SDK's continuous JSON decoder reads them
// (a value split over lines once, whole), so the SDK and the task layer
// never both answer one request.
//
// The gateway reads each host and server frame once (gateway_read.go): the
// cancel guard, the task layer, the plain-call path and the host's
// capabilities decide on that one reading (package reading), by exact
// member names as the SDK reads them and with ids keyed as the SDK keys
// them; none of them keeps a byte pre-filter or a decoder of its own. A
// host frame that JSON readers could read differently (a member given
// twice; "Method", "Task" or another deciding member in another case; a
// number beyond the double range or an integer beyond 2^53; nesting deeper
// than 256; NaN, lone surrogates, invalid UTF-8, a byte order mark; two
// values on one line; JSON followed by what is not) is refused before any
// layer or the SDK reads it: a request whose id reads alike to every
// reader is answered -32600, anything else dropped; each is recorded as
// frame.dropped, and a tools/call among them as a call refused (intent and
// outcome, "ambiguous tools/call"). A server's ambiguous frame is refused
// where the task layer would act on it (an answer to the gateway's own
// request fails that request, a status is dropped), and recorded; others
// pass to the SDK and the pins, which read them as they do. A host frame
// that is no JSON at all passes to the SDK, and no layer takes it.
//
// Each server runs with the environment [ServerEnv] builds (a minimal base,
// its env and its env_passthrough; never aegis's whole environment, and no
// value in the record). A server that fails to start is skipped and
// recorded; with none left the gateway refuses to start ([NoServerError]).
// When the host leaves, the calls in flight finish or are cancelled, each
// with a truthful outcome, and then every server is stopped: stdin closed,
// grace, SIGTERM, grace, SIGKILL (see [DefaultGatewayGrace]).
//
// A remote server ([RemoteServer], a url: server) runs no process: it is a
// go-sdk client session over streamable HTTP or legacy SSE, behind an HTTP
// client that verifies TLS, adds the file's headers to requests to the
// server's origin only and follows no redirect (gateway_remote.go,
// gateway_remote_http.go). It is namespaced, profiled, pinned, recorded and
// refused as a local server is; its connection states are server.connection
// events, never with a header value or the url's query; a session that ends
// mid-run is recorded and its calls are refused; tasks are not carried to
// it (gateway_remote_conn.go states the invariants).
//
// # Where things are
//
// Below this package, and imported by it, never the other way: package
// reading (the one reading of JSON, ambiguity marked) and package rpc (the
// one reading of a JSON-RPC frame: calls, answers, requests, ids exact and
// loose, stream continuation). Beside it: package httpfront (the
// streamable HTTP front, which imports nothing of aegis; cmd/aegis puts it
// before the gateway). Test fixtures: package mcptest.
//
// The relay: wrap.go ([Wrap], the relay and how it reads lines),
// wrap_steps.go (the steps of [Wrap]), wrap_host.go (a host frame read,
// recorded, decided and relayed or refused), wrap_answers.go (a server
// frame and the calls it answers), wrap_out.go (the two paths out and
// their bounds), wrap_server.go (how the server ends), wrap_approvals.go,
// wrap_errors.go. Shared by the
// relay and the gateway: gate.go (decisions, approvals, allowances),
// pins.go and pinread.go (the pin books and how listings are read). The
// gateway: gateway.go ([Gateway]), gateway_start.go (its start-up),
// gateway_read.go (its one reading of every host and server frame, and
// the refusal of ambiguous ones), gateway_calls.go (a call decided,
// recorded and forwarded), gateway_meta.go (the meta-tools and
// approvals), forward.go (requests between hosts and servers),
// gateway_cancel.go, gateway_resources.go, gateway_prompts.go,
// gateway_pins.go and relist.go, gateway_tasks*.go, gateway_taskids.go,
// gateway_downraw.go (the task layer and its raw server requests),
// gateway_hello.go, gateway_hostconn.go, gateway_hosttasks.go,
// gateway_lifecycle.go, gateway_remote*.go, gateway_env.go.
package proxy
