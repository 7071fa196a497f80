package schemas

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCanonicalVector reproduces the specification's §11.1 vector: a line
// written with members out of order and with whitespace canonicalizes to the
// published bytes, whose SHA-256 is the published hash.
func TestCanonicalVector(t *testing.T) {
	in := []byte(`{
	  "tool_id": "echo", "seq": 7, "line_type": "outcome",
	  "prev_hash": "0000000000000000000000000000000000000000000000000000000000000000",
	  "decision_axes": {"role": "ops", "fs": {"path_raw": "~/notes.md", "path_canonical": "/home/a/notes.md"}, "capability": "fs.read"}
	}`)
	want := `{"decision_axes":{"capability":"fs.read","fs":{"path_canonical":"/home/a/notes.md","path_raw":"~/notes.md"},"role":"ops"},"line_type":"outcome","prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","seq":7,"tool_id":"echo"}`
	got, err := Canonicalize(in)
	if err != nil {
		t.Fatalf("Canonicalize: %v", err)
	}
	if string(got) != want {
		t.Fatalf("Canonicalize = %s\nwant %s", got, want)
	}
	if got, want := HashHex(got), "9017de5e13e0a12b261e1960d0d0bc9220c6b7ef501b7dd189141e6327377664"; got != want {
		t.Fatalf("SHA-256 = %s, want %s", got, want)
	}
}

