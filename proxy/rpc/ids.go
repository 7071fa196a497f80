package rpc

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// jsonString returns a JSON string token's value, as the one reading of
// frames takes it; false for anything else.
func jsonString(raw json.RawMessage) (string, bool) {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 || r[0] != '"' {
		return "", false
	}
	if plainString(r) {
		return string(r[1 : len(r)-1]), true
	}
	v, ok := reading.Read(r).One()
	if !ok {
		return "", false
	}
	return v.String()
}

// IDKey normalizes a JSON-RPC id for matching. Strings key as "s:" plus the
// decoded string; numbers as "n:" plus the exact rational value, so that
// ids beyond 2^53 keep every digit.
func IDKey(raw json.RawMessage) (key string, ok bool, why string) {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 {
		return "", false, "tools/call without an id"
	}
	switch {
	case bytes.Equal(r, []byte("null")):
		return "", false, "tools/call with a null id"
	case r[0] == '"':
		s, ok := jsonString(r)
		if !ok {
			return "", false, "tools/call with an invalid id"
		}
		return "s:" + s, true, ""
	case r[0] == '-' || (r[0] >= '0' && r[0] <= '9'):
		if isPlainInteger(r) {
			if bytes.Equal(r, []byte("-0")) {
				return "n:0", true, ""
			}
			return "n:" + string(r), true, ""
		}
		// A fraction or exponent: normalize its value, unless the exponent
		// is large enough to make that expensive (1e999999999); such an id
		// keys by its text.
		if i := bytes.IndexAny(r, "eE"); i >= 0 {
			if e, err := strconv.Atoi(string(bytes.TrimPrefix(r[i+1:], []byte("+")))); err != nil || e > 64 || e < -64 {
				return "x:" + string(r), true, ""
			}
		}
		var q big.Rat
		if _, ok := q.SetString(string(r)); !ok {
			return "", false, "tools/call with an invalid id"
		}
		return "n:" + q.RatString(), true, ""
	}
	return "", false, "tools/call with an id that is not a string or number"
}

// AppendPlainIDKey appends to dst the key IDKey gives raw, without
// allocating, when raw is a plain integer other than -0 or a plain string
// (see plainString); it reports false for any other id, which the caller
// then keys with IDKey. raw has no white space around it.
func AppendPlainIDKey(dst, raw []byte) ([]byte, bool) {
	switch {
	case isPlainInteger(raw) && !bytes.Equal(raw, []byte("-0")):
		return append(append(dst, "n:"...), raw...), true
	case plainString(raw):
		return append(append(dst, "s:"...), raw[1:len(raw)-1]...), true
	}
	return dst, false
}

func isPlainInteger(r []byte) bool {
	if len(r) > 0 && r[0] == '-' {
		r = r[1:]
	}
	if len(r) == 0 {
		return false
	}
	for _, c := range r {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
