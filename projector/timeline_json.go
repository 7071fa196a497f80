package projector

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/schemas"
)

// The folds read a few members of every payload and audit line. A replay
// of a large store decodes millions of them, so they are read with a
// single-pass member scanner instead of reflection: the envelope already
// checked that each payload is valid JSON, and audit lines are aegis's own
// canonical JSON. Anything the scanner cannot read counts as absent; it
// never panics. TestFastDecodeMatchesEncodingJSON holds it to
// encoding/json on valid and broken input.

// members calls fn with the raw key (escapes left in) and the raw value of
// each member of the JSON object b, in order. It reports false, after
// calling fn for the members it could read, when b is not an object.
func members(b []byte, fn func(key, val []byte)) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		ke := endString(b, i)
		if ke < 0 {
			return false
		}
		key := b[i+1 : ke-1]
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		ve := endValue(b, i)
		if ve < 0 {
			return false
		}
		fn(key, b[i:ve])
		i = skipWS(b, ve)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// endString returns the index after the string that starts at b[i] ('"'),
// or -1.
func endString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// endValue returns the index after the value that starts at b[i], or -1.
func endValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return endString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := endString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// keyIs compares a raw key with name; a key written with escapes is
// unescaped first.
func keyIs(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return json.Unmarshal(q, &s) == nil && s == name
}

// str returns a string value, or "" for anything else.
func str(v []byte) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return ""
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	// An escaped string (an audit line inside a payload is one) is read
	// by the line parser's strict reader, which decodes it as
	// encoding/json does; what it refuses (invalid UTF-8, an unpaired
	// surrogate escape, junk after the string) encoding/json reads.
	if s, n, err := schemas.ReadString(v); err == nil && n == len(v) {
		return s
	}
	var s string
	json.Unmarshal(v, &s)
	return s
}

// uint returns an unsigned integer value, if v is one.
func uintVal(v []byte) (uint64, bool) {
	n, err := strconv.ParseUint(string(v), 10, 64)
	return n, err == nil
}

// framePayloadBytes returns the frame of a frame event's payload.
func framePayloadBytes(p []byte) []byte {
	const pre, suf = `{"bytes":"`, `"}`
	if len(p) >= len(pre)+len(suf) && string(p[:len(pre)]) == pre && string(p[len(p)-len(suf):]) == suf {
		enc := p[len(pre) : len(p)-len(suf)]
		out := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		if n, err := base64.StdEncoding.Decode(out, enc); err == nil {
			return out[:n]
		}
	}
	var fp struct {
		Bytes []byte `json:"bytes"`
	}
	json.Unmarshal(p, &fp)
	return fp.Bytes
}

// callPayload reads a call.intent or call.outcome payload.
func callPayload(p []byte) CallPayload {
	var cp CallPayload
	members(p, func(k, v []byte) {
		switch {
		case keyIs(k, "line"):
			cp.Line = str(v)
		case keyIs(k, "call_id"):
			cp.CallID = str(v)
		case keyIs(k, "tool_id"):
			cp.ToolID = str(v)
		}
	})
	return cp
}

// callIDOf reads a call payload's "call_id" member, as callPayload does,
// without decoding its line.
func callIDOf(p []byte) string {
	var id string
	members(p, func(k, v []byte) {
		if keyIs(k, "call_id") {
			id = str(v)
		}
	})
	return id
}

// lineOnly reads a payload's "line" member.
func lineOnly(p []byte) string {
	var line string
	members(p, func(k, v []byte) {
		if keyIs(k, "line") {
			line = str(v)
		}
	})
	return line
}

// parseAuditLine reads the members of an audit line the folds use. It
// gives what json.Unmarshal into auditLine gives for any JSON object whose
// members have the expected types.
func parseAuditLine(line string) auditLine {
	var l auditLine
	b := []byte(line)
	members(b, func(k, v []byte) {
		switch string(k) {
		case "seq":
			if n, ok := uintVal(v); ok {
				l.Seq = &n
			}
		case "line_type":
			l.LineType = str(v)
		case "call_id":
			l.CallID = str(v)
		case "tool_id":
			l.ToolID = str(v)
		case "request_digest":
			l.RequestDigest = str(v)
		case "traceparent":
			l.TraceParent = str(v)
		case "response_digest":
			l.ResponseDigest = str(v)
		case "approval_id":
			l.ApprovalID = str(v)
		case "wall_ms":
			if n, ok := uintVal(v); ok {
				l.WallMS = &n
			}
		case "policy":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "status":
					l.Policy.Status = str(v)
				case "reason":
					l.Policy.Reason = str(v)
				case "approval_id":
					l.Policy.ApprovalID = str(v)
				}
			})
		case "capability":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "status":
					l.Capability.Status = str(v)
				case "reason":
					l.Capability.Reason = str(v)
				}
			})
		case "execution":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "status":
					l.Execution.Status = str(v)
				case "reason":
					l.Execution.Reason = str(v)
				case "message":
					l.Execution.Message = str(v)
				case "kind":
					l.Execution.Kind = str(v)
				}
			})
		case "decision_axes":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "matched_rule":
					l.DecisionAxes.MatchedRule = str(v)
				case "approval_ref":
					l.DecisionAxes.ApprovalRef = str(v)
				}
			})
		case "verdict":
			members(v, func(k, v []byte) {
				switch string(k) {
				case "verdict":
					l.Verdict.Verdict = str(v)
				case "reason":
					l.Verdict.Reason = str(v)
				}
			})
		}
	})
	return l
}
