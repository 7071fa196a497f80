package policy

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors of [ProfileState]. Each method wraps one of them (errors.Is) with
// the approval id and the profiles concerned.
var (
	// ErrApprovalUnknown: no escalation request has this id.
	ErrApprovalUnknown = errors.New("unknown approval id")
	// ErrApprovalIDTaken: a request reuses an id already used; ids are
	// single-use, so that a replayed request cannot revive an approval.
	ErrApprovalIDTaken = errors.New("approval id already used")
	// ErrApprovalPending: applying a request nobody has approved.
	ErrApprovalPending = errors.New("approval still pending")
	// ErrApprovalResolved: approving or denying a request already decided.
	ErrApprovalResolved = errors.New("approval already resolved")
	// ErrApprovalDenied: applying a denied request.
	ErrApprovalDenied = errors.New("approval was denied")
	// ErrApprovalExpired: approving or applying at or after its expiry.
	ErrApprovalExpired = errors.New("approval expired")
	// ErrApprovalUsed: applying an approval a second time.
	ErrApprovalUsed = errors.New("approval already used")
	// ErrApprovalWrongProfile: applying an approval while the active
	// profile is not the one the switch was requested from.
	ErrApprovalWrongProfile = errors.New("approval from the wrong profile")
	// ErrNotActive: a switch or request whose from is not the active
	// profile.
	ErrNotActive = errors.New("not the active profile")
	// ErrBadEvent: an event that no state could accept (an empty or
	// invalid field, a target equal to the origin, an expiry not after
	// the request).
	ErrBadEvent = errors.New("malformed profile event")
)

// EscalationStatus is where an escalation request stands.
type EscalationStatus uint8

// The statuses. Pending is the zero value.
const (
	EscalationPending  EscalationStatus = iota // waiting for a human
	EscalationApproved                         // approved, not yet applied
	EscalationDenied                           // denied: never applies
	EscalationExpired                          // expired before it was applied
	EscalationApplied                          // the switch happened; spent
)

var escalationStatusNames = [...]string{"pending", "approved", "denied", "expired", "applied"}

// String returns pending, approved, denied, expired or applied: the
// answer of aegis.approval_status.
func (s EscalationStatus) String() string {
	if int(s) < len(escalationStatusNames) {
		return escalationStatusNames[s]
	}
	return fmt.Sprintf("EscalationStatus(%d)", s)
}

// Escalation is one request of an agent to switch profile along no edge.
type Escalation struct {
	ID          string
	From, To    string
	RequestedAt time.Time
	ExpiresAt   time.Time
	Status      EscalationStatus
	// ResolvedAt is when it was approved, denied or expired; AppliedAt
	// when the switch happened.
	ResolvedAt time.Time
	AppliedAt  time.Time
}

// ProfileEventKind is the kind of a [ProfileEvent].
type ProfileEventKind uint8

// The kinds of profile events.
const (
	EventSwitchRequested ProfileEventKind = iota + 1 // an agent asked for a switch along no edge
	EventSwitchApproved                              // a human approved it
	EventSwitchDenied                                // a human denied it (or revoked an approval)
	EventSwitchExpired                               // its time ran out
	EventSwitchApplied                               // the approved switch happened
	EventSwitched                                    // a switch along an edge, or by a human
)

var profileEventNames = [...]string{
	EventSwitchRequested: "switch.requested",
	EventSwitchApproved:  "switch.approved",
	EventSwitchDenied:    "switch.denied",
	EventSwitchExpired:   "switch.expired",
	EventSwitchApplied:   "switch.applied",
	EventSwitched:        "profile.switched",
}

// String returns the kind's name, such as switch.requested.
func (k ProfileEventKind) String() string {
	if k > 0 && int(k) < len(profileEventNames) {
		return profileEventNames[k]
	}
	return fmt.Sprintf("ProfileEventKind(%d)", k)
}

