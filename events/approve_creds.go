package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/schemas"
)

// CredsVersion is the format version of an approval credentials file.
const CredsVersion = 1

// maxCredsBytes bounds a credentials file that is read back.
const maxCredsBytes = 64 << 10

// Creds is an approval credentials file: how to reach one running proxy's
// approval channel, as the approver identity. It is written by the proxy
// with mode 0600 into the runtime directory ([RuntimeDir]) as
// approve-<session>.json and removed when the proxy exits.
type Creds struct {
	V        int    `json:"v"`
	Session  string `json:"session"`
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	// Reader and ReaderPassword are the read-only identity of the
	// listener (aegis console reads the stream with it); files written
	// before it existed lack them.
	Reader         string    `json:"reader,omitempty"`
	ReaderPassword string    `json:"reader_password,omitempty"`
	PID            int       `json:"pid"`
	StateDir       string    `json:"state_dir,omitempty"`
	Started        time.Time `json:"started"`
	// Path is the file the credentials were read from; it is not stored.
	Path string `json:"-"`
}

// CredsFileError is a credentials file that was refused: not 0600, not
// owned by this user, not a regular file, or not well formed. Its content
// is never used.
type CredsFileError struct {
	Path string
	Err  error
}

func (e *CredsFileError) Error() string { return fmt.Sprintf("credentials file %s: %v", e.Path, e.Err) }
func (e *CredsFileError) Unwrap() error { return e.Err }

// CredsList is what [ReadApprovalCreds] found.
type CredsList struct {
	// Live are the credentials of processes that are still running, in
	// session order (which is start order).
	Live []Creds
	// Stale are credentials whose process has exited without removing
	// them; the caller may remove them with [RemoveApprovalCreds]. A file
	// that an OS crash left empty is one, with only Session and Path set.
	Stale []Creds
	// Refused are files that were not read, each with the reason.
	Refused []*CredsFileError
}

// RuntimeDirName is the runtime directory's name inside the state
// directory, used when XDG_RUNTIME_DIR is unset.
const RuntimeDirName = "run"

// RuntimeDirPath returns the directory of approval credentials files
// without creating it: $XDG_RUNTIME_DIR/aegis when XDG_RUNTIME_DIR is set,
// else <stateDir>/run. XDG_RUNTIME_DIR must then be an absolute path to an
// existing directory of this user that neither group nor others can write,
// so that no one else can create, replace or rename the aegis directory in
// it. There is no fallback to a shared directory such as /tmp: another user
// could create aegis-<uid> there first and block every approval channel of
// this user. getenv is passed in so that callers own the environment.
func RuntimeDirPath(getenv func(string) string, stateDir string) (string, error) {
	x := getenv("XDG_RUNTIME_DIR")
	if x == "" {
		if stateDir == "" || !filepath.IsAbs(stateDir) {
			return "", fmt.Errorf("XDG_RUNTIME_DIR is unset and the state directory %q is not an absolute path", stateDir)
		}
		return filepath.Join(stateDir, RuntimeDirName), nil
	}
	if !filepath.IsAbs(x) {
		return "", fmt.Errorf("XDG_RUNTIME_DIR %q is not an absolute path", x)
	}
	fi, err := os.Stat(x)
	if err != nil {
		return "", fmt.Errorf("XDG_RUNTIME_DIR: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("XDG_RUNTIME_DIR %s is not a directory", x)
	}
	a, err := platform.PathAccess(x, fi)
	if err != nil {
		return "", fmt.Errorf("XDG_RUNTIME_DIR: %w", err)
	}
	if !a.Owned {
		return "", fmt.Errorf("XDG_RUNTIME_DIR %s is owned by %s, not by this user (%s)", x, a.Owner, a.Me)
	}
	if a.Perm&0o022 != 0 {
		return "", fmt.Errorf("XDG_RUNTIME_DIR %s %s; group or others can write it, so another user could take its aegis directory", x, platform.ModeWords(a.Perm))
	}
	return filepath.Join(x, "aegis"), nil
}

// RuntimeDir returns the directory of approval credentials files (see
// [RuntimeDirPath]), created with mode 0700 if missing. The directory it
// lives in must exist: XDG_RUNTIME_DIR is never created, and the state
// directory is made by [Open]. An existing runtime directory that is a
// symbolic link, not mode 0700, or owned by another user is refused,
// because a file planted there would point `aegis approve` at another
// process.
func RuntimeDir(getenv func(string) string, stateDir string) (string, error) {
	dir, err := RuntimeDirPath(getenv, stateDir)
	if err != nil {
		return "", err
	}
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		// Mkdir's mode is filtered by the umask; on Windows the directory
		// inherits its parent's DACL.
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", fmt.Errorf("runtime directory: %w", err)
		}
		if err := platform.MakePrivate(dir); err != nil {
			return "", fmt.Errorf("runtime directory: %w", err)
		}
	case errors.Is(err, fs.ErrExist):
	default:
		return "", fmt.Errorf("create runtime directory: %w", err)
	}
	if err := checkRuntimeDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// checkRuntimeDir refuses a directory that is not a real directory of this
