package events

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aegis-dev/aegis/events/platform"
)

// DefaultDir returns the state directory used when none is given:
// $XDG_STATE_HOME/aegis, else ~/.local/state/aegis. getenv is passed in so
// that callers own the environment.
func DefaultDir(getenv func(string) string) (string, error) {
	if x := getenv("XDG_STATE_HOME"); x != "" {
		if !filepath.IsAbs(x) {
			return "", fmt.Errorf("XDG_STATE_HOME %q is not an absolute path", x)
		}
		return filepath.Join(x, "aegis"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("neither XDG_STATE_HOME nor HOME is set")
	}
	return filepath.Join(home, ".local", "state", "aegis"), nil
}

// ErrLocked is wrapped by the error [Open] returns when another process
// holds the state directory.
var ErrLocked = errors.New("state directory is in use")

// LockedError names the directory and the process that holds it.
type LockedError struct {
	Dir string
	PID int // 0 when the holder's PID could not be read
}

func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("state directory %s is in use by aegis process %d", e.Dir, e.PID)
	}
	return fmt.Sprintf("state directory %s is in use by another aegis process", e.Dir)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// prepareDir creates dir with mode 0700 if it is missing and refuses one
// that others can read or write, or that is not a directory: the stream
// holds every frame the host and the servers exchanged.
func prepareDir(dir string) error { return privateDir(dir, "state directory") }

// privateDir is prepareDir for any directory of this user's that must be
// private; what names it in errors.
func privateDir(dir, what string) error {
	_, err := os.Stat(dir)
	missing := errors.Is(err, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", what, err)
	}
	if missing {
		// Windows: what MkdirAll made inherits its parent's DACL.
		if err := platform.MakePrivate(dir); err != nil {
			return fmt.Errorf("create %s: %w", what, err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a directory", what, dir)
	}
	a, err := platform.PathAccess(dir, fi)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if a.Perm&0o077 != 0 {
		return fmt.Errorf("%s %s %s; it must be private (run: %s)", what, dir, platform.ModeWords(a.Perm), platform.FixCommand(dir, true))
	}
	if !a.Owned {
		return fmt.Errorf("%s %s is owned by %s, not by this user (%s)", what, dir, a.Owner, a.Me)
	}
	return nil
}

// dirLock is an exclusive lock (flock; LockFileEx on Windows) on <dir>/lock that holds the owner's PID.
// The kernel drops it when the process dies, so a crash never leaves a
// stale lock behind.
type dirLock struct{ f *os.File }

// lockDir takes the lock and writes this process's PID into the lock file.
// The PID overwrites the old one in place before the file is cut to its
// length, so that it needs no new block on a disk that is full; a reader
// (readOnly) goes on without it if it still cannot be written: the flock,
// not the content, is the lock.
func lockDir(dir string, readOnly bool) (*dirLock, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := platform.TryLock(f); err != nil {
		pid := 0
		if b, rerr := os.ReadFile(path); rerr == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		f.Close()
		if errors.Is(err, platform.ErrLocked) {
			return nil, &LockedError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("lock state directory %s: %w", dir, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	_, err = f.WriteAt(pid, 0)
	if err == nil {
		err = f.Truncate(int64(len(pid)))
	}
	if err != nil && !readOnly {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// The PID is left in the file: the flock, not the content, is the lock.
	// Unlocked before it is closed: see platform.Unlock.
	err := platform.Unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
