package schemas

import "encoding/hex"

// FieldTraceParent names the optional member of an intent line that holds
// the W3C trace context the host sent with the call (params._meta.traceparent,
// MCP SEP-414), exactly as sent. Schema v2 does not name it: verifiers ignore
// unknown members and still hash the whole line, so a line that carries it
// verifies under any implementation of the specification. It joins a call's
// line in the record to the host's trace, and to the spans aegis exports for
// the call (docs/telemetry.md).
const FieldTraceParent = "traceparent"

// TraceParent is a W3C trace context (traceparent header, version 00).
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// ParseTraceParent reads s as a version-00 traceparent:
// "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>", lowercase hex,
// neither id all zeros. Anything else (another version, upper case, extra
// characters) is not a trace context aegis records or continues.
func ParseTraceParent(s string) (TraceParent, bool) {
	var tp TraceParent
	if len(s) != 55 || s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return tp, false
	}
	for _, c := range []byte(s[3:35] + s[36:52] + s[53:55]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return tp, false
		}
	}
	var flags [1]byte
	if _, err := hex.Decode(tp.TraceID[:], []byte(s[3:35])); err != nil {
		return TraceParent{}, false
	}
	if _, err := hex.Decode(tp.SpanID[:], []byte(s[36:52])); err != nil {
		return TraceParent{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return TraceParent{}, false
	}
	tp.Flags = flags[0]
	if tp.TraceID == [16]byte{} || tp.SpanID == [8]byte{} {
		return TraceParent{}, false
	}
	return tp, true
}

// String writes tp as a version-00 traceparent.
func (tp TraceParent) String() string {
	return "00-" + hex.EncodeToString(tp.TraceID[:]) + "-" + hex.EncodeToString(tp.SpanID[:]) + "-" + hex.EncodeToString([]byte{tp.Flags})
}
