package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

var (
	ps0 = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	ttl = 10 * time.Minute
)

func at(d time.Duration) time.Time { return ps0.Add(d) }

// recorder applies events to a live state and keeps those it accepted, as
// the runtime publishes only accepted events; replay folds them again.
type recorder struct {
	t      *testing.T
	s      *ProfileState
	events []ProfileEvent
}

func newRecorder(t *testing.T, active string) *recorder {
	return &recorder{t: t, s: NewProfileState(active)}
}

func (r *recorder) do(ev ProfileEvent) error {
	r.t.Helper()
	before := r.s.Clone()
	err := r.s.Apply(ev)
	if err != nil {
		if !reflect.DeepEqual(before, r.s) {
			r.t.Errorf("%v failed with %v but changed the state", ev.Kind, err)
		}
		return err
	}
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) must(ev ProfileEvent) {
	r.t.Helper()
	if err := r.do(ev); err != nil {
		r.t.Fatalf("%v %q: %v", ev.Kind, ev.ID, err)
	}
}

func request(id, from, to string, when time.Duration) ProfileEvent {
	return ProfileEvent{Kind: EventSwitchRequested, ID: id, From: from, To: to, At: at(when), ExpiresAt: at(when + ttl)}
}

func ev(kind ProfileEventKind, id string, when time.Duration) ProfileEvent {
	return ProfileEvent{Kind: kind, ID: id, At: at(when)}
}

func switched(from, to string, src SwitchSource, when time.Duration) ProfileEvent {
	return ProfileEvent{Kind: EventSwitched, From: from, To: to, Source: src, At: at(when)}
}

// replayEqual folds r's accepted events into a fresh state and requires it
// to equal the live one.
func (r *recorder) replayEqual(start string) {
	r.t.Helper()
	// Through JSON, as the stream holds them.
	b, err := json.Marshal(r.events)
	if err != nil {
		r.t.Fatal(err)
	}
	var back []ProfileEvent
	if err := json.Unmarshal(b, &back); err != nil {
		r.t.Fatal(err)
	}
	s := NewProfileState(start)
	for _, e := range back {
		if err := s.Apply(e); err != nil {
			r.t.Fatalf("replay %v %q: %v", e.Kind, e.ID, err)
		}
	}
	if !reflect.DeepEqual(s, r.s) {
		r.t.Errorf("replayed state differs:\n%+v\nlive:\n%+v", s, r.s)
	}
}

func TestApprovedEscalationCompletes(t *testing.T) {
	r := newRecorder(t, "default")
	r.must(request("apr_1", "default", "deploy", 0))
	if r.s.Active() != "default" {
		t.Fatal("the profile changed while the request is pending")
	}
	if got := r.s.Pending(); len(got) != 1 || got[0].ID != "apr_1" {
		t.Fatalf("Pending() = %+v", got)
	}
	r.must(ev(EventSwitchApproved, "apr_1", time.Minute))
	if r.s.Active() != "default" {
		t.Fatal("approval alone switched the profile")
	}
	r.must(ev(EventSwitchApplied, "apr_1", 2*time.Minute))
	if r.s.Active() != "deploy" || !r.s.ActiveSince().Equal(at(2*time.Minute)) {
		t.Fatalf("active %q since %v after apply", r.s.Active(), r.s.ActiveSince())
	}
	e, _ := r.s.Escalation("apr_1")
	if e.Status != EscalationApplied || e.Status.String() != "applied" || !e.ResolvedAt.Equal(at(time.Minute)) || !e.AppliedAt.Equal(at(2*time.Minute)) {
		t.Errorf("escalation after apply = %+v", e)
	}
	r.replayEqual("default")
}

