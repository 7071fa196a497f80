package projector

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// SessionSummary is one row of the session index.
type SessionSummary struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	// Ended is the time of session.closed; nil for a session that did not
	// close.
	Ended     *time.Time `json:"ended,omitempty"`
	LastEvent time.Time  `json:"last_event"`
	// State is StateClosed, StateKilled, StateRunning or StateUnclosed
	// (see [SessionIndex.Sessions]).
	State string `json:"state"`
	PID   int    `json:"pid"`
	// Run is the session's SessionOpened.Run: sessions that one process
	// ran at once share it.
	Run string `json:"run,omitempty"`
	// Argv is the wrapped command; Config the gateway configuration of a
	// gateway session.
	Argv   []string `json:"argv,omitempty"`
	Config string   `json:"config,omitempty"`
	// Principal is who the session serves, when a validated OAuth token
	// named them (gateway --listen).
	Principal *schemas.Principal `json:"principal,omitempty"`
	AuditPath string             `json:"audit_path,omitempty"`
	KeyID     string             `json:"key_id,omitempty"`
	Events    int                `json:"events"`
	Frames    int                `json:"frames"`
	// Calls counts intents; Refusals the calls aegis kept from the server;
	// InFlight the calls with an intent and no outcome.
	Calls     int            `json:"calls"`
	Refusals  int            `json:"refusals"`
	InFlight  int            `json:"in_flight"`
	Approvals ApprovalCounts `json:"approvals"`
	Confined  bool           `json:"confined"`
	// Profile is the profile active at the session's last event: the one
	// session.opened names (a gateway's default profile) until a
	// profile.switched event; NoProfile when the session records none.
	Profile string     `json:"profile"`
	Exit    *ChildInfo `json:"child_exit,omitempty"`
	// Skipped lists a gateway's servers that could not be used, in the
	// order they were recorded.
	Skipped []SkippedServer `json:"skipped,omitempty"`
	// First and Last are the positions of the session's first and last
	// events.
	First events.Position `json:"first"`
	Last  events.Position `json:"last"`
}

// ApprovalCounts counts a session's approval events. Approved and Denied
// count approvals by how they stand: an approval revoked by a later denial
// counts as denied. A resolution that changes nothing (see [ApprovalInfo];
// older gateways wrote two approval.resolved events for one decision)
// counts as Duplicate only.
type ApprovalCounts struct {
	Requested int `json:"requested"`
	Approved  int `json:"approved"`
	Denied    int `json:"denied"`
	Expired   int `json:"expired"`
	Used      int `json:"used"`
	Refused   int `json:"refused"`
	Duplicate int `json:"duplicate"`
}

// SessionIndex is the fold behind aegis sessions: one summary per session
// that has a session.opened event, in stream order. Events of a session
// whose open was never seen are ignored. It is pure.
type SessionIndex struct {
	list []*SessionSummary
	byID map[string]*indexEntry
}

type indexEntry struct {
	pos      int // in list
	sum      *SessionSummary
	inflight map[string]bool
	resolved resolutions
}

// Fold folds one event into the index.
func (ix *SessionIndex) Fold(rec events.Record) { ix.fold(rec) }

// fold is Fold that returns the place of the session it changed in stream
// order (-1: none).
func (ix *SessionIndex) fold(rec events.Record) int { return ix.foldLine(rec, "", false) }

// foldLine is fold given, when read, the audit line the event carries
// ([decodeLine]): the index reads it once for this fold and its span's.
func (ix *SessionIndex) foldLine(rec events.Record, line string, read bool) int {
	e := rec.Event
	if ix.byID == nil {
		ix.byID = map[string]*indexEntry{}
	}
	en := ix.byID[e.Session]
	if en == nil {
		if e.Kind != schemas.KindSessionOpened {
			return -1
		}
		var so openedPayload
		json.Unmarshal(e.Payload, &so)
		s := &SessionSummary{ID: e.Session, Started: e.Time, PID: so.PID, Run: so.Run, Argv: so.Argv, Config: so.Config,
			AuditPath: so.AuditPath, KeyID: so.KeyID, Profile: NoProfile, First: rec.Pos, Principal: so.Principal}
		if so.Profile != "" {
			s.Profile = so.Profile
		}
		en = &indexEntry{pos: len(ix.list), sum: s, inflight: map[string]bool{}, resolved: resolutions{}}
		ix.byID[e.Session] = en
		ix.list = append(ix.list, s)
	}
	s := en.sum
	s.Events++
	s.Last = rec.Pos
	if e.Time.After(s.LastEvent) {
		s.LastEvent = e.Time
	}
	switch e.Kind {
	case schemas.KindFrameC2S, schemas.KindFrameS2C, schemas.KindFrameRefusal:
		s.Frames++
	case schemas.KindCallIntent:
		s.Calls++
		en.inflight[callIDOf(e.Payload)] = true
	case schemas.KindCallOutcome:
		var id string
		if read {
			id = callIDOf(e.Payload)
		} else {
			cp := callPayload(e.Payload)
			id, line = cp.CallID, cp.Line
		}
		l := parseAuditLine(line)
		delete(en.inflight, id)
		if refused(&l) {
			s.Refusals++
		}
		if l.DecisionAxes.ApprovalRef != "" {
			s.Approvals.Used++
		}
	case schemas.KindApprovalRequested:
		s.Approvals.Requested++
	case schemas.KindApprovalResolved:
		a, _ := decodeApproval(e)
		switch a = en.resolved.fold(a); {
		case a.Event == ApprovalEventApproved:
			s.Approvals.Approved++
		case a.Event == ApprovalEventDenied:
			s.Approvals.Denied++
			if a.Revoked {
				s.Approvals.Approved--
			}
		default:
			s.Approvals.Duplicate++
		}
	case schemas.KindApprovalExpired:
		s.Approvals.Expired++
	case schemas.KindApprovalRefused:
		s.Approvals.Refused++
	case schemas.KindConfinementApplied:
		s.Confined = decodeConfinement(e.Payload).Refused == ""
	case schemas.KindChildExited:
		var c childPayload
		json.Unmarshal(e.Payload, &c)
		s.Exit = &ChildInfo{Server: c.Server, PID: c.PID, Code: c.Code, ServerExitedFirst: c.ServerExitedFirst, EndedBy: c.EndedBy, Reason: c.Reason}
	case schemas.KindNote:
		if sk, ok := skippedOf(e.Payload); ok {
			s.Skipped = append(s.Skipped, sk)
		}
	case schemas.KindProfileSwitched:
		if p := profileOf(e.Payload); p != "" {
			s.Profile = p
		}
	case schemas.KindSessionClosed:
		t := e.Time
		s.Ended = &t
	}
	s.InFlight = len(en.inflight)
	return en.pos
}

