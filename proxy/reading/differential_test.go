package reading

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

// The differential fuzz target reads each text with Read and with three
// real parsers: encoding/json in process, Node's JSON.parse and Python's
// json in subprocesses. Each reports the value it took the text for as a
// description that no reader can spell two ways: numbers as the bits of
// a double (zero of either sign as 0), strings as UTF-16 code units in
// hex, object members sorted by UTF-16 code units.

const nodePeer = `
const rl = require('readline').createInterface({input: process.stdin});
const hex16 = s => { let o = ''; for (let i = 0; i < s.length; i++) o += s.charCodeAt(i).toString(16).padStart(4, '0'); return o; };
function d(v) {
  if (v === null) return 'n';
  if (v === true) return 't';
  if (v === false) return 'f';
  if (typeof v === 'number') { if (v === 0) return 'd0'; const b = Buffer.alloc(8); b.writeDoubleBE(v); return 'd' + b.toString('hex'); }
  if (typeof v === 'string') return 's' + hex16(v);
  if (Array.isArray(v)) return '[' + v.map(d).join(',') + ']';
  const ks = Object.keys(v).sort();
  return '{' + ks.map(k => 's' + hex16(k) + ':' + d(v[k])).join(',') + '}';
}
rl.on('line', l => {
  let out;
  try { out = d(JSON.parse(Buffer.from(l, 'base64').toString('utf8'))); } catch (e) { out = 'ERR'; }
  process.stdout.write(out + '\n');
});
`

const pythonPeer = `
import sys, json, base64, struct
sys.setrecursionlimit(100000)
def hex16(s): return s.encode('utf-16-be', 'surrogatepass').hex()
def d(v):
    if v is None: return 'n'
    if v is True: return 't'
    if v is False: return 'f'
    if isinstance(v, (int, float)):
        try: f = float(v)
        except OverflowError: return 'BIG'
        if f == 0: return 'd0'
        return 'd' + struct.pack('>d', f).hex()
    if isinstance(v, str): return 's' + hex16(v)
    if isinstance(v, list): return '[' + ','.join(d(e) for e in v) + ']'
    ks = sorted(v.keys(), key=lambda k: k.encode('utf-16-be', 'surrogatepass'))
    return '{' + ','.join('s' + hex16(k) + ':' + d(v[k]) for k in ks) + '}'
for line in sys.stdin:
    try: out = d(json.loads(base64.b64decode(line.strip()).decode('utf-8')))
    except Exception: out = 'ERR'
    sys.stdout.write(out + '\n'); sys.stdout.flush()
`

// peer is a parser in a subprocess that reads one text a line.
type peer struct {
	name string
	in   io.WriteCloser
	out  *bufio.Reader
}

func startPeer(t testing.TB, name string, argv ...string) *peer {
	t.Helper()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		t.Fatalf("%s is needed for the differential reading test (make test installs it): %v", argv[0], err)
	}
	cmd := exec.Command(path, argv[1:]...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	return &peer{name: name, in: in, out: bufio.NewReaderSize(out, 1<<20)}
}

func (p *peer) read(t testing.TB, text []byte) string {
	t.Helper()
	if _, err := fmt.Fprintf(p.in, "%s\n", base64.StdEncoding.EncodeToString(text)); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	return strings.TrimSuffix(line, "\n")
}

func hex16(s string) string {
	var b strings.Builder
	for _, u := range utf16.Encode([]rune(s)) {
		fmt.Fprintf(&b, "%04x", u)
	}
	return b.String()
}

func numDesc(f float64) string {
	if f == 0 {
		return "d0"
	}
	return fmt.Sprintf("d%016x", math.Float64bits(f))
}

func cmp16(a, b string) int { return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b))) }

