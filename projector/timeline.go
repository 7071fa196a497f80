package projector

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// How a session ended, as [SessionIndex] and [Timeline.Finish] report it.
// Whether a session without a close line is still running is not in the
// stream: the caller decides it (a running session's process holds the
// state directory's lock) and passes it in.
const (
	StateClosed  = "closed"  // a session.closed event is in the stream
	StateKilled  = "killed"  // no close, and its process is gone
	StateRunning = "running" // no close yet; its process holds the store
	// StateUnclosed: no close in a copy of the stream read elsewhere (a
	// hub's mirror), where whether its process still runs is not known.
	StateUnclosed = "unclosed"
)

// Synthetic step kinds that [Timeline.Finish] adds after a session's last
// event. They are not event kinds.
const (
	StepInFlight = "in_flight" // a call with an intent and no outcome
	StepEnd      = "end"       // how the session ended
)

// NoProfile is the profile shown for a session that records none: a wrap,
// or a gateway session recorded before session.opened carried the default
// profile, until its first profile.switched event.
const NoProfile = "-"

// Step is one entry of a session transcript: one event, summarised, or a
// synthetic in_flight or end step. Its JSON form is what aegis replay
// --json prints, one object per line.
type Step struct {
	Session string          `json:"session"`
	Pos     events.Position `json:"pos"`
	Time    time.Time       `json:"time"`
	// OffsetMS is the time since the session's session.opened event.
	OffsetMS int64 `json:"offset_ms"`
	// Kind is the event kind, or StepInFlight or StepEnd.
	Kind string `json:"kind"`
	// Profile is the profile active at this step: the one session.opened
	// names (a gateway's default profile), then that of each
	// profile.switched event; NoProfile when the session records none.
	Profile string `json:"profile"`
	// Seq is the audit line's seq when the event carries one.
	Seq *uint64 `json:"seq,omitempty"`

	Opened      *OpenedInfo      `json:"opened,omitempty"`
	Frame       *FrameSummary    `json:"frame,omitempty"`
	Call        *CallInfo        `json:"call,omitempty"`
	Approval    *ApprovalInfo    `json:"approval,omitempty"`
	Confinement *ConfinementInfo `json:"confinement,omitempty"`
	Child       *ChildInfo       `json:"child,omitempty"`
	Skipped     *SkippedServer   `json:"skipped,omitempty"`
	End         *EndInfo         `json:"end,omitempty"`
	// Payload is the payload of an event the timeline has no summary for
	// (a note other than a skipped server, or a kind added later).
	Payload json.RawMessage `json:"payload,omitempty"`
}

// OpenedInfo summarises session.opened.
type OpenedInfo struct {
	PID       int      `json:"pid"`
	Argv      []string `json:"argv,omitempty"`
	Config    string   `json:"config,omitempty"`
	AuditPath string   `json:"audit_path,omitempty"`
	KeyID     string   `json:"key_id,omitempty"`
	Version   string   `json:"version,omitempty"`
	// Profile is the profile a gateway session starts in.
	Profile string `json:"profile,omitempty"`
	// Principal is who the session serves (a validated OAuth token).
	Principal *schemas.Principal `json:"principal,omitempty"`
}

