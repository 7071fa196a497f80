package events

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The cache of a mirror's index holds what the host's sessions ran: it is
// made private, one that others can read is refused rather than used, and
// its values are read and replaced like a state directory's index.
func TestMirrorIndexKeepsAPrivateCache(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "aegis", "hub", "laptop-1-0123abcd")
	mi, err := NewMirrorIndex(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := mi.IndexGet(ctx, "index.v1.head"); !errors.Is(err, ErrNoIndex) {
		t.Fatalf("an empty cache: %v, want ErrNoIndex", err)
	}
	rev, err := mi.IndexPut(ctx, "index.v1.head", []byte("head"))
	if err != nil {
		t.Fatal(err)
	}
	if b, got, err := mi.IndexGet(ctx, "index.v1.head"); err != nil || got != rev || !bytes.Equal(b, []byte("head")) {
		t.Fatalf("read back %q, revision %d (%v); wrote revision %d", b, got, err, rev)
	}
	for _, d := range []string{dir, filepath.Join(dir, IndexDir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v (%v), want mode 0700", d, fi, err)
		}
	}
	if _, err := mi.IndexPut(ctx, "../escape", []byte("x")); err == nil {
		t.Error("a key that is not a plain file name was written")
	}

	open := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMirrorIndex(nil, open); err == nil {
		t.Error("a cache folder that others can read was used")
	}
}