// TestApprovalReplay: an approval applies once. Applying it again, also
// after moving back to the profile it was requested from, fails and
// changes nothing; re-requesting its id fails; so does approving it again.
func TestApprovalReplay(t *testing.T) {
	tests := []struct {
		name  string
		setup []ProfileEvent
		try   ProfileEvent
		want  error
	}{
		{
			name: "ApplyTwice",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
				ev(EventSwitchApplied, "apr_1", 2*time.Minute),
			},
			try:  ev(EventSwitchApplied, "apr_1", 3*time.Minute),
			want: ErrApprovalUsed,
		},
		{
			name: "ApplyAgainAfterMovingBack",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
				ev(EventSwitchApplied, "apr_1", 2*time.Minute),
				switched("deploy", "default", SourceHuman, 3*time.Minute),
			},
			try:  ev(EventSwitchApplied, "apr_1", 4*time.Minute),
			want: ErrApprovalUsed,
		},
		{
			name: "RequestWithASpentID",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
				ev(EventSwitchApplied, "apr_1", 2*time.Minute),
				switched("deploy", "default", SourceAgent, 3*time.Minute),
			},
			try:  request("apr_1", "default", "deploy", 4*time.Minute),
			want: ErrApprovalIDTaken,
		},
		{
			name:  "RequestWithAPendingID",
			setup: []ProfileEvent{request("apr_1", "default", "deploy", 0)},
			try:   request("apr_1", "default", "admin", time.Minute),
			want:  ErrApprovalIDTaken,
		},
		{
			name: "ApproveTwice",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
			},
			try:  ev(EventSwitchApproved, "apr_1", 2*time.Minute),
			want: ErrApprovalResolved,
		},
		{
			name: "ApproveAfterDeny",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchDenied, "apr_1", time.Minute),
			},
			try:  ev(EventSwitchApproved, "apr_1", 2*time.Minute),
			want: ErrApprovalResolved,
		},
		{
			name: "ApplyDenied",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchDenied, "apr_1", time.Minute),
			},
			try:  ev(EventSwitchApplied, "apr_1", 2*time.Minute),
			want: ErrApprovalDenied,
		},
		{
			name: "ApplyRevoked",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
				ev(EventSwitchDenied, "apr_1", 2*time.Minute),
			},
			try:  ev(EventSwitchApplied, "apr_1", 3*time.Minute),
			want: ErrApprovalDenied,
		},
		{
			name:  "ApplyPending",
			setup: []ProfileEvent{request("apr_1", "default", "deploy", 0)},
			try:   ev(EventSwitchApplied, "apr_1", time.Minute),
			want:  ErrApprovalPending,
		},
		{
			name:  "ApplyUnknown",
			setup: nil,
			try:   ev(EventSwitchApplied, "apr_9", time.Minute),
			want:  ErrApprovalUnknown,
		},
		{
			name:  "DenyUnknown",
			setup: nil,
			try:   ev(EventSwitchDenied, "apr_9", time.Minute),
			want:  ErrApprovalUnknown,
		},
		{
			name:  "ExpireUnknown",
			setup: nil,
			try:   ev(EventSwitchExpired, "apr_9", time.Minute),
			want:  ErrApprovalUnknown,
		},
		{
			name:  "ApproveUnknown",
			setup: nil,
			try:   ev(EventSwitchApproved, "apr_9", time.Minute),
			want:  ErrApprovalUnknown,
		},
		{
			name: "ApplyAfterExpiry",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
			},
			try:  ev(EventSwitchApplied, "apr_1", ttl),
			want: ErrApprovalExpired,
		},
		{
			name:  "ApproveAfterExpiry",
			setup: []ProfileEvent{request("apr_1", "default", "deploy", 0)},
			try:   ev(EventSwitchApproved, "apr_1", ttl+time.Second),
			want:  ErrApprovalExpired,
		},
		{
			name: "ApplyExpired",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
				ev(EventSwitchExpired, "apr_1", ttl),
			},
			try:  ev(EventSwitchApplied, "apr_1", ttl-time.Second), // a clock that steps back
			want: ErrApprovalExpired,
		},
		{
			name: "ApplyWithOtherTarget",
			setup: []ProfileEvent{
				request("apr_1", "default", "deploy", 0),
				ev(EventSwitchApproved, "apr_1", time.Minute),
			},
			try:  ProfileEvent{Kind: EventSwitchApplied, ID: "apr_1", To: "admin", At: at(2 * time.Minute)},
			want: ErrBadEvent,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(t, "default")
			for _, e := range tc.setup {
				r.must(e)
			}
			active := r.s.Active()
			err := r.do(tc.try)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v %q: %v, want %v", tc.try.Kind, tc.try.ID, err, tc.want)
			}
			if r.s.Active() != active {
				t.Errorf("the refused event moved the profile from %q to %q", active, r.s.Active())
			}
			r.replayEqual("default")
		})
	}
}

