// Package console is the web face of aegis console: an HTTP server on
// loopback that shows the recorded sessions, one session's transcript,
// the pending approvals, the record files with their verify status and,
// for a fleet, the hosts of a hub with their mirrors' lag, live over
// server-sent events, and sends Approve and Deny. It holds no session or approval state of its own: every view
// comes from a [Source], which the command line implements with the same
// read model and the same approval requests as aegis sessions, replay,
// approvals, approve and deny.
//
// # Invariants
//
//   - Every asset is embedded (assets/); the page loads nothing from
//     anywhere else, and its Content-Security-Policy says so (self only,
//     no inline script, no framing).
//   - One login. [New] draws a random token; the login link carries it and
//     works exactly once: the first GET /login with it gets an HttpOnly,
//     SameSite=Strict session cookie, and every later use is refused (403)
//     even with the right token. Tokens and session ids are compared in
//     constant time.
//   - Every request but /login needs a live session cookie (else 401), and
//     every request, /login included, needs a Host header that names the
//     address the console listens on (else 403: a DNS-rebinding page has
//     the attacker's host name in Host).
//   - Every state-changing request (POST) also needs an Origin header equal
//     to the console's own origin and a JSON body (else 403), so that a
//     page of another site cannot post a form or a simple request to it.
//   - Approval links (links.go) are the one way in besides the login: a
//     link names one approval of one session under an HMAC of the
//     console's link key (drawn at start, never the login token), works
//     once and until the approval's expiry, and opens only that
//     approval's page, whose cookie is scoped to it and whose decision
//     names no approval of its own. Host, Origin and JSON are checked as
//     for every request.
//   - Host-chosen text (approval ids, tool names, arguments, transcript
//     lines) reaches the page as JSON strings already passed through
//     [projector.Printable], and the page sets it as text, never as HTML.
//   - One zone. Every time the page shows is in UTC, in one form
//     ([TimeLayout], 2006-01-02 15:04:05 UTC), whatever the zone of the
//     browser or of the machine: the state carries times in RFC 3339 UTC
//     and the page writes them with one function; notes that name a time
//     are written with [FormatTime]. A transcript is the text of aegis
//     replay, whose times are RFC 3339 UTC.
//   - A decision names the session and the approval id that the page
//     showed; the [Source] sends exactly the request aegis approve --session
//     or aegis deny --session sends. An approval of a fleet names its
//     host too, and the decision goes to that host over the hub.
//   - Records and the fleet are optional views: a Source that is a
//     [RecordSource] or a [FleetSource] adds a section, and the state of
//     one that is not says null there (the page then hides it). Their
//     methods answer at once from what the Source learnt in the
//     background (a record is verified whole, a fleet-wide question
//     waits seconds for its answers): the poll never waits for a
//     verification or for the hub.
//   - Live, not stored: while a page is open, the state is read from the
//     Source at once when the Source says something changed
//     (Config.Changed: the command line's Source follows the running
//     process's stream, woken as each message is stored), after a
//     decision, and every Config.Interval (for approvals that expire);
//     a new state is pushed to every open page when it differs. A
//     transcript stream is the Source's replay of one session, line by
//     line, following the stream while the session runs. Nothing is
//     cached on disk, and nothing survives the process.
package console
