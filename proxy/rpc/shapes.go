package rpc

import (
	"bytes"
	"slices"
	"strings"
)

// MaxFrame is the largest frame aegis carries, in bytes, without its line
// terminator: the largest that one event holds.
const MaxFrame = 16 << 20

// FrameOf strips the line terminator: the frame is the bytes before '\n'
// ('\r' included), as digested and recorded.
func FrameOf(line []byte) []byte {
	return bytes.TrimSuffix(line, []byte{'\n'})
}

// ListShape is what a listing of pinned things looks like: the result's
// member that holds them, and the member of each that names it.
type ListShape struct{ Member, Key string }

// ListShapes are the listings the pins read, by the method that asks for
// them.
var ListShapes = map[string]ListShape{
	"tools/list":               {"tools", "name"},
	"prompts/list":             {"prompts", "name"},
	"resources/templates/list": {"resourceTemplates", "uriTemplate"},
}

// CapsKey names the capabilities of a host that shape what a server lists
// (those the server is told: elicitation, roots, sampling), sorted and
// joined by commas: "" for none.
func CapsKey(names ...string) string {
	var out []string
	for _, n := range []string{"elicitation", "roots", "sampling"} {
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	return strings.Join(out, ",")
}