// TestApprovalFromTheWrongProfile: an approval is bound to the profile it
// was requested from, and the binding is checked when the switch is
// applied. A human may approve a request whatever profile the agent is in
// by then (the decision is not lost); applying it from another profile
// fails, changes nothing, and does not spend it: if that profile becomes
// active again before the expiry it may still apply, once (upstream
// TestApprovalBoundToOriginatingProfile).
func TestApprovalFromTheWrongProfile(t *testing.T) {
	t.Run("ApproveAfterTheAgentMoved", func(t *testing.T) {
		r := newRecorder(t, "default")
		r.must(request("apr_1", "default", "deploy", 0))
		r.must(switched("default", "code-review", SourceAgent, time.Minute))
		r.must(ev(EventSwitchApproved, "apr_1", 2*time.Minute))
		if e, _ := r.s.Escalation("apr_1"); e.Status != EscalationApproved {
			t.Errorf("status %v, want approved", e.Status)
		}
		err := r.do(ev(EventSwitchApplied, "apr_1", 3*time.Minute))
		if !errors.Is(err, ErrApprovalWrongProfile) {
			t.Fatalf("apply: %v, want %v", err, ErrApprovalWrongProfile)
		}
		want := `apply "apr_1": approval from the wrong profile: requested from "default", active is "code-review"`
		if err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
		if e, _ := r.s.Escalation("apr_1"); e.Status != EscalationApproved || r.s.Active() != "code-review" {
			t.Errorf("after the refused apply: %v in %q, want approved in code-review", e.Status, r.s.Active())
		}
		r.must(switched("code-review", "default", SourceAgent, 4*time.Minute))
		r.must(ev(EventSwitchApplied, "apr_1", 5*time.Minute))
		if r.s.Active() != "deploy" {
			t.Errorf("active %q, want deploy", r.s.Active())
		}
		r.replayEqual("default")
	})
	t.Run("ApplyAfterTheHumanMoved", func(t *testing.T) {
		r := newRecorder(t, "default")
		r.must(request("apr_1", "default", "deploy", 0))
		r.must(ev(EventSwitchApproved, "apr_1", time.Minute))
		r.must(switched("default", "code-review", SourceHuman, 2*time.Minute))
		err := r.do(ev(EventSwitchApplied, "apr_1", 3*time.Minute))
		if !errors.Is(err, ErrApprovalWrongProfile) {
			t.Fatalf("apply: %v, want %v", err, ErrApprovalWrongProfile)
		}
		if r.s.Active() != "code-review" {
			t.Errorf("active %q, want code-review unchanged", r.s.Active())
		}
		if _, ok := r.s.Open("deploy", at(3*time.Minute)); ok {
			t.Error("Open offers an approval from another profile")
		}
		// Back in default, the unspent approval applies, once.
		r.must(switched("code-review", "default", SourceAgent, 4*time.Minute))
		if e, ok := r.s.Open("deploy", at(4*time.Minute)); !ok || e.ID != "apr_1" {
			t.Errorf("Open(deploy) = %+v, %v, want apr_1", e, ok)
		}
		r.must(ev(EventSwitchApplied, "apr_1", 5*time.Minute))
		if r.s.Active() != "deploy" {
			t.Errorf("active %q, want deploy", r.s.Active())
		}
		r.replayEqual("default")
	})
	t.Run("RequestFromAProfileNotActive", func(t *testing.T) {
		r := newRecorder(t, "default")
		if err := r.do(request("apr_1", "code-review", "deploy", 0)); !errors.Is(err, ErrNotActive) {
			t.Fatalf("request: %v, want %v", err, ErrNotActive)
		}
	})
	t.Run("SwitchFromAProfileNotActive", func(t *testing.T) {
		r := newRecorder(t, "default")
		if err := r.do(switched("code-review", "deploy", SourceHuman, 0)); !errors.Is(err, ErrNotActive) {
			t.Fatalf("switch: %v, want %v", err, ErrNotActive)
		}
	})
}

