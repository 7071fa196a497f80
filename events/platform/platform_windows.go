package platform

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

const securityInfo = windows.OWNER_SECURITY_INFORMATION | windows.DACL_SECURITY_INFORMATION

// PathAccess is the access of the file at path, read from its owner and
// DACL; fi is the caller's Stat or Lstat of path.
func PathAccess(path string, fi fs.FileInfo) (Access, error) {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, securityInfo)
	if err != nil {
		return Access{}, fmt.Errorf("read the security descriptor of %s: %w", path, err)
	}
	return judge(sd, fi.IsDir())
}

// FileAccess is the access of the open file f, read from its owner and
// DACL.
func FileAccess(f *os.File, fi fs.FileInfo) (Access, error) {
	sd, err := windows.GetSecurityInfo(windows.Handle(f.Fd()), windows.SE_FILE_OBJECT, securityInfo)
	if err != nil {
		return Access{}, fmt.Errorf("read the security descriptor of %s: %w", f.Name(), err)
	}
	return judge(sd, fi.IsDir())
}

func judge(sd *windows.SECURITY_DESCRIPTOR, dir bool) (Access, error) {
	me, err := currentUser()
	if err != nil {
		return Access{}, err
	}
	owner := ""
	if o, _, err := sd.Owner(); err == nil && o != nil {
		owner = o.String()
	}
	dacl, _, err := sd.DACL()
	if errors.Is(err, windows.ERROR_OBJECT_NOT_FOUND) || err == nil && dacl == nil {
		return JudgeDACL(dir, owner, me.String(), nil, false), nil // no DACL: everyone has full control
	}
	if err != nil {
		return Access{}, fmt.Errorf("read the DACL: %w", err)
	}
	aces := make([]ACE, 0, dacl.AceCount)
	for i := uint32(0); i < uint32(dacl.AceCount); i++ {
		var p *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &p); err != nil {
			return Access{}, fmt.Errorf("read the DACL: %w", err)
		}
		e := ACE{Type: p.Header.AceType, Flags: p.Header.AceFlags, Mask: uint32(p.Mask)}
		// The SID follows the mask only in the entries that are not object
		// entries (whose GUIDs come first): others keep SID "" and count
		// as anyone's.
		if e.Type == aceAllowed || e.Type == aceDenied || e.Type == aceAllowedCallback || e.Type == aceDeniedCallback {
			if sid := (*windows.SID)(unsafe.Pointer(&p.SidStart)); sid.IsValid() {
				e.SID = sid.String()
			}
		}
		aces = append(aces, e)
	}
	return JudgeDACL(dir, owner, me.String(), aces, true), nil
}

func currentUser() (*windows.SID, error) {
	tu, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, fmt.Errorf("read this process's user: %w", err)
	}
	return tu.User.Sid, nil
}

// MakePrivate gives what this process just created at path to this user
// alone: a DACL, not inherited, that grants full control to the user,
// SYSTEM and Administrators, passed on to what a directory will hold.
func MakePrivate(path string) error {
	me, err := currentUser()
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("make %s private: %w", path, err)
	}
	inherit := uint32(windows.NO_INHERITANCE)
	if fi.IsDir() {
		inherit = windows.SUB_CONTAINERS_AND_OBJECTS_INHERIT
	}
	var entries []windows.EXPLICIT_ACCESS
	for _, sid := range []string{me.String(), SIDSystem, SIDAdmins} {
		s, err := windows.StringToSid(sid)
		if err != nil {
			return err
		}
		entries = append(entries, windows.EXPLICIT_ACCESS{
			AccessPermissions: windows.GENERIC_ALL,
			AccessMode:        windows.SET_ACCESS,
			Inheritance:       inherit,
			Trustee: windows.TRUSTEE{
				TrusteeForm:  windows.TRUSTEE_IS_SID,
				TrusteeType:  windows.TRUSTEE_IS_UNKNOWN,
				TrusteeValue: windows.TrusteeValueFromSID(s),
			},
		})
	}
	acl, err := windows.ACLFromEntries(entries, nil)
	if err != nil {
		return fmt.Errorf("make %s private: %w", path, err)
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, acl, nil); err != nil {
		return fmt.Errorf("make %s private: %w", path, err)
	}
	return nil
}

// TryLock takes an exclusive lock on f without waiting: [ErrLocked] when
// another open file holds it. The lock covers one byte at the far end of
// the largest offset, where no content is, so it never blocks a reader.
// It lasts until f is closed or the process ends.
func TryLock(f *os.File) error {
	ol := &windows.Overlapped{Offset: 0xfffffffe, OffsetHigh: 0x7fffffff}
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return ErrLocked
	}
	return err
}

// Unlock drops the lock [TryLock] took on f, before f is closed.
func Unlock(f *os.File) error {
	ol := &windows.Overlapped{Offset: 0xfffffffe, OffsetHigh: 0x7fffffff}
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ol)
}

// stillActive is the exit code GetExitCodeProcess gives a running process.
const stillActive = 259

// Alive reports whether a process with that PID exists. A PID reused by
// another process counts as alive.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return errors.Is(err, windows.ERROR_ACCESS_DENIED) // it exists, but is not ours
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return true
	}
	return code == stillActive
}

// DiskSpace returns the size of the volume holding dir and the space this
// user may still use on it (quotas included).
func DiskSpace(dir string) (total, free uint64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, err
	}
	var totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, &totalFree); err != nil {
		return 0, 0, err
	}
	return total, free, nil
}

// OpenNoFollow is os.OpenFile that refuses a symbolic link (or any other
// reparse point) at path's last element with an error wrapping
// syscall.ELOOP. Windows has no O_NOFOLLOW: the name is looked at first,
// so a link put in place between the look and the open is followed; the
// directories aegis opens such files in are private to the user.
func OpenNoFollow(path string, flag int, perm fs.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0 {
		return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ELOOP}
	}
	return os.OpenFile(path, flag, perm)
}

// IsDiskFull reports whether err says the disk is full.
func IsDiskFull(err error) bool {
	return errors.Is(err, windows.ERROR_DISK_FULL) || errors.Is(err, windows.ERROR_HANDLE_DISK_FULL)
}

// SyncDir does nothing on Windows: a directory cannot be flushed through
// a handle a user may open (FlushFileBuffers needs write access to it,
// and is refused), and NTFS journals its entries itself.
func SyncDir(dir string) error { return nil }
