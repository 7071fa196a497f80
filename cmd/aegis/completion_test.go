package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The completion scripts are golden: a change to a command's flags shows
// up here, and go test -update rewrites them.
func TestCompletionGolden(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, stderr := run(t, nil, "completion", sh)
		if code != 0 || stderr != "" {
			t.Fatalf("completion %s: exit %d, stderr %q", sh, code, stderr)
		}
		golden(t, "completion."+sh+".golden", out)
	}
	if code, _, stderr := run(t, nil, "completion", "tcsh"); code != 2 || !strings.Contains(stderr, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, stderr %q", code, stderr)
	}
}

// The bash script completes as a user types: commands, a command's flags,
// events' subcommands, and files for the rest.
func TestCompletionBashCompletes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	_, script, _ := run(t, nil, "completion", "bash")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "calls.aarl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"aegis", "ver"}, "verify version"},
		{[]string{"aegis", "verify", "--k"}, "--key"},
		{[]string{"aegis", "rotate", "--if-"}, "--if-larger --if-older"},
		{[]string{"aegis", "events", "l"}, "list"},
		{[]string{"aegis", "prove", "i"}, "inclusion"},
		{[]string{"aegis", "hub", "e"}, "enroll"},
		{[]string{"aegis", "help", "fle"}, "fleet"},
		{[]string{"aegis", "verify", "cal"}, "calls.aarl"},
	} {
		quoted := make([]string, len(tc.words))
		for i, w := range tc.words {
			quoted[i] = "'" + w + "'"
		}
		cmd := exec.Command(bash, "--norc", "-c", script+"\nCOMP_WORDS=("+strings.Join(quoted, " ")+"); COMP_CWORD="+
			strconv.Itoa(len(tc.words)-1)+"; _aegis; echo \"${COMPREPLY[*]}\"")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%v completes to %q, want %q", tc.words, got, tc.want)
		}
	}
}

// The help of aegis and of every command is golden: what a user with only
// the binary reads. go test -update rewrites the files.
func TestHelpGolden(t *testing.T) {
	m := &Main{}
	for _, args := range append([][]string{{"help"}}, func() [][]string {
		var out [][]string
		for _, c := range m.allCommands() {
			out = append(out, []string{"help", c.name})
		}
		return out
	}()...) {
		code, out, stderr := run(t, nil, args...)
		if code != 0 || stderr != "" || !strings.Contains(out, "Example") {
			t.Errorf("aegis %v: exit %d, stderr %q, and its help must show an example", args, code, stderr)
		}
		name := "aegis"
		if len(args) > 1 {
			name = args[1]
		}
		golden(t, filepath.Join("help", name+".golden"), out)
	}
}

// Every reference page of docs/ is a help topic that prints the page as
// the source has it (a command's own page with --full), so a user with
// only the binary reads what the repository says.
func TestHelpTopicsAreTheDocs(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs pages: %v %v", pages, err)
	}
	commands := map[string]bool{}
	for _, c := range (&Main{}).commands() {
		commands[c.name] = true
	}
	for _, page := range pages {
		topic := strings.ToLower(strings.TrimSuffix(filepath.Base(page), ".md"))
		args := []string{"help", topic}
		if commands[topic] {
			args = append(args, "--full")
		}
		want, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		code, out, stderr := run(t, nil, args...)
		if code != 0 || stderr != "" || out != string(want) {
			t.Errorf("aegis %v: exit %d, stderr %q, and it does not print %s as it is", args, code, stderr, page)
		}
	}
	if code, _, stderr := run(t, nil, "help", "nosuch"); code != 2 || !strings.Contains(stderr, "threat-model") {
		t.Errorf("an unknown topic: exit %d, stderr %q; want 2 and the list of topics", code, stderr)
	}
}
