package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fastSeeds returns every line of the audit records under testdata (this
// package's and the verifier's), the envelope documents, and hand-written
// edge cases of the value space.
func fastSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, pattern := range []string{
		"testdata/audit/*.aarl",
		"testdata/envelope/*/*.json",
		"../verifier/testdata/*.aarl",
		"../verifier/testdata/corpus/*.aarl",
	} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			tb.Fatal(err)
		}
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				tb.Fatal(err)
			}
			if strings.HasSuffix(name, ".json") {
				seeds = append(seeds, b)
				continue
			}
			for _, line := range bytes.Split(b, []byte("\n")) {
				if len(line) > 0 {
					seeds = append(seeds, line)
				}
			}
		}
	}
	for _, s := range []string{
		``, ` `, `{}`, `[]`, ` {} `, "{}\n", `{"a":1}`, `{"a":1,}`, `{"a" :1}`, `{"b":1,"a":2}`,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"b":1,"a":2,"b":3}`, `{"a":{"b":[1,2,{"c":true}]},"d":false}`,
		`{"signature":"ab"}`, `{"signature":"ab","z":1}`, `{"a":1,"signature":"ab"}`, `{"a":{"signature":1},"signature":2}`,
		`{"a":null}`, `null`, `{"a":nul}`, `{"a":nulx}`, `{"a":nullx}`, `true`, `tru`, `truex`, `[true,false]`,
		`0`, `-0`, `01`, `[01]`, `[-01]`, `1.5`, `1.`, `1e5`, `1E+5`, `1e`, `-`, `-a`, `9007199254740991`, `9007199254740992`,
		`99999999999999999999`, `00`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1 "b":2}`, `{1:2}`, `{"a"}`, `{"a":}`, `[}`, `{]`,
		`"\u0000\u001f\b\t\n\f\r\"\\"`, `"\u0008"`, `"\u001F"`, `"\u0041"`, `"\/"`, `"\ud83d\ude00"`, `"😀"`,
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800\ud800"`, `"\ud800\udc00`, `"\ud800x"`, `"\ud800\x"`,
		`"\ud8"`, `"\x"`, "\"a\x01\"", "\"\xff\"", `"\\ud800"`, `{"a":"\ud800"} x`, `{"\ud800":1}`, `{} {}`, `{} x`,
		`{"é":1,"z":2}`, `{"\ue000":1,"\U0001f600":2}`, "{\"\ue000\":1,\"\U0001f600\":2}", "{\"\U0001f600\":1,\"\ue000\":2}",
		`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`, strings.Repeat("[", 1200) + strings.Repeat("]", 1200),
		`{"a":1}}`, `{"a":1}]`, "\t{\"a\":1}\r\n", `{"a":[]}`, `{"a":{}}`, `[{},[]]`, `""`,
		`{"a\"b":"\u001f","c":["\\",{"d":"\n"}],"signature":"x"}`, `{"sign\u0061ture":"x"}`, `[{"signature":1}]`,
		`{"line_type":"open","prev_hash":"x","schema_version":2,"seq":0}`, `{"line_type":1,"schema_version":2}`,
		`{"line_type":"open","prev_hash":{"a":[1]},"schema_version":3,"seq":true}`, `{"schema_version":"2"}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	// The corpora share many lines (about half of them): each is checked
	// once.
	seen := map[string]bool{}
	return slices.DeleteFunc(seeds, func(b []byte) bool {
		dup := seen[string(b)]
		seen[string(b)] = true
		return dup
	})
}

