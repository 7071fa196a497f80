// Package policy is the pure decision core of aegis: it parses and validates
// the policy file, evaluates tools/call requests against its rules, and
// computes the policy set hash that the audit record carries.
//
// The package is pure. It does no file, network or process I/O (the caller
// reads the file and passes its bytes to [Parse]), reads no clock (time is a
// parameter of [Engine.Evaluate]) and draws no randomness; TestDeps enforces
// the imports.
//
// # File format
//
// A policy file is one YAML document (upstream-spec §2.2):
//
//	version: 1                 # optional; any other value is refused
//	default: deny              # allow | deny; optional, allow when omitted
//	on_tool_change: deny       # deny | pending_approval | allow; optional,
//	                           # pending_approval when omitted (toolchange.go)
//	rules:
//	  - id: deny-exec          # required, unique
//	    action: deny           # allow | deny | rate_limit | pending_approval
//	    tool: exec-runner      # optional: exact tool name; omitted or "*" = any
//	    capability: exec.command   # optional axis, exact or "*"
//	    role: "*"              # optional axis, exact or "*"
//	    priority: 10           # optional int32, default 0
//	    reason: exec is disabled here   # optional
//	  - id: rate-search
//	    action: rate_limit
//	    tool: search
//	    rate: {max: 100, per_seconds: 60}     # required on rate_limit, refused elsewhere
//	    limits: {max_wall_ms: 5000}           # allow and rate_limit only
//	  - id: gate-deploy
//	    action: pending_approval
//	    tool: deploy
//	    park: true             # pending_approval only; needs timeout_seconds
//	    timeout_seconds: 300   # only with park: true
//
// limits may set max_memory_bytes, max_wall_ms and max_output_bytes, at least
// one of them.
//
// # Strictness
//
// Parsing fails closed. Every problem is a *[ParseError] naming the file,
// the line and the key path (rules[1].rate; rule indexes count from 0).
// Refused:
//
//   - an empty file, a file of only comments, or a null document — an empty
//     policy is more likely a truncated write than an intent to allow
//     everything, so it is an error rather than "default allow, no rules";
//   - more than one YAML document, invalid YAML;
//   - unknown keys and duplicate keys, at any level; duplicate rule ids;
//   - a value of the wrong type: strings must be strings (quote a tool
//     named 123), integers must be plain decimals (no 0x1f, 0o17, 1_000,
//     +5, 007 or 1.0), booleans must be true or false, null is never a value;
//   - version other than 1; default other than allow or deny; an action
//     outside the four; a missing id or action; an empty id, axis or reason
//     ("" would silently mean something else); a control character in an id;
//   - rate on an action other than rate_limit, a rate_limit without rate,
//     rate.max or rate.per_seconds not in [1, 2^32-1];
//   - limits on deny or pending_approval, an empty limits, a limit not in
//     [1, 2^53-1] (it must fit an integer of the audit record);
//   - park or timeout_seconds on an action other than pending_approval,
//     park: true without timeout_seconds (a parked call must not wait
//     forever), timeout_seconds without park: true;
//   - YAML anchors, aliases and merge keys, so that the file is read as
//     written and every value has one line to point at.
//
// # Evaluation
//
// [Engine.Evaluate] follows upstream-spec §2.3. A rule matches a [Request]
// when each of its concrete axes (tool, capability, role) equals the
// request's field exactly; an axis the request leaves empty is not supplied,
// and a rule that names a concrete value for it never matches. If any
// matching rule is a deny, the best matching deny decides (deny-overrides:
// a deny on any tool beats a more specific allow). Otherwise the best
// matching non-deny rule decides; best is most concrete axes, then the
// higher priority, then the earlier rule in the file. No match falls back
// to the default. The reasons are exactly those of upstream: "no matching
// rule (default deny)", the rule's reason or "denied by rule `<id>`", and
// the rule's reason or "rate limit exceeded for `<id>` (<max> per
// <per_seconds>s)".
//
// rate_limit rules count calls in a fixed window per rule, tool and session
// (per rule and tool when the request has no session): a window opens at the
// first admitted call, admits while fewer than max calls were admitted, and
// is replaced at the first call at or after opened + per_seconds. Windows
// live in the Engine's memory and start empty; durable windows are a
// projection of the event stream, not this package's concern.
//
// pending_approval refuses with an approval id
// "apr-<rule_id>-<tool>-<session>.<n>" ([ApprovalIDs]): session is the
// session's number in its state directory, which no other session of the
// directory has, and n counts the session's approvals from 1, so an id
// never repeats within a state directory, across sessions and restarts
// (upstream's "apr-<rule_id>-<tool>-<n>" repeats in every session). The
// rule id and tool keep only [A-Za-z0-9._-] (any other character becomes
// '_') and at most 32 bytes each, so an id can be pasted into a shell
// unquoted whatever a server named its tool. An Engine made alone (aegis
// policy test, replays) has no session and writes "apr-<rule_id>-<tool>-<n>".
// park and timeout_seconds are parsed,
// validated, hashed and passed through in the [Decision]; holding the call
// is the caller's business.
//
// on_tool_change says what a session does with a tool whose definition
// changed since it was pinned ([ToolChange]; the gateway file takes it
// too). It is not a rule; the policy set hash covers it when it is deny
// or allow (pending_approval, the default, is omitted from the projection,
// so spelling it changes nothing).
//
// # Policy set hash
//
// [Set.Hash] is lowercase hex SHA-256 over the RFC 8785 canonical JSON of
// [Set.Projection], the projection that [schemas.PolicySet] defines. It is
// computed from the parsed rules, never from the YAML text: comments, layout
// and spelled-out defaults do not change it; rule order and every evaluated
// field do.
package policy
