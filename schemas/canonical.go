package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxInteger is the exclusive upper bound of an integer in the audit value
// space (2^53). Larger values must be carried as decimal strings.
const MaxInteger = 1 << 53

var (
	// ErrSyntax marks input that is not JSON text at all: a syntax error,
	// truncation, trailing data or bytes that are not UTF-8. A verifier uses it
	// to tell a torn final line from a malformed one.
	ErrSyntax = errors.New("not json")

	// ErrValueSpace marks JSON that is well formed but outside the audit value
	// space: a null, a float, a negative or too large integer, a duplicate
	// member name or an unpaired surrogate escape.
	ErrValueSpace = errors.New("outside the audit value space")
)

// ParseError reports why bytes could not be canonicalized. Err is
// [ErrSyntax] or [ErrValueSpace]; Offset is the byte offset in the input
// near which the problem was found.
type ParseError struct {
	Offset int64
	Detail string
	Err    error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s at byte %d", e.Detail, e.Offset)
}

func (e *ParseError) Unwrap() error { return e.Err }

func syntaxErrorf(off int64, format string, args ...any) error {
	return &ParseError{Offset: off, Detail: fmt.Sprintf(format, args...), Err: ErrSyntax}
}

func spaceErrorf(off int64, format string, args ...any) error {
	return &ParseError{Offset: off, Detail: fmt.Sprintf(format, args...), Err: ErrValueSpace}
}

// Canonicalize parses raw as one JSON value inside the audit value space and
// returns its RFC 8785 canonical form. Insignificant whitespace in raw is
// accepted and dropped; everything else that is not in the value space is an
// error wrapping [ErrSyntax] or [ErrValueSpace]. For any accepted input,
// Canonicalize of the result returns the result unchanged.
func Canonicalize(raw []byte) ([]byte, error) {
	v, err := DecodeValue(raw)
	if err != nil {
		return nil, err
	}
	return EncodeValue(v)
}

// MarshalCanonical encodes v with encoding/json and canonicalizes the result.
// A Go value that marshals to a null (a nil pointer, slice or map without
// omitempty), a float with a fractional part or a negative number is refused,
// so the types that go into audit lines must omit absent fields.
func MarshalCanonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal canonical: %w", err)
	}
	return Canonicalize(raw)
}

// DecodeValue parses raw as one JSON value inside the audit value space. The
// result is a tree of map[string]any (objects), []any (arrays), string,
// uint64 (integers) and bool. Errors are *[ParseError].
func DecodeValue(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			r, n := utf8.DecodeRune(raw[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, syntaxErrorf(int64(off), "invalid utf-8")
	}
	if err := checkSurrogates(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeToken(dec)
	if err != nil {
		return nil, err
	}
	off := dec.InputOffset()
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, syntaxErrorf(off, "trailing data: %v", err)
		}
		return nil, syntaxErrorf(off, "trailing data %v", tok)
	}
	return v, nil
}

func decodeToken(dec *json.Decoder) (any, error) {
	off := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, syntaxErrorf(off, "unexpected end of input")
		}
		return nil, syntaxErrorf(dec.InputOffset(), "%v", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := make(map[string]any)
			for dec.More() {
				koff := dec.InputOffset()
				ktok, err := dec.Token()
				if err != nil {
					return nil, syntaxErrorf(dec.InputOffset(), "%v", err)
				}
				key, ok := ktok.(string)
				if !ok {
					return nil, syntaxErrorf(koff, "object key is not a string")
				}
				if _, dup := obj[key]; dup {
					return nil, spaceErrorf(koff, "duplicate member %q", key)
				}
				val, err := decodeToken(dec)
				if err != nil {
					return nil, err
				}
				obj[key] = val
			}
			if _, err := dec.Token(); err != nil {
				return nil, syntaxErrorf(dec.InputOffset(), "%v", err)
			}
			return obj, nil
		case '[':
			arr := make([]any, 0)
			for dec.More() {
				val, err := decodeToken(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, syntaxErrorf(dec.InputOffset(), "%v", err)
			}
			return arr, nil
		default:
			return nil, syntaxErrorf(off, "unexpected %v", t)
		}
	case string:
		return t, nil
	case bool:
		return t, nil
	case json.Number:
		n, err := parseInteger(string(t))
		if err != nil {
			return nil, spaceErrorf(off, "%v", err)
		}
		return n, nil
	case nil:
		return nil, spaceErrorf(off, "null is not allowed")
	default:
		return nil, syntaxErrorf(off, "unexpected token %v", t)
	}
}