// MarshalText encodes k by name.
func (k ProfileEventKind) MarshalText() ([]byte, error) {
	if k == 0 || int(k) >= len(profileEventNames) {
		return nil, fmt.Errorf("%v has no name", k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText decodes a kind's name.
func (k *ProfileEventKind) UnmarshalText(b []byte) error {
	for i, name := range profileEventNames {
		if i > 0 && name == string(b) {
			*k = ProfileEventKind(i)
			return nil
		}
	}
	return fmt.Errorf("unknown profile event kind %q", b)
}

// ProfileEvent is one fact of a session's profile history, as the event
// stream holds it. Which fields a kind uses:
//
//	switch.requested  ID, From, To, At, ExpiresAt
//	switch.approved   ID, At          (From and To, when set, must match)
//	switch.denied     ID, At          (likewise)
//	switch.expired    ID, At          (likewise)
//	switch.applied    ID, At          (likewise)
//	profile.switched  From, To, Source, At
type ProfileEvent struct {
	Kind      ProfileEventKind `json:"kind"`
	ID        string           `json:"id,omitempty"`
	From      string           `json:"from,omitempty"`
	To        string           `json:"to,omitempty"`
	Source    SwitchSource     `json:"source"`
	At        time.Time        `json:"at"`
	ExpiresAt time.Time        `json:"expires_at,omitzero"`
}

// ProfileState is the profile state of one gateway session: the active
// profile and every escalation request with its status. It is a fold over
// the session's [ProfileEvent]s: start from [NewProfileState] with the
// default profile and [ProfileState.Apply] each event in stream order, and
// the same events always give the same state.
//
// Each method checks the event against the state before changing anything;
// on error the state is unchanged. The runtime asks a method first and
// publishes the event only when it succeeded, so replay never fails on a
// stream this code wrote. The invariants:
//
//   - approvals are single-use: an approved request applies once, and its
//     id can never be requested again;
//   - a human's decision is never lost to the agent's movements: a pending
//     request may be approved (or denied) whatever profile is active at
//     that moment;
//   - an approval is bound to the profile it was requested from, and the
//     binding is checked where it matters, when the switch is applied:
//     applying it while another profile is active fails with
//     [ErrApprovalWrongProfile] and leaves it approved (it is not spent, so
//     it may still apply if that profile becomes active again before it
//     expires);
//   - every request expires: nothing is approved or applied at or after
//     ExpiresAt;
//   - a denied or expired request never applies; an approved one may still
//     be denied (revoked) until it is applied.
//
// ProfileState does not know the gateway: whether a switch follows an edge
// is [Gateway.DecideSwitch]'s question, asked before the event is made.
// A ProfileState is not safe for concurrent use.
//
// Upstream differs: its approvals never expire, an approved switch cannot
// be revoked, and approval_status answers only approved or pending. Like
// upstream, an approval is checked against the active profile only when
// it is applied.
type ProfileState struct {
	active      string
	since       time.Time
	escalations map[string]*Escalation
	order       []string // ids in request order
}

// NewProfileState returns the state of a session that starts in profile
// active (the gateway's default profile), with no requests.
func NewProfileState(active string) *ProfileState {
	return &ProfileState{active: active, escalations: make(map[string]*Escalation)}
}

// Active returns the active profile.
func (s *ProfileState) Active() string { return s.active }

// ActiveSince returns when the active profile became active: the time of
// the last switch, zero before the first.
func (s *ProfileState) ActiveSince() time.Time { return s.since }

// Escalation returns the request with id.
func (s *ProfileState) Escalation(id string) (Escalation, bool) {
	e, ok := s.escalations[id]
	if !ok {
		return Escalation{}, false
	}
	return *e, true
}

// Escalations returns every request, in request order.
func (s *ProfileState) Escalations() []Escalation {
	out := make([]Escalation, len(s.order))
	for i, id := range s.order {
		out[i] = *s.escalations[id]
	}
	return out
}

// Pending returns the requests still waiting for a human, in request
// order.
func (s *ProfileState) Pending() []Escalation {
	var out []Escalation
	for _, id := range s.order {
		if e := s.escalations[id]; e.Status == EscalationPending {
			out = append(out, *e)
		}
	}
	return out
}

// Open returns the latest request from the active profile to to that is
// pending or approved and not expired at now, so that an agent re-issuing
// set_profile reuses it (applying it once approved) instead of raising a
// new prompt.
func (s *ProfileState) Open(to string, now time.Time) (Escalation, bool) {
	for _, id := range slices.Backward(s.order) {
		e := s.escalations[id]
		if e.From == s.active && e.To == to && (e.Status == EscalationPending || e.Status == EscalationApproved) && now.Before(e.ExpiresAt) {
			return *e, true
		}
	}
	return Escalation{}, false
}

// Due returns the ids of the requests, pending or approved, whose expiry
// is at or before now, in request order: the switch.expired events the
// runtime owes.
func (s *ProfileState) Due(now time.Time) []string {
	var out []string
	for _, id := range s.order {
		e := s.escalations[id]
		if (e.Status == EscalationPending || e.Status == EscalationApproved) && !now.Before(e.ExpiresAt) {
			out = append(out, id)
		}
	}
	return out
}

// Clone returns an independent copy of s.
func (s *ProfileState) Clone() *ProfileState {
	c := &ProfileState{active: s.active, since: s.since, escalations: make(map[string]*Escalation, len(s.escalations)), order: slices.Clone(s.order)}
	for id, e := range s.escalations {
		ec := *e
		c.escalations[id] = &ec
	}
	return c
}

// Apply folds one event into s (see [ProfileEvent] for the fields each kind
// uses) by calling the method of its kind.
func (s *ProfileState) Apply(ev ProfileEvent) error {
	if ev.Kind != EventSwitchRequested && ev.Kind != EventSwitched {
		if e, ok := s.escalations[ev.ID]; ok && (ev.From != "" && ev.From != e.From || ev.To != "" && ev.To != e.To) {
			return fmt.Errorf("%w: %s %q names %q -> %q, the request was %q -> %q", ErrBadEvent, ev.Kind, ev.ID, ev.From, ev.To, e.From, e.To)
		}
	}
	switch ev.Kind {
	case EventSwitchRequested:
		return s.RequestSwitch(ev.ID, ev.From, ev.To, ev.At, ev.ExpiresAt)
	case EventSwitchApproved:
		return s.ApproveSwitch(ev.ID, ev.At)
	case EventSwitchDenied:
		return s.DenySwitch(ev.ID, ev.At)
	case EventSwitchExpired:
		return s.ExpireSwitch(ev.ID, ev.At)
	case EventSwitchApplied:
		return s.ApplySwitch(ev.ID, ev.At)
	case EventSwitched:
		return s.Switch(ev.From, ev.To, ev.Source, ev.At)
	}
	return fmt.Errorf("%w: unknown kind %v", ErrBadEvent, ev.Kind)
}

// validApprovalID accepts 1 to 128 bytes of [A-Za-z0-9_.-], which covers
// upstream's apr_<n> and every id [ApprovalIDs] makes.
func validApprovalID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isToolNameByte(c) && c != '.' {
			return false
		}
	}
	return true
}

// RequestSwitch records that the agent, in profile from, asked at at to
// switch to to along no edge, as request id, which expires at expiresAt.
// from must be the active profile, to another profile name, expiresAt after
// at, and id a fresh id of 1 to 128 bytes of [A-Za-z0-9_.-]. The active
// profile does not change.
func (s *ProfileState) RequestSwitch(id, from, to string, at, expiresAt time.Time) error {
	switch {
	case !validApprovalID(id):
		return fmt.Errorf("%w: approval id %q", ErrBadEvent, id)
	case s.escalations[id] != nil:
		return fmt.Errorf("request %q: %w", id, ErrApprovalIDTaken)
	case from != s.active:
		return fmt.Errorf("request %q from %q: %w (%q is)", id, from, ErrNotActive, s.active)
	case to == "" || to == from:
		return fmt.Errorf("%w: request %q from %q to %q", ErrBadEvent, id, from, to)
	case !expiresAt.After(at):
		return fmt.Errorf("%w: request %q expires at %v, not after %v", ErrBadEvent, id, expiresAt, at)
	}
	s.escalations[id] = &Escalation{ID: id, From: from, To: to, RequestedAt: at, ExpiresAt: expiresAt}
	s.order = append(s.order, id)
	return nil
}

// ApproveSwitch records a human's approval of request id at at. It fails
// unless the request is pending and unexpired at at. The active profile
// does not matter here: what the human approves is the request as the
// prompt showed it (from From to To), and [ProfileState.ApplySwitch]
// applies it only while From is active, so an agent that moved on in the
// meantime cannot make the human's decision lost, nor use it elsewhere.
func (s *ProfileState) ApproveSwitch(id string, at time.Time) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	switch {
	case e.Status != EscalationPending:
		return fmt.Errorf("approve %q: %w (%s)", id, ErrApprovalResolved, e.Status)
	case !at.Before(e.ExpiresAt):
		return fmt.Errorf("approve %q: %w at %v", id, ErrApprovalExpired, e.ExpiresAt)
	}
	e.Status, e.ResolvedAt = EscalationApproved, at
	return nil
}

