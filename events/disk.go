package events

import (
	"errors"
	"fmt"

	"github.com/aegis-dev/aegis/events/platform"
)

// ErrDiskFull is wrapped (by a [*DiskFullError]) when a commit failed on a
// disk that is full or nearly so.
var ErrDiskFull = errors.New("disk full")

// DiskFullError says that the disk holding the state directory is full or
// nearly so, and how much space is left.
type DiskFullError struct {
	Dir         string
	Free, Total uint64
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("the disk holding the state directory %s is full: %s free of %s; every acknowledged event is kept, nothing was dropped or deleted",
		e.Dir, FormatBytes(int64(e.Free)), FormatBytes(int64(e.Total)))
}

func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// diskFullMargin is the free space under which a failed commit is taken
// for a full disk: a commit takes up to one batch (MaxBatchBytes) and the
// store's own index writes.
const diskFullMargin = 8 << 20

// diskSpace returns the size of the filesystem holding dir and the space
// an unprivileged writer may still use on it.
func diskSpace(dir string) (total, free uint64, err error) {
	return platform.DiskSpace(dir)
}

// diskFull returns a *DiskFullError if the disk holding dir is (nearly)
// full, else nil.
func diskFull(dir string) error {
	total, free, err := diskSpace(dir)
	if err != nil || free >= diskFullMargin {
		return nil
	}
	return &DiskFullError{Dir: dir, Free: free, Total: total}
}

// DiskFull returns a [*DiskFullError] if the disk holding dir has (nearly)
// no space left, else nil: what a reader says when something it had to
// write (a snapshot copy, say) failed.
func DiskFull(dir string) error { return diskFull(dir) }
