package projector

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

// auditFields are the member names auditLine reads, at any depth.
var auditFields = map[string]bool{}

func init() {
	for _, k := range []string{"seq", "line_type", "call_id", "tool_id", "request_digest", "policy", "status", "reason", "approval_id",
		"capability", "execution", "message", "kind", "response_digest", "wall_ms", "decision_axes", "matched_rule", "approval_ref",
		"verdict", "line"} {
		auditFields[k] = true
	}
}

// caseTwin reports whether v has a key that encoding/json would match to
// a field case-insensitively but that is not its exact name: the fast
// reader, like the canonical form, is case-sensitive.
func caseTwin(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if !auditFields[k] && auditFields[strings.ToLower(k)] {
				return true
			}
			if !auditFields[k] {
				for f := range auditFields {
					if strings.EqualFold(f, k) {
						return true
					}
				}
			}
			if caseTwin(e) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if caseTwin(e) {
				return true
			}
		}
	}
	return false
}

func sampleLines(t testing.TB) [][]byte {
	c := schemas.WrapCall{CallID: "call-7", ToolID: "dé\"ploy", RequestDigest: strings.Repeat("a", 64), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
	var out [][]byte
	add := func(l schemas.Line, err error) {
		if err != nil {
			t.Fatal(err)
		}
		l.Set("seq", uint64(12))
		l.Set("prev_hash", schemas.GenesisHash)
		l.Set("signature", strings.Repeat("5", 128))
		b, err := l.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	add(c.Intent().Line())
	add(c.Answered(strings.Repeat("b", 64), 33).Line())
	add(c.Refused(schemas.PolicyDenied("no \u2028 way\n"), "r1").Line())
	add(c.Refused(schemas.PolicyPendingApproval("apr-x-1"), "gate").Line())
	add(c.ChildExited().Line())
	o := c.Answered("", 1)
	o.Execution = schemas.ExecutionTrap("boom")
	o.DecisionAxes.ApprovalRef = "apr-x-1"
	add(o.Line())
	add(schemas.Decision{ApprovalID: "apr-x-1", Verdict: schemas.Rejected("nope")}.Line())
	add(schemas.Decision{ApprovalID: "apr-x-1", Verdict: schemas.Approved(schemas.ApprovalScope{ToolID: "x"})}.Line())
	add(schemas.CloseLine(), nil)
	out = append(out, []byte(` { "seq" : 3 , "policy" : { "status" : "denied" } , "call_id" : "a\u0062\\" , "seq" : 4 } `))
	out = append(out, []byte(`{"tool_id":"\ud83d\ude00","execution":{"kind":"memory","status":"resource_exceeded"},"wall_ms":0}`))
	return out
}

func mutate(rnd *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	switch rnd.Intn(5) {
	case 0:
		return b[:rnd.Intn(len(b)+1)]
	case 1:
		const alphabet = "{}[]\",:\\ 0a-\xff"
		b[rnd.Intn(len(b))] = alphabet[rnd.Intn(len(alphabet))]
	case 2:
		i := rnd.Intn(len(b) + 1)
		ws := " \n\t"[rnd.Intn(3)]
		return append(b[:i], append([]byte{ws}, b[i:]...)...)
	case 3:
		i, j := rnd.Intn(len(b)), rnd.Intn(len(b))
		b[i], b[j] = b[j], b[i]
	case 4:
		i := rnd.Intn(len(b))
		return append(b[:i], b[min(len(b), i+1+rnd.Intn(8)):]...)
	}
	return b
}

// compared counts the inputs checkSame held to encoding/json.
var compared int

// checkSame compares the fast readers with encoding/json on one input.
func checkSame(t *testing.T, in []byte) {
	t.Helper()
	fast := parseAuditLine(string(in)) // must never panic
	members(in, func(k, v []byte) {})
	var generic any
	if json.Unmarshal(in, &generic) != nil || caseTwin(generic) {
		return
	}
	var slow auditLine
	if err := json.Unmarshal(in, &slow); err != nil {
		return
	}
	compared++
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("parseAuditLine(%q)\n fast %+v\n json %+v", in, fast, slow)
	}
	// The same line inside a call payload.
	cp := CallPayload{Line: string(in), CallID: "call-1", ToolID: "t"}
	p, _ := json.Marshal(cp)
	json.Unmarshal(p, &cp) // invalid UTF-8 became U+FFFD
	if got := callPayload(p); got != cp {
		t.Fatalf("callPayload(%s) = %+v", p, got)
	}
	if got := callIDOf(p); got != cp.CallID {
		t.Fatalf("callIDOf(%s) = %q", p, got)
	}
	if got := lineOnly(p); got != cp.Line {
		t.Fatalf("lineOnly(%s) = %q", p, got)
	}
}

func TestFastDecodeMatchesEncodingJSON(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	for _, l := range sampleLines(t) {
		checkSame(t, l)
		// 1000 mutations a line here; FuzzParseAuditLine goes on from
		// the same lines for as long as make fuzz gives it.
		for i := 0; i < 1000; i++ {
			m := l
			for n := rnd.Intn(3) + 1; n > 0 && len(m) > 0; n-- {
				m = mutate(rnd, m)
			}
			if len(m) > 0 {
				checkSame(t, m)
			}
		}
	}
	if compared < 1000 {
		t.Errorf("only %d inputs were valid JSON to compare", compared)
	}
	for _, in := range []string{"", "{", "}", `{"a"}`, `{"a":}`, `{"a":1,}`, `[]`, `{"a":"\`, `{"a":[1,{"b":"]"}],"seq":2}`} {
		parseAuditLine(in)
		callPayload([]byte(in))
	}
	if got := parseAuditLine(`{"a":[1,{"b":"]"}],"seq":2}`).Seq; got == nil || *got != 2 {
		t.Errorf("seq after nested values: %v", got)
	}
}

func TestFramePayloadBytes(t *testing.T) {
	for _, b := range [][]byte{nil, {}, []byte("x"), []byte("{\"jsonrpc\":\"2.0\"}\r"), bytes.Repeat([]byte{0xff, 0, '"'}, 100)} {
		p, _ := json.Marshal(schemas.FramePayload{Bytes: b})
		if got := framePayloadBytes(p); !bytes.Equal(got, b) {
			t.Errorf("framePayloadBytes(%s) = %q, want %q", p, got, b)
		}
		spaced := []byte(`{ "bytes" : "` + base64.StdEncoding.EncodeToString(b) + `" }`)
		if got := framePayloadBytes(spaced); !bytes.Equal(got, b) {
			t.Errorf("framePayloadBytes(%s) = %q", spaced, got)
		}
	}
}

func FuzzParseAuditLine(f *testing.F) {
	for _, l := range sampleLines(f) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkSame(t, in) })
}
