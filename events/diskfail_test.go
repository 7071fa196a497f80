package events

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// mountTmpfs mounts a small tmpfs for a test that needs a disk to fill up or
// turn read-only. It needs root, which CI has.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// A full disk makes Append fail with an error the caller can see; it never
// drops an event silently, and the store refuses everything after it.
func TestFullDiskFailsAppendLoudly(t *testing.T) {
	dir := filepath.Join(mountTmpfs(t, "24m"), "state")
	s, err := Open(context.Background(), Config{Dir: dir, AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("Open on tmpfs = %v", err)
	}
	defer s.Close(context.Background())
	sess, _ := s.NewSession()
	big := make([]byte, 256<<10)
	var failed error
	acked := 0
	for i := 0; i < 400 && failed == nil; i++ {
		e := newEvent(t, s, sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: big})
		if _, err := s.Append(context.Background(), e); err != nil {
			failed = err
			break
		}
		acked++
	}
	if failed == nil {
		t.Fatalf("appended %d × 256 KiB to a 24 MiB disk without an error", acked)
	}
	t.Logf("after %d acknowledged appends: %v", acked, failed)
	// The disk is the limit, not 75% of the space free at start, and the
	// error says so in plain words.
	var de *DiskFullError
	if !errors.As(failed, &de) || !errors.Is(failed, ErrDiskFull) || !strings.Contains(failed.Error(), "is full: ") {
		t.Fatalf("the error on a full disk does not say the disk is full: %v", failed)
	}
	if de.Free > de.Total/10 {
		t.Errorf("the store stopped with %d of %d bytes free; the disk, not a share of it, is the limit", de.Free, de.Total)
	}
	e := newEvent(t, s, sess, schemas.KindNote, map[string]int{})
	if _, err := s.Append(context.Background(), e); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after a failed commit = %v, want ErrFailed", err)
	}
	// While the disk is still full, the state directory can be read.
	s.Close(context.Background())
	r, err := Open(context.Background(), Config{Dir: dir, AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("Open on the full disk = %v; read commands need it", err)
	}
	defer r.Close(context.Background())
	n := 0
	if err := r.Replay(context.Background(), Position{}, func(Record) error { n++; return nil }); err != nil {
		t.Fatalf("Replay on the full disk = %v", err)
	}
	if n < acked {
		t.Fatalf("Replay on the full disk gave %d events, want the %d acknowledged", n, acked)
	}
}

// Opening a state directory on a read-only filesystem fails with an error
// instead of starting a store that cannot record.
func TestOpenOnReadOnlyDirFails(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	if s, err := Open(context.Background(), Config{Dir: filepath.Join(mnt, "state")}); err == nil {
		s.Close(context.Background())
		t.Fatal("Open on a read-only filesystem succeeded")
	} else {
		t.Logf("Open on read-only fs: %v", err)
	}
}

// fillDisk takes every byte still free on the filesystem of dir with one
// file, so that the next block anyone asks for fails with ENOSPC.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			buf = buf[:len(buf)/2]
		}
	}
	if _, free, err := diskSpace(dir); err != nil || free != 0 {
		t.Fatalf("after filling the disk: %d bytes free (%v), want 0", free, err)
	}
}

// A disk full to the last byte: a read-only Open reads everything the
// stream holds, where a writing Open fails (it rewrites the stream's
// metadata), and nothing a reader does needs a byte of space.
func TestReadOnlyOpenReadsADiskWithNoByteFree(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "state")
	s, err := Open(context.Background(), Config{Dir: dir, AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := s.NewSession()
	const n = 50
	for i := 0; i < n; i++ {
		e := newEvent(t, s, sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: make([]byte, 1000)})
		if _, err := s.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fillDisk(t, mnt)

	if w, err := Open(context.Background(), Config{Dir: dir}); err == nil {
		w.Close(context.Background())
		t.Log("a writing Open worked on a disk with no byte free")
	} else {
		t.Logf("a writing Open on a disk with no byte free: %v", err)
	}
	r, err := Open(context.Background(), Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open on a disk with no byte free = %v", err)
	}
	got := 0
	if err := r.Replay(context.Background(), Position{}, func(Record) error { got++; return nil }); err != nil || got != n {
		t.Fatalf("Replay = %d events, %v; want %d", got, err, n)
	}
	got = 0
	if err := r.ReplaySubject(context.Background(), "aegis."+sess+".>", func(Record) error { got++; return nil }); err != nil || got != n {
		t.Fatalf("ReplaySubject = %d events, %v; want %d", got, err, n)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Fatalf("Check = %v", err)
	}
	if _, err := r.MessageDigest(context.Background(), n); err != nil {
		t.Fatalf("MessageDigest = %v", err)
	}
	e := newEvent(t, r, sess, schemas.KindNote, map[string]int{})
	if _, err := r.Append(context.Background(), e); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append to a read-only store = %v, want ErrReadOnly", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	// The lock was taken: a second reader at the same time is refused.
	r, err = Open(context.Background(), Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatalf("second read-only Open = %v", err)
	}
	defer r.Close(context.Background())
	if w, err := Open(context.Background(), Config{Dir: dir}); !errors.Is(err, ErrLocked) {
		if err == nil {
			w.Close(context.Background())
		}
		t.Fatalf("a writer's Open beside a reader = %v, want ErrLocked", err)
	}
}

// A read-only Open never creates what it reads.
func TestReadOnlyOpenCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if s, err := Open(context.Background(), Config{Dir: dir, ReadOnly: true}); err == nil {
		s.Close(context.Background())
		t.Fatal("read-only Open of a missing directory succeeded")
	} else if !strings.Contains(err.Error(), "no event stream in") {
		t.Fatalf("read-only Open of a missing directory = %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open created %s (%v)", dir, err)
	}
}

// A reader changes no file of the stream: not its metadata (which a
// writing Open rewrites), not its blocks, not the length mark.
func TestReadOnlyOpenChangesNoFileOfTheStream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	fillStore(t, dir, 20)
	files := func() map[string]string {
		got := map[string]string{}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() == "lock" {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fi, _ := d.Info()
			got[p] = fmt.Sprintf("%x %s", sha256.Sum256(b), fi.ModTime())
			return nil
		})
		return got
	}
	before := files()
	time.Sleep(10 * time.Millisecond) // a rewrite shows in the modification time
	for range 2 {
		s, err := Open(context.Background(), Config{Dir: dir, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := s.Replay(context.Background(), Position{}, func(Record) error { n++; return nil }); err != nil || n != 20 {
			t.Fatalf("Replay = %d events, %v", n, err)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	after := files()
	for p, b := range before {
		if after[p] != b {
			t.Errorf("a reader changed %s", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("a reader wrote %s", p)
		}
	}
}