// CallInfo is one tools/call at its intent, its outcome, or in flight.
// Outcome members are empty on an intent.
type CallInfo struct {
	CallID        string `json:"call_id"`
	Tool          string `json:"tool"`
	RequestDigest string `json:"request_digest,omitempty"`

	// Policy is the verdict: allowed, denied, rate_limited or
	// pending_approval; Reason says why (denied, rate_limited), ApprovalID
	// names the approval a pending call waits for.
	Policy      string `json:"policy,omitempty"`
	Reason      string `json:"reason,omitempty"`
	ApprovalID  string `json:"approval_id,omitempty"`
	MatchedRule string `json:"matched_rule,omitempty"`
	// ApprovalRef is the approval that let a pending_approval call through.
	ApprovalRef      string `json:"approval_ref,omitempty"`
	Capability       string `json:"capability,omitempty"`
	CapabilityReason string `json:"capability_reason,omitempty"`
	Execution        string `json:"execution,omitempty"`
	// ExecutionReason is the execution's reason, message or kind.
	ExecutionReason string  `json:"execution_reason,omitempty"`
	WallMS          *uint64 `json:"wall_ms,omitempty"`
	ResponseDigest  string  `json:"response_digest,omitempty"`
	// Refused is set when aegis kept the call from the server (a policy
	// refusal, or a sibling of one in a batch).
	Refused bool `json:"refused,omitempty"`

	// IntentAt and IntentPos say when the call's intent was recorded; set
	// on in_flight steps.
	IntentAt  *time.Time       `json:"intent_at,omitempty"`
	IntentPos *events.Position `json:"intent_pos,omitempty"`
}

// ApprovalInfo is one approval event: requested, approved, denied,
// expired, refused (a request that could not be honoured) or duplicate (a
// resolution that changes nothing: the same verdict again, as streams of
// older gateways hold for every escalation decision, or an approval after
// a denial). A denial after an approval is a revocation (Revoked), which
// the gateway allows until the switch is applied.
type ApprovalInfo struct {
	ApprovalID string `json:"approval_id"`
	Event      string `json:"event"`
	// Tool is what a call's approval is for; From and To the profiles of
	// a gateway's profile switch (an escalation).
	Tool       string     `json:"tool,omitempty"`
	From       string     `json:"from,omitempty"`
	To         string     `json:"to,omitempty"`
	ArgsDigest string     `json:"args_digest,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	// By is who asked: aegis approve's "user@host, pid N".
	By string `json:"by,omitempty"`
	// ApproverKeyID is the key id of the approver whose signature an
	// approval carried (a proxy run with --approvers), or that a refused
	// request was signed with; Approver is that approver's name in the
	// approvers file.
	ApproverKeyID string `json:"approver_key_id,omitempty"`
	Approver      string `json:"approver,omitempty"`
	// Op is the operation (approve or deny) of a refused request or of a
	// duplicate resolution.
	Op     string `json:"op,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Revoked marks a denial of an approval that was approved.
	Revoked bool `json:"revoked,omitempty"`
}

// Approval events as [ApprovalInfo].Event names them.
const (
	ApprovalEventRequested = "requested"
	ApprovalEventApproved  = "approved"
	ApprovalEventDenied    = "denied"
	ApprovalEventExpired   = "expired"
	ApprovalEventRefused   = "refused"
	ApprovalEventDuplicate = "duplicate"
)

// ConfinementInfo summarises a confinement.applied fact; Fact is the fact
// as recorded.
type ConfinementInfo struct {
	Refused         string          `json:"refused,omitempty"`
	ExecPath        string          `json:"exec_path,omitempty"`
	LandlockABI     int             `json:"landlock_abi"`
	FullyEnforced   bool            `json:"landlock_fully_enforced"`
	TCPRestricted   bool            `json:"landlock_tcp_restricted"`
	FSRules         int             `json:"fs_rules"`
	NetRules        int             `json:"net_rules"`
	SeccompApplied  bool            `json:"seccomp_applied"`
	NetworkDenied   bool            `json:"seccomp_network_denied"`
	NoNewPrivs      bool            `json:"no_new_privs"`
	Protected       int             `json:"protected_paths"`
	ProtectVerified bool            `json:"protected_verified"`
	Degradations    []string        `json:"degradations,omitempty"`
	Fact            json.RawMessage `json:"fact"`
}

// ChildInfo is child.started (Server, PID, Argv) or child.exited (Server,
// PID, Code, ServerExitedFirst, EndedBy, Reason). Server names a gateway's
// server; EndedBy says what ended it when the gateway stopped it ("stdin
// closed", "SIGTERM", "SIGKILL", or "exited before the shutdown") or when
// wrap did, and Reason why wrap did (e.g. a frame over the 16 MiB limit).
type ChildInfo struct {
	Server            string   `json:"server,omitempty"`
	PID               int      `json:"pid,omitempty"`
	Argv              []string `json:"argv,omitempty"`
	Code              *int     `json:"code,omitempty"`
	ServerExitedFirst bool     `json:"server_exited_first,omitempty"`
	EndedBy           string   `json:"ended_by,omitempty"`
	Reason            string   `json:"reason,omitempty"`
}