func TestCanonicalForms(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"whitespace dropped", " { \"b\" : [ 1 , 2 ] ,\n\"a\":true } ", `{"a":true,"b":[1,2]}`},
		{"arrays keep order", `[3,1,2]`, `[3,1,2]`},
		{"largest integer", `9007199254740991`, `9007199254740991`},
		{"zero", `0`, `0`},
		{"false", `false`, `false`},
		{"empty object", `{}`, `{}`},
		{"short escapes", `"\b\t\n\f\r"`, `"\b\t\n\f\r"`},
		{"other controls lowercase hex", `"\u0007\u001F\u0000"`, `"\u0007\u001f\u0000"`},
		{"slash not escaped", `"a\/b"`, `"a/b"`},
		{"quote and backslash", `"\"\\"`, `"\"\\"`},
		{"non-ascii literal", `"\u00e9\u2028"`, "\"\u00e9\u2028\""},
		{"del literal", `"\u007f"`, "\"\x7f\""},
		{"surrogate pair literal", `"\ud83d\ude00"`, "\"\U0001F600\""},
		{"html not escaped", `"<&>"`, `"<&>"`},
		{
			// U+1F600 is D83D DE00 in UTF-16 and sorts before U+E000,
			// though its UTF-8 bytes sort after.
			"keys sort by utf-16 units",
			"{\"\ue000\":1,\"\U0001F600\":2,\"a\":3,\"\":4}",
			"{\"\":4,\"a\":3,\"\U0001F600\":2,\"\ue000\":1}",
		},
		{"key prefix sorts first", `{"ab":1,"a":2}`, `{"a":2,"ab":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("Canonicalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
			again, err := Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("Canonicalize(%q) = %q, %v; want it unchanged", got, again, err)
			}
		})
	}
}

// TestCanonicalRefuses lists inputs outside the value space; each would let
// two different byte strings mean the same line, or smuggle a value that
// another implementation reads differently.
func TestCanonicalRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"null member", `{"a":null}`, ErrValueSpace},
		{"null in array", `[1,null]`, ErrValueSpace},
		{"top-level null", `null`, ErrValueSpace},
		{"float", `1.5`, ErrValueSpace},
		{"integral float", `1.0`, ErrValueSpace},
		{"exponent", `1e2`, ErrValueSpace},
		{"negative", `-1`, ErrValueSpace},
		{"negative zero", `-0`, ErrValueSpace},
		{"two to the 53", `9007199254740992`, ErrValueSpace},
		{"uint64 overflow", `184467440737095516160`, ErrValueSpace},
		{"duplicate member", `{"seq":1,"seq":2}`, ErrValueSpace},
		{"duplicate member nested", `{"a":{"b":1,"b":1}}`, ErrValueSpace},
		{"duplicate member by escape", `{"a":1,"\u0061":2}`, ErrValueSpace},
		{"lone high surrogate", `"\ud800"`, ErrValueSpace},
		{"lone low surrogate", `"\udc00"`, ErrValueSpace},
		{"reversed surrogates", `"\udc00\ud800"`, ErrValueSpace},
		{"high surrogate then letter", `"\ud800\u0041"`, ErrValueSpace},
		{"lone surrogate in key", `{"\ud800":1}`, ErrValueSpace},
		{"invalid utf-8", "\"\xff\"", ErrSyntax},
		{"overlong utf-8", "\"\xc0\xaf\"", ErrSyntax},
		{"empty", ``, ErrSyntax},
		{"whitespace only", "  \n", ErrSyntax},
		{"truncated", `{"a":1`, ErrSyntax},
		{"trailing comma", `{"a":1,}`, ErrSyntax},
		{"two values", `{} {}`, ErrSyntax},
		{"trailing garbage", `{}x`, ErrSyntax},
		{"leading zero", `01`, ErrSyntax},
		{"bare word", `nul`, ErrSyntax},
		{"missing colon", `{"a" 1}`, ErrSyntax},
		{"non-string key", `{1:2}`, ErrSyntax},
		{"raw control in string", "\"a\x01\"", ErrSyntax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Canonicalize(%q) = %q, %v; want error %v", tc.in, got, err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Canonicalize(%q) error %T is not a *ParseError", tc.in, err)
			}
		})
	}
}

func TestEncodeValueRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"float", 1.0},
		{"negative int", -1},
		{"large uint", uint64(MaxInteger)},
		{"invalid utf-8 string", "\xff"},
		{"invalid utf-8 key", map[string]any{"\xff": true}},
		{"nested nil", map[string]any{"a": []any{nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := EncodeValue(tc.v); !errors.Is(err, ErrValueSpace) {
				t.Fatalf("EncodeValue(%#v) = %q, %v; want ErrValueSpace", tc.v, got, err)
			}
		})
	}
}

func TestMarshalCanonicalRefusesNull(t *testing.T) {
	type withSlice struct {
		Paths []string `json:"paths"`
	}
	if got, err := MarshalCanonical(withSlice{}); !errors.Is(err, ErrValueSpace) {
		t.Fatalf("MarshalCanonical(nil slice) = %q, %v; want ErrValueSpace", got, err)
	}
}

func FuzzCanonicalize(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"\ud83d\ude00":"\u0000","b":[true,false,9007199254740991]}`))
	f.Add([]byte(`9007199254740992`)) // first integer outside the space
	f.Add([]byte(`"\ud800"`))         // unpaired surrogate
	f.Add([]byte("\"\\\\u0041\""))    // escaped backslash before u
	f.Add([]byte(`{"a":1,"a":1}`))
	f.Add([]byte(`[[[[[]]]]]`))
	if b, err := os.ReadFile(filepath.Join("testdata", "audit", "upstream-golden-session.aarl")); err == nil {
		for line := range bytes.Lines(b) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			f.Add(line)
			f.Add(line[:len(line)/2]) // torn
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Canonicalize(in)
		if err != nil {
			if got != nil {
				t.Fatalf("Canonicalize(%q) = %q with error %v", in, got, err)
			}
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrValueSpace) {
				t.Fatalf("Canonicalize(%q) error %v is neither ErrSyntax nor ErrValueSpace", in, err)
			}
			return
		}
		again, err := Canonicalize(got)
		if err != nil {
			t.Fatalf("Canonicalize(%q) = %q, which does not canonicalize: %v", in, got, err)
		}
		if !bytes.Equal(again, got) {
			t.Fatalf("Canonicalize(%q) = %q, but again = %q", in, got, again)
		}
		if l, err := DecodeLine(in); err == nil {
			_, _ = l.Header()
			if _, err := l.Hash(); err != nil {
				t.Fatalf("Hash of accepted line %q: %v", in, err)
			}
			if _, err := l.SigningInput(); err != nil {
				t.Fatalf("SigningInput of accepted line %q: %v", in, err)
			}
		}
	})
}
