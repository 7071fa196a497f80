package schemas

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A checkpoint commits to a sealed record file (a segment of a rotated
// record): its number of lines, the RFC 6962 Merkle tree root over them and
// the line hash of the last one. It is the body of a C2SP tlog-checkpoint,
// which a signed note (C2SP signed-note) carries; package projector signs
// it, package verifier checks it.
//
// The tree's leaves are the record file's lines without their '\n', in file
// order, every line counted (a record file with a checkpoint holds no empty
// line); a leaf's hash is SHA-256(0x00 ‖ line) and an inner node's
// SHA-256(0x01 ‖ left ‖ right), as golang.org/x/mod/sumdb/tlog computes
// them (RecordHash, NodeHash, TreeHash). The tree of no lines has the root
// SHA-256 of the empty string.
//
// The body is, each line ending in '\n':
//
//	<origin>
//	<size, decimal>
//	<root, base64 standard encoding with padding>
//	aegis-tail <line hash of the last line, 64 lowercase hex>
//
// The aegis-tail extension line is there exactly when size is not 0.
// [ParseCheckpoint] accepts nothing else, so a body that parses has one
// encoding: Body of the result gives back the same bytes.

// CheckpointTailPrefix starts the extension line that carries
// [Checkpoint.Tail].
const CheckpointTailPrefix = "aegis-tail "

// MaxCheckpointBody bounds the body [ParseCheckpoint] reads; a real one is
// well under 300 bytes.
const MaxCheckpointBody = 4096

// ErrCheckpoint is wrapped by every error of [ParseCheckpoint].
var ErrCheckpoint = errors.New("malformed checkpoint")

// Checkpoint is the body of a signed checkpoint of one record file.
type Checkpoint struct {
	// Origin names the log: "aegis/<key_id>/<file base name>" for a
	// segment sealed by aegis. It is non-empty printable UTF-8 without
	// surrounding spaces.
	Origin string
	// Size is the number of lines in the file.
	Size int64
	// Root is the RFC 6962 tree root over the lines.
	Root [32]byte
	// Tail is [HashHex] of the last line's bytes, which for the canonical
	// lines a record holds is its line hash ([Line.Hash]) and so the
	// prev_session_tail of the next segment's first open; "" when Size is
	// 0.
	Tail string
}

// Body returns the note text of c (see the package notes above). It does
// not validate c; [ParseCheckpoint] of the result does.
func (c Checkpoint) Body() []byte {
	var b bytes.Buffer
	b.WriteString(c.Origin)
	b.WriteByte('\n')
	b.WriteString(strconv.FormatInt(c.Size, 10))
	b.WriteByte('\n')
	b.WriteString(base64.StdEncoding.EncodeToString(c.Root[:]))
	b.WriteByte('\n')
	if c.Size != 0 {
		b.WriteString(CheckpointTailPrefix)
		b.WriteString(c.Tail)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ParseCheckpoint parses a checkpoint body strictly: three lines (origin,
// size, root) and the aegis-tail line when size is not 0, each ending in
// '\n', and nothing else. The size is decimal without sign or leading zero;
// the root is canonical base64 of 32 bytes; the tail 64 lowercase hex. Every
// error wraps [ErrCheckpoint].
func ParseCheckpoint(body []byte) (Checkpoint, error) {
	fail := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: "+format, append([]any{ErrCheckpoint}, args...)...)
	}
	if len(body) > MaxCheckpointBody {
		return fail("longer than %d bytes", MaxCheckpointBody)
	}
	if len(body) == 0 || body[len(body)-1] != '\n' {
		return fail("does not end in a newline")
	}
	lines := strings.Split(string(body[:len(body)-1]), "\n")
	if len(lines) < 3 {
		return fail("%d lines, want origin, size and root", len(lines))
	}
	var c Checkpoint
	c.Origin = lines[0]
	if !validOrigin(c.Origin) {
		return fail("origin %q is not non-empty printable text without surrounding spaces", c.Origin)
	}
	size, ok := parseSize(lines[1])
	if !ok {
		return fail("size %q is not a decimal count", lines[1])
	}
	c.Size = size
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != len(c.Root) || base64.StdEncoding.EncodeToString(root) != lines[2] {
		return fail("root %q is not base64 of 32 bytes", lines[2])
	}
	copy(c.Root[:], root)
	ext := lines[3:]
	switch {
	case c.Size == 0 && len(ext) != 0:
		return fail("%d extension line(s) in the checkpoint of an empty file", len(ext))
	case c.Size == 0:
		return c, nil
	case len(ext) != 1:
		return fail("%d extension lines, want one %q line", len(ext), strings.TrimSpace(CheckpointTailPrefix))
	}
	tail, ok := strings.CutPrefix(ext[0], CheckpointTailPrefix)
	if !ok || !IsDigest(tail) {
		return fail("extension line %q is not %q and 64 lowercase hex", ext[0], CheckpointTailPrefix)
	}
	c.Tail = tail
	return c, nil
}

// validOrigin: non-empty valid UTF-8, every rune printable (spaces inside
// allowed), no leading or trailing space.
func validOrigin(s string) bool {
	if s == "" || !utf8.ValidString(s) || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// parseSize accepts "0" and decimal numbers without sign or leading zero
// that fit an int64.
func parseSize(s string) (int64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