// parseInteger accepts the decimal form of an integer in [0, MaxInteger).
func parseInteger(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("number %s is not a non-negative integer", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("number %s has a leading zero", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n >= MaxInteger {
		return 0, fmt.Errorf("integer %s is not below 2^53", s)
	}
	return n, nil
}

// checkSurrogates refuses \u escapes that encode an unpaired UTF-16
// surrogate: encoding/json would silently turn them into U+FFFD, and RFC 8785
// (via I-JSON) forbids them. It only has to be right for valid JSON; the
// decoder rejects everything else afterwards.
func checkSurrogates(raw []byte) error {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(raw) {
				return nil
			}
			if raw[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(raw[i+2:])
			if !ok {
				return nil
			}
			start := i
			i += 5
			switch {
			case r >= 0xd800 && r < 0xdc00:
				if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if lo, ok := hex4(raw[i+3:]); ok && lo >= 0xdc00 && lo < 0xe000 {
						i += 6
						continue
					}
				}
				return spaceErrorf(int64(start), "unpaired surrogate escape %s", raw[start:start+6])
			case r >= 0xdc00 && r < 0xe000:
				return spaceErrorf(int64(start), "unpaired surrogate escape %s", raw[start:start+6])
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits a \u escape ends with.
func hex4[T string | []byte](b T) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := b[i]
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// EncodeValue returns the RFC 8785 canonical form of a value tree as produced
// by [DecodeValue]: map[string]any, []any, string, bool and non-negative
// integers below [MaxInteger] (uint64, or int and int64 for convenience). Any
// other type, invalid UTF-8 in a string or an out-of-range integer is an error
// wrapping [ErrValueSpace].
func EncodeValue(v any) ([]byte, error) {
	return appendValue(make([]byte, 0, 512), v)
}

func appendValue(b []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendString(b, k); err != nil {
				return nil, err
			}
			b = append(b, ':')
			if b, err = appendValue(b, t[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case string:
		return appendString(b, t)
	case bool:
		return strconv.AppendBool(b, t), nil
	case uint64:
		if t >= MaxInteger {
			return nil, spaceErrorf(0, "integer %d is not below 2^53", t)
		}
		return strconv.AppendUint(b, t, 10), nil
	case int:
		return appendValue(b, int64(t))
	case int64:
		if t < 0 {
			return nil, spaceErrorf(0, "integer %d is negative", t)
		}
		return appendValue(b, uint64(t))
	case nil:
		return nil, spaceErrorf(0, "null is not allowed")
	default:
		return nil, spaceErrorf(0, "type %T is not in the value tree", v)
	}
}

// appendString writes s as RFC 8785 does: only '"', '\\' and control
// characters are escaped, with the short forms where JSON has them and
// lowercase \u00xx otherwise; everything else, '/' and non-ASCII included,
// is written literally.
func appendString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, spaceErrorf(0, "string %q is not valid utf-8", s)
	}
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		// Copy the run of bytes that need no escape in one append.
		j := i
		for j < len(s) && s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' {
			j++
		}
		b = append(b, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"'), nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// requires for member names. It differs from byte order only when a
// supplementary-plane character meets one in U+E000..U+FFFF.
func compareUTF16(a, b string) int {
	// Skip the common prefix; if the first differing bytes are both ASCII,
	// UTF-16 order is byte order.
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i < len(a) && i < len(b) && a[i] < 0x80 && b[i] < 0x80 {
		return int(a[i]) - int(b[i])
	}
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return slices.Compare(utf16Units(ra), utf16Units(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

func utf16Units(r rune) []uint16 {
	if r >= 0x10000 {
		hi, lo := utf16.EncodeRune(r)
		return []uint16{uint16(hi), uint16(lo)}
	}
	return []uint16{uint16(r)}
}