// DenySwitch records a human's denial of request id at at: a pending
// request, or an approved one not yet applied (revocation). It never
// applies afterwards.
func (s *ProfileState) DenySwitch(id string, at time.Time) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	if e.Status != EscalationPending && e.Status != EscalationApproved {
		return fmt.Errorf("deny %q: %w (%s)", id, ErrApprovalResolved, e.Status)
	}
	e.Status, e.ResolvedAt = EscalationDenied, at
	return nil
}

// ExpireSwitch records that request id, pending or approved, expired: at
// must be at or after its ExpiresAt.
func (s *ProfileState) ExpireSwitch(id string, at time.Time) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	switch {
	case e.Status != EscalationPending && e.Status != EscalationApproved:
		return fmt.Errorf("expire %q: %w (%s)", id, ErrApprovalResolved, e.Status)
	case at.Before(e.ExpiresAt):
		return fmt.Errorf("%w: expire %q at %v, before its expiry %v", ErrBadEvent, id, at, e.ExpiresAt)
	}
	e.Status, e.ResolvedAt = EscalationExpired, at
	return nil
}

// ApplySwitch performs the approved switch id at at: the active profile
// becomes its To and the approval is spent. It fails, changing nothing,
// when the request is unknown, pending, denied, expired (or at is at or
// after its expiry), already applied ([ErrApprovalUsed]: no replay), or
// requested from a profile that is not the active one
// ([ErrApprovalWrongProfile]; such an approval is not spent).
func (s *ProfileState) ApplySwitch(id string, at time.Time) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	switch e.Status {
	case EscalationPending:
		return fmt.Errorf("apply %q: %w", id, ErrApprovalPending)
	case EscalationDenied:
		return fmt.Errorf("apply %q: %w", id, ErrApprovalDenied)
	case EscalationExpired:
		return fmt.Errorf("apply %q: %w", id, ErrApprovalExpired)
	case EscalationApplied:
		return fmt.Errorf("apply %q: %w", id, ErrApprovalUsed)
	}
	switch {
	case !at.Before(e.ExpiresAt):
		return fmt.Errorf("apply %q: %w at %v", id, ErrApprovalExpired, e.ExpiresAt)
	case e.From != s.active:
		return fmt.Errorf("apply %q: %w: requested from %q, active is %q", id, ErrApprovalWrongProfile, e.From, s.active)
	}
	e.Status, e.AppliedAt = EscalationApplied, at
	s.active, s.since = e.To, at
	return nil
}

// Switch records a switch from the active profile from to to at at, along
// an edge or by a human (src); [Gateway.DecideSwitch] decided it. from must
// be the active profile and to another profile name.
func (s *ProfileState) Switch(from, to string, src SwitchSource, at time.Time) error {
	switch {
	case from != s.active:
		return fmt.Errorf("switch from %q: %w (%q is)", from, ErrNotActive, s.active)
	case to == "" || to == from:
		return fmt.Errorf("%w: switch from %q to %q by %v", ErrBadEvent, from, to, src)
	}
	s.active, s.since = to, at
	return nil
}

func (s *ProfileState) lookup(id string) (*Escalation, error) {
	e, ok := s.escalations[id]
	if !ok {
		return nil, fmt.Errorf("approval %q: %w", id, ErrApprovalUnknown)
	}
	return e, nil
}
