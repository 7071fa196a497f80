package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/proxy"
)

// How an aegis gateway finds the aegis console of its state directory to
// link a pending approval to it (docs/console.md, Approval links): the
// console writes console-<pid>.json (mode 0600) into the runtime
// directory, beside the approval credentials files, with its address,
// its state directory and the key its approval links are made with; it
// removes the file when it stops. The gateway reads the files of live
// consoles of its own state directory when a call waits, and makes the
// link with the key (console.ApprovalLink). A file that is not a regular
// 0600 file of this user is never used, as for credentials files.

// consoleFileVersion is the format version of a console file.
const consoleFileVersion = 1

// maxConsoleFileBytes bounds a console file.
const maxConsoleFileBytes = 4 << 10

type consoleFile struct {
	V        int    `json:"v"`
	PID      int    `json:"pid"`
	StateDir string `json:"state_dir"`
	URL      string `json:"url"`      // http://host:port
	LinkKey  string `json:"link_key"` // hex
}

func consoleFileName(pid int) string { return "console-" + strconv.Itoa(pid) + ".json" }

// writeConsoleFile writes c into the runtime directory dir (0600, renamed
// into place whole) and returns its path.
func writeConsoleFile(dir string, c consoleFile) (path string, err error) {
	c.V = consoleFileVersion
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".console-*.tmp")
	if err != nil {
		return "", fmt.Errorf("write the console file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err == nil {
		err = platform.MakePrivate(tmp)
	}
	if err == nil {
		_, err = f.Write(append(b, '\n'))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write the console file: %w", err)
	}
	path = filepath.Join(dir, consoleFileName(c.PID))
	if err = os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write the console file: %w", err)
	}
	return path, nil
}

// readConsoleFile reads one console file, refusing what another user
// could have written or changed.
func readConsoleFile(path string) (consoleFile, error) {
	var c consoleFile
	f, err := platform.OpenNoFollow(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return c, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return c, err
	}
	if !fi.Mode().IsRegular() {
		return c, errors.New("is not a regular file")
	}
	a, err := platform.FileAccess(f, fi)
	if err != nil {
		return c, err
	}
	if !a.Owned || a.Perm != 0o600 {
		return c, errors.New("is not a 0600 file of this user")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConsoleFileBytes+1))
	if err != nil || len(b) > maxConsoleFileBytes {
		return c, errors.New("cannot be read whole")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("malformed: %v", err)
	}
	if c.V != consoleFileVersion || c.PID <= 0 || filepath.Base(path) != consoleFileName(c.PID) || !strings.HasPrefix(c.URL, "http://") {
		return c, errors.New("malformed")
	}
	return c, nil
}

// consoleFor returns the running console of stateDir in the runtime
// directory dir, if there is one.
func consoleFor(dir, stateDir string) (consoleFile, []byte, bool) {
	names, _ := filepath.Glob(filepath.Join(dir, "console-*.json"))
	for _, p := range names {
		c, err := readConsoleFile(p)
		if err != nil || !platform.Alive(c.PID) || !sameDir(c.StateDir, stateDir) {
			continue
		}
		key, err := hex.DecodeString(c.LinkKey)
		if err != nil || len(key) != console.LinkKeyBytes {
			continue
		}
		return c, key, true
	}
	return consoleFile{}, nil, false
}

// approvalLinker is the gateway's [gateway.Config.ApprovalLink] and
// wrap's [relay.Config.ApprovalLink]: the link
// that opens a pending approval in the aegis console of stateDir, or why
// there is none.
func (m *Main) approvalLinker(stateDir string) func(proxy.PendingApproval) (string, string) {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return func(p proxy.PendingApproval) (string, string) {
		start := "start it in a terminal: aegis console --state-dir " + proxy.QuoteArg(stateDir) + ", then call the tool again for a link the host shows you"
		dir, err := events.RuntimeDirPath(m.Getenv, stateDir)
		if err != nil {
			return "", "no aegis console can be found (" + err.Error() + ")"
		}
		c, key, ok := consoleFor(dir, stateDir)
		if !ok {
			return "", "no aegis console runs for this state directory; " + start
		}
		link, err := console.ApprovalLink(c.URL, key, p.Session, p.ApprovalID, p.ExpiresAt, rand.Reader)
		if err != nil {
			return "", err.Error()
		}
		return link, ""
	}
}

// offerLinks draws the console's link key and writes its console file
// for stateDir, served at base; it returns the file's path and the key.
func (m *Main) offerLinks(stateDir, base string) (string, []byte, error) {
	key := make([]byte, console.LinkKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", nil, fmt.Errorf("draw the approval link key: %w", err)
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return "", nil, fmt.Errorf("state directory %q: %w", stateDir, err)
	}
	dir, err := events.RuntimeDir(m.Getenv, abs)
	if err != nil {
		return "", nil, fmt.Errorf("runtime directory: %w", err)
	}
	path, err := writeConsoleFile(dir, consoleFile{PID: os.Getpid(), StateDir: abs, URL: base, LinkKey: hex.EncodeToString(key)})
	if err != nil {
		return "", nil, err
	}
	return path, key, nil
}
