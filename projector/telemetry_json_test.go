package projector

import (
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"
)

// TestTelemetryCallReadsWhatTheRecordSays: what the telemetry fold reads
// of a call's payload and line (its quick reader, which unescapes the
// line into a reused buffer) is what callPayload and parseAuditLine read,
// member for member, on the sample lines and on mutations of them,
// including escapes the quick reader leaves to the strict one and lines
// that are not JSON at all. A span that says other than its record line
// would join a trace to the wrong verdict.
func TestTelemetryCallReadsWhatTheRecordSays(t *testing.T) {
	var buf []byte
	check := func(in []byte) {
		t.Helper()
		for _, p := range [][]byte{
			mustJSON(t, CallPayload{Line: string(in), CallID: "call-1", ToolID: "t\"x"}),
			// Escapes the quick reader does not take: \u in the payload.
			[]byte(`{"call_id":"c\u0031","line":` + string(jsonASCII(string(in))) + `,"tool_id":"t"}`),
			// Every two-character escape, which it does take.
			[]byte(`{"line":` + string(jsonTwoChar(string(in))) + `,"call_id":"c\/1"}`),
			in, // a payload that is no call payload
		} {
			want := callPayload(p)
			wl := parseAuditLine(want.Line)
			var callID, toolID string
			var tl telLine
			callID, toolID, tl, buf = telemetryCall(p, buf)
			l := tl.auditLine
			if tl.hasSeq {
				l.Seq = &tl.seq
			}
			if tl.hasWall {
				l.WallMS = &tl.wallMS
			}
			if callID != want.CallID || toolID != want.ToolID {
				t.Fatalf("telemetryCall(%s): ids %q %q, want %q %q", p, callID, toolID, want.CallID, want.ToolID)
			}
			var w auditLine
			w.Seq, w.TraceParent, w.WallMS = wl.Seq, wl.TraceParent, wl.WallMS
			w.Policy.Status, w.Policy.Reason = wl.Policy.Status, wl.Policy.Reason
			w.Capability.Status = wl.Capability.Status
			w.Execution.Status, w.Execution.Reason = wl.Execution.Status, wl.Execution.Reason
			w.DecisionAxes.ApprovalRef = wl.DecisionAxes.ApprovalRef
			if !reflect.DeepEqual(l, w) {
				t.Fatalf("telemetryCall(%s)\n quick %+v\n want  %+v", p, l, w)
			}
		}
	}
	rnd := rand.New(rand.NewSource(2))
	for _, l := range append(sampleLines(t), []byte(`{"seq":18446744073709551615,"wall_ms":18446744073709551616,"traceparent":"00-\u0030","policy":{"status":"denied","reason":"a\/b\tc"}}`)) {
		check(l)
		for range 100 {
			m := l
			for n := rnd.Intn(3) + 1; n > 0 && len(m) > 0; n-- {
				m = mutate(rnd, m)
			}
			check(m)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonASCII encodes s as a JSON string with every non-ASCII character and
// every quote as a \u escape.
func jsonASCII(s string) []byte {
	b := []byte{'"'}
	for _, r := range s {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			if r > 0xffff {
				r1, r2 := (r-0x10000)>>10+0xd800, (r-0x10000)&0x3ff+0xdc00
				b = append(b, []byte(jsonU(r1)+jsonU(r2))...)
				continue
			}
			b = append(b, []byte(jsonU(r))...)
			continue
		}
		b = append(b, byte(r))
	}
	return append(b, '"')
}

func jsonU(r rune) string {
	const hex = "0123456789abcdef"
	return string([]byte{'\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf]})
}

// jsonTwoChar encodes s as a JSON string with the two-character escape of
// every character that has one, the solidus included.
func jsonTwoChar(s string) []byte {
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '/':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, []byte(jsonU(rune(c)))...)
				continue
			}
			b = append(b, c)
		}
	}
	return append(b, '"')
}
