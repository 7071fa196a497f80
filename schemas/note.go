package schemas

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxNote bounds one signed note that [ReadNote] reads: a checkpoint
// body and a few signature lines.
const MaxNote = MaxCheckpointBody + 1024

// ErrTornNote is returned by [ReadNote] for a last note cut short: one
// that does not end in a newline, or that ends before its signatures.
// A file of notes that is still being appended to can show one.
var ErrTornNote = errors.New("the last note is torn")

// ReadNote reads the next signed note of a file of notes, each followed
// by an empty line (the sidecar of a record's checkpoints): its text, an
// empty line and its signature lines, up to the empty line that ends it
// (or the end of the file). It returns io.EOF at a clean end. br must
// buffer more than [MaxNote] bytes.
func ReadNote(br *bufio.Reader) ([]byte, error) {
	var msg []byte
	blank := 0 // empty lines seen: 1 after the text, 2 after the signatures
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(msg)+len(line) > MaxNote {
			return nil, fmt.Errorf("a note is longer than %d bytes", MaxNote)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if len(line) > 0 && line[len(line)-1] != '\n' {
			return nil, fmt.Errorf("%w: it does not end in a newline", ErrTornNote)
		}
		if len(line) == 0 { // EOF
			switch {
			case len(msg) == 0:
				return nil, io.EOF
			case blank == 1:
				return msg, nil
			}
			return nil, fmt.Errorf("%w: it has no signature", ErrTornNote)
		}
		if len(line) == 1 {
			if len(msg) == 0 {
				return nil, errors.New("an empty line where a note should begin")
			}
			blank++
			if blank == 2 {
				return msg, nil
			}
		}
		msg = append(msg, line...)
	}
}

// NoteText returns the text of a signed note, what comes before its
// empty line; nil when it has none.
func NoteText(msg []byte) []byte {
	i := bytes.Index(msg, []byte("\n\n"))
	if i < 0 {
		return nil
	}
	return msg[:i+1]
}
