package projector

import (
	"crypto/sha256"
	"encoding/json"
	"path"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// This file is the fold of events into what aegis exports as metrics and
// traces (docs/telemetry.md). It is pure, like every fold: the events and
// their times come in, observations go out through a [TelemetryOut], and
// the OpenTelemetry wiring lives in a shell outside this package.
//
// Its invariants:
//   - No unbounded label. A metric's labels are the server (one per
//     server a session started), the tool (at most [MaxToolLabels]
//     distinct names per fold, then [OtherLabel]: a host can name any
//     tool in a call that is refused), and closed sets of words for
//     verdicts and reasons. Arguments, ids and paths are never labels.
//   - Spans carry no content: ids, names, verdicts, times and record
//     positions, never arguments or results.
//   - The same events give the same spans. A span's ids are derived
//     from the session and the call (or taken from the host's trace
//     context recorded in the intent line), so a replay of the stream
//     re-emits the spans the running process exported, with the same ids.

// MaxToolLabels bounds the distinct tool names a fold uses as labels.
const MaxToolLabels = 200

// OtherLabel stands for every tool past [MaxToolLabels], and for a server
// aegis cannot name.
const OtherLabel = "_other"

// Verdicts of a call, as its metrics and span label it.
const (
	CallAllowed         = "allowed"
	CallDenied          = "denied"
	CallRateLimited     = "rate_limited"
	CallPendingApproval = "pending_approval"
	CallFailed          = "failed"
	// CallUnfinished is a call whose session closed before its outcome.
	CallUnfinished = "unfinished"
)

// Refusal reasons, as the refusals metric labels them: a closed set.
const (
	RefusalPolicy          = "policy_denied"
	RefusalRateLimited     = "rate_limited"
	RefusalPendingApproval = "pending_approval"
	RefusalMalformed       = "malformed"
	RefusalCapability      = "capability_denied"
	RefusalSibling         = "sibling_refused"
	RefusalHost            = "host_denied"
)

// TelemetryEvent is one event as the fold takes it: its stream sequence
// (the commit that made it durable) and, when the reader knows it, when
// that commit was acknowledged.
type TelemetryEvent struct {
	Seq    uint64
	Stored time.Time
	Event  schemas.Event
}

// CallSpan is one tools/call from its intent to its outcome.
type CallSpan struct {
	Session string
	CallID  string
	// Server and Tool are the call's labels (bounded); ToolID is the tool
	// as recorded, for the span alone.
	Server, Tool, ToolID string
	Verdict              string
	// Reason is the refusal reason (one of the Refusal constants) of a
	// refused call, else "".
	Reason string
	// TraceID and SpanID name the call's span; Parent is the host's span
	// (zero when the host sent no trace context), HostTraceParent the
	// context as recorded.
	TraceID         [16]byte
	SpanID          [8]byte
	Parent          [8]byte
	HostTraceParent string
	Start, End      time.Time
	// AtServer is the call's time at the server (the outcome's wall_ms),
	// when it ran there.
	AtServer *time.Duration
	// IntentSeq and OutcomeSeq are the record lines' seq, joining the
	// span to the signed record.
	IntentSeq, OutcomeSeq *uint64
	// Children are the call's durable commits and its approval wait.
	Children []ChildSpan
	// Unfinished is set for a call whose session closed without its
	// outcome; End is then the close.
	Unfinished bool
}

// ChildSpan is a part of a call: the commit of its intent or outcome, or
// the wait for the approval that let it through.
type ChildSpan struct {
	Name       string
	SpanID     [8]byte
	Start, End time.Time
}

// Why an HTTP client's session ended, as the closed sessions metric
// labels it: a closed set.
const (
	HTTPEndedDeleted  = "deleted"  // its client ended it
	HTTPEndedEvicted  = "evicted"  // the one idle longest, to make room
	HTTPEndedIdle     = "idle"     // idle past the idle timeout
	HTTPEndedShutdown = "shutdown" // the gateway stopped
	// HTTPEndedOther is a session that ended on its own (its connection
	// failed), or whose close event does not say (an older aegis).
	HTTPEndedOther = "other"
)

// ApprovalAbandoned is the verdict of an approval still pending when its
// session closed: no one can act on it any more.
const ApprovalAbandoned = "abandoned"

// Child span names.
const (
	SpanCommitIntent  = "aegis.commit intent"
	SpanCommitOutcome = "aegis.commit outcome"
	SpanApprovalWait  = "aegis.approval.wait"
)

// TelemetryOut receives what the fold observes, in stream order.
type TelemetryOut interface {
	// Call is a finished call.
	Call(CallSpan)
	// ApprovalRequested and ApprovalDecided move the pending approvals;
	// verdict is approved, denied, expired or abandoned (its session
	// closed), wait the time since the request.
	ApprovalRequested()
	ApprovalDecided(verdict string, wait time.Duration)
	// Commit is one durable commit of this store (one fsync): from the
	// earliest event in it to its acknowledgement.
	Commit(latency time.Duration)
	// PinChanged is a tool.changed event.
	PinChanged()
	// SessionOpened and SessionClosed move the open sessions; http is set
	// for a session of an HTTP client of gateway --listen, and ended is
	// then why it ended (one of the HTTPEnded constants).
	SessionOpened(http bool)
	SessionClosed(http bool, ended string)
}

// Telemetry is the fold. The zero value is not ready: use [NewTelemetry].
type Telemetry struct {
	tools    map[string]bool
	sessions map[string]*telSession
	lastSeq  uint64
	commitAt time.Time
	earliest time.Time
	// buf is where a call's record line is unescaped to be read.
	buf []byte
}

// telCall is a call from its intent to its outcome, with room for what
// its span points at: one allocation a call.
type telCall struct {
	CallSpan
	seqs     [2]uint64
	atServer time.Duration
	kids     [3]ChildSpan
}

// telSession is what the fold keeps of an open session; it lets go of it
// at the close, so a long-running process keeps only its open sessions.
type telSession struct {
	http    bool
	servers []string
	calls   map[string]*telCall
	// approvalWaits holds, per approval id, its request and decision
	// times; decided, the approvals decided.
	approvalWaits map[string][2]time.Time
	decided       map[string]bool
}

// NewTelemetry returns an empty fold.
func NewTelemetry() *Telemetry {
	return &Telemetry{tools: map[string]bool{}, sessions: map[string]*telSession{}}
}

func (t *Telemetry) session(id string) *telSession {
	s := t.sessions[id]
	if s == nil {
		s = &telSession{calls: map[string]*telCall{}, approvalWaits: map[string][2]time.Time{}, decided: map[string]bool{}}
		t.sessions[id] = s
	}
	return s
}

// Apply folds one event.
func (t *Telemetry) Apply(te TelemetryEvent, out TelemetryOut) {
	e := te.Event
	t.commit(te, out)
	switch e.Kind {
	case schemas.KindSessionOpened:
		var p SessionOpened
		json.Unmarshal(e.Payload, &p)
		s := t.session(e.Session)
		s.http = p.Run != ""
		out.SessionOpened(s.http)
	case schemas.KindSessionClosed:
		s := t.session(e.Session)
		for _, c := range s.calls {
			c.End, c.Unfinished, c.Verdict = e.Time, true, CallUnfinished
			out.Call(c.CallSpan)
		}
		for id, w := range s.approvalWaits {
			if !s.decided[id] {
				out.ApprovalDecided(ApprovalAbandoned, e.Time.Sub(w[0]))
			}
		}
		ended := ""
		if s.http {
			var p SessionClosedPayload
			json.Unmarshal(e.Payload, &p)
			switch ended = p.Ended; ended {
			case HTTPEndedDeleted, HTTPEndedEvicted, HTTPEndedIdle, HTTPEndedShutdown:
			default:
				ended = HTTPEndedOther
			}
		}
		out.SessionClosed(s.http, ended)
		delete(t.sessions, e.Session)
	case schemas.KindChildStarted, schemas.KindServerConnection:
		var p struct {
			Server string   `json:"server"`
			Argv   []string `json:"argv"`
		}
		json.Unmarshal(e.Payload, &p)
		name := p.Server
		if name == "" {
			name = commandName(p.Argv)
		}
		s := t.session(e.Session)
		if name != "" && !contains(s.servers, name) && len(s.servers) < MaxToolLabels {
			s.servers = append(s.servers, name)
		}
	case schemas.KindCallIntent:
		callID, toolID, l, buf := telemetryCall(e.Payload, t.buf)
		t.buf = buf
		s := t.session(e.Session)
		c := &telCall{}
		c.Session, c.CallID, c.ToolID, c.Start = e.Session, callID, toolID, e.Time
		if l.hasSeq {
			c.seqs[0] = l.seq
			c.IntentSeq = &c.seqs[0]
		}
		c.Children = c.kids[:0]
		c.Server, c.Tool = t.labels(s, toolID)
		c.SpanID = spanID(e.Session, callID, "call")
		if tp, ok := schemas.ParseTraceParent(l.TraceParent); ok {
			c.TraceID, c.Parent, c.HostTraceParent = tp.TraceID, tp.SpanID, l.TraceParent
		} else {
			var b [128]byte
			h := sha256.Sum256(append(append(append(append(b[:0], "aegis-trace\x00"...), e.Session...), 0), callID...))
			copy(c.TraceID[:], h[:16])
		}
		if !te.Stored.IsZero() {
			c.Children = append(c.Children, ChildSpan{Name: SpanCommitIntent, SpanID: spanID(e.Session, callID, SpanCommitIntent), Start: e.Time, End: te.Stored})
		}
		s.calls[callID] = c
	case schemas.KindCallOutcome:
		callID, _, l, buf := telemetryCall(e.Payload, t.buf)
		t.buf = buf
		s := t.session(e.Session)
		c := s.calls[callID]
		if c == nil {
			// An outcome whose intent came before the fold began.
			return
		}
		delete(s.calls, callID)
		c.End = e.Time
		if l.hasSeq {
			c.seqs[1] = l.seq
			c.OutcomeSeq = &c.seqs[1]
		}
		c.Verdict, c.Reason = verdictOf(l.auditLine)
		if l.hasWall && l.Execution.Status != schemas.StatusHostDenied && c.Verdict != CallDenied && c.Verdict != CallRateLimited && c.Verdict != CallPendingApproval {
			c.atServer = time.Duration(l.wallMS) * time.Millisecond
			c.AtServer = &c.atServer
		}
		if !te.Stored.IsZero() {
			c.Children = append(c.Children, ChildSpan{Name: SpanCommitOutcome, SpanID: spanID(e.Session, callID, SpanCommitOutcome), Start: e.Time, End: te.Stored})
		}
		if ref := l.DecisionAxes.ApprovalRef; ref != "" {
			if w, ok := s.approvalWaits[ref]; ok && !w[0].IsZero() && !w[1].IsZero() {
				c.Children = append(c.Children, ChildSpan{Name: SpanApprovalWait, SpanID: spanID(e.Session, callID, SpanApprovalWait), Start: w[0], End: w[1]})
			}
		}
		out.Call(c.CallSpan)
	case schemas.KindApprovalRequested:
		a, _ := decodeApproval(e)
		s := t.session(e.Session)
		if _, seen := s.approvalWaits[a.ApprovalID]; a.ApprovalID == "" || seen || s.decided[a.ApprovalID] {
			return
		}
		s.approvalWaits[a.ApprovalID] = [2]time.Time{e.Time}
		out.ApprovalRequested()
	case schemas.KindApprovalResolved, schemas.KindApprovalExpired:
		a, _ := decodeApproval(e)
		s := t.session(e.Session)
		if a.ApprovalID == "" || s.decided[a.ApprovalID] {
			return
		}
		verdict := a.Event
		if verdict != ApprovalEventApproved && verdict != ApprovalEventDenied && verdict != ApprovalEventExpired {
			return
		}
		s.decided[a.ApprovalID] = true
		var wait time.Duration
		if w, ok := s.approvalWaits[a.ApprovalID]; ok {
			wait = e.Time.Sub(w[0])
			w[1] = e.Time
			s.approvalWaits[a.ApprovalID] = w
			out.ApprovalDecided(verdict, wait)
		}
	case schemas.KindToolChanged:
		out.PinChanged()
	}
}

// commit reports a commit when te begins a new message; the message's
// earliest event time is tracked until the next one begins.
func (t *Telemetry) commit(te TelemetryEvent, out TelemetryOut) {
	if te.Seq == 0 || te.Stored.IsZero() {
		return
	}
	if te.Seq != t.lastSeq {
		if t.lastSeq != 0 && !t.commitAt.IsZero() {
			out.Commit(t.commitAt.Sub(t.earliest))
		}
		t.lastSeq, t.commitAt, t.earliest = te.Seq, te.Stored, te.Event.Time
	} else if te.Event.Time.Before(t.earliest) {
		t.earliest = te.Event.Time
	}
}

// Flush reports the last commit seen, which [Telemetry.Apply] holds until
// the next one begins (its events may not all have been folded yet).
func (t *Telemetry) Flush(out TelemetryOut) {
	if t.lastSeq != 0 && !t.commitAt.IsZero() {
		out.Commit(t.commitAt.Sub(t.earliest))
	}
	t.commitAt = time.Time{}
}

// labels returns the server and tool labels of toolID in session s: the
// gateway's "server__tool" when server is one the session started, else
// the session's only server.
func (t *Telemetry) labels(s *telSession, toolID string) (server, tool string) {
	server = OtherLabel
	if i := strings.Index(toolID, "__"); i > 0 && contains(s.servers, toolID[:i]) {
		server = toolID[:i]
	} else if len(s.servers) == 1 {
		server = s.servers[0]
	}
	tool = toolID
	if !t.tools[tool] {
		if len(t.tools) >= MaxToolLabels {
			return server, OtherLabel
		}
		t.tools[tool] = true
	}
	return server, tool
}

// verdictOf classifies an outcome line.
func verdictOf(l auditLine) (verdict, reason string) {
	switch l.Policy.Status {
	case schemas.StatusRateLimited:
		return CallRateLimited, RefusalRateLimited
	case schemas.StatusPendingApproval:
		return CallPendingApproval, RefusalPendingApproval
	case schemas.StatusDenied:
		r := l.Policy.Reason
		if r == schemas.ReasonMalformedCall || strings.HasPrefix(r, "ambiguous") || strings.Contains(r, "tools/call") {
			return CallDenied, RefusalMalformed
		}
		return CallDenied, RefusalPolicy
	}
	if l.Capability.Status == schemas.StatusDenied {
		return CallDenied, RefusalCapability
	}
	switch l.Execution.Status {
	case schemas.StatusHostDenied:
		if l.Execution.Reason == schemas.ReasonSiblingRefused {
			return CallDenied, RefusalSibling
		}
		return CallDenied, RefusalHost
	case schemas.StatusTrap, schemas.StatusResourceExceeded:
		return CallFailed, ""
	}
	return CallAllowed, ""
}

// spanID derives the id of one of a call's spans.
func spanID(session, callID, part string) [8]byte {
	var b [128]byte
	h := sha256.Sum256(append(append(append(append(append(append(b[:0], "aegis-span\x00"...), session...), 0), callID...), 0), part...))
	var id [8]byte
	copy(id[:], h[:8])
	if id == [8]byte{} {
		id[7] = 1
	}
	return id
}

// launchers are commands that run the server named by their first
// argument that is not a flag.
var launchers = map[string]bool{"npx": true, "node": true, "python": true, "python3": true, "uvx": true, "uv": true, "bunx": true, "deno": true, "go": true, "docker": true, "podman": true, "env": true}

// commandName names a wrapped server by its command: the base name of
// argv[0], or of the first argument after a launcher such as npx.
func commandName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	name := path.Base(argv[0])
	if launchers[name] {
		for _, a := range argv[1:] {
			if a != "" && !strings.HasPrefix(a, "-") && a != "run" && !strings.Contains(a, "=") {
				return path.Base(a)
			}
		}
	}
	return name
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
