package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Status values of the tagged objects in an outcome line.
const (
	StatusAllowed          = "allowed"
	StatusDenied           = "denied"
	StatusRateLimited      = "rate_limited"
	StatusPendingApproval  = "pending_approval"
	StatusGranted          = "granted"
	StatusSuccess          = "success"
	StatusTrap             = "trap"
	StatusResourceExceeded = "resource_exceeded"
	StatusHostDenied       = "host_denied"
)

// Verdict values of a decision line.
const (
	VerdictApproved = "approved"
	VerdictDenied   = "denied"
)

// Open is the payload of an open line. The chain writer fills the header,
// key_id and signature.
type Open struct {
	PublicKey       string `json:"public_key"`
	PrevSessionTail string `json:"prev_session_tail,omitempty"`
}

// FieldPrincipal is the member of an open and an intent line that names
// the session's principal (see [Principal]).
const FieldPrincipal = "principal"

// Line returns the open line without header position and signature.
func (o Open) Line() (Line, error) { return payloadLine(LineOpen, o) }

// Intent is the payload of an intent line: what a call is about to do,
// recorded before it runs. Intent lines are never signed.
//
// TraceParent, when set, is the host's W3C trace context for the call
// ([FieldTraceParent]); it is omitted otherwise, and the line is exactly
// as before.
type Intent struct {
	CallID        string `json:"call_id"`
	ToolID        string `json:"tool_id"`
	RequestDigest string `json:"request_digest"`
	// Principal, when not nil, is who made the call (a member schema v2
	// does not define, which its verifiers hash and chain like any other).
	Principal *Principal `json:"principal,omitempty"`
	// TraceParent, when not empty, is the host's W3C trace context of the
	// call (params._meta.traceparent), as it was sent.
	TraceParent string `json:"traceparent,omitempty"`
	// ProtocolVersion, when not empty, is the protocol version a
	// stateless host named in the call's own request (2026-07-28 and
	// later); a call of a session's host has none.
	ProtocolVersion string `json:"protocol_version,omitempty"`
}

// Line returns the intent line without header position.
func (i Intent) Line() (Line, error) {
	if l, ok := i.fastLine(); ok {
		return l, nil
	}
	return payloadLine(LineIntent, i)
}

// Outcome is the payload of an outcome line, the record of one call on
// whichever path it ended. Optional members are omitted when empty or nil;
// decision_axes is always present.
type Outcome struct {
	CallID          string       `json:"call_id"`
	ToolID          string       `json:"tool_id"`
	RequestDigest   string       `json:"request_digest"`
	PolicySetHash   string       `json:"policy_set_hash"`
	Policy          Policy       `json:"policy"`
	Capability      Capability   `json:"capability"`
	Execution       Execution    `json:"execution"`
	GrantID         string       `json:"grant_id,omitempty"`
	ResponseDigest  string       `json:"response_digest,omitempty"`
	WallMS          *uint64      `json:"wall_ms,omitempty"`
	PeakMemoryBytes *uint64      `json:"peak_memory_bytes,omitempty"`
	DecisionAxes    DecisionAxes `json:"decision_axes"`
}

// Line returns the outcome line without header position and signature.
func (o Outcome) Line() (Line, error) {
	l, ok, err := o.fastLine()
	if err != nil {
		return Line{}, err
	}
	if ok {
		return l, nil
	}
	return payloadLine(LineOutcome, o)
}

// Policy is the policy verdict of an outcome, tagged by Status: allowed;
// denied and rate_limited with Reason; pending_approval with ApprovalID.
// Members that do not belong to Status are not written.
type Policy struct {
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"`
}

// PolicyAllowed returns {"status":"allowed"}.
func PolicyAllowed() Policy { return Policy{Status: StatusAllowed} }

// PolicyDenied returns a denied policy verdict.
func PolicyDenied(reason string) Policy { return Policy{Status: StatusDenied, Reason: reason} }

// PolicyRateLimited returns a rate_limited policy verdict.
func PolicyRateLimited(reason string) Policy {
	return Policy{Status: StatusRateLimited, Reason: reason}
}

// PolicyPendingApproval returns a pending_approval policy verdict.
func PolicyPendingApproval(approvalID string) Policy {
	return Policy{Status: StatusPendingApproval, ApprovalID: approvalID}
}

// MarshalJSON writes exactly the members of p's status.
func (p Policy) MarshalJSON() ([]byte, error) {
	m := map[string]any{"status": p.Status}
	switch p.Status {
	case StatusAllowed:
	case StatusDenied, StatusRateLimited:
		m["reason"] = p.Reason
	case StatusPendingApproval:
		m["approval_id"] = p.ApprovalID
	default:
		return nil, fmt.Errorf("unknown policy status %q", p.Status)
	}
	return json.Marshal(m)
}

// Capability is the capability verdict of an outcome, tagged by Status:
// granted with Grant; denied with Reason and an optional DeniedCapability.
type Capability struct {
	Status           string `json:"status"`
	Grant            *Grant `json:"grant,omitempty"`
	Reason           string `json:"reason,omitempty"`
	DeniedCapability string `json:"denied_capability,omitempty"`
}

