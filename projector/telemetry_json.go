package projector

import (
	"unicode/utf8"

	"github.com/aegis-dev/aegis/schemas"
)

// The telemetry fold reads every call's two record lines while calls are
// being made, so it reads only what a call's span and metrics take, in one
// pass over the payload and one over the line. The line is unescaped into
// a buffer the fold reuses, and only the ids, the host's traceparent and
// a reason that is not one of aegis's own become strings.

// telemetryCall reads a call.intent or call.outcome payload as the fold
// needs it: its call and tool ids, and of its line the seq, traceparent,
// policy, capability and execution status and reason, wall_ms and
// decision_axes.approval_ref. Those are what [callPayload] and
// [parseAuditLine] give for the same payload; the other members of l are
// left empty, and seq and wall_ms are in l's seq and wallMS, not behind
// pointers. buf is scratch space; the grown buffer is returned.
func telemetryCall(p, buf []byte) (callID, toolID string, l telLine, scratch []byte) {
	var raw []byte
	members(p, func(k, v []byte) {
		switch {
		case keyIs(k, "line"):
			raw = v
		case keyIs(k, "call_id"):
			callID = str(v)
		case keyIs(k, "tool_id"):
			toolID = str(v)
		}
	})
	line, ok := unescapeInto(buf[:0], raw)
	if !ok {
		// Escapes that the quick path leaves to the strict reader.
		line = append(buf[:0], str(raw)...)
	}
	members(line, func(k, v []byte) {
		switch string(k) {
		case "seq":
			if n, ok := digits(v); ok {
				l.seq, l.hasSeq = n, true
			}
		case "traceparent":
			l.TraceParent = str(v)
		case "wall_ms":
			if n, ok := digits(v); ok {
				l.wallMS, l.hasWall = n, true
			}
		case "policy":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "status":
					l.Policy.Status = known(v)
				case "reason":
					l.Policy.Reason = known(v)
				}
			})
		case "capability":
			members(v, func(k, v []byte) {
				if string(k) == "status" {
					l.Capability.Status = known(v)
				}
			})
		case "execution":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "status":
					l.Execution.Status = known(v)
				case "reason":
					l.Execution.Reason = known(v)
				}
			})
		case "decision_axes":
			members(v, func(k, v []byte) {
				if string(k) == "approval_ref" {
					l.DecisionAxes.ApprovalRef = str(v)
				}
			})
		}
	})
	return callID, toolID, l, line
}

// telLine is what [telemetryCall] reads of a line.
type telLine struct {
	auditLine
	seq, wallMS     uint64
	hasSeq, hasWall bool
}

// unescapeInto appends the JSON string v decodes to, if v is one whose
// only escapes are the two-character ones and that holds valid UTF-8 and
// no control character: what [str] gives for it. It reports false for
// anything else, which str reads instead.
func unescapeInto(dst, v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || !utf8.Valid(v) {
		return dst, false
	}
	in := v[1 : len(v)-1]
	for i := 0; i < len(in); {
		j := i
		for j < len(in) && in[j] != '\\' && in[j] != '"' && in[j] >= 0x20 {
			j++
		}
		dst = append(dst, in[i:j]...)
		if j == len(in) {
			return dst, true
		}
		if in[j] != '\\' || j+1 == len(in) {
			return dst, false
		}
		var c byte
		switch in[j+1] {
		case '"', '\\', '/':
			c = in[j+1]
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default:
			return dst, false
		}
		dst = append(dst, c)
		i = j + 2
	}
	return dst, true
}

// digits is [uintVal] without the copy: a decimal unsigned integer that
// fits 64 bits.
func digits(v []byte) (uint64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// known is [str] for a status or reason, without an allocation when it is
// one of aegis's own words.
func known(v []byte) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		switch string(v[1 : len(v)-1]) {
		case schemas.StatusAllowed:
			return schemas.StatusAllowed
		case schemas.StatusDenied:
			return schemas.StatusDenied
		case schemas.StatusRateLimited:
			return schemas.StatusRateLimited
		case schemas.StatusPendingApproval:
			return schemas.StatusPendingApproval
		case schemas.StatusGranted:
			return schemas.StatusGranted
		case schemas.StatusSuccess:
			return schemas.StatusSuccess
		case schemas.StatusTrap:
			return schemas.StatusTrap
		case schemas.StatusResourceExceeded:
			return schemas.StatusResourceExceeded
		case schemas.StatusHostDenied:
			return schemas.StatusHostDenied
		case schemas.ReasonNotEvaluated:
			return schemas.ReasonNotEvaluated
		case schemas.ReasonNotExecuted:
			return schemas.ReasonNotExecuted
		case schemas.ReasonPolicyBlocked:
			return schemas.ReasonPolicyBlocked
		case schemas.ReasonSiblingRefused:
			return schemas.ReasonSiblingRefused
		case schemas.ReasonMalformedCall:
			return schemas.ReasonMalformedCall
		case "":
			return ""
		}
	}
	return str(v)
}
