package schemas

import (
	"fmt"
	"strconv"
	"time"
)

// Reasons and identities that the wrap relay writes into outcome lines. They
// are part of the record format: changing one changes what verifiers and
// rechecks read.
const (
	ReasonNotEvaluated   = "not evaluated"
	ReasonNotExecuted    = "not executed"
	ReasonPolicyBlocked  = "policy blocked before capability"
	ReasonChildExited    = "child exited before responding"
	ReasonClientClosed   = "client closed stdin; child did not answer within the shutdown grace"
	ReasonMalformedCall  = "tools/call without a string params.name"
	ReasonSiblingRefused = "not executed: sibling call in this batch was refused"
	ReasonAbandoned      = "session abandoned"
	MessageHostPanic     = "host panic during tool call"

	// UnknownToolID is the tool_id of a tools/call without a string
	// params.name.
	UnknownToolID = "<unknown>"

	// WrapGrantPrefix prefixes the call_id in the grant_id of a relayed call.
	WrapGrantPrefix = "wrap-passthrough-"
)

// The reasons of a call that the child did not answer because aegis
// stopped the child first (see [WrapCall.Stopped]): never "child exited
// before responding", which says the child ended on its own.
const (
	ReasonChildFrameTooLarge  = "child sent a frame larger than the 16 MiB frame limit; aegis stopped the child before it responded"
	ReasonClientFrameTooLarge = "client sent a frame larger than the 16 MiB frame limit; aegis stopped the child before it responded"
	ReasonRecordingFailed     = "recording failed; aegis stopped the child before it responded"
	ReasonStoppedBySignal     = "aegis was told to stop a second time; it killed the child before it responded"
)

// CallID returns the call_id of the n-th call of a writer ("call-<n>",
// counted from 1).
func CallID(n uint64) string { return "call-" + strconv.FormatUint(n, 10) }

// WrapCall identifies one tools/call that the relay records. PolicySetHash is
// the hash of the policy set that governed it, or
// [WrapPassthroughPolicySetHash] when none did.
type WrapCall struct {
	CallID        string
	ToolID        string
	RequestDigest string
	PolicySetHash string
}

// MalformedCall returns the WrapCall of a tools/call without a string
// params.name: its tool_id is [UnknownToolID] and its policy_set_hash is the
// pass-through hash even when a policy is loaded, because no rule was asked.
func MalformedCall(callID, requestDigest string) WrapCall {
	return WrapCall{
		CallID:        callID,
		ToolID:        UnknownToolID,
		RequestDigest: requestDigest,
		PolicySetHash: WrapPassthroughPolicySetHash,
	}
}

// Intent returns the intent payload of the call.
func (c WrapCall) Intent() Intent {
	return Intent{CallID: c.CallID, ToolID: c.ToolID, RequestDigest: c.RequestDigest}
}

// Seed returns the default-deny outcome that a call holds until something
// better is known: policy and capability denied "not evaluated", execution
// host_denied "not executed" and no decision axes.
func (c WrapCall) Seed() Outcome {
	return Outcome{
		CallID:        c.CallID,
		ToolID:        c.ToolID,
		RequestDigest: c.RequestDigest,
		PolicySetHash: c.PolicySetHash,
		Policy:        PolicyDenied(ReasonNotEvaluated),
		Capability:    CapabilityDenied(ReasonNotEvaluated),
		Execution:     ExecutionHostDenied(ReasonNotExecuted),
	}
}

// Answered returns the outcome of a call that was relayed and answered. The
// execution is success even when the server answered with a JSON-RPC error;
// responseDigest is SHA-256 of the server's response frame, wallMS the round
// trip through the relay, and peak_memory_bytes is 0 (not measured). A
// matched rule, if any, goes into DecisionAxes.MatchedRule afterwards.
func (c WrapCall) Answered(responseDigest string, wallMS uint64) Outcome {
	o := c.Seed()
	grantID := WrapGrantPrefix + c.CallID
	var peak uint64
	o.Policy = PolicyAllowed()
	o.Capability = CapabilityGranted(DenyAllGrant(c.ToolID, grantID))
	o.Execution = ExecutionSuccess()
	o.GrantID = grantID
	o.ResponseDigest = responseDigest
	o.WallMS = &wallMS
	o.PeakMemoryBytes = &peak
	return o
}

// ChildExited returns the outcome of a call whose server closed its stdout
// before answering.
func (c WrapCall) ChildExited() Outcome {
	o := c.Seed()
	o.Execution = ExecutionHostDenied(ReasonChildExited)
	return o
}

// Stopped returns the outcome of a call that the child did not answer
// because aegis stopped the child first; reason says why (one of
// [ReasonChildFrameTooLarge], [ReasonClientFrameTooLarge],
// [ReasonRecordingFailed], [ReasonStoppedBySignal]).
func (c WrapCall) Stopped(reason string) Outcome {
	o := c.Seed()
	o.Execution = ExecutionHostDenied(reason)
	return o
}

// ClientClosed returns the outcome of a call that the server did not answer
// within the shutdown grace after the client closed stdin.
func (c WrapCall) ClientClosed() Outcome {
	o := c.Seed()
	o.Execution = ExecutionHostDenied(ReasonClientClosed)
	return o
}

// Cancelled returns the outcome of a call that was relayed, then cancelled
// by the host (notifications/cancelled) after, and that the server never
// answered; wallMS is how long it was in flight. The server may have run
// it, so it is allowed and granted as an answered call is, and its
// execution is a trap that says what happened: it was relayed, so it is
// never host_denied or "not executed".
func (c WrapCall) Cancelled(after time.Duration, wallMS uint64) Outcome {
	o := c.Answered("", wallMS)
	o.ResponseDigest = ""
	o.Execution = ExecutionTrap(fmt.Sprintf("cancelled by the host at +%.1f s (notifications/cancelled); the server did not answer", after.Seconds()))
	return o
}

// Malformed returns the outcome of a tools/call without a string
// params.name (see [MalformedCall]); the relay still forwards it in record
// mode, but no rule was evaluated.
func (c WrapCall) Malformed() Outcome {
	o := c.Seed()
	o.Policy = PolicyDenied(ReasonMalformedCall)
	o.Capability = CapabilityDenied(ReasonMalformedCall)
	return o
}

// Refused returns the outcome of a call that a policy gate refused; p is the
// gate's denied, rate_limited or pending_approval verdict and matchedRule the
// id of the rule that decided it ("" when the default decided).
func (c WrapCall) Refused(p Policy, matchedRule string) Outcome {
	o := c.Seed()
	o.Policy = p
	o.Capability = CapabilityDenied(ReasonPolicyBlocked)
	o.DecisionAxes.MatchedRule = matchedRule
	return o
}

// SiblingRefused returns the outcome of a call that the policy allowed but
// that was not relayed because another call in its batch was refused.
func (c WrapCall) SiblingRefused() Outcome {
	o := c.Seed()
	o.Policy = PolicyAllowed()
	o.Execution = ExecutionHostDenied(ReasonSiblingRefused)
	return o
}

// Abandoned returns the outcome of a call whose session ended without
// completing it.
func (c WrapCall) Abandoned() Outcome {
	o := c.Seed()
	o.Execution = ExecutionHostDenied(ReasonAbandoned)
	return o
}
