package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// 'go install github.com/aegis-dev/aegis/cmd/aegis@latest' works: the
// committed tree, served as a release by a module proxy of files (as
// proxy.golang.org serves a tag), installs with the go command's own
// rules for a module at a version (no replace directives, a complete
// go.sum, nothing that needs the checkout), and the installed aegis names
// that version.
func TestGoInstallLatest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds aegis from a module zip")
	}
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: the release is made from the committed tree")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	const path, version = "github.com/aegis-dev/aegis", "v0.1.0"
	proxy := t.TempDir()
	dir := filepath.Join(proxy, path, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := zip.CreateFromVCS(f, module.Version{Path: path, Version: version}, root, "HEAD", ""); err != nil {
		t.Fatalf("zip the committed tree: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	gomod, err := exec.Command("git", "-C", root, "show", "HEAD:go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, b := range map[string][]byte{"list": []byte(version + "\n"), version + ".mod": gomod, version + ".info": info} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The module cache keeps what it extracted of this version in an
	// earlier run, and go install would build that instead of this tree.
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	forgetModule(t, strings.TrimSpace(string(modcache)), path, version)
	upstream, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", path+"/cmd/aegis@latest")
	cmd.Dir = t.TempDir() // outside any module, as a user runs it
	cmd.Env = append(os.Environ(),
		"GOPROXY=file://"+proxy+","+strings.TrimSpace(string(upstream)),
		"GONOSUMDB="+path, // not published: the checksum database has never seen it
		"GOBIN="+gobin, "GOFLAGS=",
		// The go command's index of the module cache takes a module's
		// files as never changing; forgetModule changed them.
		"GODEBUG=goindex=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/aegis@latest: %v\n%s", path, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "aegis"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "aegis " + Version + " · module " + version; !strings.HasPrefix(string(out), want) {
		t.Errorf("aegis version says %q, want it to start %q", out, want)
	}
}

// forgetModule takes path@version out of the module cache at modcache:
// its extracted tree (read-only, as the go command leaves it) and its
// download files.
func forgetModule(t *testing.T, modcache, path, version string) {
	t.Helper()
	dir := filepath.Join(modcache, filepath.FromSlash(path)+"@"+version)
	if _, err := os.Stat(dir); err == nil {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(dir); err != nil {
			t.Fatalf("take the %s extracted by an earlier run out of the module cache: %v", path, err)
		}
	}
	dl := filepath.Join(modcache, "cache", "download", filepath.FromSlash(path), "@v")
	for _, ext := range []string{".zip", ".ziphash", ".mod", ".info", ".lock"} {
		if err := os.Remove(filepath.Join(dl, version+ext)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}
