package proxy

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ArgsPreviewBytes bounds the canonical JSON of the arguments that an
// approver is shown with a pending approval (the prompt, aegis approvals).
const ArgsPreviewBytes = 512

// argsPreview returns the canonical JSON of a call's arguments cut to at
// most ArgsPreviewBytes at a character boundary, and its whole length.
func argsPreview(canonical []byte) (string, int) {
	return cutUTF8(canonical, ArgsPreviewBytes), len(canonical)
}

func cutUTF8(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n])
}

// Printable returns s safe to write to a terminal: every character that
// could act on it or hide what follows (C0 and C1 controls, DEL, format
// characters such as bidi overrides and zero-width ones, line and
// paragraph separators, and any other non-printing character) is written
// as \uXXXX (\UXXXXXXXX above the BMP), and a byte that is not UTF-8 as
// \xXX. Printable characters, the ASCII space included, stay as they are.
// Host-chosen text (tool names, approval ids, arguments) goes through it
// before it reaches the operator.
func Printable(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < 0x7f {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// ShowArgs is how an approver is shown a call's arguments: the canonical
// JSON preview made [Printable], "…" when it was cut, then the whole
// length and the start of the SHA-256 digest (args_digest):
//
//	{"a":2,"b":3} (13 bytes, sha256 5e1f2a3b4c5d6e7f…)
//	{"text":"aaaa…(70000 bytes, sha256 0c1d2e3f4a5b6c7d…)
func ShowArgs(preview string, total int, digest string) string {
	if len(digest) > 16 {
		digest = digest[:16] + "…"
	}
	sep := " "
	if total > len(preview) {
		sep = "…"
	}
	return fmt.Sprintf("%s%s(%d bytes, sha256 %s)", Printable(preview), sep, total, Printable(digest))
}
