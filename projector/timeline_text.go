package projector

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/schemas"
)

// Label is the short name of a step's kind in a text transcript.
func (s Step) Label() string {
	switch s.Kind {
	case string(schemas.KindSessionOpened):
		return "open"
	case string(schemas.KindSessionClosed):
		return "closed"
	case string(schemas.KindFrameC2S):
		return "c2s"
	case string(schemas.KindFrameS2C):
		return "s2c"
	case string(schemas.KindFrameRefusal):
		return "refusal"
	case string(schemas.KindCallIntent):
		return "intent"
	case string(schemas.KindCallOutcome):
		return "outcome"
	case string(schemas.KindApprovalRequested), string(schemas.KindApprovalResolved),
		string(schemas.KindApprovalExpired), string(schemas.KindApprovalRefused):
		return "approval"
	case string(schemas.KindConfinementApplied):
		return "confined"
	case string(schemas.KindChildStarted):
		return "started"
	case string(schemas.KindChildExited):
		return "exited"
	case string(schemas.KindProfileSwitched):
		return "profile"
	case string(schemas.KindCallCancelled):
		return "cancelled"
	case string(schemas.KindTaskResult):
		return "task"
	case string(schemas.KindFrameDropped):
		return "dropped"
	case string(schemas.KindRecordCheckpoint):
		return "signed"
	case string(schemas.KindToolPinned):
		return "pinned"
	case string(schemas.KindToolChanged):
		return "changed"
	case string(schemas.KindPinsReset):
		return "unpinned"
	case string(schemas.KindNote):
		if s.Skipped != nil {
			return "skipped"
		}
	case StepInFlight:
		return "in-flight"
	}
	return s.Kind
}

// Line renders a step as one transcript line:
//
//	+0.012s  -        outcome   call-1 echo: allowed → success in 3 ms · seq 4
func (s Step) Line() string {
	return fmt.Sprintf("%9s  %-8s %-9s %s", formatOffset(s.OffsetMS), Printable(s.Profile), s.Label(), s.Text())
}

// Text renders what a step says, without its time, profile and label.
// Control characters (which tool names, reasons and other recorded text
// may hold) are escaped, so a transcript cannot drive a terminal.
func (s Step) Text() string {
	return Printable(s.text())
}

