package verifier

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"io"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

// prefixNotes returns a sidecar of signed checkpoints of the first sizes
// lines of file, each note followed by an empty line.
func prefixNotes(t testing.TB, file []byte, sizes ...int) []byte {
	var b bytes.Buffer
	lines := splitLines(file)
	for _, n := range sizes {
		prefix := append(bytes.Join(lines[:n], []byte("\n")), '\n')
		b.Write(signCheckpoint(t, devKey(), checkpointBody(t, "calls.aarl", prefix)))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func verifyWithSidecar(file, sidecar []byte) Result {
	return VerifySet([]Segment{{
		Name: "calls.aarl", Record: bytes.NewReader(file), CheckpointsName: "calls.aarl.checkpoints",
		Checkpoints: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(sidecar)), nil },
	}}, Options{})
}

// Every checkpoint of a sidecar is checked against the record's first
// lines, and each attack on the pair is named for what it did.
func TestPrefixCheckpoints(t *testing.T) {
	file := rotatedFiles(t)[0]
	n := len(splitLines(file))
	good := prefixNotes(t, file, 3, n-1, n)
	if r := verifyWithSidecar(file, good); r.Verdict != Verified || len(r.Checkpoints) != 1 || r.Checkpoints[0].Count != 3 || !strings.Contains(Render(r), "checkpoints calls.aarl.checkpoints: 3, the last of ") {
		t.Fatalf("%+v\n%s", r, Render(r))
	}
	if r := verifyWithSidecar(file, nil); r.Verdict != Verified || !strings.Contains(Render(r), "checkpoints calls.aarl.checkpoints: none") {
		t.Fatalf("empty sidecar: %s", Render(r))
	}
	cut := bytes.Join(splitLines(file)[:n-1], []byte("\n"))
	cut = append(cut, '\n')
	for _, tc := range []struct {
		name    string
		file    []byte
		sidecar []byte
		want    Code
		part    string
	}{
		{"the record's last line cut", cut, good, CheckpointMismatch, "fewer than the"},
		{"a covered line swapped for another", bytes.Replace(file, splitLines(file)[1], splitLines(file)[2], 1), prefixNotes(t, file, 3), "", ""},
		{"notes out of order", file, append(prefixNotes(t, file, n), prefixNotes(t, file, 3)...), BadCheckpoint, "not more than"},
		{"a note signed by another key", file, append(prefixNotes(t, file, 3), append(signCheckpoint(t, otherKey(), checkpointBody(t, "calls.aarl", file)), '\n')...), BadCheckpoint, "not by a key of this record"},
		{"a note without its signature", file, []byte(strings.SplitAfter(string(good), "\n\n")[0]), BadCheckpoint, "is not a signed note"},
		{"a note torn", file, good[:len(good)-3], BadCheckpoint, "does not end in a newline"},
		{"a blank line first", file, append([]byte("\n"), good...), BadCheckpoint, "empty line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := verifyWithSidecar(tc.file, tc.sidecar)
			if r.Verdict == Verified {
				t.Fatalf("verified:\n%s", Render(r))
			}
			if tc.want != "" && (r.Reason == nil || r.Reason.Code != tc.want || !strings.Contains(r.Reason.Message, tc.part)) {
				t.Fatalf("reason %+v, want %s %q", r.Reason, tc.want, tc.part)
			}
		})
	}
}

// FuzzPrefixCheckpoints: no sidecar makes the verifier panic, and one it
// accepts holds only notes signed by the record's key, each of the
// record's first lines, in increasing order.
func FuzzPrefixCheckpoints(f *testing.F) {
	file := rotatedFiles(f)[0]
	lines := splitLines(file)
	n := len(lines)
	f.Add(prefixNotes(f, file, 3, n))
	f.Add(prefixNotes(f, file, n))
	f.Add([]byte("calls.aarl\n1\nAAAA\n\n— aegis-x AAAAAAA=\n\n"))
	f.Add([]byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, sidecar []byte) {
		r := verifyWithSidecar(file, sidecar)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Verdict != Verified {
			if r.Reason == nil || (r.Reason.Code != BadCheckpoint && r.Reason.Code != CheckpointMismatch) {
				t.Fatalf("verdict %v reason %+v", r.Verdict, r.Reason)
			}
			return
		}
		br := bufio.NewReader(bytes.NewReader(sidecar))
		prev := int64(0)
		for {
			msg, err := schemas.ReadNote(br)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("accepted a sidecar that does not read: %v", err)
			}
			cp, signer, reason := checkCheckpointSig(msg, []ed25519.PublicKey{pubOf(devKey())}, "", "")
			if reason != nil || signer != schemas.KeyID(pubOf(devKey())) {
				t.Fatalf("accepted a note not signed by the record's key: %v", reason)
			}
			if cp.Size <= prev || cp.Size > int64(n) {
				t.Fatalf("accepted a note of %d lines after one of %d, for a record of %d", cp.Size, prev, n)
			}
			if want := tlogRoot(t, lines[:cp.Size]); cp.Root != want {
				t.Fatalf("accepted a note of %d lines whose root is not theirs", cp.Size)
			}
			prev = cp.Size
		}
	})
}

// A record in writing gets its checkpoints appended as verify reads it:
// the last note may be cut short where the read caught the write. That
// note is left for the next verify, in a record whose session is open;
// in a closed one it is BadCheckpoint (the "a note torn" case above).
func TestPrefixCheckpointBeingAppendedIsNotTampering(t *testing.T) {
	file := rotatedFiles(t)[0]
	lines := splitLines(file)
	open := append(bytes.Join(lines[:len(lines)-1], []byte("\n")), '\n')
	if r := verifyWithSidecar(open, nil); r.Verdict != Indeterminate {
		t.Fatalf("the record without its last line: %s, want Indeterminate (its session open)", Render(r))
	}
	whole := prefixNotes(t, open, 3, len(lines)-1)
	last := prefixNotes(t, open, len(lines)-1)
	for _, cut := range []int{1, len(last) / 2, len(last) - 2} { // (without only its final empty line, a note is whole)
		r := verifyWithSidecar(open, append(append([]byte{}, prefixNotes(t, open, 3)...), last[:cut]...))
		if r.Verdict != Indeterminate {
			t.Fatalf("a note cut at %d of %d bytes: %s", cut, len(last), Render(r))
		}
		if len(r.Checkpoints) != 1 || r.Checkpoints[0].Count != 1 || !r.Checkpoints[0].Matches {
			t.Fatalf("a note cut at %d: checkpoints %+v, want the one before it, checked", cut, r.Checkpoints)
		}
	}
	if r := verifyWithSidecar(open, whole); r.Verdict != Indeterminate || r.Checkpoints[0].Count != 2 {
		t.Fatalf("whole: %s", Render(r))
	}
}