// describe is the description of a value as Read took it.
func describe(v *Value) string {
	switch v.Kind {
	case Null:
		return "n"
	case Bool:
		if v.Bool {
			return "t"
		}
		return "f"
	case Number:
		return numDesc(v.Num)
	case String:
		return "s" + hex16(v.Str)
	case Array:
		parts := make([]string, len(v.Elems))
		for i, e := range v.Elems {
			parts[i] = describe(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	ms := slices.Clone(v.Members)
	slices.SortFunc(ms, func(a, b Member) int { return cmp16(a.Name, b.Name) })
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = "s" + hex16(m.Name) + ":" + describe(m.Value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// describeGo is the description of what encoding/json decoded.
func describeGo(v any) string {
	switch t := v.(type) {
	case nil:
		return "n"
	case bool:
		if t {
			return "t"
		}
		return "f"
	case float64:
		return numDesc(t)
	case string:
		return "s" + hex16(t)
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = describeGo(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, cmp16)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = "s" + hex16(k) + ":" + describeGo(t[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return "?"
}

func goRead(text []byte) string {
	var v any
	if err := json.Unmarshal(text, &v); err != nil {
		return "ERR"
	}
	return describeGo(v)
}

// differentialSeeds are texts on which parsers are known to disagree, and
// plain ones on which they agree.
var differentialSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`,
	`{"result":{"tool\u0073":[{"name":"x"}]}}`,
	`{"result":{"Tools":[{"name":"x"}]}}`,
	`{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`,
	`{"x":1e400}`,
	`{"x":-1e400}`,
	`{"x":1e-400}`,
	`[9007199254740993]`,
	`[9007199254740992]`,
	`[-9007199254740993]`,
	`[12345678901234567890123]`,
	`[0.1,1.5e3,-0,-0.0,1E+2]`,
	`[NaN]`,
	`[Infinity,-Infinity]`,
	`"\ud800"`,
	`"\udc00\ud800"`,
	`"\ud83d\ude00"`,
	"\"\xff\"",
	"\"\xed\xa0\x80\"",
	"\xef\xbb\xbf{}",
	`{} {}`,
	`1 2`,
	"\"a\tb\"",
	`"\/\b\f\n\r\t\\"`,
	`{"K":1,"\u212a":2}`,
	` [ ] `,
	`[1,]`,
	`{"a":1,}`,
	`01`,
	`1.`,
	`.5`,
	`-`,
	`tru`,
	`"\x"`,
	`"\u12"`,
	"[\"\x00\"]",
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	`{"result":{"tools":[{"name":"a","annotations":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}]}}`,
}

func FuzzReadDifferential(f *testing.F) {
	for _, s := range differentialSeeds {
		f.Add([]byte(s))
	}
	node := startPeer(f, "JSON.parse", "node", "-e", nodePeer)
	python := startPeer(f, "python json", "python3", "-c", pythonPeer)
	f.Fuzz(func(t *testing.T, input []byte) {
		if len(input) > 1<<16 {
			return
		}
		// A sequence of frames: each line is read on its own, as line
		// readers read it; the whole as a stream reader reads it.
		texts := bytes.Split(input, []byte{'\n'})
		for _, text := range texts {
			if len(bytes.TrimSpace(text)) == 0 {
				continue
			}
			checkDifferential(t, text, map[string]string{
				"encoding/json": goRead(text),
				node.name:       node.read(t, text),
				python.name:     python.read(t, text),
			})
		}
		checkStream(t, input)
	})
}

// checkDifferential holds Read to the parsers' readings of text: where it
// reads one unambiguous value, each parser accepts it and takes it for
// that value; where a parser accepts a text, Read reads it as that one
// value or marks it ambiguous.
func checkDifferential(t *testing.T, text []byte, got map[string]string) {
	t.Helper()
	r := Read(text)
	v, one := r.One()
	clear := one && r.Ambiguous == ""
	for name, d := range got {
		switch {
		case clear && d != describe(v):
			t.Fatalf("%q: Read takes it as %s without ambiguity, %s as %s", text, describe(v), name, d)
		case !clear && d != "ERR" && r.Ambiguous == "":
			t.Fatalf("%q: %s reads %s, Read neither reads it nor marks it ambiguous (err %q)", text, name, d, r.Err)
		}
	}
}

// checkStream holds Read to encoding/json's stream decoder: the values it
// decodes before any error are the values Read reads, and where they
// differ Read marks the text ambiguous.
func checkStream(t *testing.T, input []byte) {
	t.Helper()
	r := Read(input)
	dec := json.NewDecoder(bytes.NewReader(input))
	var got []string
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		got = append(got, describeGo(v))
	}
	for i, d := range got {
		if i >= len(r.Values) {
			if r.Ambiguous == "" && r.Err == "" {
				t.Fatalf("%q: the stream decoder reads value %d, Read reads %d and no error", input, i+1, len(r.Values))
			}
			return
		}
		if r.Values[i].Ambiguous == "" && describe(r.Values[i]) != d {
			t.Fatalf("%q: value %d is %s to the stream decoder, %s to Read", input, i+1, d, describe(r.Values[i]))
		}
	}
}

// TestReadingOfKnownDisagreements names the disagreements Read marks.
func TestReadingOfKnownDisagreements(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		ambiguous  bool
	}{
		{"escaped member name is the member", `{"tool\u0073":[]}`, false},
		{"duplicated member name", `{"a":1,"a":2}`, true},
		{"duplicated member name behind an escape", `{"a":1,"\u0061":2}`, true},
		{"number beyond the double range", `{"x":1e400}`, true},
		{"integer beyond 2^53", `[9007199254740993]`, true},
		{"integer at 2^53", `[9007199254740992]`, false},
		{"NaN", `[NaN]`, true},
		{"lone surrogate", `"\ud800"`, true},
		{"surrogate pair", `"\ud83d\ude00"`, false},
		{"invalid UTF-8", "\"\xff\"", true},
		{"byte order mark", "\xef\xbb\xbf{}", true},
		{"two values in one text", `{} {}`, true},
		{"nesting beyond MaxDepth", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), true},
		{"nesting at MaxDepth", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), false},
		{"nesting beyond encoding/json's limit", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Read([]byte(tc.text))
			if (r.Ambiguous != "") != tc.ambiguous {
				t.Fatalf("Ambiguous = %q (err %q), want ambiguous %v", r.Ambiguous, r.Err, tc.ambiguous)
			}
		})
	}
}

// TestGetReadsMembersAsEveryReaderDoes: Get finds an escaped name, and
// reports a name in another case or given twice.
func TestGetReadsMembersAsEveryReaderDoes(t *testing.T) {
	for _, tc := range []struct {
		name, text, member string
		found, ambiguous   bool
	}{
		{"plain", `{"tools":[]}`, "tools", true, false},
		{"escaped", `{"tool\u0073":[]}`, "tools", true, false},
		{"another case alone", `{"Tools":[]}`, "tools", false, true},
		{"another case beside it", `{"tools":[],"TOOLS":[1]}`, "tools", true, true},
		{"Kelvin sign folds to k", `{"\u212aey":1}`, "key", false, true},
		{"twice", `{"tools":[],"tools":[1]}`, "tools", true, true},
		{"absent", `{"other":1}`, "tools", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := Read([]byte(tc.text)).One()
			if !ok {
				t.Fatal("not one value")
			}
			m, why := v.Get(tc.member)
			if (m != nil) != tc.found || (why != "") != tc.ambiguous {
				t.Fatalf("Get(%q) = %v, %q", tc.member, m != nil, why)
			}
		})
	}
}

func TestReadKeepsRawBytes(t *testing.T) {
	text := []byte(`{"a" : [1, 2.50 ,"x\u0041"] }`)
	v, _ := Read(text).One()
	a, _ := v.Get("a")
	if string(a.Raw) != `[1, 2.50 ,"x\u0041"]` || a.Elems[2].Str != "xA" {
		t.Fatalf("raw %q, str %q", a.Raw, a.Elems[2].Str)
	}
	if hex.EncodeToString(v.Raw) != hex.EncodeToString(text[:len(text)]) {
		t.Fatalf("object raw %q", v.Raw)
	}
}

// A text cut inside a value says that more could complete it, as a stream
// reader waits for more (a frame split over lines); a text that no more
// could make JSON does not.
func TestMoreMarksATextThatEndsInsideAValue(t *testing.T) {
	for _, tc := range []struct {
		text string
		more bool
	}{
		{`{"a":`, true},
		{`{"a":[1,`, true},
		{`{"a":"x`, true},
		{`{"a":"x\`, true},
		{`{"a":"\u00`, true},
		{`{"a":tr`, true},
		{`{"a":1.`, true},
		{`{"a":-`, true},
		{`{"a":1}`, false},
		{`{"a":1}}`, false},
		{`{"a":x`, false},
		{`{"a":"\uzz`, false},
		{`{"a":tx`, false},
		{`garbage`, false},
		{`{"a":1} {"b":`, true},
	} {
		if rd := Read([]byte(tc.text)); rd.More != tc.more {
			t.Errorf("%s: More %v, want %v (err %q)", tc.text, rd.More, tc.more, rd.Err)
		}
	}
}