// CapabilityGranted returns a granted capability verdict.
func CapabilityGranted(g Grant) Capability { return Capability{Status: StatusGranted, Grant: &g} }

// CapabilityDenied returns a denied capability verdict.
func CapabilityDenied(reason string) Capability {
	return Capability{Status: StatusDenied, Reason: reason}
}

// MarshalJSON writes exactly the members of c's status.
func (c Capability) MarshalJSON() ([]byte, error) {
	m := map[string]any{"status": c.Status}
	switch c.Status {
	case StatusGranted:
		if c.Grant == nil {
			return nil, fmt.Errorf("granted capability without a grant")
		}
		m["grant"] = c.Grant
	case StatusDenied:
		m["reason"] = c.Reason
		if c.DeniedCapability != "" {
			m["denied_capability"] = c.DeniedCapability
		}
	default:
		return nil, fmt.Errorf("unknown capability status %q", c.Status)
	}
	return json.Marshal(m)
}

// Execution is what happened when the call ran, tagged by Status: success;
// trap with Message; resource_exceeded with Kind; host_denied with Reason.
type Execution struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// ExecutionSuccess returns {"status":"success"}.
func ExecutionSuccess() Execution { return Execution{Status: StatusSuccess} }

// ExecutionTrap returns a trap execution.
func ExecutionTrap(message string) Execution {
	return Execution{Status: StatusTrap, Message: message}
}

// ExecutionResourceExceeded returns a resource_exceeded execution.
func ExecutionResourceExceeded(kind string) Execution {
	return Execution{Status: StatusResourceExceeded, Kind: kind}
}

// ExecutionHostDenied returns a host_denied execution.
func ExecutionHostDenied(reason string) Execution {
	return Execution{Status: StatusHostDenied, Reason: reason}
}

// MarshalJSON writes exactly the members of e's status.
func (e Execution) MarshalJSON() ([]byte, error) {
	m := map[string]any{"status": e.Status}
	switch e.Status {
	case StatusSuccess:
	case StatusTrap:
		m["message"] = e.Message
	case StatusResourceExceeded:
		m["kind"] = e.Kind
	case StatusHostDenied:
		m["reason"] = e.Reason
	default:
		return nil, fmt.Errorf("unknown execution status %q", e.Status)
	}
	return json.Marshal(m)
}

// Grant is a capability grant (upstream CapabilityGrant).
type Grant struct {
	GrantID        string    `json:"grant_id"`
	ToolID         string    `json:"tool_id"`
	FS             *FSGrant  `json:"fs,omitempty"`
	Net            *NetGrant `json:"net,omitempty"`
	MaxMemoryBytes uint64    `json:"max_memory_bytes"`
	MaxWallMS      uint64    `json:"max_wall_ms"`
	MaxOutputBytes uint64    `json:"max_output_bytes"`
}

// DenyAllGrant returns the grant that allows nothing: no fs, no net and all
// three limits zero.
func DenyAllGrant(toolID, grantID string) Grant {
	return Grant{GrantID: grantID, ToolID: toolID}
}

// FSGrant lists paths a grant may read and write. Nil lists are written as [].
type FSGrant struct {
	ReadPaths  []string `json:"read_paths"`
	WritePaths []string `json:"write_paths"`
}

// MarshalJSON writes nil lists as empty arrays, never null.
func (g FSGrant) MarshalJSON() ([]byte, error) {
	type plain FSGrant
	p := plain(g)
	p.ReadPaths = nonNil(p.ReadPaths)
	p.WritePaths = nonNil(p.WritePaths)
	return json.Marshal(p)
}

// NetGrant lists the HTTP endpoints a grant may reach.
type NetGrant struct {
	HTTP []HTTPGrant `json:"http"`
}

// MarshalJSON writes a nil list as an empty array, never null.
func (g NetGrant) MarshalJSON() ([]byte, error) {
	type plain NetGrant
	p := plain(g)
	p.HTTP = nonNil(p.HTTP)
	return json.Marshal(p)
}

// HTTPGrant is one reachable host with its ports and methods.
type HTTPGrant struct {
	Host    string   `json:"host"`
	Ports   []uint16 `json:"ports"`
	Methods []string `json:"methods"`
}