// checkFastDecode compares the fast parser with DecodeValue and EncodeValue
// on in: the same acceptance, value and canonical bytes, the same class of
// error; and DecodeCanonicalLine with DecodeLine: the same line, error
// text, canonical form and signing input.
func checkFastDecode(t *testing.T, in []byte) {
	t.Helper()
	wantV, wantErr := DecodeValue(in)
	var wantCanon []byte
	if wantErr == nil {
		var err error
		if wantCanon, err = EncodeValue(wantV); err != nil {
			t.Fatalf("EncodeValue(DecodeValue(%q)): %v", in, err)
		}
	}
	v, canon, err := fastCanonicalize(in)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("fast(%q) err = %v, DecodeValue err = %v", in, err, wantErr)
	case err != nil:
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("fast(%q) err = %#v, not a *ParseError", in, err)
		}
		for _, class := range []error{ErrSyntax, ErrValueSpace} {
			if errors.Is(err, class) != errors.Is(wantErr, class) {
				t.Fatalf("fast(%q) err = %v, DecodeValue err = %v: classes differ", in, err, wantErr)
			}
		}
	default:
		if !reflect.DeepEqual(v, wantV) {
			t.Fatalf("fast(%q) = %#v, DecodeValue = %#v", in, v, wantV)
		}
		if !bytes.Equal(canon, wantCanon) {
			t.Fatalf("fast(%q) canonical = %q, EncodeValue = %q", in, canon, wantCanon)
		}
	}

	wantL, wantErr := DecodeLine(in)
	c, err := DecodeCanonicalLine(in)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("DecodeCanonicalLine(%q) err = %v, DecodeLine err = %v", in, err, wantErr)
	}
	if err != nil {
		return
	}
	if got := c.Line(); !reflect.DeepEqual(got.m, wantL.m) {
		t.Fatalf("DecodeCanonicalLine(%q) = %#v, DecodeLine = %#v", in, got.m, wantL.m)
	}
	if c.fields != nil && len(c.fields) != len(wantL.m) {
		t.Fatalf("DecodeCanonicalLine(%q) has %d members, DecodeLine %d", in, len(c.fields), len(wantL.m))
	}
	names := []string{"", "nope", FieldSchemaVersion, FieldLineType, FieldSeq, FieldPrevHash, FieldSignature}
	for name := range wantL.m {
		names = append(names, name)
	}
	for _, name := range names {
		v, ok := c.Get(name)
		wv, wok := wantL.Get(name)
		if ok != wok || !reflect.DeepEqual(v, wv) {
			t.Fatalf("DecodeCanonicalLine(%q).Get(%q) = %#v, %v; DecodeLine: %#v, %v", in, name, v, ok, wv, wok)
		}
		s, ok := c.Str(name)
		ws, wok := wantL.Str(name)
		if s != ws || ok != wok {
			t.Fatalf("DecodeCanonicalLine(%q).Str(%q) = %q, %v; DecodeLine: %q, %v", in, name, s, ok, ws, wok)
		}
	}
	if c.Type() != wantL.Type() {
		t.Fatalf("DecodeCanonicalLine(%q).Type() = %q, DecodeLine: %q", in, c.Type(), wantL.Type())
	}
	h, err := c.Header()
	wh, werr := wantL.Header()
	if h != wh || fmt.Sprint(err) != fmt.Sprint(werr) {
		t.Fatalf("DecodeCanonicalLine(%q).Header() = %+v, %v; DecodeLine: %+v, %v", in, h, err, wh, werr)
	}
	wantCanon, _ = wantL.Canonical()
	if !bytes.Equal(c.Canonical, wantCanon) {
		t.Fatalf("DecodeCanonicalLine(%q) canonical = %q, want %q", in, c.Canonical, wantCanon)
	}
	if c.Hash() != HashHex(wantCanon) {
		t.Fatalf("DecodeCanonicalLine(%q) hash differs", in)
	}
	msg, err := c.SigningInput()
	wantMsg, wantErr := wantL.SigningInput()
	if err != nil || wantErr != nil || !bytes.Equal(msg, wantMsg) {
		t.Fatalf("DecodeCanonicalLine(%q) signing input = %q, %v; want %q, %v", in, msg, err, wantMsg, wantErr)
	}
	msg, err = c.AppendSigningInput([]byte("prefix"))
	if err != nil || string(msg) != "prefix"+string(wantMsg) {
		t.Fatalf("DecodeCanonicalLine(%q) appended signing input = %q, %v; want prefix%q", in, msg, err, wantMsg)
	}
}

