package rpc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/proxy/reading"
)

func TestClassifyCalls(t *testing.T) {
	type want struct {
		shape     Shape
		keys      []string // "" for a malformed call
		tools     []string
		malformed int
	}
	cases := []struct {
		name  string
		frame string
		want  want
	}{
		{"plain call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
			want{Single, []string{"n:1"}, []string{"echo"}, 0}},
		{"string id", `{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"echo"}}`,
			want{Single, []string{"s:a-1"}, []string{"echo"}, 0}},
		{"id beyond 2^53 keeps every digit", `{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"e"}}`,
			want{Single, []string{"n:9007199254740993"}, []string{"e"}, 0}},
		{"escaped method still a call", `{"jsonrpc":"2.0","id":2,"method":"tools\/call","params":{"name":"x"}}`,
			want{Single, []string{"n:2"}, []string{"x"}, 0}},
		{"unicode-escaped method still a call", `{"jsonrpc":"2.0","id":2,"method":"\u0074ools/call","params":{"name":"x"}}`,
			want{Single, []string{"n:2"}, []string{"x"}, 0}},
		{"notification call without id is recorded", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"rm"}}`,
			want{Single, []string{""}, []string{"rm"}, 1}},
		{"null id call is recorded", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"rm"}}`,
			want{Single, []string{""}, []string{"rm"}, 1}},
		{"object id call is recorded", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"name":"rm"}}`,
			want{Single, []string{""}, []string{"rm"}, 1}},
		{"call without a name", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}`,
			want{Single, []string{""}, []string{UnknownTool}, 1}},
		{"duplicate method hides a call from last-wins parsers", `{"jsonrpc":"2.0","id":4,"method":"tools/call","method":"ping","params":{"name":"rm"}}`,
			want{Single, []string{""}, []string{UnknownTool}, 1}},
		{"duplicate method hides a call from first-wins parsers", `{"jsonrpc":"2.0","id":4,"method":"ping","method":"tools/call","params":{"name":"rm"}}`,
			want{Single, []string{""}, []string{UnknownTool}, 1}},
		{"duplicate tool name", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"safe","name":"rm"}}`,
			want{Single, []string{""}, []string{UnknownTool}, 1}},
		{"two objects on one line for a stream decoder", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"a"}}{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"b"}}`,
			want{Opaque, []string{"n:6", "n:7"}, []string{"a", "b"}, 0}},
		{"call spread over lines", `"method":"tools/call","params":{"name":"rm"}}`,
			want{Opaque, []string{""}, []string{UnknownTool}, 1}},
		{"byte order mark before a call", "\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"rm"}}`,
			want{Opaque, []string{""}, []string{UnknownTool}, 1}},
		{"single quotes for a lenient parser", `{'jsonrpc':'2.0','id':9,'method':'tools/call'}`,
			want{Opaque, []string{""}, []string{UnknownTool}, 1}},
		{"escaped call in broken JSON", `{"method":"tools\u002fcall",`,
			want{Opaque, []string{""}, []string{UnknownTool}, 1}},
		{"batch of two calls and a ping", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":"3","method":"tools/call","params":{"name":"b"}}]`,
			want{Batch, []string{"n:1", "s:3"}, []string{"a", "b"}, 0}},
		{"ping is not a call", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, want{Single, nil, nil, 0}},
		{"tool named tools/call in a list call is not a call", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"x"}}`, want{Single, nil, nil, 0}},
		{"empty line", ``, want{Opaque, nil, nil, 0}},
		{"garbage", `not json at all`, want{Opaque, nil, nil, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Classify([]byte(tc.frame))
			if c.Shape != tc.want.shape {
				t.Errorf("Shape = %v, want %v", c.Shape, tc.want.shape)
			}
			if len(c.Calls) != len(tc.want.keys) {
				t.Fatalf("Classify found %d calls %+v, want %d", len(c.Calls), c.Calls, len(tc.want.keys))
			}
			mal := 0
			for i, call := range c.Calls {
				if call.Key != tc.want.keys[i] || call.Tool != tc.want.tools[i] {
					t.Errorf("call %d = %+v, want key %q tool %q", i, call, tc.want.keys[i], tc.want.tools[i])
				}
				if call.Malformed != "" {
					mal++
				}
			}
			if mal != tc.want.malformed {
				t.Errorf("%d malformed calls, want %d: %+v", mal, tc.want.malformed, c.Calls)
			}
		})
	}
}

// encoding/json matches member names regardless of case (as
// strings.EqualFold does, so also "ſ" for "s"), and lets the last duplicate
// win; JSON.parse and most other parsers take names exactly. Every member
// that decides a call must therefore appear once, spelled exactly, or the
// call is ambiguous: the relay refuses it, answering with the id only when
// the id itself is not in doubt.
func TestClassifyAmbiguousCalls(t *testing.T) {
	cases := []struct {
		name, frame string
		id          string // the id the refusal answers with; "" for none
		reason      string // "" for a call that is not ambiguous
	}{
		{"a method in another case hides a call",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{"name":"echo"}}`, "1",
			`ambiguous tools/call: member "Method", which differs from "method" only in case`},
		{"a method only in another case is a call to encoding/json alone",
			`{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"echo"}}`, "1",
			`ambiguous tools/call: member "METHOD", which differs from "method" only in case`},
		{"an escaped method in another case",
			`{"jsonrpc":"2.0","id":1,"method":"ping","\u004dethod":"tools/call","params":{"name":"echo"}}`, "1",
			`ambiguous tools/call: member "Method", which differs from "method" only in case`},
		{"params in another case renames the tool",
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"},"Params":{"name":"echo"}}`, "2",
			`ambiguous tools/call: member "Params", which differs from "params" only in case`},
		{"params with a long s renames the tool",
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"rm\"},\"param\u017f\":{\"name\":\"echo\"}}", "2",
			`ambiguous tools/call: member "paramſ", which differs from "params" only in case`},
		{"a duplicate params",
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"},"params":{"name":"echo"}}`, "2",
			`ambiguous tools/call: duplicate member "params"`},
		{"params.Name in another case renames the tool",
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm","Name":"echo"}}`, "3",
			`ambiguous tools/call: params has member "Name", which differs from "name" only in case`},
		{"a duplicate params.name",
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"safe","name":"rm"}}`, "3",
			`ambiguous tools/call: params has duplicate member "name"`},
		{"params.Arguments in another case swaps the arguments",
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"rm","arguments":{"p":"/"},"Arguments":{"p":"/tmp"}}}`, "4",
			`ambiguous tools/call: params has member "Arguments", which differs from "arguments" only in case`},
		{"an id in another case misroutes the answer",
			`{"jsonrpc":"2.0","id":5,"Id":6,"method":"tools/call","params":{"name":"echo"}}`, "null",
			`ambiguous tools/call: member "Id", which differs from "id" only in case`},
		{"a duplicate id",
			`{"jsonrpc":"2.0","id":5,"id":6,"method":"tools/call","params":{"name":"echo"}}`, "null",
			`ambiguous tools/call: duplicate member "id"`},
		{"a result in another case beside a call",
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"},"result":1,"RESULT":2}`, "7",
			`ambiguous tools/call: member "RESULT", which differs from "result" only in case`},
		{"an ambiguous notification has no id to answer",
			`{"jsonrpc":"2.0","method":"tools/call","Method":"x","params":{"name":"echo"}}`, "",
			`ambiguous tools/call: member "Method", which differs from "method" only in case`},
		{"names inside arguments are the tool's business",
			`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"Name":"a","name":"b","name":"c"}}}`, "8", ""},
		{"a member that decides nothing may be in any case",
			`{"jsonrpc":"2.0","JSONRPC":"2.0","id":9,"method":"tools/call","params":{"name":"echo","Meta":1}}`, "9", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Classify([]byte(tc.frame))
			if len(c.Calls) != 1 {
				t.Fatalf("calls = %+v, want one", c.Calls)
			}
			call := c.Calls[0]
			if string(call.ID) != tc.id {
				t.Errorf("ID = %s, want %s", call.ID, tc.id)
			}
			if tc.reason == "" {
				if call.Ambiguous || call.Malformed != "" {
					t.Fatalf("call %+v, want a well-formed call", call)
				}
				return
			}
			if !call.Ambiguous || call.Malformed != tc.reason || call.Tool != UnknownTool || call.Key != "" {
				t.Errorf("call %+v, want ambiguous %q, tool %s", call, tc.reason, UnknownTool)
			}
		})
	}
}

