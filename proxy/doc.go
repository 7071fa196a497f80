// Package proxy holds what aegis's two ways of fronting MCP servers share:
// the recording relay (package relay, aegis wrap) and the gateway
// (package gateway, aegis gateway). That is the gate (a tools/call's
// decision, its approvals and their allowances: gate.go, approvals.go),
// the pin books (pins.go, pinread.go: how listings are read and what
// changed), the ids of host requests as hosts match them (ids.go), how a
// server process ended (server.go), and what the operator is shown of a
// call's arguments (show.go). It decides; it reads no wire and runs no
// process.
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
//   - Approvers, when configured (relay.Config.Approvers,
//     gateway.Config.Approvers), are the only ones who can approve: an
//     approve must carry an approver's Ed25519 signature over the
//     domain-separated claim of this approval (its id, this session, its
//     tool or gateway.EscalationTarget, its args digest; see
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
// # Tool pins
//
// Every tools/list answer is read into the server's pins (pins.go states
// the invariants, pinread.go how a listing is read; package gateway has
// the gateway's part, pins.go there): first sight pins a tool to the digest of its whole
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
//
// # Trace context
//
// A tools/call's params._meta.traceparent (MCP SEP-414) is read by the
// one reading of the frame (rpc.Call.TraceParent; the gateway from the
// request's _meta) and, when it is a well-formed version-00 context, kept
// in the call's intent line ([IntentOf]); a malformed one is not recorded.
// It is never taken out of the frame: wrap relays the frame byte for
// byte and the gateway passes the _meta on, so the server sees it as the
// host sent it. Exporting spans is not the relay's work: a fold of the
// stream does it, after the fact (cmd/aegis/telemetry).
//
// # State, and what is folded from events
//
// What outlives a process is a fold of the event stream, never state kept
// beside it: the pins (projector's index folds pin.* and tool.changed
// events; a session starts from [projector.Session.Pins]), the gateway's
// active profile and escalations (policy.ProfileState, the fold of the
// session's profile events, applied only once each event is durable), the
// approval ids (behind the session's number, [projector.Session.Seq]),
// and what `aegis approvals`, `replay` and the console show. What the
// relay and the gateway hold in memory belongs to one process's pipes: the
// calls and requests in flight, the listings being read, the task id map,
// the allowances of the gate. None of it can be resumed by another
// process (the server it was said to has gone with the process), so none
// of it is rebuilt: a session that ends with calls in flight records an
// outcome for each, and an approval pending in an ended session is
// refused by any other (its id names its session). Each of these holds
// its invariant under the one lock of its owner and is bounded (the
// limits are in the packages that hold them, each with a test at it).
//
// # Where things are
//
// Imports go one way, downwards:
//
//	cmd/aegis
//	  → proxy/httpfront   the streamable HTTP front; imports nothing of aegis
//	  → proxy/gateway     aegis gateway: aggregation, profiles, tasks, remote
//	                      servers, lifecycle, prompts, its pins
//	  → proxy/relay       aegis wrap: the byte-exact recording relay
//	      → proxy         this package: gate, approvals, pins
//	          → proxy/rpc      the one reading of a JSON-RPC frame
//	              → proxy/reading  the one reading of JSON, ambiguity marked
//
// relay and gateway never import each other; proxy imports neither, and
// rpc and reading import nothing of aegis. cmd/aegis puts the HTTP front
// before the gateway (a gateway.Config.Host per client session). Test
// fixtures: package mcptest. The tests of the whole proxy (wrap and the
// gateway side by side with a direct connection, through real hosts and
// servers) are this directory's external tests.
package proxy