func TestEscalationExpiry(t *testing.T) {
	r := newRecorder(t, "default")
	r.must(request("apr_1", "default", "deploy", 0))
	r.must(request("apr_2", "default", "admin", time.Minute))
	r.must(ev(EventSwitchApproved, "apr_2", 2*time.Minute))
	r.must(request("apr_3", "default", "ops", 3*time.Minute))
	r.must(ev(EventSwitchDenied, "apr_3", 4*time.Minute))
	if got := r.s.Due(at(ttl - time.Nanosecond)); len(got) != 0 {
		t.Errorf("Due before expiry = %q", got)
	}
	if got, want := r.s.Due(at(ttl+time.Minute)), []string{"apr_1", "apr_2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Due = %q, want %q (pending and approved, not denied)", got, want)
	}
	if err := r.do(ev(EventSwitchExpired, "apr_1", ttl-time.Second)); !errors.Is(err, ErrBadEvent) {
		t.Errorf("early expiry: %v, want %v", err, ErrBadEvent)
	}
	r.must(ev(EventSwitchExpired, "apr_1", ttl))
	r.must(ev(EventSwitchExpired, "apr_2", ttl+time.Minute))
	if err := r.do(ev(EventSwitchExpired, "apr_3", ttl+3*time.Minute)); !errors.Is(err, ErrApprovalResolved) {
		t.Errorf("expire denied: %v, want %v", err, ErrApprovalResolved)
	}
	if err := r.do(ev(EventSwitchDenied, "apr_1", ttl+time.Minute)); !errors.Is(err, ErrApprovalResolved) {
		t.Errorf("deny expired: %v, want %v", err, ErrApprovalResolved)
	}
	var got []string
	for _, e := range r.s.Escalations() {
		got = append(got, e.ID+"="+e.Status.String())
	}
	if want := []string{"apr_1=expired", "apr_2=expired", "apr_3=denied"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Escalations = %q, want %q", got, want)
	}
	if len(r.s.Pending()) != 0 {
		t.Errorf("Pending = %+v", r.s.Pending())
	}
	r.replayEqual("default")
}

// TestOpenReusesRequests: an agent re-issuing set_profile finds its open
// request (pending or approved, same origin and target, unexpired).
func TestOpenReusesRequests(t *testing.T) {
	r := newRecorder(t, "default")
	r.must(request("apr_1", "default", "deploy", 0))
	if e, ok := r.s.Open("deploy", at(time.Minute)); !ok || e.ID != "apr_1" || e.Status != EscalationPending {
		t.Errorf("Open = %+v, %v", e, ok)
	}
	if _, ok := r.s.Open("admin", at(time.Minute)); ok {
		t.Error("Open found a request for another target")
	}
	if _, ok := r.s.Open("deploy", at(ttl)); ok {
		t.Error("Open found an expired request")
	}
	r.must(ev(EventSwitchApproved, "apr_1", time.Minute))
	if e, ok := r.s.Open("deploy", at(2*time.Minute)); !ok || e.Status != EscalationApproved {
		t.Errorf("Open after approval = %+v, %v", e, ok)
	}
	r.must(ev(EventSwitchApplied, "apr_1", 2*time.Minute))
	if _, ok := r.s.Open("deploy", at(3*time.Minute)); ok {
		t.Error("Open found an applied request")
	}
}

func TestProfileEventsMalformed(t *testing.T) {
	tests := []struct {
		name string
		ev   ProfileEvent
	}{
		{"EmptyID", request("", "default", "deploy", 0)},
		{"IDWithSpace", request("apr 1", "default", "deploy", 0)},
		{"IDTooLong", request(string(make([]byte, 129)), "default", "deploy", 0)},
		{"SameTarget", request("apr_1", "default", "default", 0)},
		{"EmptyTarget", request("apr_1", "default", "", 0)},
		{"NoExpiry", ProfileEvent{Kind: EventSwitchRequested, ID: "apr_1", From: "default", To: "deploy", At: ps0}},
		{"ExpiryBeforeRequest", ProfileEvent{Kind: EventSwitchRequested, ID: "apr_1", From: "default", To: "deploy", At: ps0, ExpiresAt: ps0.Add(-time.Second)}},
		{"SwitchToSame", switched("default", "default", SourceAgent, 0)},
		{"SwitchToNothing", switched("default", "", SourceAgent, 0)},
		{"UnknownKind", ProfileEvent{Kind: 99, ID: "apr_1"}},
		{"ZeroKind", ProfileEvent{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(t, "default")
			if err := r.do(tc.ev); !errors.Is(err, ErrBadEvent) {
				t.Errorf("Apply = %v, want %v", err, ErrBadEvent)
			}
		})
	}
}