// Printable returns s safe to write to a terminal: every character that
// could act on it or hide what follows (C0 and C1 controls, DEL, format
// characters such as bidi overrides and zero-width ones, line and
// paragraph separators, and any other non-printing character) is written
// as \uXXXX (\UXXXXXXXX above the BMP), except C0 controls and DEL, which
// are written as \xXX, like a byte that is not UTF-8. Printable
// characters, the ASCII space included, stay as they are. Host-chosen
// text (tool names, approval ids, arguments, and every transcript line)
// goes through it before it reaches the operator.
func Printable(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < 0x7f {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r) // C0 and DEL
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

func (s Step) text() string {
	var b strings.Builder
	switch {
	case s.Opened != nil:
		o := s.Opened
		b.WriteString("pid " + strconv.Itoa(o.PID))
		if o.Config != "" {
			b.WriteString(" · gateway " + o.Config)
		} else if len(o.Argv) > 0 {
			b.WriteString(" · " + QuoteArgv(o.Argv))
		}
		if o.Principal != nil {
			b.WriteString(" · principal " + Printable(o.Principal.Short()) + " of " + Printable(o.Principal.Issuer))
		}
		if o.AuditPath != "" {
			b.WriteString(" · audit " + o.AuditPath)
		}
		if o.KeyID != "" {
			b.WriteString(" · key " + short(o.KeyID, 12))
		}
	case s.Frame != nil:
		b.WriteString(frameText(s.Frame))
	case s.Kind == StepInFlight && s.Call != nil:
		c := s.Call
		b.WriteString(c.CallID + " " + c.Tool + ": in flight, no outcome")
		if c.IntentAt != nil {
			b.WriteString(" (intent at " + c.IntentAt.UTC().Format(time.RFC3339Nano) + ")")
		}
	case s.Call != nil:
		b.WriteString(callText(s.Kind, s.Call))
	case s.Approval != nil:
		b.WriteString(approvalText(s.Approval))
	case s.Confinement != nil:
		b.WriteString(confinementText(s.Confinement))
	case s.Child != nil:
		c := s.Child
		if c.Server != "" {
			b.WriteString(c.Server + " ")
		}
		if s.Kind == string(schemas.KindChildStarted) {
			b.WriteString("pid " + strconv.Itoa(c.PID))
			if len(c.Argv) > 0 {
				b.WriteString(" · " + QuoteArgv(c.Argv))
			}
		} else {
			if c.PID != 0 {
				b.WriteString("pid " + strconv.Itoa(c.PID) + " ")
			}
			if c.Code != nil {
				b.WriteString("status " + strconv.Itoa(*c.Code))
			} else {
				b.WriteString("status unknown")
			}
			if c.EndedBy != "" {
				b.WriteString(" · ended by " + c.EndedBy)
			}
			if c.Reason != "" {
				b.WriteString(": " + Printable(c.Reason))
			}
			if c.ServerExitedFirst {
				b.WriteString(" · the server exited before the host closed stdin")
			}
		}
	case s.Skipped != nil:
		k := s.Skipped
		fmt.Fprintf(&b, "server %s skipped at %s: %s", k.Server, k.Stage, k.Error)
	case s.End != nil:
		e := s.End
		switch e.State {
		case StateRunning:
			fmt.Fprintf(&b, "running: aegis process %d still holds the store; this is the session as far as it is durable", e.PID)
		case StateUnclosed:
			fmt.Fprintf(&b, "unclosed: no close line has reached this copy; aegis process %d may still be running on its host, or was stopped before it wrote one", e.PID)
		default:
			fmt.Fprintf(&b, "%s: no close line, and its process (pid %d) is gone", e.State, e.PID)
		}
		if e.InFlight > 0 {
			fmt.Fprintf(&b, "; %d call(s) in flight", e.InFlight)
		}
	case s.Kind == string(schemas.KindProfileSwitched):
		b.WriteString("switched to " + s.Profile)
	case s.Kind == string(schemas.KindSessionClosed):
		b.WriteString("close line")
	case s.Kind == string(schemas.KindCallCancelled):
		var c struct {
			CallID  string `json:"call_id"`
			ToolID  string `json:"tool_id"`
			AfterMS int64  `json:"after_ms"`
			By      string `json:"by"`
			Reason  string `json:"reason"`
		}
		var task struct {
			TaskID string `json:"task_id"`
		}
		json.Unmarshal(s.Payload, &c)
		json.Unmarshal(s.Payload, &task)
		if task.TaskID != "" {
			fmt.Fprintf(&b, "task %s of %s %s cancelled by the host (tasks/cancel)", Printable(task.TaskID), c.CallID, c.ToolID)
			break
		}
		if c.By == "aegis" {
			fmt.Fprintf(&b, "%s %s cancelled by aegis %d ms after its intent: %s", c.CallID, c.ToolID, c.AfterMS, c.Reason)
		} else {
			fmt.Fprintf(&b, "%s %s cancelled by the host %d ms after its intent", c.CallID, c.ToolID, c.AfterMS)
		}
	case s.Kind == string(schemas.KindTaskResult):
		var r struct {
			TaskID       string `json:"task_id"`
			CallID       string `json:"call_id"`
			ToolID       string `json:"tool_id"`
			ResultDigest string `json:"result_digest"`
			IsError      bool   `json:"is_error"`
			Error        string `json:"error"`
		}
		json.Unmarshal(s.Payload, &r)
		fmt.Fprintf(&b, "task %s of %s %s: ", Printable(r.TaskID), r.CallID, r.ToolID)
		switch {
		case r.Error != "":
			b.WriteString("no result: " + Printable(short(r.Error, 120)))
		case r.IsError:
			b.WriteString("error result " + short(r.ResultDigest, 12))
		default:
			b.WriteString("result " + short(r.ResultDigest, 12))
		}
	case s.Kind == string(schemas.KindRecordCheckpoint):
		var c RecordCheckpoint
		json.Unmarshal(s.Payload, &c)
		fmt.Fprintf(&b, "checkpoint of the record's first %d lines", c.Size)
	case s.Kind == string(schemas.KindToolPinned), s.Kind == string(schemas.KindToolChanged), s.Kind == string(schemas.KindPinsReset):
		b.WriteString(pinText(schemas.Kind(s.Kind), s.Payload))
	case s.Kind == string(schemas.KindFrameDropped):
		var d struct {
			Direction string `json:"direction"`
			Reason    string `json:"reason"`
		}
		json.Unmarshal(s.Payload, &d)
		fmt.Fprintf(&b, "the %s frame above was not relayed: %s", d.Direction, d.Reason)
	case len(s.Payload) > 0:
		b.WriteString(short(string(s.Payload), 160))
	}
	if s.Seq != nil {
		b.WriteString(" · seq " + strconv.FormatUint(*s.Seq, 10))
	}
	return b.String()
}

func frameText(f *FrameSummary) string {
	var b strings.Builder
	if f.Shape == "batch" {
		fmt.Fprintf(&b, "batch of %d: ", len(f.Batch))
		for i := range f.Batch {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == 8 {
				fmt.Fprintf(&b, "… %d more", len(f.Batch)-i)
				break
			}
			b.WriteString(frameHead(&f.Batch[i]))
		}
	} else {
		b.WriteString(frameHead(f))
	}
	fmt.Fprintf(&b, " · %d B", f.Size)
	return b.String()
}

func frameHead(f *FrameSummary) string {
	var s string
	switch f.Shape {
	case "request", "notification":
		s = f.Method
		if f.Tool != "" {
			s += " " + f.Tool
		}
	case "response":
		s = "result"
	case "error":
		s = "error"
		if f.AegisCode != "" {
			s += " " + f.AegisCode
		} else if f.ErrorCode != "" {
			s += " " + f.ErrorCode
		}
	default:
		return "not JSON-RPC"
	}
	if f.ID != "" {
		s += " id=" + f.ID
	}
	return s
}

func callText(kind string, c *CallInfo) string {
	s := c.CallID + " " + c.Tool
	if kind == string(schemas.KindCallIntent) {
		return s
	}
	s += ": " + c.Policy
	if c.Policy == schemas.StatusPendingApproval && c.ApprovalID != "" {
		s += " " + c.ApprovalID
	}
	if c.Reason != "" {
		s += " " + strconv.Quote(c.Reason)
	}
	if c.MatchedRule != "" {
		s += " (rule " + c.MatchedRule + ")"
	}
	if c.ApprovalRef != "" {
		s += " by approval " + c.ApprovalRef
	}
	switch {
	case c.Refused && c.ExecutionReason == schemas.ReasonSiblingRefused:
		s += " → refused with its batch, not executed"
	case c.Refused:
		s += " → refused, not executed"
	default:
		s += " → " + c.Execution
		if c.ExecutionReason != "" {
			s += " (" + c.ExecutionReason + ")"
		}
		if c.WallMS != nil {
			s += " in " + strconv.FormatUint(*c.WallMS, 10) + " ms"
		}
	}
	return s
}

func approvalText(a *ApprovalInfo) string {
	switch a.Event {
	case ApprovalEventRequested:
		s := "requested " + a.ApprovalID
		if t := approvalTarget(a); t != "" {
			s += " for " + t
		}
		if a.ExpiresAt != nil {
			s += " · expires " + a.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return s
	case ApprovalEventApproved, ApprovalEventDenied:
		s := a.ApprovalID + " " + a.Event
		if a.By != "" {
			s += " by " + a.By
		}
		s += signedBy(a)
		if a.Reason != "" {
			s += " " + strconv.Quote(a.Reason)
		}
		if a.Revoked {
			s += " · revokes its approval"
		}
		if a.Tool == "" && (a.From != "" || a.To != "") {
			s += " · " + approvalTarget(a)
		}
		return s
	case ApprovalEventDuplicate:
		s := a.Op + " " + a.ApprovalID
		if a.By != "" {
			s += " by " + a.By
		}
		return s + " · duplicate resolution, ignored: " + a.Reason
	case ApprovalEventRefused:
		s := a.Op + " " + a.ApprovalID
		if a.By != "" {
			s += " by " + a.By
		}
		return s + signedBy(a) + " refused: " + a.Reason
	}
	return a.ApprovalID + " " + a.Event
}

// signedBy names the approver key an approval event carries, if any.
func signedBy(a *ApprovalInfo) string {
	if a.ApproverKeyID == "" {
		return ""
	}
	s := " · signed by "
	if a.Approver != "" {
		s += a.Approver + " "
	}
	return s + "(key " + short(a.ApproverKeyID, 16) + ")"
}

// approvalTarget says what an approval is for: the tool of a call's
// approval, or "profile FROM -> TO" for a gateway's profile switch.
func approvalTarget(a *ApprovalInfo) string {
	switch {
	case a.Tool != "":
		return a.Tool
	case a.From != "" || a.To != "":
		return "profile " + orUnknown(a.From) + " -> " + orUnknown(a.To)
	}
	return ""
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func confinementText(c *ConfinementInfo) string {
	if c.Refused != "" {
		return "refused: " + c.Refused
	}
	var parts []string
	ll := "landlock ABI " + strconv.Itoa(c.LandlockABI)
	if c.FullyEnforced {
		ll += " fully enforced"
	} else {
		ll += " partly enforced"
	}
	ll += fmt.Sprintf(" (%d fs rules, %d net rules", c.FSRules, c.NetRules)
	if c.TCPRestricted {
		ll += ", tcp restricted"
	}
	parts = append(parts, ll+")")
	switch {
	case !c.SeccompApplied:
		parts = append(parts, "no seccomp")
	case c.NetworkDenied:
		parts = append(parts, "seccomp: network denied")
	default:
		parts = append(parts, "seccomp applied")
	}
	if c.NoNewPrivs {
		parts = append(parts, "no_new_privs")
	}
	p := fmt.Sprintf("%d protected paths", c.Protected)
	if c.ProtectVerified {
		p += " verified"
	}
	parts = append(parts, p)
	if len(c.Degradations) > 0 {
		parts = append(parts, "degraded: "+strings.Join(c.Degradations, "; "))
	}
	if c.ExecPath != "" {
		parts = append(parts, "exec "+c.ExecPath)
	}
	return strings.Join(parts, " · ")
}

// QuoteArgv renders argv for one line, quoting arguments that need it.
func QuoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") || !strconv.CanBackquote(a) {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
