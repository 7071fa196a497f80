package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// GatewayCode is the stable, machine-readable code of a gateway refusal:
// the "code" member of its JSON payload (upstream aegiserr).
type GatewayCode string

// The gateway codes.
const (
	// GatewayCapDenied: a tools/call of a tool the active profile does not
	// allow.
	GatewayCapDenied GatewayCode = "AEGIS_CAP_DENIED"
	// GatewayResourceDenied: a resources/read of a URI the active profile
	// does not allow, or that the matcher refuses.
	GatewayResourceDenied GatewayCode = "AEGIS_RESOURCE_DENIED"
	// GatewayPromptDenied: a prompts/get of a prompt the active profile
	// does not allow (new here: upstream has no prompts).
	GatewayPromptDenied GatewayCode = "AEGIS_PROMPT_DENIED"
	// GatewayProfileUnknown: set_profile to a profile that does not exist.
	GatewayProfileUnknown GatewayCode = "AEGIS_PROFILE_UNKNOWN"
	// GatewayPendingApproval: set_profile along no edge; a human must
	// approve, and the profile is unchanged until then.
	GatewayPendingApproval GatewayCode = "AEGIS_PENDING_APPROVAL"
)

// The hints of the payloads, exactly as upstream.
const (
	hintCapDenied       = "capability requires a profile that allows it"
	hintResourceDenied  = "resource not permitted in active profile"
	hintPromptDenied    = "prompt requires a profile that allows it"
	hintProfileUnknown  = "no such profile"
	hintPendingApproval = "human approval requested; re-issue set_profile or poll aegis.approval_status"
)

// GatewayError is a refusal of the gateway, to be shown to the agent. Its
// JSON form (MarshalJSON) is upstream's payload, member for member and in
// the same (sorted) order:
//
//	AEGIS_CAP_DENIED        {"active_profile","capability","code","hint"[,"required_profile"]}
//	AEGIS_RESOURCE_DENIED   {"active_profile","code","hint","uri"}
//	AEGIS_PROMPT_DENIED     {"active_profile","code","hint","prompt"[,"required_profile"]}
//	AEGIS_PROFILE_UNKNOWN   {"code","hint","requested_profile"}
//	AEGIS_PENDING_APPROVAL  {"active_profile","approval_id","code","hint","requested_profile"}
//
// Every member of a code is present even when empty; no other member ever
// is. RequiredProfile appears only in a verbose CAP_DENIED or
// PROMPT_DENIED that some profile would grant. Build one with
// [Gateway.CapDenied], [Gateway.ResourceDenied], [Gateway.PromptDenied],
// [ProfileUnknownError] or [PendingApprovalError].
type GatewayError struct {
	Code             GatewayCode
	Capability       string // CAP_DENIED: "<server>.<tool>"
	URI              string // RESOURCE_DENIED: the URI as asked
	Prompt           string // PROMPT_DENIED: "<server>.<prompt>"
	ActiveProfile    string // CAP_DENIED, RESOURCE_DENIED, PENDING_APPROVAL
	RequestedProfile string // PROFILE_UNKNOWN, PENDING_APPROVAL
	ApprovalID       string // PENDING_APPROVAL
	RequiredProfile  string // CAP_DENIED, PROMPT_DENIED, verbose only, "" when none
}

// Hint returns the payload's hint for e's code.
func (e *GatewayError) Hint() string {
	switch e.Code {
	case GatewayCapDenied:
		return hintCapDenied
	case GatewayResourceDenied:
		return hintResourceDenied
	case GatewayPromptDenied:
		return hintPromptDenied
	case GatewayProfileUnknown:
		return hintProfileUnknown
	case GatewayPendingApproval:
		return hintPendingApproval
	}
	return ""
}

// Error returns a one-line summary for logs; the agent gets the JSON.
func (e *GatewayError) Error() string {
	switch e.Code {
	case GatewayCapDenied:
		return fmt.Sprintf("%s: %q not allowed in profile %q", e.Code, e.Capability, e.ActiveProfile)
	case GatewayResourceDenied:
		return fmt.Sprintf("%s: %q not permitted in profile %q", e.Code, e.URI, e.ActiveProfile)
	case GatewayPromptDenied:
		return fmt.Sprintf("%s: prompt %q not allowed in profile %q", e.Code, e.Prompt, e.ActiveProfile)
	case GatewayProfileUnknown:
		return fmt.Sprintf("%s: no profile %q", e.Code, e.RequestedProfile)
	case GatewayPendingApproval:
		return fmt.Sprintf("%s: switch from %q to %q awaits approval %s", e.Code, e.ActiveProfile, e.RequestedProfile, e.ApprovalID)
	}
	return string(e.Code)
}

