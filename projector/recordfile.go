package projector

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aegis-dev/aegis/events/platform"
)

// ErrUnsafeRecordFile is wrapped by the error [OpenSession] returns when
// the record file, or its checkpoints sidecar, is one that another user
// could cut and rewrite, or is not a plain file of this user's
// ([*UnsafeFileError]).
var ErrUnsafeRecordFile = errors.New("record file is not private to this user")

// UnsafeFileError refuses a file that aegis would append evidence to (the
// record file, its checkpoints sidecar): one that is a symbolic link, not
// a regular file, owned by another user, or open to group or others.
// Writing the signed record into it would hand it to whoever can change it.
type UnsafeFileError struct {
	What string // "audit file", "checkpoints file"
	Path string
	Why  string // "is readable or writable by group or others (mode 0666)"
	Into string // what would have been written: "the signed record"
	hint string
}

func (e *UnsafeFileError) Error() string {
	return fmt.Sprintf("%s %s %s; refusing to write %s into it", e.What, e.Path, e.Why, e.Into)
}

// Hint says what to do about it.
func (e *UnsafeFileError) Hint() string { return e.hint }

func (e *UnsafeFileError) Unwrap() error { return ErrUnsafeRecordFile }

// The files aegis appends evidence to, as errors name them.
const (
	recordWhat   = "audit file"
	recordInto   = "the signed record"
	sidecarWhat  = "checkpoints file"
	sidecarInto  = "the record's signed checkpoints"
	privateHint  = "or choose a file in a directory only you can write"
	privateModes = 0o077
)

// unsafeFile says why fi, the file at path, is not one aegis may append
// evidence to, or returns nil: it must be a regular file, owned by this
// process's effective user, that group and others cannot access.
func unsafeFile(fi fs.FileInfo, a platform.Access, path, what, into string) *UnsafeFileError {
	e := &UnsafeFileError{What: what, Path: path, Into: into}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Why = "is a symbolic link"
		e.hint = "name the file itself, not a link to it, " + privateHint
		return e
	case !fi.Mode().IsRegular():
		e.Why = "is not a regular file (" + fileType(fi.Mode()) + ")"
		e.hint = "give a regular file, " + privateHint
		return e
	}
	perm := a.Perm
	if !a.Owned {
		e.Why = fmt.Sprintf("belongs to %s, not to this user (%s)", a.Owner, a.Me)
		if perm&privateModes != 0 {
			e.Why += fmt.Sprintf(", and is readable or writable by group or others (mode %#o)", perm)
		}
		e.hint = "another user can cut and rewrite that file: remove it (or have its owner remove it), " + privateHint
		return e
	}
	if perm&privateModes != 0 {
		e.Why = fmt.Sprintf("is readable or writable by group or others (mode %#o)", perm)
		e.hint = platform.FixCommand(path, false) + ", " + privateHint
		return e
	}
	return nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// checkPrivateFile refuses the file at path, if it exists, when aegis may
// not append evidence to it (see unsafeFile); it does not follow a
// symbolic link. A file that does not exist passes: it will be created.
func checkPrivateFile(path, what, into string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	var a platform.Access
	if fi.Mode().IsRegular() { // unsafeFile says what else it is first
		if a, err = platform.PathAccess(path, fi); err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
	}
	if e := unsafeFile(fi, a, path, what, into); e != nil {
		return e
	}
	return nil
}

// openPrivateAppend opens the file at path for appending evidence to it:
// a new file is created with mode 0600 (O_EXCL, so nothing of another's
// is ever taken for new), and an existing one must pass unsafeFile, as
// opened: the final component is never followed if it is a symbolic
// link (O_NOFOLLOW), and a named pipe cannot hold the open (O_NONBLOCK).
// created says whether this call made the file. An error that is not an
// *UnsafeFileError comes from the file system as it is (a missing
// directory is fs.ErrNotExist).
func openPrivateAppend(path, what, into string) (f *os.File, created bool, err error) {
	f, err = platform.OpenNoFollow(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		// Windows: the new file inherits its directory's DACL.
		if err := platform.MakePrivate(path); err != nil {
			f.Close()
			os.Remove(path)
			return nil, false, err
		}
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	f, err = openPrivateExisting(path, what, into)
	return f, false, err
}

// openPrivateExisting opens the existing file at path for appending
// evidence to it, as openPrivateAppend does.
func openPrivateExisting(path, what, into string) (*os.File, error) {
	// Said from the name first, so that a link, a directory or a pipe is
	// named as such; then checked again as opened.
	if err := checkPrivateFile(path, what, into); err != nil {
		return nil, err
	}
	f, err := platform.OpenNoFollow(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &UnsafeFileError{What: what, Path: path, Into: into, Why: "is a symbolic link",
				hint: "name the file itself, not a link to it, " + privateHint}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	var a platform.Access
	if fi.Mode().IsRegular() { // unsafeFile says what else it is first
		if a, err = platform.FileAccess(f, fi); err != nil {
			f.Close()
			return nil, err
		}
	}
	if e := unsafeFile(fi, a, path, what, into); e != nil {
		f.Close()
		return nil, e
	}
	return f, nil
}

// followOwnLinks follows the symbolic links at path's final component
// while each is this user's own, and refuses a link another user owns: a
// link in a shared directory must not send the signed record into a file
// of the user's that the link's owner chose. It reports nothing about a
// path that does not exist, or a chain too long to follow (resolving it
// says so).
func followOwnLinks(path string) error {
	orig := path
	for range 40 {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		if a, err := platform.PathAccess(path, fi); err != nil || !a.Owned {
			owner, me := a.Owner, a.Me
			if err != nil {
				owner, me = "an owner aegis could not read ("+err.Error()+")", "you"
			}
			why := fmt.Sprintf("is a symbolic link that belongs to %s, not to this user (%s)", owner, me)
			if path != orig {
				why = fmt.Sprintf("leads through %s, a symbolic link that belongs to %s, not to this user (%s)", path, owner, me)
			}
			return &UnsafeFileError{What: recordWhat, Path: orig, Into: recordInto, Why: why,
				hint: "name the file itself, not a link another user made, " + privateHint}
		}
		target, err := os.Readlink(path)
		if err != nil {
			return nil
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return nil
}
