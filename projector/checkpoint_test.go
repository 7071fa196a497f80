package projector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// TestTreeHasherMatchesTlog: the streaming hasher gives the root that
// tlog.TreeHash gives over every stored hash of the tree, for every size
// up to 300, while keeping no more hashes than the size has bits.
func TestTreeHasherMatchesTlog(t *testing.T) {
	var (
		all  []tlog.Hash
		tree TreeHasher
	)
	full := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = all[x]
		}
		return out, nil
	})
	for n := int64(0); n <= 300; n++ {
		want, err := tlog.TreeHash(n, full)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tree.Root()
		if err != nil {
			t.Fatalf("size %d: Root: %v", n, err)
		}
		if got != [32]byte(want) {
			t.Fatalf("size %d: Root = %x, want %x", n, got, want)
		}
		if tree.Size() != n {
			t.Fatalf("Size = %d, want %d", tree.Size(), n)
		}
		if kept, bits := len(tree.stored), popcount(n); kept != bits {
			t.Fatalf("size %d: %d hashes kept, want %d (one per set bit)", n, kept, bits)
		}
		line := []byte(strings.Repeat("x", int(n%7)) + string(rune('a'+n%26)))
		h, err := tlog.StoredHashes(n, line, full)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, h...)
		if err := tree.Add(line); err != nil {
			t.Fatal(err)
		}
	}
}

func popcount(n int64) int {
	c := 0
	for ; n != 0; n &= n - 1 {
		c++
	}
	return c
}

// writeRecord writes sessions of the real chain to path and returns the
// lines written.
func writeRecord(t *testing.T, path string, key PrivateKey, sessions int) [][]byte {
	t.Helper()
	var (
		lines [][]byte
		tail  string
	)
	for range sessions {
		c, err := NewChain(key)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Open(tail)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, e.Bytes)
		for _, l := range []schemas.Line{
			mustLine(t)(schemas.Intent{CallID: "c1", ToolID: "echo", RequestDigest: schemas.HashHex([]byte("c1"))}.Line()),
			schemas.CloseLine(),
		} {
			e, err := c.Append(l)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, e.Bytes)
		}
		_, tail = c.Tail()
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return lines
}

func mustLine(t *testing.T) func(schemas.Line, error) schemas.Line {
	return func(l schemas.Line, err error) schemas.Line {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// TestCheckpointFileSignsWhatTheFileHolds: the checkpoint of a record
// written by the real chain commits to its line count, its tree root over
// the lines and its last line's hash, and its note verifies under the
// signing key, and under no other.
func TestCheckpointFileSignsWhatTheFileHolds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.000001.jsonl")
	key := InsecureDevKey()
	lines := writeRecord(t, path, key, 3)

	msg, cp, err := CheckpointFile(context.Background(), key, path, CheckpointOrigin(key, path))
	if err != nil {
		t.Fatal(err)
	}
	var tree TreeHasher
	for _, l := range lines {
		if err := tree.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := tree.Root()
	want := schemas.Checkpoint{
		Origin: "aegis/" + key.KeyID() + "/audit.000001.jsonl",
		Size:   int64(len(lines)),
		Root:   root,
		Tail:   schemas.HashHex(lines[len(lines)-1]),
	}
	if cp != want {
		t.Fatalf("CheckpointFile = %+v, want %+v", cp, want)
	}
	v, err := CheckpointVerifier(key.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		t.Fatalf("note.Open: %v\n%s", err, msg)
	}
	if n.Text != string(want.Body()) || len(n.Sigs) != 1 || n.Sigs[0].Name != "aegis-"+key.KeyID() {
		t.Fatalf("note = %+v", n)
	}
	other, _ := NewPrivateKey(bytes.Repeat([]byte{9}, 32))
	ov, _ := CheckpointVerifier(other.PublicKey())
	if _, err := note.Open(msg, note.VerifierList(ov)); err == nil {
		t.Fatal("the note verifies under another key")
	}
}

// TestCheckpointFileRefuses: a file that is not whole record lines is not
// sealed, so a checkpoint never vouches for a torn write or for bytes the
// verifier would not read as lines.
func TestCheckpointFileRefuses(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	key := InsecureDevKey()
	for _, tc := range []struct {
		name    string
		content string
		want    string
	}{
		{"torn last line", "{\"a\":1}\n{\"b\"", "does not end in a newline"},
		{"empty line hides a dropped one", "{\"a\":1}\n\n{\"b\":2}\n", "line 2 is empty"},
		{"overlong line", strings.Repeat("x", MaxCheckpointLine+1) + "\n", "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.000001.jsonl")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := CheckpointFile(context.Background(), key, path, "aegis/x/audit.000001.jsonl")
			if !errors.Is(err, ErrCheckpointRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckpointFile = %v, want %v containing %q", err, ErrCheckpointRecord, tc.want)
			}
		})
	}
	t.Run("canceled", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.000001.jsonl")
		writeRecord(t, path, key, 1)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := CheckpointFile(ctx, key, path, "o"); !errors.Is(err, context.Canceled) {
			t.Fatalf("CheckpointFile = %v", err)
		}
	})
	t.Run("zero key", func(t *testing.T) {
		if _, _, err := CheckpointFile(context.Background(), PrivateKey{}, "x", "o"); !errors.Is(err, ErrZeroKey) {
			t.Fatalf("CheckpointFile = %v", err)
		}
	})
}

// TestCheckpointOfEmptyFile: an empty segment has the empty tree's root and
// no tail.
func TestCheckpointOfEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.000001.jsonl")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, cp, err := CheckpointFile(context.Background(), InsecureDevKey(), path, "o")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Size != 0 || cp.Tail != "" || cp.Root != [32]byte(tlog.Hash{0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55}) {
		t.Fatalf("checkpoint of an empty file = %+v", cp)
	}
}

// TestSignCheckpointRefusesMalformedBody: a body that no verifier would
// parse is never signed.
func TestSignCheckpointRefusesMalformedBody(t *testing.T) {
	if _, err := SignCheckpoint(InsecureDevKey(), schemas.Checkpoint{Origin: "o\nforged", Size: 1, Tail: strings.Repeat("0", 64)}); !errors.Is(err, schemas.ErrCheckpoint) {
		t.Fatalf("SignCheckpoint = %v", err)
	}
	if _, err := SignCheckpoint(PrivateKey{}, schemas.Checkpoint{Origin: "o"}); !errors.Is(err, ErrZeroKey) {
		t.Fatalf("SignCheckpoint(zero key) = %v", err)
	}
}

// TestWriteCheckpointFile: the sidecar is private, whole, and leaves no
// temporary file behind; a second write replaces it.
func TestWriteCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.000001.jsonl.checkpoint")
	for _, content := range []string{"first\n", "second\n"} {
		if err := WriteCheckpointFile(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Fatalf("read back %q, %v", b, err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v", fi.Mode(), err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(ents))
	}
	if err := WriteCheckpointFile(filepath.Join(dir, "missing", "x.checkpoint"), []byte("x\n")); err == nil {
		t.Fatal("WriteCheckpointFile into a missing directory succeeded")
	}
}
