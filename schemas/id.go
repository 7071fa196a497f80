package schemas

import (
	"fmt"
	"io"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDLen is the length of an id made by [NewID].
const IDLen = 26

// NewID returns a 26-character sortable id: 48 bits of Unix milliseconds
// from now followed by 80 bits read from rand, in Crockford base32. Ids made
// in later milliseconds sort after earlier ones as strings. The clock and
// the randomness are parameters so that callers (and tests) own them.
func NewID(now time.Time, rand io.Reader) (string, error) {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := io.ReadFull(rand, b[6:]); err != nil {
		return "", fmt.Errorf("new id: read random: %w", err)
	}
	// 128 bits -> 26 base32 digits (130 bits, the top two are zero).
	var out [IDLen]byte
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
		uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	for i := IDLen - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:]), nil
}

// ValidID reports whether s has the form of a [NewID] id: 26 characters of
// upper-case Crockford base32, the first no greater than '7'. Such a string
// is a safe NATS subject token.
func ValidID(s string) bool {
	if len(s) != IDLen || s[0] > '7' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U')
		if !ok {
			return false
		}
	}
	return true
}

// IDTime returns the millisecond time encoded in an id made by [NewID].
func IDTime(id string) (time.Time, error) {
	if !ValidID(id) {
		return time.Time{}, fmt.Errorf("id time: %q is not an id", id)
	}
	var ms uint64
	for i := 0; i < 10; i++ {
		ms = ms<<5 | uint64(indexCrockford(id[i]))
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

func indexCrockford(c byte) int {
	for i := 0; i < len(crockford); i++ {
		if crockford[i] == c {
			return i
		}
	}
	return 0
}