func TestProfileEventJSON(t *testing.T) {
	e := ProfileEvent{Kind: EventSwitchRequested, ID: "apr_1", From: "a", To: "b", Source: SourceHuman, At: ps0, ExpiresAt: ps0.Add(ttl)}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"kind": "switch.requested", "id": "apr_1", "from": "a", "to": "b", "source": "human",
		"at": "2026-09-01T12:00:00Z", "expires_at": "2026-09-01T12:10:00Z"}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("JSON = %v, want %v", m, want)
	}
	s, _ := json.Marshal(ProfileEvent{Kind: EventSwitched, From: "a", To: "b", At: ps0})
	m = nil
	if err := json.Unmarshal(s, &m); err != nil {
		t.Fatal(err)
	}
	if _, has := m["expires_at"]; has || m["kind"] != "profile.switched" || m["source"] != "agent" {
		t.Errorf("switched JSON = %s", s)
	}
	var k ProfileEventKind
	if err := k.UnmarshalText([]byte("switch.bogus")); err == nil {
		t.Error("UnmarshalText accepted switch.bogus")
	}
	if _, err := json.Marshal(ProfileEvent{}); err == nil {
		t.Error("Marshal of a kind-less event succeeded")
	}
	for k := EventSwitchRequested; k <= EventSwitched; k++ {
		var back ProfileEventKind
		text, _ := k.MarshalText()
		if err := back.UnmarshalText(text); err != nil || back != k {
			t.Errorf("kind %v round trip: %v, %v", k, back, err)
		}
	}
	if _, ok := NewProfileState("a").Escalation("apr_1"); ok {
		t.Error("Escalation found an unknown id")
	}
	if got := ProfileEventKind(42).String(); got != "ProfileEventKind(42)" {
		t.Errorf("String = %q", got)
	}
	if got := EscalationStatus(9).String(); got != "EscalationStatus(9)" {
		t.Errorf("String = %q", got)
	}
}