func TestFastDecodeMatchesDecodeValue(t *testing.T) {
	seeds := fastSeeds(t)
	if len(seeds) < 100 {
		t.Fatalf("only %d seeds", len(seeds))
	}
	for _, in := range seeds {
		checkFastDecode(t, in)
		// Prefixes, and the input with a byte dropped or doubled: at every
		// position of short inputs, at a stride through long ones.
		step := 1
		if len(in) > 200 {
			step = 37
		}
		for i := 0; i <= len(in); i += step {
			checkFastDecode(t, in[:i])
			if i < len(in) {
				checkFastDecode(t, append(in[:i:i], in[i+1:]...))
				checkFastDecode(t, append(in[:i+1:i+1], in[i:]...))
			}
		}
	}
}

// TestFastDecodeStringScan puts every kind of byte at every offset of the
// eight-byte scan in str.
func TestFastDecodeStringScan(t *testing.T) {
	for _, c := range []string{`"`, `\\`, `\"`, `\u0001`, "\x00", "\x01", "\x1f", " ", "\x7f", "\x80", "é", "\\", "x"} {
		for i := 0; i < 20; i++ {
			for _, tail := range []string{``, `abcdefghij`} {
				in := `{"k":"` + strings.Repeat("a", i) + c + tail + `"}`
				checkFastDecode(t, []byte(in))
				checkFastDecode(t, []byte(`["`+strings.Repeat("a", i)+c+tail))
			}
		}
	}
}

// TestSpecial8 holds the eight-byte test of str to a byte loop.
func TestSpecial8(t *testing.T) {
	naive := func(b []byte) bool {
		for _, c := range b {
			if c == '"' || c == '\\' || c < 0x20 {
				return true
			}
		}
		return false
	}
	rng := rand.New(rand.NewSource(1))
	b := make([]byte, 8)
	for i := 0; i < 200000; i++ {
		if i < 8*256 { // every byte value at every position of a plain run
			copy(b, "abcdefgh")
			b[i%8] = byte(i / 8)
		} else {
			for j := range b {
				b[j] = byte(0x20 + rng.Intn(0x60))
				if rng.Intn(8) == 0 {
					b[j] = byte(rng.Intn(256))
				}
			}
		}
		if got, want := special8(string(b)), naive(b); got != want {
			t.Fatalf("special8(%q) = %v, want %v", b, got, want)
		}
	}
}

// TestLowerHex holds isDigestFast to IsDigest and DecodeLowerHex to
// ParseSignature and ParsePublicKey.
func TestLowerHex(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	const alphabet = "0123456789abcdefABCDEFgz/:@`G\x00\xff"
	for i := 0; i < 100000; i++ {
		n := []int{63, 64, 65, 128, 127, 0}[rng.Intn(6)]
		b := make([]byte, n)
		for j := range b {
			b[j] = "0123456789abcdef"[rng.Intn(16)]
		}
		if n > 0 && rng.Intn(2) == 0 {
			b[rng.Intn(n)] = alphabet[rng.Intn(len(alphabet))]
		}
		if i < 256*64 { // every byte at every position of a digest
			b = bytes.Repeat([]byte("a"), 64)
			b[i%64] = byte(i / 64)
		}
		s := string(b)
		if got, want := isDigestFast(s), IsDigest(s); got != want {
			t.Fatalf("isDigestFast(%q) = %v, want %v", s, got, want)
		}
		var sig [64]byte
		wantSig, wantOK := ParseSignature(s)
		if ok := DecodeLowerHex(sig[:], s); ok != wantOK || ok && !bytes.Equal(sig[:], wantSig) {
			t.Fatalf("DecodeLowerHex(sig, %q) = %x, %v; ParseSignature: %x, %v", s, sig, ok, wantSig, wantOK)
		}
		var pub [32]byte
		wantPub, err := ParsePublicKey(s)
		if ok := DecodeLowerHex(pub[:], s); ok != (err == nil) || ok && !bytes.Equal(pub[:], wantPub) {
			t.Fatalf("DecodeLowerHex(pub, %q) = %x, %v; ParsePublicKey: %x, %v", s, pub, ok, wantPub, err)
		}
	}
}

