package verifier

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/aegis-dev/aegis/schemas"
)

// Checkpoints of a record file's first lines. While aegis writes a record
// file it signs checkpoints of it as it stands (the lines so far) and
// appends them to a sidecar file, RECORD.checkpoints: signed notes, each
// followed by an empty line, in the order signed, each covering more lines
// than the one before. A record file must hold, as its first Size lines,
// what each of them covers: the same tree root and the same last line.
// Fewer lines than one covers is Tampered (lines were cut from its end,
// CheckpointMismatch), and so is another root; a note that does not parse
// or that no key of the record signed is BadCheckpoint.
//
// The sidecar is read twice, beside the walk and after it: the roots are
// compared as the walk's tree reaches each size, so that nothing but the
// note at hand is held, and the signatures are checked after the walk,
// when the record's keys are known. Both reads must see the same bytes.

// prefixWatch compares a record file's tree with the sidecar's checkpoints
// as the walk's tree reaches each one's size.
type prefixWatch struct {
	br     *bufio.Reader
	digest hash.Hash // of the sidecar's bytes read
	name   string    // the sidecar, for messages
	file   string    // the record file, for messages

	next  schemas.Checkpoint // the checkpoint waited for
	has   bool
	count int // checkpoints compared
	last  schemas.Checkpoint
	fail  *Reason
	// torn is the error of a last note cut short, left to [checkPrefixes]:
	// a record still in writing can have one being appended as it is
	// read; any other has none.
	torn error
}

func newPrefixWatch(r io.Reader, name, file string) *prefixWatch {
	d := sha256.New()
	w := &prefixWatch{br: bufio.NewReaderSize(io.TeeReader(r, d), schemas.MaxNote+16), digest: d, name: name, file: file}
	w.advance(0)
	return w
}

// advance reads the next checkpoint, which must cover more than prev
// lines.
func (w *prefixWatch) advance(prev int64) {
	w.has = false
	msg, err := schemas.ReadNote(w.br)
	if errors.Is(err, io.EOF) {
		return
	}
	if errors.Is(err, schemas.ErrTornNote) {
		w.torn = err
		return
	}
	if err != nil {
		w.bad("%s after its %d checkpoints does not read as signed notes: %v", display(w.name), w.count, err)
		return
	}
	cp, err := schemas.ParseCheckpoint(schemas.NoteText(msg))
	if err != nil {
		w.bad("checkpoint %d of %s does not parse: %v", w.count+1, display(w.name), err)
		return
	}
	if cp.Size <= prev {
		w.bad("checkpoint %d of %s covers %d lines, not more than the %d of the one before it", w.count+1, display(w.name), cp.Size, prev)
		return
	}
	w.next, w.has = cp, true
}

func (w *prefixWatch) bad(format string, args ...any) {
	if w.fail == nil {
		w.fail = &Reason{Code: BadCheckpoint, Message: fmt.Sprintf(format, args...), File: w.file}
	}
}

func (w *prefixWatch) mismatch(format string, args ...any) {
	if w.fail == nil {
		w.fail = &Reason{Code: CheckpointMismatch, Message: display(w.file) + " " + fmt.Sprintf(format, args...), File: w.file}
	}
}

// seen is called after the tree took in line, its t.n-th.
func (w *prefixWatch) seen(t *leafTree, line []byte) {
	if !w.has || w.fail != nil || t.n != w.next.Size {
		return
	}
	cp := w.next
	if root := t.root(); t.broken || root != cp.Root {
		w.mismatch("holds as its first %d lines what hashes to root %s, but checkpoint %d of %s says %s: a line it covers was changed",
			cp.Size, base64.StdEncoding.EncodeToString(root[:]), w.count+1, display(w.name), base64.StdEncoding.EncodeToString(cp.Root[:]))
		return
	}
	if tail := schemas.HashHex(line); tail != cp.Tail {
		w.mismatch("line %d hashes to %s, but checkpoint %d of %s covers one hashing to %s", cp.Size, tail, w.count+1, display(w.name), cp.Tail)
		return
	}
	w.count++
	w.last = cp
	w.advance(cp.Size)
}

// end is called when the walk read the whole file of n lines.
func (w *prefixWatch) end(n int64) {
	if w.has && w.fail == nil {
		w.mismatch("holds %d lines, fewer than the %d that checkpoint %d of %s covers: lines were cut from its end",
			n, w.next.Size, w.count+1, display(w.name))
	}
}

// checkSignatures reads the sidecar again from r and checks that every
// note is signed by one of keys, and that it holds the bytes the walk
// compared. It returns the key_id of the last note's signer.
func (w *prefixWatch) checkSignatures(r io.Reader, keys []ed25519.PublicKey) (string, *Reason) {
	d := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(r, d), schemas.MaxNote+16)
	signer := ""
	for i := 1; ; i++ {
		msg, err := schemas.ReadNote(br)
		if errors.Is(err, io.EOF) || w.torn != nil && errors.Is(err, schemas.ErrTornNote) {
			break // the torn note the walk saw; the digests below say it is the same
		}
		if err != nil {
			return "", &Reason{Code: BadCheckpoint, Message: fmt.Sprintf("%s changed while it was read: %v", display(w.name), err), File: w.file}
		}
		_, s, rerr := checkCheckpointSig(msg, keys, w.file, fmt.Sprintf("%d of %s", i, w.name))
		if rerr != nil {
			return "", rerr
		}
		signer = s
	}
	if !bytes.Equal(d.Sum(nil), w.digest.Sum(nil)) {
		return "", &Reason{Code: BadCheckpoint, Message: display(w.name) + " changed while it was read", File: w.file}
	}
	return signer, nil
}