// MarshalJSON writes the payload of e's code (see [GatewayError]), keys
// sorted, without HTML escaping.
func (e *GatewayError) MarshalJSON() ([]byte, error) {
	type member struct{ k, v string }
	var ms []member
	switch e.Code {
	case GatewayCapDenied:
		ms = []member{{"active_profile", e.ActiveProfile}, {"capability", e.Capability}, {"code", string(e.Code)}, {"hint", hintCapDenied}}
		if e.RequiredProfile != "" {
			ms = append(ms, member{"required_profile", e.RequiredProfile})
		}
	case GatewayResourceDenied:
		ms = []member{{"active_profile", e.ActiveProfile}, {"code", string(e.Code)}, {"hint", hintResourceDenied}, {"uri", e.URI}}
	case GatewayPromptDenied:
		ms = []member{{"active_profile", e.ActiveProfile}, {"code", string(e.Code)}, {"hint", hintPromptDenied}, {"prompt", e.Prompt}}
		if e.RequiredProfile != "" {
			ms = append(ms, member{"required_profile", e.RequiredProfile})
		}
	case GatewayProfileUnknown:
		ms = []member{{"code", string(e.Code)}, {"hint", hintProfileUnknown}, {"requested_profile", e.RequestedProfile}}
	case GatewayPendingApproval:
		ms = []member{{"active_profile", e.ActiveProfile}, {"approval_id", e.ApprovalID}, {"code", string(e.Code)}, {"hint", hintPendingApproval}, {"requested_profile", e.RequestedProfile}}
	default:
		return nil, fmt.Errorf("gateway error with unknown code %q", e.Code)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	str := func(s string) error {
		if err := enc.Encode(s); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		return nil
	}
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := str(m.k); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := str(m.v); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// JSON returns the payload as a string, the text an agent is shown.
func (e *GatewayError) JSON() string {
	b, err := e.MarshalJSON()
	if err != nil {
		return ""
	}
	return string(b)
}

// CapDenied returns the AEGIS_CAP_DENIED refusal of tool on server in the
// active profile. Under verbose disclosure it names [Gateway.RequiredProfile]
// when some profile grants the capability; under minimal it never does.
func (g *Gateway) CapDenied(active, server, tool string) *GatewayError {
	e := &GatewayError{Code: GatewayCapDenied, Capability: Capability(server, tool), ActiveProfile: active}
	if g.disclosure == DisclosureVerbose {
		e.RequiredProfile = g.RequiredProfile(active, server, tool)
	}
	return e
}

// ResourceDenied returns the AEGIS_RESOURCE_DENIED refusal of uri in the
// active profile. As upstream, it never names a profile, whatever the
// disclosure.
func (g *Gateway) ResourceDenied(active, uri string) *GatewayError {
	return &GatewayError{Code: GatewayResourceDenied, URI: uri, ActiveProfile: active}
}

// PromptDenied returns the AEGIS_PROMPT_DENIED refusal of prompt on
// server in the active profile. Under verbose disclosure it names
// [Gateway.RequiredPromptProfile] when some profile grants the prompt;
// under minimal it never does.
func (g *Gateway) PromptDenied(active, server, prompt string) *GatewayError {
	e := &GatewayError{Code: GatewayPromptDenied, Prompt: Capability(server, prompt), ActiveProfile: active}
	if g.disclosure == DisclosureVerbose {
		e.RequiredProfile = g.RequiredPromptProfile(active, server, prompt)
	}
	return e
}

// ProfileUnknownError returns the AEGIS_PROFILE_UNKNOWN refusal of a
// switch to requested.
func ProfileUnknownError(requested string) *GatewayError {
	return &GatewayError{Code: GatewayProfileUnknown, RequestedProfile: requested}
}

// PendingApprovalError returns the AEGIS_PENDING_APPROVAL answer to a
// switch from active to requested that waits for approval id.
func PendingApprovalError(id, active, requested string) *GatewayError {
	return &GatewayError{Code: GatewayPendingApproval, ApprovalID: id, ActiveProfile: active, RequestedProfile: requested}
}