func TestClassifyAnswers(t *testing.T) {
	cases := []struct {
		name  string
		frame string
		keys  []string
	}{
		{"result", `{"jsonrpc":"2.0","id":1,"result":{}}`, []string{"n:1"}},
		{"error", `{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}`, []string{"s:x"}},
		{"number forms are one id", `{"jsonrpc":"2.0","id":1.0,"result":{}}`, []string{"n:1"}},
		{"server request reusing an id is no answer", `{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","result":{}}`, nil},
		{"null id error is no answer", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}`, nil},
		// An answer that parsers read differently closes every call that
		// any reading answers, so the host never gets an answer whose
		// outcome is not on disk, whichever parser it uses.
		{"a duplicate id answers both", `{"jsonrpc":"2.0","id":1,"id":2,"result":{}}`, []string{"n:2", "n:1"}},
		{"an id in another case answers both", `{"jsonrpc":"2.0","id":1,"ID":2,"result":{}}`, []string{"n:2", "n:1"}},
		{"a result in another case still answers", `{"jsonrpc":"2.0","id":1,"result":{},"Result":{}}`, []string{"n:1"}},
		{"a method in another case hides an answer from encoding/json only", `{"jsonrpc":"2.0","id":3,"result":{},"Method":"x"}`, []string{"n:3"}},
		{"a duplicate method still makes a request", `{"jsonrpc":"2.0","id":3,"method":"x","method":"y","result":{}}`, nil},
		{"batch of answers", `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":""}}]`, []string{"n:1", "n:2"}},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/progress"}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Classify([]byte(tc.frame))
			var got []string
			for _, a := range c.Answers {
				got = append(got, a.Key)
			}
			if strings.Join(got, ",") != strings.Join(tc.keys, ",") {
				t.Errorf("answers = %v, want %v", got, tc.keys)
			}
		})
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}]`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"method":"tools\u002fcall"`,        // truncated, escaped
		`{"id":1e999,"method":"tools/call"}`, // huge exponent
		`{"id":-0,"result":1}`,
		"\xff\xfe{",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{"name":"echo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","Name":"echo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","name":"echo"}}`,
		`{"jsonrpc":"2.0","id":1,"ID":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"result":{},"Method":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := Classify(b)
		for _, call := range c.Calls {
			if (call.Key == "") != (call.Malformed != "") {
				t.Fatalf("call %+v: a key exactly when well-formed", call)
			}
			// params.name may be "", and is then recorded as sent.
			if call.Tool == "" && !bytes.Contains(b, []byte(`""`)) {
				t.Fatalf("call %+v without a tool", call)
			}
			if call.Ambiguous && (call.Malformed == "" || call.Tool != UnknownTool) {
				t.Fatalf("ambiguous call %+v: want it malformed, tool %s", call, UnknownTool)
			}
			if !call.Named && call.Tool != UnknownTool || (call.Ambiguous || call.Unreadable) && call.Named {
				t.Fatalf("call %+v: a tool name exactly when one was read", call)
			}
			if call.Unreadable && (call.Malformed == "" || call.Ambiguous) {
				t.Fatalf("unreadable call %+v: want it malformed and not ambiguous", call)
			}
		}
		// A parser that takes member names exactly, whichever duplicate it
		// keeps, must see no call that Classify missed, and every call
		// Classify calls well-formed must be the same call to it.
		if tr := bytes.TrimSpace(b); len(tr) > 0 && tr[0] == '{' && json.Valid(tr) {
			checkExactReadings(t, tr, c)
		}
		// The quick reading of plain envelopes changes nothing.
		if slow := classify(b, false); !reflect.DeepEqual(c, slow) {
			t.Fatalf("frame %q: quick reading %+v, slow reading %+v", b, c, slow)
		}
		// What is not one JSON value is read as an opaque frame, unless
		// the one reading takes it for one and marks it ambiguous (NaN,
		// Infinity: values some readers take).
		if tr := bytes.TrimSpace(b); len(tr) > 0 && !json.Valid(tr) && c.Shape != Opaque && reading.Read(tr).Ambiguous == "" {
			t.Fatalf("invalid frame %q read as shape %d", b, c.Shape)
		}
		// Without a policy the relay relays a host frame that does not
		// name tools/call, after a stream between values, before reading
		// it: no reading of such a frame may find a call.
		if !MentionsToolsCall(b) {
			if len(c.Calls) > 0 {
				t.Fatalf("call found in a frame that does not name tools/call: %q", b)
			}
			if !bytes.ContainsRune(b, '\n') {
				if cls, _ := ReadHostFrame(Stream{}, append(slices.Clip(b), '\n'), false); len(cls.Calls) > 0 {
					t.Fatalf("the relay's reading of %q finds a call in a frame that does not name tools/call", b)
				}
			}
		}
		// Anything that names tools/call is never left unrecorded.
		if MentionsToolsCall(b) && len(c.Calls) == 0 {
			// Allowed only when the mention is inside a value that is
			// not a method (e.g. a tool argument) of a parseable frame.
			if c.Shape == Opaque {
				t.Fatalf("opaque frame naming tools/call classified without a call: %q", b)
			}
		}
	})
}

