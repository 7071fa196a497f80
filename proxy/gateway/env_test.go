package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/policy"
)

// aegisEnviron is the environment of an aegis process that holds secrets
// meant for nobody in particular.
var aegisEnviron = []string{
	"PATH=/usr/bin:/bin", "HOME=/home/op", "USER=op", "LANG=C.UTF-8", "LC_TIME=en_GB.UTF-8", "TZ=UTC",
	"AWS_SECRET_ACCESS_KEY=aws-secret", "GITHUB_TOKEN=gh-secret", "HTTPS_PROXY=http://proxy:3128",
	"AEGIS_SIGNING_KEY=/etc/aegis/signing.key", "LD_PRELOAD=/tmp/evil.so", "NODE_OPTIONS=--require=/tmp/evil.js",
}

// Which of aegis's variables reach a server: the base ones, what the
// server's env sets and what its env_passthrough lists; nothing else.
func TestServerEnvIsolation(t *testing.T) {
	tests := []struct {
		name   string
		server policy.Server
		want   []string // exactly
	}{
		{"UnlistedSecretsNotInherited", policy.Server{Name: "fs"},
			[]string{"PATH=/usr/bin:/bin", "HOME=/home/op", "USER=op", "LANG=C.UTF-8", "LC_TIME=en_GB.UTF-8", "TZ=UTC"}},
		{"PassthroughCopiesOnlyWhatItNames", policy.Server{Name: "gh", EnvPassthrough: []string{"GITHUB_TOKEN", "NOT_SET"}},
			[]string{"PATH=/usr/bin:/bin", "HOME=/home/op", "USER=op", "LANG=C.UTF-8", "LC_TIME=en_GB.UTF-8", "TZ=UTC", "GITHUB_TOKEN=gh-secret"}},
		{"EnvReplacesABaseVariable", policy.Server{Name: "fs", Env: []string{"PATH=/opt/fs/bin", "MODE=ro"}},
			[]string{"PATH=/opt/fs/bin", "HOME=/home/op", "USER=op", "LANG=C.UTF-8", "LC_TIME=en_GB.UTF-8", "TZ=UTC", "MODE=ro"}},
		{"LoaderVariablesNotInherited", policy.Server{Name: "fs", EnvPassthrough: []string{"HTTPS_PROXY"}},
			[]string{"PATH=/usr/bin:/bin", "HOME=/home/op", "USER=op", "LANG=C.UTF-8", "LC_TIME=en_GB.UTF-8", "TZ=UTC", "HTTPS_PROXY=http://proxy:3128"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServerEnv(aegisEnviron, tc.server)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ServerEnv =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// An env file is read at start: trimmed, and refused (naming the server,
// the variable and the path, never the value) when anyone but its owner
// could read or change it, when it is not a regular file, or is missing.
func TestServerEnvFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		return p
	}
	const secret = "tok-9f8e7d"
	good := write("good", secret+"\r\n\n", 0o600)
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("shared", secret, 0o644), link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want string // the error holds it; "" for no error
	}{
		{"TrailingNewlinesTrimmed", good, ""},
		{"GroupReadableTokenFile", write("group", secret, 0o640), "is accessible by group or others (mode 0640); run: chmod 600"},
		{"WorldReadableTokenFile", write("world", secret, 0o604), "is accessible by group or others (mode 0604)"},
		{"GroupWritableTokenFile", write("gw", secret, 0o620), "is accessible by group or others (mode 0620)"},
		{"SymlinkToAReadableFile", link, "is accessible by group or others (mode 0644)"},
		{"MissingTokenFile", filepath.Join(dir, "absent"), "absent does not exist"},
		{"DirectoryAsTokenFile", dir, "is not a regular file"},
		{"FIFOThatWouldBlockTheStart", fifo, "is not a regular file"},
		{"OversizedTokenFile", write("big", strings.Repeat("x", maxEnvFile+1), 0o600), "is larger than 64 KiB"},
		{"NULInTokenFile", write("nul", secret+"\x00"+secret, 0o600), "holds a NUL byte"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := policy.Server{Name: "gh", EnvFiles: []policy.EnvFile{{Name: "GITHUB_TOKEN", Path: tc.path}}}
			env, err := ServerEnv(aegisEnviron, s)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(env, "GITHUB_TOKEN="+secret) {
					t.Errorf("env %q has no GITHUB_TOKEN=%s", env, secret)
				}
				return
			}
			if err == nil {
				t.Fatalf("ServerEnv accepted %s", tc.path)
			}
			msg := err.Error()
			if !errors.Is(err, ErrEnvFile) || !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, "server gh: env GITHUB_TOKEN: ") {
				t.Errorf("error %q, want ErrEnvFile naming the server and variable, with %q", msg, tc.want)
			}
			if strings.Contains(msg, secret) || env != nil {
				t.Errorf("the value leaked: %q %q", msg, env)
			}
		})
	}
}
