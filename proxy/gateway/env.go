package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
)

// BaseEnv names the variables of aegis's own environment that every
// downstream server of the gateway gets, when they are set. Nothing else of
// aegis's environment reaches a server unless its env_passthrough names it:
// a token meant for one server is never visible to another. Each is there
// because ordinary programs break or misbehave without it, and none is
// meant to carry a secret:
//
//   - PATH: to find the programs a server runs (npx finds node with it).
//   - HOME: where npm, pip and most tools keep their cache and config.
//   - USER, LOGNAME: who runs it, for tools that ask (os.userInfo and the
//     like) rather than read the password database.
//   - SHELL: the shell a server starts commands with.
//   - LANG, LC_ALL and every other LC_*: the locale, so that text is
//     decoded and sorted as the user expects.
//   - TZ: the time zone of the times a server prints.
//   - TMPDIR: where a server may create temporary files.
//   - TERM: the terminal type, for a server that colours its stderr.
//   - XDG_RUNTIME_DIR: the per-user runtime directory (sockets, locks),
//     when the session has one.
var BaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM", "XDG_RUNTIME_DIR"}

// maxEnvFile bounds an env file: a value larger than this is not a token
// but a mistake (and would not fit in an exec's environment anyway).
const maxEnvFile = 64 << 10

// ErrEnvFile is wrapped by every error of [ServerEnv] about an env file.
var ErrEnvFile = errors.New("unusable env file")

// inBase reports whether aegis passes the variable name to every server.
func inBase(name string) bool {
	return slices.Contains(BaseEnv, name) || strings.HasPrefix(name, "LC_")
}

// ServerEnv returns the whole environment of one downstream server: from
// environ (aegis's own, as os.Environ returns it) the variables of
// [BaseEnv] and those s.EnvPassthrough names, then s.Env, then each of
// s.EnvFiles with its file's contents, later entries replacing earlier
// ones of the same name. A name that env_passthrough lists but environ
// does not hold is left unset.
//
// An env file is read now: it must be a regular file that neither group
// nor others may access (mode&0o077 == 0), of at most 64 KiB, without a NUL
// byte; trailing newlines ("\n" or "\r\n") are trimmed. Anything else, and
// a missing file, is an error that wraps [ErrEnvFile] and names the server,
// the variable and the path, never the value. The result holds secrets:
// it goes to exec, never into a record, a log or an error.
func ServerEnv(environ []string, s policy.Server) ([]string, error) {
	out := make([]string, 0, len(BaseEnv)+len(s.Env)+len(s.EnvFiles)+len(s.EnvPassthrough))
	set := func(name, value string) {
		entry := name + "=" + value
		for i, e := range out {
			if n, _, _ := strings.Cut(e, "="); n == name {
				out[i] = entry
				return
			}
		}
		out = append(out, entry)
	}
	for _, e := range environ {
		name, value, ok := strings.Cut(e, "=")
		if ok && name != "" && (inBase(name) || slices.Contains(s.EnvPassthrough, name)) {
			set(name, value)
		}
	}
	for _, e := range s.Env {
		name, value, _ := strings.Cut(e, "=")
		set(name, value)
	}
	for _, f := range s.EnvFiles {
		v, err := readEnvFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("server %s: env %s: %w", s.Name, f.Name, err)
		}
		set(f.Name, v)
	}
	return out, nil
}

// readEnvFile reads one env file as [ServerEnv] says.
func readEnvFile(path string) (string, error) {
	return ReadSecretFile(path, ErrEnvFile, "which no environment value can")
}

// ReadSecretFile reads a file that holds one secret (an env file, a
// header file, the HTTP front's token file): a regular file that neither group nor others may access,
// of at most 64 KiB, without a NUL byte (nul says why not), trailing
// newlines trimmed. It opens without blocking (a FIFO is refused, not
// waited on) and checks the file it opened, so a symlink is judged by its
// target. Every error wraps kind and names the path, never the contents.
func ReadSecretFile(path string, kind error, nul string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s does not exist", kind, path)
		}
		return "", fmt.Errorf("%w: %w", kind, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %w", kind, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", kind, path)
	}
	acc, err := platform.FileAccess(f, fi)
	if err != nil {
		return "", fmt.Errorf("%w: %w", kind, err)
	}
	if perm := acc.Perm; perm&0o077 != 0 {
		fix := "chmod 600 " + proxy.QuoteArg(path)
		if runtime.GOOS == "windows" {
			fix = platform.FixCommand(path, false)
		}
		return "", fmt.Errorf("%w: %s is accessible by group or others (mode %#o); run: %s", kind, path, perm, fix)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxEnvFile+1))
	if err != nil {
		return "", fmt.Errorf("%w: read %s: %w", kind, path, err)
	}
	if len(b) > maxEnvFile {
		return "", fmt.Errorf("%w: %s is larger than %d KiB", kind, path, maxEnvFile>>10)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return "", fmt.Errorf("%w: %s holds a NUL byte, %s", kind, path, nul)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
