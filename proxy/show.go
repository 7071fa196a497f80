package proxy

import (
	"fmt"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/projector"
)

// ArgsPreviewBytes bounds the canonical JSON of the arguments that an
// approver is shown with a pending approval (the prompt, aegis approvals).
const ArgsPreviewBytes = 512

// ArgsPreview returns the canonical JSON of a call's arguments cut to at
// most ArgsPreviewBytes at a character boundary, and its whole length.
func ArgsPreview(canonical []byte) (string, int) {
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

// ShowArgs is how an approver is shown a call's arguments: the canonical
// JSON preview made [projector.Printable], "…" when it was cut, then the whole
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
	return fmt.Sprintf("%s%s(%d bytes, sha256 %s)", projector.Printable(preview), sep, total, projector.Printable(digest))
}
