// Package gateway is aegis gateway: one MCP server to the host in front of
// many servers, their tools namespaced (server__tool), shown and decided
// under capability profiles, with human approval of escalations.
//
// [Run] is an MCP server to the host and a client to each downstream
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
// prompts.go): hidden ones are absent from the lists and refused
// if asked for, and every prompts/get and resources/read has a durable
// call.verdict before it runs or is refused. A profile's "<server>.*"
// resources entry grants a URI only for the one server that owns it (it
// lists it, or alone has templates matching it: soleOwner); a grant of one
// server never lets a read reach another. Protocol-level refusals are
// the -32042 error of wrap, with data.aegis.layer "gateway"; no error
// reaches the host with code 0 (refusal.go, docs/ERRORS.md).
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
// (Config.Host: one HTTP client's session of package httpfront).
// Both pass the same layers, value by value or message by message
// (hostconn.go): the record of every frame, the one reading of it
// (refusing an ambiguous frame), the cancel guard and the task layer; over HTTP, what a server sends during a call goes out
// with that call's context, so it reaches the client on the call's stream.
// A plain tools/call is answered by the task layer on both: from stdio
// taken out of the SDK's stream, from HTTP handed to the SDK's server as a
// request of the gateway's own method, without params, that the task
// layer answers under the SDK's context of the request (so the SDK keeps
// its stream and cancellation, and decodes nothing of it); a method the
// host itself cannot invoke.
//
// Toward the servers the gateway speaks the session protocol
// (2025-11-25), but toward a remote server over streamable HTTP with
// Config.HostProtocol "2026-07-28", which is asked for that version first
// (its input_required results answered through the gateway's handlers of
// a server's requests); toward the host, that and, with
// Config.HostProtocol "2026-07-28", the protocol without sessions
// (mrtr.go). A 2026-07-28
// host's tools/call is decided and recorded once, as every call is (its
// intent names the version), and runs on in the gateway across the host's
// requests: a server's sampling, elicitation or roots request during it
// becomes the call's input_required result, recorded before the host sees
// it, and the host's retry answers it only when its requestState (an
// HMAC of the call's key, round, tool and arguments under a per-process
// key) is the call's last one and its tool and arguments are the decided
// ones; any other retry is refused (-32042, MRTR_REFUSED) and recorded.
// A prompts/get or resources/read of such a host is served the same way
// once its verdict is recorded: a server's request during it is its
// input_required result, and the retry must be the same prompt with the
// same arguments, or the same URI, under its last requestState.
// A host's calls waiting on it are bounded (maxRounds); the per-request
// _meta of 2026-07-28 never reaches a server. A host of 2026-07-28
// that declares the tasks extension gets a server's 2025-11-25 task as
// the extension's task (exttasks.go): decided and recorded as every call,
// driven by the gateway, its server requests shown as the task's
// inputRequests and answered by tasks/update, recorded step by step.
//
// The servers start at once but are initialized only after the host's
// initialize has been read, and are told the host's capabilities
// (hello.go). What the SDK cannot carry, tasks both ways, the
// gateway carries at the JSON-RPC level on the same pipes
// (tasks.go, hosttasks.go): a task-augmented tools/call is
// decided and recorded as every call is, a task's result is recorded
// before the host sees it, and a task id reaches only the peer that
// created it: the host knows a server's task by an id of the gateway's,
// mapped to that server and its own id (taskids.go), so two
// servers' equal task ids never meet. A frame filter (frames.go) shows
// the layers whole values, as the SDK's continuous JSON decoder reads them
// (a value split over lines once, whole), so the SDK and the task layer
// never both answer one request.
//
// The gateway reads each host and server frame once (read.go): the
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
// grace, SIGTERM, grace, SIGKILL (see [DefaultGrace]). A stdio host's
// stdout is closed one grace after it left: nothing it no longer reads (a
// server's progress into a full pipe) can hold the gateway's end.
//
// A call that waits for a human is, toward a host that declared URL
// elicitation and while [Config.ApprovalLink] makes a link (an aegis
// console runs for the state directory), MCP's URLElicitationRequired
// error (-32042, data.elicitations with the link, data.aegis as always);
// the host is told notifications/elicitation/complete when the approval is
// decided, and a denied call's retry is refused as denied (elicit.go).
// Toward a 2026-07-28 host whose call's request declares URL elicitation
// the same elicitation is a round of the call (input_required, the
// requestState's MAC covering the approval id too); the accepting retry
// is held until the human decides, then the call is decided again (run
// once on the approval, or refused as denied), round and retry recorded.
// Every other host gets the refusal result unchanged. The host's
// instructions are the servers' own, each under its server's name and
// pinned (instructions.go).
//
// A remote server ([RemoteServer], a url: server) runs no process: it is a
// go-sdk client session over streamable HTTP or legacy SSE, behind an HTTP
// client that verifies TLS, adds the file's headers to requests to the
// server's origin only and follows no redirect (remote.go,
// remote_http.go). It is namespaced, profiled, pinned, recorded and
// refused as a local server is; its connection states are server.connection
// events, never with a header value or the url's query; a session that ends
// mid-run is recorded, connected again and listed again, and the calls made
// meanwhile wait for it or are refused; tasks are not carried to it
// (remote_conn.go states the invariants). With oauth: the gateway is an
// OAuth client of it: it sends, refreshes (with the RFC 8707 resource) and
// saves the token aegis auth login stored, age-encrypted, in the state
// directory, and a refused refresh refuses only that server's calls
// (oauth.go, oauth_store.go); a 403 insufficient_scope (step-up) runs the
// authorization again, for more scopes, through a host that shows URL
// elicitations, and is refused, naming the scopes, toward any other
// (stepup.go). With oauth: token_exchange: it reaches the
// server in each session with the session's caller token (held in memory
// only) exchanged for one for the server (RFC 8693), cached until shortly
// before it expires; a refused exchange refuses only that server in that
// session, and a session without a caller token never reaches it
// (exchange.go).
//
// # Where things are
//
// gateway.go ([Run], [Config]), start.go (start-up), elicit.go,
// instructions.go, read.go (the one
// reading of every host and server frame, and the refusal of ambiguous
// ones), calls.go (a call decided, recorded and forwarded), meta.go (the
// meta-tools and approvals), forward.go (requests between hosts and
// servers), cancel.go, resources.go, prompts.go, pins.go and relist.go,
// tasks.go, tasklist.go, taskids.go, downraw.go (the task layer and its
// raw server requests), frames.go (the frame filter), hello.go,
// hostconn.go, hosttasks.go, mrtr.go and exttasks.go (2026-07-28 toward
// the host),
// lifecycle.go, remote*.go, oauth*.go, env.go,
// refusal.go, taps.go. The gate, approvals and pin books are package
// proxy's; the reading of frames is package rpc's.
package gateway