// SkippedServer is a gateway's server that could not be used: the note
// the gateway records ({"server", "skipped", "error"}) when a server fails
// to start (Stage "start"), to connect ("connect"), or to list its tools
// ("tools/list").
type SkippedServer struct {
	Server string `json:"server"`
	Stage  string `json:"stage"`
	Error  string `json:"error"`
}

// skippedOf reads a note that says a server was skipped; ok is false for
// any other note.
func skippedOf(payload []byte) (SkippedServer, bool) {
	var n struct {
		Server  string `json:"server"`
		Skipped string `json:"skipped"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(payload, &n) != nil || n.Server == "" || n.Skipped == "" {
		return SkippedServer{}, false
	}
	return SkippedServer{Server: n.Server, Stage: n.Skipped, Error: n.Error}, true
}

// EndInfo is the synthetic end step of a session that has no close line.
type EndInfo struct {
	State    string `json:"state"`
	InFlight int    `json:"in_flight"`
	PID      int    `json:"pid,omitempty"`
}

// Timeline folds events into transcript steps. It keeps only what later
// steps need (each session's start, active profile and calls in flight),
// never the steps themselves: [Timeline.Fold] returns each step, so a
// caller can print a session of any size as it goes. It is pure: time
// comes from the events.
type Timeline struct {
	only     string
	sessions map[string]*timelineSession
}

type timelineSession struct {
	opened   time.Time
	pid      int
	profile  string
	closed   bool
	inflight map[string]*CallInfo
	resolved resolutions
}

// NewTimeline returns a timeline of one session, or of every session when
// session is "".
func NewTimeline(session string) *Timeline {
	return &Timeline{only: session, sessions: map[string]*timelineSession{}}
}

// Fold folds one event and returns its step; ok is false for an event of
// another session, or of a session whose session.opened was never seen.
func (t *Timeline) Fold(rec events.Record) (Step, bool) {
	e := rec.Event
	if t.only != "" && e.Session != t.only {
		return Step{}, false
	}
	s := t.sessions[e.Session]
	if s == nil {
		if e.Kind != schemas.KindSessionOpened {
			return Step{}, false
		}
		s = &timelineSession{opened: e.Time, profile: NoProfile, inflight: map[string]*CallInfo{}, resolved: resolutions{}}
		t.sessions[e.Session] = s
	}
	st := Step{Session: e.Session, Pos: rec.Pos, Time: e.Time, OffsetMS: e.Time.Sub(s.opened).Milliseconds(), Kind: string(e.Kind)}
	switch e.Kind {
	case schemas.KindSessionOpened:
		var so openedPayload
		json.Unmarshal(e.Payload, &so)
		s.pid = so.PID
		if so.Profile != "" {
			s.profile = so.Profile
		}
		st.Opened = &OpenedInfo{PID: so.PID, Argv: so.Argv, Config: so.Config, AuditPath: so.AuditPath, KeyID: so.KeyID, Version: so.Version, Profile: so.Profile,
			Principal: so.Principal}
		st.Seq = lineSeq(so.Line)
	case schemas.KindFrameC2S, schemas.KindFrameS2C, schemas.KindFrameRefusal:
		f := SummarizeFrame(e.Kind, framePayloadBytes(e.Payload))
		st.Frame = &f
	case schemas.KindCallIntent, schemas.KindCallOutcome:
		ci, seq := decodeCallLine(callPayload(e.Payload))
		st.Call, st.Seq = &ci, seq
		if e.Kind == schemas.KindCallIntent {
			at, pos := e.Time, rec.Pos
			c := ci
			c.IntentAt, c.IntentPos = &at, &pos
			s.inflight[ci.CallID] = &c
		} else {
			delete(s.inflight, ci.CallID)
		}
	case schemas.KindApprovalRequested, schemas.KindApprovalResolved, schemas.KindApprovalExpired, schemas.KindApprovalRefused:
		a, seq := decodeApproval(e)
		if e.Kind == schemas.KindApprovalResolved {
			a = s.resolved.fold(a)
		}
		st.Approval, st.Seq = &a, seq
	case schemas.KindConfinementApplied:
		c := decodeConfinement(e.Payload)
		st.Confinement = &c
	case schemas.KindChildStarted, schemas.KindChildExited:
		var c childPayload
		json.Unmarshal(e.Payload, &c)
		st.Child = &ChildInfo{Server: c.Server, PID: c.PID, Argv: c.Argv, Code: c.Code, ServerExitedFirst: c.ServerExitedFirst, EndedBy: c.EndedBy, Reason: c.Reason}
	case schemas.KindProfileSwitched:
		if p := profileOf(e.Payload); p != "" {
			s.profile = p
		}
	case schemas.KindSessionClosed:
		st.Seq = lineSeq(lineOnly(e.Payload))
		s.closed = true
	case schemas.KindNote:
		if sk, ok := skippedOf(e.Payload); ok {
			st.Skipped = &sk
		} else {
			st.Payload = e.Payload
		}
	default:
		st.Payload = e.Payload
	}
	st.Profile = s.profile
	return st, true
}

// InFlight returns the calls of session that have an intent and no
// outcome, in the order of their intents.
func (t *Timeline) InFlight(session string) []CallInfo {
	s := t.sessions[session]
	if s == nil {
		return nil
	}
	out := make([]CallInfo, 0, len(s.inflight))
	for _, c := range s.inflight {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IntentPos.Less(*out[j].IntentPos) })
	return out
}

// Finish returns the steps that close a transcript after the session's
// last event: one in_flight step per call still in flight, then, unless
// the session closed, an end step with state (StateKilled or
// StateRunning), timed at the last event. A closed session gets no end
// step: its session.closed step says it.
func (t *Timeline) Finish(session, state string, last events.Record) []Step {
	s := t.sessions[session]
	if s == nil {
		return nil
	}
	var out []Step
	base := Step{Session: session, Pos: last.Pos, Time: last.Event.Time, OffsetMS: last.Event.Time.Sub(s.opened).Milliseconds(), Profile: s.profile}
	fl := t.InFlight(session)
	for i := range fl {
		st := base
		st.Kind = StepInFlight
		st.Call = &fl[i]
		out = append(out, st)
	}
	if !s.closed && state != StateClosed {
		st := base
		st.Kind = StepEnd
		st.End = &EndInfo{State: state, InFlight: len(fl), PID: s.pid}
		out = append(out, st)
	}
	return out
}

// openedPayload is session.opened as the timeline reads it: Config is the
// gateway configuration a gateway session records instead of argv.
type openedPayload struct {
	SessionOpened
	Config string `json:"config"`
}

type childPayload struct {
	Server            string   `json:"server"`
	EndedBy           string   `json:"ended_by"`
	Reason            string   `json:"reason"`
	PID               int      `json:"pid"`
	Argv              []string `json:"argv"`
	Code              *int     `json:"code"`
	ServerExitedFirst bool     `json:"server_exited_first"`
}

// profileOf reads profile.switched's "profile" member.
func profileOf(p json.RawMessage) string {
	var v struct {
		Profile string `json:"profile"`
	}
	json.Unmarshal(p, &v)
	return v.Profile
}

// auditLine is the part of an audit line the projections read.
type auditLine struct {
	Seq           *uint64 `json:"seq"`
	LineType      string  `json:"line_type"`
	CallID        string  `json:"call_id"`
	ToolID        string  `json:"tool_id"`
	RequestDigest string  `json:"request_digest"`
	TraceParent   string  `json:"traceparent"`
	Policy        struct {
		Status     string `json:"status"`
		Reason     string `json:"reason"`
		ApprovalID string `json:"approval_id"`
	} `json:"policy"`
	Capability struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"capability"`
	Execution struct {
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Kind    string `json:"kind"`
	} `json:"execution"`
	ResponseDigest string  `json:"response_digest"`
	WallMS         *uint64 `json:"wall_ms"`
	DecisionAxes   struct {
		MatchedRule string `json:"matched_rule"`
		ApprovalRef string `json:"approval_ref"`
	} `json:"decision_axes"`
	// decision lines
	ApprovalID string `json:"approval_id"`
	Verdict    struct {
		Verdict string `json:"verdict"`
		Reason  string `json:"reason"`
	} `json:"verdict"`
}

func lineSeq(line string) *uint64 {
	if line == "" {
		return nil
	}
	return parseAuditLine(line).Seq
}

// decodeCallLine reads an intent or outcome event.
func decodeCallLine(cp CallPayload) (CallInfo, *uint64) {
	l := parseAuditLine(cp.Line)
	ci := CallInfo{CallID: cp.CallID, Tool: cp.ToolID, RequestDigest: l.RequestDigest}
	if ci.CallID == "" {
		ci.CallID = l.CallID
	}
	if ci.Tool == "" {
		ci.Tool = l.ToolID
	}
	if l.LineType == schemas.LineOutcome {
		ci.Policy, ci.Reason, ci.ApprovalID = l.Policy.Status, l.Policy.Reason, l.Policy.ApprovalID
		ci.MatchedRule, ci.ApprovalRef = l.DecisionAxes.MatchedRule, l.DecisionAxes.ApprovalRef
		ci.Capability, ci.CapabilityReason = l.Capability.Status, l.Capability.Reason
		ci.Execution = l.Execution.Status
		ci.ExecutionReason = firstNonEmpty(l.Execution.Reason, l.Execution.Message, l.Execution.Kind)
		ci.WallMS, ci.ResponseDigest = l.WallMS, l.ResponseDigest
		ci.Refused = refused(&l)
	}
	return ci, l.Seq
}

// refused reports whether an outcome line records a call that aegis kept
// from the server: blocked by policy, or refused with a refused sibling.
func refused(l *auditLine) bool {
	return (l.Capability.Status == schemas.StatusDenied && l.Capability.Reason == schemas.ReasonPolicyBlocked) ||
		(l.Execution.Status == schemas.StatusHostDenied && l.Execution.Reason == schemas.ReasonSiblingRefused)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// approvalPayload is the union of the approval events' payloads. A
// gateway's escalation events carry From and To and the profile event
// (profile_event) they record.
type approvalPayload struct {
	Line          string     `json:"line"`
	ApprovalID    string     `json:"approval_id"`
	ToolID        string     `json:"tool_id"`
	RequestDigest string     `json:"request_digest"`
	ArgsDigest    string     `json:"args_digest"`
	RequestedAt   *time.Time `json:"requested_at"`
	ExpiresAt     *time.Time `json:"expires_at"`
	Op            string     `json:"op"`
	By            string     `json:"by"`
	ApproverKeyID string     `json:"approver_key_id"`
	Approver      string     `json:"approver"`
	Reason        string     `json:"reason"`
	From          string     `json:"from"`
	To            string     `json:"to"`
	ProfileEvent  *struct {
		Kind string `json:"kind"`
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"profile_event"`
}

func decodeApproval(e schemas.Event) (ApprovalInfo, *uint64) {
	var p approvalPayload
	json.Unmarshal(e.Payload, &p)
	a := ApprovalInfo{ApprovalID: p.ApprovalID, Tool: p.ToolID, From: p.From, To: p.To, By: p.By, ApproverKeyID: p.ApproverKeyID, Approver: p.Approver}
	if pe := p.ProfileEvent; pe != nil && a.From == "" && a.To == "" {
		a.From, a.To = pe.From, pe.To
	}
	var seq *uint64
	switch e.Kind {
	case schemas.KindApprovalRequested:
		a.Event, a.ArgsDigest, a.ExpiresAt = ApprovalEventRequested, p.ArgsDigest, p.ExpiresAt
	case schemas.KindApprovalExpired:
		a.Event = ApprovalEventExpired
	case schemas.KindApprovalRefused:
		a.Event, a.Op, a.Reason = ApprovalEventRefused, p.Op, p.Reason
	case schemas.KindApprovalResolved:
		l := parseAuditLine(p.Line)
		seq = l.Seq
		if a.ApprovalID == "" {
			a.ApprovalID = l.ApprovalID
		}
		// The signed verdict first, then what the request asked, then
		// the profile event (the only member of the second
		// approval.resolved event that older gateways wrote). Anything
		// else grants nothing: denied.
		pe := ""
		if p.ProfileEvent != nil {
			pe = p.ProfileEvent.Kind
		}
		switch {
		case l.Verdict.Verdict == schemas.VerdictApproved:
			a.Event = ApprovalEventApproved
		case l.Verdict.Verdict == schemas.VerdictDenied:
			a.Event, a.Reason = ApprovalEventDenied, l.Verdict.Reason
		case p.Op == "approve":
			a.Event = ApprovalEventApproved
		case p.Op == "deny":
			a.Event = ApprovalEventDenied
		case pe == "switch.approved":
			a.Event = ApprovalEventApproved
		default:
			a.Event = ApprovalEventDenied
		}
	}
	return a, seq
}

// resolutions is how each approval of one session stands (approval id ->
// approved or denied).
type resolutions map[string]string

// fold takes one approval.resolved event of the session and returns it as
// it counts. The first resolution of an approval stands; a denial of an
// approved approval revokes it; any other resolution (the same verdict
// again, or an approval after a denial) is a duplicate that changes
// nothing, its Op saying what it asked.
func (r resolutions) fold(a ApprovalInfo) ApprovalInfo {
	cur, seen := r[a.ApprovalID]
	switch {
	case !seen:
		r[a.ApprovalID] = a.Event
		return a
	case cur == ApprovalEventApproved && a.Event == ApprovalEventDenied:
		r[a.ApprovalID] = a.Event
		a.Revoked = true
		return a
	}
	a.Op = "deny"
	if a.Event == ApprovalEventApproved {
		a.Op = "approve"
	}
	a.Event, a.Reason = ApprovalEventDuplicate, "already "+cur
	return a
}

func decodeConfinement(p json.RawMessage) ConfinementInfo {
	var f struct {
		Refused               string            `json:"refused"`
		ExecPath              string            `json:"exec_path"`
		LandlockABI           int               `json:"landlock_abi"`
		LandlockFullyEnforced bool              `json:"landlock_fully_enforced"`
		LandlockTCPRestricted bool              `json:"landlock_tcp_restricted"`
		FSRules               []json.RawMessage `json:"fs_rules"`
		NetRules              []json.RawMessage `json:"net_rules"`
		SeccompApplied        bool              `json:"seccomp_applied"`
		SeccompNetworkDenied  bool              `json:"seccomp_network_denied"`
		NoNewPrivs            bool              `json:"no_new_privs"`
		ProtectedPaths        []string          `json:"protected_paths"`
		ProtectedVerified     bool              `json:"protected_verified"`
		Degradations          []string          `json:"degradations"`
	}
	json.Unmarshal(p, &f)
	return ConfinementInfo{
		Refused: f.Refused, ExecPath: f.ExecPath, LandlockABI: f.LandlockABI,
		FullyEnforced: f.LandlockFullyEnforced, TCPRestricted: f.LandlockTCPRestricted,
		FSRules: len(f.FSRules), NetRules: len(f.NetRules),
		SeccompApplied: f.SeccompApplied, NetworkDenied: f.SeccompNetworkDenied, NoNewPrivs: f.NoNewPrivs,
		Protected: len(f.ProtectedPaths), ProtectVerified: f.ProtectedVerified,
		Degradations: f.Degradations, Fact: p,
	}
}

// FrameSummary is what a transcript shows of one frame. Bytes is left nil
// by [SummarizeFrame]; a caller that prints exact frames sets it.
type FrameSummary struct {
	// Dir is c2s (host to server), s2c (server to host) or refusal (the
	// error aegis answered the host with instead of relaying).
	Dir  string `json:"dir"`
	Size int    `json:"size"`
	// Shape is request, notification, response, error, batch or opaque
	// (not a JSON-RPC object).
	Shape  string `json:"shape"`
	Method string `json:"method,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// ID is the JSON-RPC id as written.
	ID string `json:"id,omitempty"`
	// ErrorCode is an error response's code; AegisCode a refusal's
	// data.aegis.code.
	ErrorCode string         `json:"error_code,omitempty"`
	AegisCode string         `json:"aegis_code,omitempty"`
	Batch     []FrameSummary `json:"batch,omitempty"`
	Bytes     []byte         `json:"bytes,omitempty"`
}

// SummarizeFrame reads one recorded frame: its method, tool, id and size.
// It never fails; what it cannot read is opaque.
func SummarizeFrame(kind schemas.Kind, b []byte) FrameSummary {
	dir := "c2s"
	switch kind {
	case schemas.KindFrameS2C:
		dir = "s2c"
	case schemas.KindFrameRefusal:
		dir = "refusal"
	}
	f := FrameSummary{Dir: dir, Size: len(b), Shape: "opaque"}
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return f
	}
	switch t[0] {
	case '{':
		summarizeObject(t, &f)
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(t, &elems) != nil {
			return f
		}
		f.Shape = "batch"
		for _, el := range elems {
			sub := FrameSummary{Dir: dir, Size: len(el), Shape: "opaque"}
			el = bytes.TrimSpace(el)
			if len(el) > 0 && el[0] == '{' {
				summarizeObject(el, &sub)
			}
			f.Batch = append(f.Batch, sub)
		}
	}
	return f
}

func summarizeObject(b []byte, f *FrameSummary) {
	if !json.Valid(b) {
		return
	}
	var id, method, params, result, errv []byte
	members(b, func(k, v []byte) {
		switch {
		case keyIs(k, "id"):
			id = v
		case keyIs(k, "method"):
			method = v
		case keyIs(k, "params"):
			params = v
		case keyIs(k, "result"):
			result = v
		case keyIs(k, "error"):
			errv = v
		}
	})
	if len(id) > 0 {
		f.ID = string(id)
	}
	if len(method) > 0 && method[0] == '"' {
		f.Method = str(method)
	}
	isErr := len(errv) > 0 && errv[0] == '{'
	switch {
	case f.Method != "" && len(id) > 0:
		f.Shape = "request"
	case f.Method != "":
		f.Shape = "notification"
	case isErr:
		f.Shape = "error"
		members(errv, func(k, v []byte) {
			switch {
			case keyIs(k, "code"):
				f.ErrorCode = string(v)
			case keyIs(k, "data"):
				members(v, func(k, v []byte) {
					if keyIs(k, "aegis") {
						members(v, func(k, v []byte) {
							if keyIs(k, "code") {
								f.AegisCode = str(v)
							}
						})
					}
				})
			}
		})
	case len(result) > 0:
		f.Shape = "response"
	}
	if f.Method == "tools/call" {
		f.Tool = schemas.UnknownToolID
		members(params, func(k, v []byte) {
			if keyIs(k, "name") && len(v) > 0 && v[0] == '"' {
				f.Tool = str(v)
			}
		})
	}
}

// formatOffset writes a step's offset as seconds, "+1.234s".
func formatOffset(ms int64) string {
	sign := "+"
	if ms < 0 {
		sign, ms = "-", -ms
	}
	frac := strconv.FormatInt(ms%1000, 10)
	for len(frac) < 3 {
		frac = "0" + frac
	}
	return sign + strconv.FormatInt(ms/1000, 10) + "." + frac + "s"
}
