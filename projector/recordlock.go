package projector

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aegis-dev/aegis/events/platform"
)

// ErrRecordLocked is wrapped by the error [OpenSession] returns when
// another process is writing the record file.
var ErrRecordLocked = errors.New("record file is in use")

// ErrNoRecordDir is wrapped by the error [OpenSession] returns when the
// record file's directory does not exist. aegis creates the file, never its
// directory.
var ErrNoRecordDir = errors.New("cannot create the record file")

// RecordLockedError names the record file and the process that holds it.
type RecordLockedError struct {
	Path string
	PID  int // 0 when the holder could not be found
}

func (e *RecordLockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("record file %s is in use by process %d, which is writing a session to it", e.Path, e.PID)
	}
	return fmt.Sprintf("record file %s is in use by another process, which is writing a session to it", e.Path)
}

func (e *RecordLockedError) Unwrap() error { return ErrRecordLocked }

// openRecordFile opens the record file at path for appending, creating it
// with mode 0600, and takes an exclusive flock on it that lasts as long as
// the file stays open. An existing file must be a regular file of this
// user's that group and others cannot access, and is not followed if it
// is a symbolic link (openPrivateAppend): [*UnsafeFileError] otherwise. The lock is on the file itself, not on a name, so
// two paths to one file (a symbolic or hard link) still find each other,
// and the file's bytes stay nothing but audit lines. The kernel drops the
// lock when the holder dies, so a crash leaves no stale lock. (A link
// reaches openRecordFile resolved: see resolveRecordPath.)
//
// created says whether this call made the file, so that a caller that
// fails before writing to it can remove it again.
func openRecordFile(path string) (f *os.File, created bool, err error) {
	f, created, err = openPrivateAppend(path, recordWhat, recordInto)
	if err != nil {
		if _, ok := err.(*UnsafeFileError); ok {
			return nil, false, err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, fmt.Errorf("%w: %s has no directory %s", ErrNoRecordDir, path, filepath.Dir(path))
		}
		return nil, false, fmt.Errorf("open record file: %w", err)
	}
	if err := platform.TryLock(f); err != nil {
		defer f.Close()
		if errors.Is(err, platform.ErrLocked) {
			return nil, false, &RecordLockedError{Path: path, PID: flockHolder(f)}
		}
		return nil, false, fmt.Errorf("lock record file %s: %w", path, err)
	}
	return f, created, nil
}