// checkExactReadings holds Classify's reading of a valid object frame to
// every exact-name reading of it (exactReadings, which Classify itself
// uses only for ambiguous objects).
func checkExactReadings(t *testing.T, frame []byte, c Classification) {
	t.Helper()
	for _, r := range exactReadings(frame) {
		if m, ok := jsonString(r["method"]); ok && m == "tools/call" && len(c.Calls) == 0 {
			t.Fatalf("a parser that takes names exactly reads a tools/call that Classify missed: %q", frame)
		}
		// An answer that such a parser sees must close its call first.
		_, method := r["method"]
		_, result := r["result"]
		_, errm := r["error"]
		if key, ok, _ := IDKey(r["id"]); ok && !method && (result || errm) && !slices.ContainsFunc(c.Answers, func(a Answer) bool { return a.Key == key }) {
			t.Fatalf("a parser that takes names exactly reads an answer to %s that Classify missed: %q (answers %v)", key, frame, c.Answers)
		}
	}
	for _, call := range c.Calls {
		if call.Malformed != "" {
			continue
		}
		for _, r := range exactReadings(frame) {
			if m, _ := jsonString(r["method"]); m != "tools/call" {
				t.Fatalf("Classify read call %+v where an exact reading has method %s: %q", call, r["method"], frame)
			}
			if key, _, _ := IDKey(r["id"]); key != call.Key {
				t.Fatalf("Classify read id %s where an exact reading has %s: %q", call.Key, r["id"], frame)
			}
			for _, p := range exactReadings(bytes.TrimSpace(r["params"])) {
				if name, _ := jsonString(p["name"]); name != call.Tool {
					t.Fatalf("Classify read tool %q where an exact reading has %s: %q", call.Tool, p["name"], frame)
				}
				if args := compactRaw(p["arguments"]); !bytes.Equal(args, call.Args) {
					t.Fatalf("Classify read arguments %s where an exact reading has %s: %q", call.Args, args, frame)
				}
			}
		}
	}
}