// ReadElsewhere is the holderPID to pass to [SessionIndex.Sessions] for a
// copy of a stream read away from its machine (a host's mirror on a hub):
// a session without a close line is then StateUnclosed, since whether its
// process still runs cannot be known there.
const ReadElsewhere = -1

// Sessions returns the summaries in stream order with State filled in:
// closed when the session has a close line; running for the last session
// opened by holderPID, the process that holds the state directory now (0:
// none), and for every session of that session's run when it has one (a
// gateway serving HTTP clients runs several at once); killed otherwise.
// With holderPID [ReadElsewhere], a session without a close line is
// unclosed.
func (ix *SessionIndex) Sessions(holderPID int) []SessionSummary {
	running := -1
	if holderPID > 0 {
		for i := len(ix.list) - 1; i >= 0; i-- {
			if ix.list[i].PID == holderPID {
				running = i
				break
			}
		}
	}
	out := make([]SessionSummary, len(ix.list))
	for i, s := range ix.list {
		out[i] = *s
		switch {
		case s.Ended != nil:
			out[i].State = StateClosed
		case i == running, running >= 0 && s.Run != "" && s.PID == holderPID && s.Run == ix.list[running].Run:
			out[i].State = StateRunning
		case holderPID == ReadElsewhere:
			out[i].State = StateUnclosed
		default:
			out[i].State = StateKilled
		}
	}
	return out
}

// Get returns one session's summary, with State as in
// [SessionIndex.Sessions].
func (ix *SessionIndex) Get(id string, holderPID int) (SessionSummary, bool) {
	for _, s := range ix.Sessions(holderPID) {
		if s.ID == id {
			return s, true
		}
	}
	return SessionSummary{}, false
}

