// Package httpfront serves the gateway to hosts over MCP's streamable HTTP
// transport: one [Front] is the http.Handler of 'aegis gateway --listen'.
//
// The HTTP framing is the go-sdk's [mcp.StreamableServerTransport]; this
// package only decides who may talk and which session a request belongs
// to, and hands each session's message connection to [Config.Serve] (the
// gateway, which records and decides every message as it does on stdio).
//
// # Invariants
//
//   - Every request is checked before anything of it is read or served, in
//     this order: the Host header (on a loopback listener it must name a
//     loopback host: DNS rebinding), the Origin header (absent, or the
//     listener's own origin, or one the configuration allows), then the
//     bearer token (constant-time comparison, or OAuth). A refusal is a 4xx with a
//     body that says what was refused and what to do; no session is made
//     or touched.
//   - Without a token, a Front serves only a loopback listener, and only
//     when the configuration says so explicitly ([Config.NoToken]).
//   - With [Config.OAuth] the token is an OAuth 2.1 access token (oauth.go),
//     checked on every request, after Host and Origin: 401 with
//     WWW-Authenticate naming the protected resource metadata (and
//     error="invalid_token" for a token that is bad, expired, another
//     issuer's or for another audience), 403 insufficient_scope naming
//     the scopes. A session serves the principal of its initialize;
//     a request of the session with another principal's token (issuer and
//     subject) is refused 403, whatever its session id. A token is never
//     logged, recorded nor put in an error; the principal it names
//     reaches [Config.Serve] ([Principal]; the package still imports nothing of aegis),
//     and so does the token itself, in memory only ([Session.Token]: the
//     newest one of the session's requests, "" once Serve returned), for
//     a gateway that exchanges it for a remote server's (RFC 8693).
//   - A session begins only with a POST whose body is a single initialize
//     request and that carries no Mcp-Session-Id (but for the stateless
//     requests of [Config.Stateless], stateless.go: their headers checked
//     against their body first, each principal's served on one session
//     of the front's, each request under an id of the front's (its
//     progress token too) and answered on its own POST, as an SSE stream
//     when it has progress to carry or is a subscriptions/listen, one
//     listen per stateless session at a time). Its id is 32 random
//     characters; every later request names it, and an unknown id is 404
//     (the client starts a new session, as the transport says).
//   - Each session is served by its own call of [Config.Serve], which owns
//     the session's connection until it returns; when Serve returns, the
//     session is gone. If Serve fails before it answered the initialize,
//     the client gets a JSON-RPC error that says why.
//   - A session ends when the client deletes it (DELETE), when it has been
//     idle (no request open) for [Config.IdleTimeout], when Serve returns,
//     or when the Front closes. [Front.Close] ends every session and waits
//     for their Serve calls.
//   - At most [Config.MaxSessions] sessions at once; more are refused with
//     503 and nothing is started.
//   - The transport's own checks are made as the go-sdk's
//     StreamableHTTPHandler makes them, with the same status for the same
//     request: a POST needs Content-Type application/json (415) and an
//     Accept that takes JSON and an event stream (400), before its session
//     is looked up; a GET needs an Accept that takes an event stream
//     (400); a JSON-RPC batch under protocol version 2025-06-18 or later
//     (MCP-Protocol-Version) is 400, since those versions have none.
//   - A DELETE frees its session's slot before it answers 204: a client
//     that deleted its session can begin another at once at the cap.
//     An ended session (deleted or evicted) whose Serve has not returned
//     yet (its servers are stopping) counts as winding down; at most
//     [Config.MaxSessions] wind down at once, and an initialize past that
//     waits up to 5 s for one to finish, then is refused with 503: no
//     client, by beginning and ending sessions in a loop, makes aegis run
//     more than twice MaxSessions sessions' servers.
//   - At [Config.MaxSessions] an initialize ends the session idle
//     longest; when every session has a request open it waits up to a
//     second for one to close (a client sees its answer a moment before
//     its request counts as closed), then is refused with 503.
//   - [Session.Ended] says why the front ended a session (deleted,
//     evicted to make room, idle, shutdown), set before its connection is
//     closed, so the session's close can record it.
//   - No client, with the token or without, decides how many descriptors
//     the process holds: a [Listener] holds at most [Limits.MaxConns]
//     connections at once, and [Limits.MaxConnsPerClient] from one IP
//     address; a connection past either is answered 503 saying which
//     limit it met once its request's headers are in (a second at most),
//     then closed; at most 64 are being answered at once, and past that
//     the oldest of them is closed unanswered. [Limits.Fit] keeps the
//     connections under the open file limit with a reserve for the
//     process and its sessions.
//   - A request's headers have [Limits.HeaderTimeout] to arrive and its
//     body [Limits.BodyTimeout]; the body's deadline is lifted once it is
//     read, so an answer that streams for long is never cut by it. A
//     kept-alive connection without a request is closed after
//     [Limits.ConnIdleTimeout].
//   - What a session keeps for a client that resumes a stream
//     (Last-Event-ID) is bounded: the streams still waiting for their
//     answer and the last [ReplayAnswered] answered ones, within
//     [ReplayBytes] (replay.go). A long session does not grow the
//     process; a resume of a stream no longer kept is refused (400).
package httpfront