// An id with a vast exponent must not make the relay compute 10^999999999.
func TestHugeExponentIDIsCheap(t *testing.T) {
	c := Classify([]byte(`{"jsonrpc":"2.0","id":1e999999999,"method":"tools/call","params":{"name":"x"}}`))
	if len(c.Calls) != 1 || c.Calls[0].Key != "x:1e999999999" {
		t.Fatalf("calls = %+v", c.Calls)
	}
}

// exactReadings reads the top-level members of obj, a valid JSON object, by
// exact name with encoding/json's token decoder: once keeping the first of
// duplicate members and once the last. It is the tests' reference, read
// independently of the one reading Classify uses.
func exactReadings(obj []byte) []map[string]json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	first, last := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil
		}
		if _, ok := first[k]; !ok {
			first[k] = v
		}
		last[k] = v
	}
	return []map[string]json.RawMessage{first, last}
}

// FuzzHostStream holds the relay's reading of a sequence of host frames
// (ReadHostFrame, with the stream state carried from frame to frame as the
// relay carries it) to a server that decodes its stdin as one continuous
// JSON stream: every tools/call that such a server reads out of the bytes
// relayed so far is found in the frame that completes it, as that call or
// as a malformed one, so its intent is durable before that frame is
// relayed. The stream reader starts again at the next line after bytes it
// cannot parse, as a lenient one might. Frames the relay refuses for
// themselves are not relayed, and so not read. Under a policy (strict), no
// frame that leaves a value unfinished is relayed at all.
func FuzzHostStream(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}` + "\r" + `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":` + "\n" + `{"name":"add","arguments":{"a":40,"b":2}}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"method":` + "\n" + `"tools/call","params":{"name":"add"}}` + "\n",
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},` + "\n" + `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}]` + "\n",
		`{"a":` + "\n" + `1}{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x"}}` + "\n",
		`{"a" 1,` + "\n" + `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + "\n" + `{"name":"add"}}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, strict bool) {
		var s Stream
		var relayed []byte
		var ends []int // where each relayed frame ends in relayed
		var found []Classification
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			line := b
			if i >= 0 {
				line = b[:i+1]
			}
			b = b[len(line):]
			cls, sc := ReadHostFrame(s, line, strict)
			refused := false
			for _, c := range cls.Calls {
				if c.Ambiguous || strict && c.Unreadable {
					refused = true
				}
			}
			if refused {
				continue
			}
			if strict && sc.Inside {
				t.Fatalf("a frame that leaves a value unfinished would be relayed under a policy: %q", line)
			}
			s = sc.Next
			relayed = append(relayed, line...)
			ends = append(ends, len(relayed))
			found = append(found, cls)
		}
		for start := 0; start < len(relayed); {
			dec := json.NewDecoder(bytes.NewReader(relayed[start:]))
			for {
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					break
				}
				end := start + int(dec.InputOffset())
				frame := sort.SearchInts(ends, end)
				for _, r := range exactReadings(bytes.TrimSpace(v)) {
					if m, _ := jsonString(r["method"]); m != "tools/call" {
						continue
					}
					key, _, _ := IDKey(r["id"])
					ok := false
					for _, c := range found[frame].Calls {
						if c.Malformed != "" || c.Key == key {
							ok = true
						}
					}
					if !ok {
						t.Fatalf("a stream reader reads a tools/call (id %s) that frame %d completes, and the relay found no call there: %+v\nstream %q", r["id"], frame, found[frame].Calls, relayed)
					}
				}
			}
			// Start again after the line where the reader stopped.
			next := start + int(dec.InputOffset())
			nl := bytes.IndexByte(relayed[next:], '\n')
			if nl < 0 {
				break
			}
			start = next + nl + 1
		}
	})
}

// TestClassifyTraceParent: the host's trace context is read from
// params._meta.traceparent only where every reader reads the same string.
func TestClassifyTraceParent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for name, tc := range map[string]struct{ frame, want string }{
		"sent":                 {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":"` + tp + `"}}}`, tp},
		"none":                 {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`, ""},
		"given twice":          {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":"` + tp + `","traceparent":"` + tp + `"}}}`, ""},
		"_meta given twice":    {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":"` + tp + `"},"_meta":{}}}`, ""},
		"another case":         {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":"` + tp + `","TraceParent":"x"}}}`, ""},
		"not a string":         {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":1}}}`, ""},
		"of another length":    {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":"00-1-2-01"}}}`, ""},
		"beside the arguments": {`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"_meta":{"traceparent":"` + tp + `"}}}}`, ""},
	} {
		c := Classify([]byte(tc.frame))
		if len(c.Calls) != 1 || c.Calls[0].TraceParent != tc.want {
			t.Errorf("%s: calls %+v, want traceparent %q", name, c.Calls, tc.want)
		}
	}
}
