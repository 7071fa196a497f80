package projector

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, &RecordLockedError{Path: path, PID: flockHolder(f)}
		}
		return nil, false, fmt.Errorf("lock record file %s: %w", path, err)
	}
	return f, created, nil
}

// flockHolder returns the PID that holds a write flock on f's file, read
// from /proc/locks, or 0. It matches device and inode, or the inode alone
// when the filesystem reports a device that /proc/locks does not (as
// overlay and btrfs can) and exactly one lock has that inode.
func flockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	ino := ":" + strconv.FormatUint(uint64(st.Ino), 10)

	lf, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer lf.Close()
	exact, byIno, inoMatches := 0, 0, 0
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 4242 fe:00:9978721 0 EOF"; a waiter
		// has "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[1] == "->" {
			continue
		}
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid <= 0 {
			continue
		}
		switch {
		case fields[5] == want:
			exact = pid
		case strings.HasSuffix(fields[5], ino):
			byIno = pid
			inoMatches++
		}
	}
	if exact > 0 {
		return exact
	}
	if inoMatches == 1 {
		return byIno
	}
	return 0
}
