//go:build !windows

package platform

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// PathAccess is the access of the file at path, whose fi the caller has
// (from Stat or Lstat of path).
func PathAccess(path string, fi fs.FileInfo) (Access, error) { return statAccess(fi), nil }

// FileAccess is the access of the open file f, whose fi the caller has.
func FileAccess(f *os.File, fi fs.FileInfo) (Access, error) { return statAccess(fi), nil }

func statAccess(fi fs.FileInfo) Access {
	me := os.Geteuid()
	a := Access{Perm: fi.Mode().Perm(), Owned: true, Me: "uid " + strconv.Itoa(me)}
	a.Owner = a.Me
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		a.Owner = "uid " + strconv.FormatUint(uint64(st.Uid), 10)
		a.Owned = int(st.Uid) == me
	}
	return a
}

// MakePrivate gives what this process just created at path to this user
// alone. On Unix the mode it was created with already does.
func MakePrivate(path string) error { return nil }

// TryLock takes an exclusive lock on f without waiting: [ErrLocked] when
// another open file holds it. The lock lasts until f is closed or the
// process ends.
func TryLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}

// Unlock drops the lock [TryLock] took on f, before f is closed: closing
// alone drops it only once every copy of the descriptor is closed, and a
// child that another goroutine is starting holds a copy until it execs,
// so a lock closed at that moment would outlive its holder for as long.
func Unlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// Alive reports whether a process with that PID exists. A PID reused by
// another process counts as alive.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// DiskSpace returns the size of the file system holding dir and the space
// an unprivileged writer may still use on it.
func DiskSpace(dir string) (total, free uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

// OpenNoFollow is os.OpenFile that refuses a symbolic link at path's last
// element with an error wrapping syscall.ELOOP.
func OpenNoFollow(path string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
}

// IsDiskFull reports whether err says the disk is full.
func IsDiskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// SyncDir makes the entries of dir (a rename into it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