// user with mode 0700.
func checkRuntimeDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("runtime directory %s is a symbolic link; remove it (aegis recreates it)", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("runtime directory %s is not a directory", dir)
	}
	a, err := platform.PathAccess(dir, fi)
	if err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	if !a.Owned {
		return fmt.Errorf("runtime directory %s is owned by %s, not by this user (%s); remove it, or point XDG_RUNTIME_DIR at a private directory of yours", dir, a.Owner, a.Me)
	}
	if a.Perm != 0o700 {
		return fmt.Errorf("runtime directory %s %s; it must be 0700 (run: %s)", dir, platform.ModeWords(a.Perm), platform.FixCommand(dir, true))
	}
	return nil
}

func credsFileName(session string) string { return "approve-" + session + ".json" }

// WriteApprovalCreds writes c to dir/approve-<session>.json with mode 0600,
// atomically (a temporary file renamed over it, not fsynced), and returns
// the path. dir must be a private directory of this user, as [RuntimeDir]
// makes.
func WriteApprovalCreds(dir string, c Creds) (path string, err error) {
	if !schemas.ValidID(c.Session) {
		return "", fmt.Errorf("write approval credentials: bad session id %q", c.Session)
	}
	if c.URL == "" || c.User == "" || c.Password == "" || c.PID <= 0 {
		return "", errors.New("write approval credentials: url, user, password and pid are required")
	}
	if c.V == 0 {
		c.V = CredsVersion
	}
	if err := checkRuntimeDir(dir); err != nil {
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(dir, ".approve-"+c.Session+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	// Windows: the file inherits the directory's DACL; give it its own.
	if err := platform.MakePrivate(tmp); err != nil {
		f.Close()
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	// Not fsynced: the file names a running process and is useless once
	// that process is gone, which an OS crash (the only thing that loses
	// unsynced writes) ensures; a file that a crash left empty is refused
	// like any malformed one (ReadApprovalCreds), a stale one is listed as
	// stale. The rename alone keeps readers from seeing a partial file.
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	path = filepath.Join(dir, credsFileName(c.Session))
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write approval credentials: %w", err)
	}
	return path, nil
}

// RemoveApprovalCreds removes a credentials file; one already gone is not
// an error.
func RemoveApprovalCreds(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove approval credentials: %w", err)
	}
	return nil
}

// ReadApprovalCreds reads every credentials file in dir. A missing dir
// holds none; a dir that is not private to this user is an error. Files
// that are not 0600, not owned by this user, not regular files or not well
// formed are refused (listed, never used); credentials of a process that no
// longer exists are listed as stale.
func ReadApprovalCreds(dir string) (*CredsList, error) {
	list := &CredsList{}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return list, nil
	}
	if err := checkRuntimeDir(dir); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read runtime directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "approve-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		c, err := readCredsFile(path)
		if errors.Is(err, errCredsEmpty) {
			// Left empty by an OS crash (files are renamed into place
			// whole but not fsynced): its process is gone with it.
			if session := strings.TrimSuffix(strings.TrimPrefix(name, "approve-"), ".json"); schemas.ValidID(session) {
				list.Stale = append(list.Stale, Creds{Session: session, Path: path})
				continue
			}
		}
		if err != nil {
			list.Refused = append(list.Refused, &CredsFileError{Path: path, Err: err})
			continue
		}
		if processAlive(c.PID) {
			list.Live = append(list.Live, c)
		} else {
			list.Stale = append(list.Stale, c)
		}
	}
	sort.Slice(list.Live, func(i, j int) bool { return list.Live[i].Session < list.Live[j].Session })
	sort.Slice(list.Stale, func(i, j int) bool { return list.Stale[i].Session < list.Stale[j].Session })
	return list, nil
}

// errCredsEmpty is a credentials file of this user with nothing in it.
var errCredsEmpty = errors.New("is empty")

func readCredsFile(path string) (Creds, error) {
	f, err := platform.OpenNoFollow(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return Creds{}, errors.New("is a symbolic link")
		}
		return Creds{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Creds{}, err
	}
	if !fi.Mode().IsRegular() {
		return Creds{}, errors.New("is not a regular file")
	}
	a, err := platform.FileAccess(f, fi)
	if err != nil {
		return Creds{}, err
	}
	if !a.Owned {
		return Creds{}, fmt.Errorf("is owned by %s, not by this user (%s)", a.Owner, a.Me)
	}
	if a.Perm != 0o600 {
		return Creds{}, fmt.Errorf("%s; a credentials file must be 0600", platform.ModeWords(a.Perm))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredsBytes+1))
	if err != nil {
		return Creds{}, err
	}
	if len(b) > maxCredsBytes {
		return Creds{}, fmt.Errorf("is larger than %d bytes", maxCredsBytes)
	}
	if len(b) == 0 {
		return Creds{}, errCredsEmpty
	}
	var c Creds
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Creds{}, fmt.Errorf("malformed: %v", err)
	}
	switch {
	case c.V != CredsVersion:
		return Creds{}, fmt.Errorf("has format version %d; this aegis reads version %d", c.V, CredsVersion)
	case !schemas.ValidID(c.Session) || filepath.Base(path) != credsFileName(c.Session):
		return Creds{}, fmt.Errorf("names session %q, which does not match its file name", c.Session)
	case c.URL == "" || c.User == "" || c.Password == "" || c.PID <= 0:
		return Creds{}, errors.New("lacks url, user, password or pid")
	}
	c.Path = path
	return c, nil
}

// processAlive reports whether a process with that PID exists. A PID that
// was reused by another process counts as alive; connecting then fails.
func processAlive(pid int) bool { return platform.Alive(pid) }