// TestProfileStateWithGateway runs the seed's flow end to end against a
// gateway: the decision, then the event, then the state.
func TestProfileStateWithGateway(t *testing.T) {
	g := extendsGateway(t)
	s := NewProfileState(g.DefaultProfile())
	step := func(target string, src SwitchSource, when time.Duration) SwitchOutcome {
		t.Helper()
		o := g.DecideSwitch(s.Active(), target, src)
		switch o {
		case SwitchNow:
			if err := s.Switch(s.Active(), target, src, at(when)); err != nil {
				t.Fatal(err)
			}
		case SwitchNeedsApproval:
			if _, open := s.Open(target, at(when)); !open {
				id := "apr_" + target
				if err := s.RequestSwitch(id, s.Active(), target, at(when), at(when+ttl)); err != nil {
					t.Fatal(err)
				}
			}
		}
		return o
	}
	if o := step("code-review", SourceAgent, 0); o != SwitchNow || s.Active() != "code-review" {
		t.Fatalf("edge switch: %v, active %q", o, s.Active())
	}
	if o := step("frontend-dev", SourceAgent, time.Minute); o != SwitchNeedsApproval || s.Active() != "code-review" {
		t.Fatalf("lateral spread: %v, active %q", o, s.Active())
	}
	if o := step("frontend-dev", SourceAgent, 2*time.Minute); o != SwitchNeedsApproval || len(s.Pending()) != 1 {
		t.Fatalf("re-issued: %v, %d pending (want the same one)", o, len(s.Pending()))
	}
	if o := step("ghost", SourceAgent, 3*time.Minute); o != SwitchUnknownProfile {
		t.Fatalf("unknown: %v", o)
	}
	if err := s.ApproveSwitch("apr_frontend-dev", at(4*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplySwitch("apr_frontend-dev", at(5*time.Minute)); err != nil || s.Active() != "frontend-dev" {
		t.Fatalf("apply: %v, active %q", err, s.Active())
	}
}

// TestApprovalAcrossProfiles walks the attacks on an approval whose agent
// moves between profiles: each step either applies or is refused with its
// error, a refused step changes nothing, and replay gives the same state.
func TestApprovalAcrossProfiles(t *testing.T) {
	type step struct {
		ev   ProfileEvent
		want error // nil: accepted
	}
	tests := []struct {
		name   string
		steps  []step
		active string // at the end
		status EscalationStatus
	}{
		{
			name: "ApprovedWhileAwayAppliedFromAnotherProfile",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{switched("default", "code-review", SourceAgent, time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", 2*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 3*time.Minute), ErrApprovalWrongProfile},
			},
			active: "code-review", status: EscalationApproved,
		},
		{
			name: "ApprovedWhileAwayAppliedAfterReturning",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{switched("default", "code-review", SourceAgent, time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", 2*time.Minute), nil},
				{switched("code-review", "default", SourceAgent, 3*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 4*time.Minute), nil},
			},
			active: "deploy", status: EscalationApplied,
		},
		{
			name: "ReplayedAfterApplyingFromTheRightProfile",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{ev(EventSwitchApproved, "esc-1", time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 2*time.Minute), nil},
				{switched("deploy", "default", SourceHuman, 3*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 4*time.Minute), ErrApprovalUsed},
			},
			active: "default", status: EscalationApplied,
		},
		{
			name: "AppliedFromAnotherProfileThenReplayedFromTheRightOne",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{ev(EventSwitchApproved, "esc-1", time.Minute), nil},
				{switched("default", "code-review", SourceAgent, 2*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 3*time.Minute), ErrApprovalWrongProfile},
				{switched("code-review", "default", SourceAgent, 4*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 5*time.Minute), nil},
				{switched("deploy", "default", SourceAgent, 6*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 7*time.Minute), ErrApprovalUsed},
			},
			active: "default", status: EscalationApplied,
		},
		{
			name: "AppliedAfterReturningTooLate",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{switched("default", "code-review", SourceAgent, time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", 2*time.Minute), nil},
				{switched("code-review", "default", SourceAgent, ttl), nil},
				{ev(EventSwitchApplied, "esc-1", ttl), ErrApprovalExpired},
			},
			active: "default", status: EscalationApproved,
		},
		{
			name: "ApprovedTwiceWhileAway",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{switched("default", "code-review", SourceAgent, time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", 2*time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", 3*time.Minute), ErrApprovalResolved},
			},
			active: "code-review", status: EscalationApproved,
		},
		{
			name: "ApprovedAfterExpiryWhileAway",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{switched("default", "code-review", SourceAgent, time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", ttl), ErrApprovalExpired},
			},
			active: "code-review", status: EscalationPending,
		},
		{
			name: "RevokedWhileAwayThenAppliedAfterReturning",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{switched("default", "code-review", SourceAgent, time.Minute), nil},
				{ev(EventSwitchApproved, "esc-1", 2*time.Minute), nil},
				{ev(EventSwitchDenied, "esc-1", 3*time.Minute), nil},
				{switched("code-review", "default", SourceAgent, 4*time.Minute), nil},
				{ev(EventSwitchApplied, "esc-1", 5*time.Minute), ErrApprovalDenied},
			},
			active: "default", status: EscalationDenied,
		},
		{
			name: "AppliedWithAnotherOrigin",
			steps: []step{
				{request("esc-1", "default", "deploy", 0), nil},
				{ev(EventSwitchApproved, "esc-1", time.Minute), nil},
				{switched("default", "code-review", SourceAgent, 2*time.Minute), nil},
				{ProfileEvent{Kind: EventSwitchApplied, ID: "esc-1", From: "code-review", To: "deploy", At: at(3 * time.Minute)}, ErrBadEvent},
			},
			active: "code-review", status: EscalationApproved,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(t, "default")
			for i, st := range tc.steps {
				err := r.do(st.ev)
				if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
					t.Fatalf("step %d %v %q: %v, want %v", i, st.ev.Kind, st.ev.ID, err, st.want)
				}
			}
			e, _ := r.s.Escalation("esc-1")
			if r.s.Active() != tc.active || e.Status != tc.status {
				t.Errorf("end: %q %v, want %q %v", r.s.Active(), e.Status, tc.active, tc.status)
			}
			r.replayEqual("default")
		})
	}
}
