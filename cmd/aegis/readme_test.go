package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeCommands returns the shell commands of the sh blocks in the
// README's section titled section, comments taken off, in order.
func readmeCommands(t *testing.T, readme, section string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, inBlock := false, false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## "+section
		case in && line == "```sh":
			inBlock = true
		case in && inBlock && line == "```":
			inBlock = false
		case in && inBlock:
			if c, _, _ := strings.Cut(line, "#"); strings.TrimSpace(c) != "" {
				cmds = append(cmds, strings.TrimSpace(c))
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("no commands in the README's %q section", section)
	}
	return cmds
}

// The README's Install section works as written, in a fresh HOME: make
// install, aegis version, and aegis init each succeed, and init's entry
// names the files it made.
func TestReadmeInstallWorksAsWritten(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	// The user's PATH after make install's note; Go's caches are the
	// machine's, so that the build is not a cold one.
	env := []string{"HOME=" + home, "PATH=" + filepath.Join(home, ".local", "bin") + ":" + os.Getenv("PATH")}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range []string{"GOCACHE", "GOMODCACHE"} {
		if os.Getenv(k) == "" {
			out, _ := exec.Command("go", "env", k).Output()
			env = append(env, k+"="+strings.TrimSpace(string(out)))
		}
	}
	var outputs strings.Builder
	for _, c := range readmeCommands(t, filepath.Join(root, "README.md"), "Install") {
		cmd := exec.Command("bash", "-c", c)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's %q: %v\n%s", c, err, out)
		}
		outputs.Write(out)
	}
	got := outputs.String()
	for _, want := range []string{
		"installed " + filepath.Join(home, ".local", "bin", "aegis"),
		"aegis " + Version + " · module ",
		`"command": "` + filepath.Join(home, ".local", "bin", "aegis") + `"`,
		filepath.Join(home, ".config", "aegis", "signing.key") + " (new)",
		"verify --key ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the README's commands did not print %q:\n%s", want, got)
		}
	}
}
