//go:build unix

package platform

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A lock whose descriptor a child still holds a copy of (as a child that
// another goroutine is starting does until it execs) outlives its close,
// and is free at once when it is unlocked first.
func TestUnlockFreesALockAChildStillHolds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		unlock bool
		want   error
	}{
		{"closed only: the child's copy keeps it", false, ErrLocked},
		{"unlocked, then closed: free", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "lock")
			f1, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if err := TryLock(f1); err != nil {
				t.Fatal(err)
			}
			child := exec.Command("sleep", "30")
			child.ExtraFiles = []*os.File{f1}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { child.Process.Kill(); child.Wait() }()
			if tc.unlock {
				if err := Unlock(f1); err != nil {
					t.Fatal(err)
				}
			}
			f1.Close()
			f2, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f2.Close()
			if err := TryLock(f2); err != tc.want {
				t.Fatalf("TryLock after the holder let go: %v, want %v", err, tc.want)
			}
		})
	}
}
