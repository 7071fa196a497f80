package schemas

import "testing"

// TestParseTraceParent: only a well-formed version-00 trace context is
// recorded or continued; anything a host could use to smuggle other text
// into the intent line, or a context that names no trace, is not.
func TestParseTraceParent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp, ok := ParseTraceParent(good)
	if !ok || tp.String() != good || tp.Flags != 1 || tp.TraceID[0] != 0x4b || tp.SpanID[7] != 0xb7 {
		t.Fatalf("ParseTraceParent(%q) = %+v, %v", good, tp, ok)
	}
	for name, s := range map[string]string{
		"empty":              "",
		"another version":    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"upper case hex":     "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"zero trace id":      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"zero span id":       "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"trailing text":      good + "-x",
		"text in the id":     "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
		"wrong separators":   "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
		"a quote in the id":  "00-4bf92f3577b34da6a3ce929d0e0e473\"-00f067aa0ba902b7-01",
		"short":              "00-4bf92f3577b34da6-00f067aa0ba902b7-01",
		"newline in flags":   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n",
		"non-ascii in flags": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-\xc3\xa9",
	} {
		if _, ok := ParseTraceParent(s); ok {
			t.Errorf("%s: %q accepted", name, s)
		}
	}
}