// Approval is one approval's state as the stream tells it.
type Approval struct {
	Session       string    `json:"session"`
	ApprovalID    string    `json:"approval_id"`
	ToolID        string    `json:"tool_id"`
	RequestDigest string    `json:"request_digest"`
	ArgsDigest    string    `json:"args_digest"`
	RequestedAt   time.Time `json:"requested_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	// State is pending, approved, denied, expired or used.
	State string `json:"state"`
	// By is who approved or denied it; UsedBy the call that used an
	// approval.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	UsedBy string `json:"used_by,omitempty"`
}

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
	ApprovalUsed     = "used"
)

// Approvals folds the approval events into each approval's state: the
// pending approvals that aegis approvals lists are a projection of the
// stream. Approval ids are unique within a session only.
type Approvals struct {
	list   []*Approval
	byKey  map[[2]string]*Approval
	closed map[string]bool
}

// Fold folds one event.
func (a *Approvals) Fold(rec events.Record) {
	e := rec.Event
	if a.byKey == nil {
		a.byKey = map[[2]string]*Approval{}
		a.closed = map[string]bool{}
	}
	switch e.Kind {
	case schemas.KindApprovalRequested:
		var p approvalPayload
		json.Unmarshal(e.Payload, &p)
		ap := &Approval{Session: e.Session, ApprovalID: p.ApprovalID, ToolID: p.ToolID, RequestDigest: p.RequestDigest,
			ArgsDigest: p.ArgsDigest, State: ApprovalPending, RequestedAt: e.Time}
		if p.RequestedAt != nil {
			ap.RequestedAt = *p.RequestedAt
		}
		if p.ExpiresAt != nil {
			ap.ExpiresAt = *p.ExpiresAt
		}
		a.byKey[[2]string{e.Session, p.ApprovalID}] = ap
		a.list = append(a.list, ap)
	case schemas.KindApprovalResolved:
		// The first resolution stands, or a denial revokes an approval
		// not yet used; a duplicate (see [ApprovalInfo]) changes nothing.
		info, _ := decodeApproval(e)
		ap := a.byKey[[2]string{e.Session, info.ApprovalID}]
		if ap != nil && (ap.State == ApprovalPending || (ap.State == ApprovalApproved && info.Event == ApprovalEventDenied)) {
			ap.State, ap.By, ap.Reason = info.Event, info.By, info.Reason
		}
	case schemas.KindApprovalExpired:
		info, _ := decodeApproval(e)
		if ap := a.byKey[[2]string{e.Session, info.ApprovalID}]; ap != nil && ap.State == ApprovalPending {
			ap.State = ApprovalExpired
		}
	case schemas.KindCallOutcome:
		cp := callPayload(e.Payload)
		l := parseAuditLine(cp.Line)
		if ref := l.DecisionAxes.ApprovalRef; ref != "" {
			if ap := a.byKey[[2]string{e.Session, ref}]; ap != nil {
				ap.State, ap.UsedBy = ApprovalUsed, cp.CallID
			}
		}
	case schemas.KindSessionClosed:
		a.closed[e.Session] = true
	}
}

// All returns every approval, in the order they were requested.
func (a *Approvals) All() []Approval {
	out := make([]Approval, len(a.list))
	for i, ap := range a.list {
		out[i] = *ap
	}
	return out
}

// Pending returns the approvals a human can still act on at now: pending,
// not expired, in a session that has not closed. Oldest first, as aegis
// approvals lists them.
func (a *Approvals) Pending(now time.Time) []Approval {
	var out []Approval
	for _, ap := range a.list {
		if ap.State == ApprovalPending && now.Before(ap.ExpiresAt) && !a.closed[ap.Session] {
			out = append(out, *ap)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	return out
}

// Profiles folds each session's active profile: the profile its
// session.opened names (a gateway's default), then that of each
// profile.switched event ({"profile": NAME}).
type Profiles struct {
	active map[string]string
}

// Fold folds one event.
func (p *Profiles) Fold(rec events.Record) {
	if rec.Event.Kind != schemas.KindProfileSwitched && rec.Event.Kind != schemas.KindSessionOpened {
		return
	}
	if p.active == nil {
		p.active = map[string]string{}
	}
	if name := profileOf(rec.Event.Payload); name != "" {
		p.active[rec.Event.Session] = name
	}
}

// Active returns the session's active profile, or [NoProfile].
func (p *Profiles) Active(session string) string {
	if v, ok := p.active[session]; ok {
		return v
	}
	return NoProfile
}

// All returns every session's active profile (sessions that record none
// are absent).
func (p *Profiles) All() map[string]string {
	out := make(map[string]string, len(p.active))
	for k, v := range p.active {
		out[k] = v
	}
	return out
}

// Projections are all the state that aegis derives from the stream:
// profile state, approvals, the session index and the audit record. Each
// is a fold; a replay of the same events gives the same projections, which
// is how state is rebuilt after a crash.
type Projections struct {
	Sessions  SessionIndex
	Approvals Approvals
	Profiles  Profiles
	Record    Record
	// At is the position of the last event folded.
	At events.Position
}

// Fold folds one event into every projection.
func (p *Projections) Fold(rec events.Record) {
	p.Sessions.Fold(rec)
	p.Approvals.Fold(rec)
	p.Profiles.Fold(rec)
	p.Record.Fold(rec)
	p.At = rec.Pos
}

// ProjectionSnapshot is a comparable picture of [Projections]: the
// session index (State left empty: that is not in the stream), every
// approval, the active profiles, and per session the SHA-256 of its audit
// export and its line count.
type ProjectionSnapshot struct {
	At        events.Position           `json:"at"`
	Sessions  []SessionSummary          `json:"sessions"`
	Approvals []Approval                `json:"approvals"`
	Profiles  map[string]string         `json:"profiles"`
	Export    map[string]ExportSnapshot `json:"export"`
}

// ExportSnapshot summarises one session's audit export.
type ExportSnapshot struct {
	Lines  int    `json:"lines"`
	SHA256 string `json:"sha256"`
}

// Snapshot returns the comparable picture of p.
func (p *Projections) Snapshot() ProjectionSnapshot {
	ss := p.Sessions.Sessions(0)
	for i := range ss {
		ss[i].State = ""
	}
	ex := map[string]ExportSnapshot{}
	for _, s := range p.Record.Sessions {
		var buf []byte
		for _, l := range p.Record.Lines(s.ID) {
			buf = append(buf, l...)
			buf = append(buf, '\n')
		}
		ex[s.ID] = ExportSnapshot{Lines: len(p.Record.Lines(s.ID)), SHA256: schemas.HashHex(buf)}
	}
	return ProjectionSnapshot{At: p.At, Sessions: ss, Approvals: p.Approvals.All(), Profiles: p.Profiles.All(), Export: ex}
}
