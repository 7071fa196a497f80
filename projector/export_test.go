package projector

import (
	"encoding/json"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

// The direct reading of a line payload must agree with encoding/json.
func FuzzFastLine(f *testing.F) {
	f.Add(`{"call_id":"call-1","line_type":"intent","tool_id":"a\"b\\c</>&é"}`)
	f.Add("tab\there\nnew \u2028 \x01")
	f.Fuzz(func(t *testing.T, line string) {
		p, err := json.Marshal(CallPayload{Line: line, CallID: "c", ToolID: "t"})
		if err != nil {
			return
		}
		got, ok := decodeLine(schemas.Event{Payload: p})
		var want LinePayload
		json.Unmarshal(p, &want)
		if want.Line == "" {
			if ok {
				t.Fatalf("decodeLine(%s) = %q, want none", p, got)
			}
			return
		}
		if !ok || got != want.Line {
			t.Fatalf("decodeLine(%s) = %q %v, want %q", p, got, ok, want.Line)
		}
		if l, ok := fastLine(p); ok && l != want.Line {
			t.Fatalf("fastLine(%s) = %q, want %q", p, l, want.Line)
		}
	})
}
