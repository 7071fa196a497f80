package schemas

import (
	"fmt"
	"unicode/utf8"
)

// The relay builds an intent and an outcome line for every call. These
// builders make their members directly, without the JSON round trip of
// payloadLine; they fall back to it for anything unusual (fs or net grants,
// fs or net axes, strings that are not valid UTF-8, integers outside the
// value space), so both paths give the same line. A test holds them equal.

func (i Intent) fastLine() (Line, bool) {
	if !allUTF8(i.CallID, i.ToolID, i.RequestDigest, i.TraceParent, i.ProtocolVersion) {
		return Line{}, false
	}
	m := map[string]any{
		FieldSchemaVersion: uint64(AuditSchemaVersion),
		FieldLineType:      LineIntent,
		"call_id":          i.CallID,
		"tool_id":          i.ToolID,
		"request_digest":   i.RequestDigest,
	}
	if i.Principal != nil {
		m[FieldPrincipal] = i.Principal.Value()
	}
	if i.TraceParent != "" {
		m[FieldTraceParent] = i.TraceParent
	}
	if i.ProtocolVersion != "" {
		m["protocol_version"] = i.ProtocolVersion
	}
	return Line{m: m}, true
}

func (o Outcome) fastLine() (Line, bool, error) {
	if !allUTF8(o.CallID, o.ToolID, o.RequestDigest, o.PolicySetHash, o.GrantID, o.ResponseDigest,
		o.Policy.Status, o.Policy.Reason, o.Policy.ApprovalID,
		o.Capability.Status, o.Capability.Reason, o.Capability.DeniedCapability,
		o.Execution.Status, o.Execution.Message, o.Execution.Kind, o.Execution.Reason,
		o.DecisionAxes.Capability, o.DecisionAxes.Role, o.DecisionAxes.Session, o.DecisionAxes.MatchedRule, o.DecisionAxes.ApprovalRef, o.DecisionAxes.ToolPin) {
		return Line{}, false, nil
	}
	if o.DecisionAxes.FS != nil || o.DecisionAxes.Net != nil {
		return Line{}, false, nil
	}
	m := map[string]any{
		FieldSchemaVersion: uint64(AuditSchemaVersion),
		FieldLineType:      LineOutcome,
		"call_id":          o.CallID,
		"tool_id":          o.ToolID,
		"request_digest":   o.RequestDigest,
		"policy_set_hash":  o.PolicySetHash,
	}
	// policy
	p := map[string]any{"status": o.Policy.Status}
	switch o.Policy.Status {
	case StatusAllowed:
	case StatusDenied, StatusRateLimited:
		p["reason"] = o.Policy.Reason
	case StatusPendingApproval:
		p["approval_id"] = o.Policy.ApprovalID
	default:
		return Line{}, false, fmt.Errorf("unknown policy status %q", o.Policy.Status)
	}
	m["policy"] = p
	// capability
	c := map[string]any{"status": o.Capability.Status}
	switch o.Capability.Status {
	case StatusGranted:
		g := o.Capability.Grant
		if g == nil {
			return Line{}, false, fmt.Errorf("granted capability without a grant")
		}
		if g.FS != nil || g.Net != nil || !allUTF8(g.GrantID, g.ToolID) ||
			g.MaxMemoryBytes >= MaxInteger || g.MaxWallMS >= MaxInteger || g.MaxOutputBytes >= MaxInteger {
			return Line{}, false, nil
		}
		c["grant"] = map[string]any{
			"grant_id":         g.GrantID,
			"tool_id":          g.ToolID,
			"max_memory_bytes": g.MaxMemoryBytes,
			"max_wall_ms":      g.MaxWallMS,
			"max_output_bytes": g.MaxOutputBytes,
		}
	case StatusDenied:
		c["reason"] = o.Capability.Reason
		if o.Capability.DeniedCapability != "" {
			c["denied_capability"] = o.Capability.DeniedCapability
		}
	default:
		return Line{}, false, fmt.Errorf("unknown capability status %q", o.Capability.Status)
	}
	m["capability"] = c
	// execution
	e := map[string]any{"status": o.Execution.Status}
	switch o.Execution.Status {
	case StatusSuccess:
	case StatusTrap:
		e["message"] = o.Execution.Message
	case StatusResourceExceeded:
		e["kind"] = o.Execution.Kind
	case StatusHostDenied:
		e["reason"] = o.Execution.Reason
	default:
		return Line{}, false, fmt.Errorf("unknown execution status %q", o.Execution.Status)
	}
	m["execution"] = e
	if o.GrantID != "" {
		m["grant_id"] = o.GrantID
	}
	if o.ResponseDigest != "" {
		m["response_digest"] = o.ResponseDigest
	}
	if o.WallMS != nil {
		if *o.WallMS >= MaxInteger {
			return Line{}, false, nil
		}
		m["wall_ms"] = *o.WallMS
	}
	if o.PeakMemoryBytes != nil {
		if *o.PeakMemoryBytes >= MaxInteger {
			return Line{}, false, nil
		}
		m["peak_memory_bytes"] = *o.PeakMemoryBytes
	}
	ax := map[string]any{}
	for k, v := range map[string]string{
		"capability": o.DecisionAxes.Capability, "role": o.DecisionAxes.Role, "session": o.DecisionAxes.Session,
		"matched_rule": o.DecisionAxes.MatchedRule, "approval_ref": o.DecisionAxes.ApprovalRef,
		"tool_pin": o.DecisionAxes.ToolPin,
	} {
		if v != "" {
			ax[k] = v
		}
	}
	m["decision_axes"] = ax
	return Line{m: m}, true, nil
}

func allUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
