package events

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