// TestFastDecodeSharesCanonicalInput: a canonical line is not copied.
func TestFastDecodeSharesCanonicalInput(t *testing.T) {
	in := []byte(`{"a":[1,"x"],"key_id":"k","signature":"s","z":{}}`)
	c, err := DecodeCanonicalLine(in)
	if err != nil {
		t.Fatal(err)
	}
	if &c.Canonical[0] != &in[0] {
		t.Fatal("canonical input was copied")
	}
	msg, _ := c.SigningInput()
	if got, want := string(msg), `{"a":[1,"x"],"key_id":"k","z":{}}`; got != want {
		t.Fatalf("signing input = %s, want %s", got, want)
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range fastSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(checkFastDecode)
}

func BenchmarkDecodeCanonicalLine(b *testing.B) {
	raw, err := os.ReadFile("testdata/audit/upstream-golden-session.aarl")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			for _, l := range lines {
				c, err := DecodeCanonicalLine(l)
				if err != nil {
					b.Fatal(err)
				}
				_ = c.Hash()
				if _, err := c.Header(); err != nil {
					b.Fatal(err)
				}
				if _, ok := c.Get(FieldSignature); ok {
					_, _ = c.SigningInput()
				}
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		for b.Loop() {
			for _, l := range lines {
				line, err := DecodeLine(l)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = line.Hash()
				if _, err := line.Header(); err != nil {
					b.Fatal(err)
				}
				if _, ok := line.Get(FieldSignature); ok {
					_, _ = line.SigningInput()
				}
			}
		}
	})
}

// readStringCases are strings as they start a payload member: plain,
// escaped (an audit line inside a payload), followed by more JSON, cut
// short, and broken in the ways a strict reader refuses.
var readStringCases = []string{
	`""`, `"a"`, `"a","b":1}`, `"{\"seq\":1,\"x\":\"\\u00e9\\\\\"}","call_id":"c"}`,
	`"\u00e9\ud83d\ude00\n\t\/"`, `"\\"`, `"\\\""`, `"a\"`, `"abc`, `"\`, `"a\q"`,
	`"\ud800"`, `"\ud800\u0041"`, "\"tab\there\"", "\"\xff\"", "\"ok\" \xff", `"a"garbage`,
	`"` + strings.Repeat(`\"x`, 300) + `"`, `x"`, ``,
}

// ReadString, where it accepts a string, reads it as encoding/json does.
func checkReadString(t *testing.T, in []byte) {
	s, n, err := ReadString(in)
	if err != nil {
		return
	}
	var want string
	if n < 2 || n > len(in) || json.Unmarshal(in[:n], &want) != nil || s != want {
		t.Fatalf("ReadString(%q) = %q, %d; encoding/json reads %q", in, s, n, want)
	}
}

func TestReadStringReadsAsEncodingJSON(t *testing.T) {
	accepted := 0
	for _, c := range readStringCases {
		checkReadString(t, []byte(c))
		if _, _, err := ReadString([]byte(c)); err == nil {
			accepted++
		}
	}
	if accepted < 8 {
		t.Fatalf("ReadString accepted only %d of the cases", accepted)
	}
	for _, bad := range []string{`"a\"`, `"abc`, `"\ud800"`, "\"tab\there\"", "\"\xff\"", `x"`, ``} {
		if s, _, err := ReadString([]byte(bad)); err == nil {
			t.Errorf("ReadString(%q) = %q, want an error", bad, s)
		}
	}
}

func FuzzReadString(f *testing.F) {
	for _, c := range readStringCases {
		f.Add([]byte(c))
	}
	f.Fuzz(checkReadString)
}