// MarshalJSON writes nil lists as empty arrays, never null.
func (g HTTPGrant) MarshalJSON() ([]byte, error) {
	type plain HTTPGrant
	p := plain(g)
	p.Ports = nonNil(p.Ports)
	p.Methods = nonNil(p.Methods)
	return json.Marshal(p)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// DecisionAxes are the optional axes a decision was made on. Empty members
// are omitted; the object itself is always written, as {} when empty.
type DecisionAxes struct {
	Capability  string   `json:"capability,omitempty"`
	Role        string   `json:"role,omitempty"`
	Session     string   `json:"session,omitempty"`
	MatchedRule string   `json:"matched_rule,omitempty"`
	ApprovalRef string   `json:"approval_ref,omitempty"`
	FS          *FSAxis  `json:"fs,omitempty"`
	Net         *NetAxis `json:"net,omitempty"`
	// ToolPin is the digest the called tool is pinned to (tool pins,
	// docs/pins.md); empty when the tool has no pin.
	ToolPin string `json:"tool_pin,omitempty"`
}

// FSAxis is the filesystem path a decision was about.
type FSAxis struct {
	PathRaw       string `json:"path_raw"`
	PathCanonical string `json:"path_canonical"`
}

// NetAxis is the network endpoint a decision was about.
type NetAxis struct {
	Host string `json:"host"`
	Port uint16 `json:"port"`
}

// Decision is the payload of a decision line: a human verdict on an approval.
//
// ApproverKeyID, when set, is the key id of the approver whose signature
// the approval carried (a proxy run with an approvers file). It is a
// member that schema v2 does not name: the specification has verifiers
// ignore unknown members and still hash and sign over the whole line, so
// the line stays verifiable by any implementation, and the signature
// covers the member. Without an approvers file it is omitted and the
// line is exactly as before.
type Decision struct {
	ApprovalID    string          `json:"approval_id"`
	Verdict       ApprovalVerdict `json:"verdict"`
	ApproverKeyID string          `json:"approver_key_id,omitempty"`
	// Principal, when not nil, is who made the call the decision is about
	// (see [Principal]): an approval names whose call it let through.
	Principal *Principal `json:"principal,omitempty"`
}

// Line returns the decision line without header position and signature.
func (d Decision) Line() (Line, error) { return payloadLine(LineDecision, d) }

// ApprovalVerdict is tagged by Verdict: approved with Scope, denied with
// Reason.
type ApprovalVerdict struct {
	Verdict string         `json:"verdict"`
	Scope   *ApprovalScope `json:"scope,omitempty"`
	Reason  string         `json:"reason,omitempty"`
}

// ApprovalScope is what an approval allows.
type ApprovalScope struct {
	ToolID string    `json:"tool_id"`
	FS     *FSGrant  `json:"fs,omitempty"`
	Net    *NetGrant `json:"net,omitempty"`
}

// Approved returns an approved verdict with the given scope.
func Approved(scope ApprovalScope) ApprovalVerdict {
	return ApprovalVerdict{Verdict: VerdictApproved, Scope: &scope}
}

// Rejected returns a denied verdict.
func Rejected(reason string) ApprovalVerdict {
	return ApprovalVerdict{Verdict: VerdictDenied, Reason: reason}
}

// MarshalJSON writes exactly the members of v's verdict.
func (v ApprovalVerdict) MarshalJSON() ([]byte, error) {
	m := map[string]any{"verdict": v.Verdict}
	switch v.Verdict {
	case VerdictApproved:
		if v.Scope == nil {
			return nil, fmt.Errorf("approved verdict without a scope")
		}
		m["scope"] = v.Scope
	case VerdictDenied:
		m["reason"] = v.Reason
	default:
		return nil, fmt.Errorf("unknown approval verdict %q", v.Verdict)
	}
	return json.Marshal(m)
}

// CloseLine returns a close line without header position and signature; a
// close carries nothing but the header and the signature pair.
func CloseLine() Line { return NewLine(LineClose) }

// payloadLine turns a payload struct into a line with schema_version and
// line_type set.
//
// The payload is one of this package's own types, so its JSON has unique
// members and valid UTF-8; it is decoded with encoding/json directly instead
// of the strict token walk that untrusted input gets, and each number must
// still be a non-negative integer below 2^53. The line's canonical form is
// checked again when it is signed and hashed.
func payloadLine(lineType string, payload any) (Line, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Line{}, fmt.Errorf("%s line: %w", lineType, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return Line{}, fmt.Errorf("%s line: %w", lineType, err)
	}
	if err := trustedNumbers(m); err != nil {
		return Line{}, fmt.Errorf("%s line: %w", lineType, err)
	}
	m[FieldSchemaVersion] = uint64(AuditSchemaVersion)
	m[FieldLineType] = lineType
	return Line{m: m}, nil
}

// trustedNumbers replaces json.Number values in place with uint64, refusing
// anything outside the value space (and null).
func trustedNumbers(v any) error {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if n, ok := e.(json.Number); ok {
				u, err := strconv.ParseUint(string(n), 10, 64)
				if err != nil || u >= MaxInteger {
					return fmt.Errorf("%s: %w: %s", k, ErrValueSpace, n)
				}
				t[k] = u
				continue
			}
			if e == nil {
				return fmt.Errorf("%s: %w: null", k, ErrValueSpace)
			}
			if err := trustedNumbers(e); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range t {
			if n, ok := e.(json.Number); ok {
				u, err := strconv.ParseUint(string(n), 10, 64)
				if err != nil || u >= MaxInteger {
					return fmt.Errorf("[%d]: %w: %s", i, ErrValueSpace, n)
				}
				t[i] = u
				continue
			}
			if e == nil {
				return fmt.Errorf("[%d]: %w: null", i, ErrValueSpace)
			}
			if err := trustedNumbers(e); err != nil {
				return err
			}
		}
	}
	return nil
}
