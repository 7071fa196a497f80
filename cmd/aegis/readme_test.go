package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// readmeBlock returns the lines of the fenced blocks of language lang in
// the README's section titled section, in order, their indentation taken
// off as far as the fence had it.
func readmeBlock(t *testing.T, readme, section, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in, inBlock, indent := false, false, ""
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line) // blocks in a list are indented
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.HasPrefix(line, "## "+section)
		case in && !inBlock && trimmed == "```"+lang:
			inBlock, indent = true, line[:len(line)-len(strings.TrimLeft(line, " "))]
		case in && inBlock && trimmed == "```":
			inBlock = false
		case in && inBlock:
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no %s block in the README's %q section", lang, section)
	}
	return lines
}

// readmeCommands returns the shell commands of the sh blocks in the
// README's section titled section, comments taken off, in order.
func readmeCommands(t *testing.T, readme, section string) []string {
	t.Helper()
	var cmds []string
	for _, line := range readmeBlock(t, readme, section, "sh") {
		if c, _, _ := strings.Cut(line, "#"); strings.TrimSpace(c) != "" {
			cmds = append(cmds, strings.TrimSpace(c))
		}
	}
	return cmds
}

// The README's Install section works as written, in a fresh HOME whose
// bin folder is not on PATH yet: make install builds aegis there and says
// so, and how to put the folder on PATH; with that done, aegis version
// names the checkout's revision and aegis init succeeds, its entry naming
// the files it made.
func TestReadmeInstallWorksAsWritten(t *testing.T) {
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	bin := filepath.Join(home, ".local", "bin")
	// Go's caches are the machine's, so that the build is not a cold one.
	env := []string{"HOME=" + home}
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
	path := os.Getenv("PATH")
	var outputs strings.Builder
	for i, c := range readmeCommands(t, filepath.Join(root, "README.md"), "Install") {
		cmd := exec.Command("bash", "-c", c)
		cmd.Dir, cmd.Env = root, append(env, "PATH="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's %q: %v\n%s", c, err, out)
		}
		outputs.Write(out)
		if i == 0 {
			// What make install's note says to do.
			if note := `add it: export PATH="` + bin + `:$PATH"`; !strings.Contains(string(out), note) {
				t.Errorf("make install, with %s not on PATH, did not say %q:\n%s", bin, note, out)
			}
			path = bin + ":" + path
		}
	}
	got := outputs.String()
	for _, want := range []string{
		"installed " + filepath.Join(bin, "aegis"),
		"aegis " + Version + " · module ",
		`"command": "` + filepath.Join(bin, "aegis") + `"`,
		filepath.Join(home, ".config", "aegis", "signing.key") + " (new)",
		"verify --key ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the README's commands did not print %q:\n%s", want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err == nil {
		if _, err := exec.LookPath("git"); err == nil && !strings.Contains(got, " · revision ") {
			t.Errorf("a build from a git checkout names no revision:\n%s", got)
		}
	}
}

// quickstart runs one of the README's quickstarts as a user would: in a
// fresh HOME, with the commands of its sh blocks. The quickstarts run one
// after another, not t.Parallel: beside the package's parallel tests on 2
// cores, the gateway's start (npx servers, in a fresh HOME) outlasted its
// host's wait.
type quickstart struct {
	t                  *testing.T
	root, readme, home string
	env                []string
	cmds               []string
}

func newQuickstart(t *testing.T, section, first string) *quickstart {
	mcptest.EverythingServer(t) // node and the package, or a clear failure
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	q := &quickstart{t: t, root: root, readme: filepath.Join(root, "README.md"), home: t.TempDir()}
	q.env = []string{"HOME=" + q.home, "PATH=" + bins(t) + ":" + os.Getenv("PATH"), "NPM_CONFIG_UPDATE_NOTIFIER=false"}
	q.cmds = readmeCommands(t, q.readme, section)
	if len(q.cmds) != 4 || !strings.HasPrefix(q.cmds[0], first) {
		t.Fatalf("the quickstart's commands: %q", q.cmds)
	}
	return q
}

// sh runs one command line as the README shows it.
func (q *quickstart) sh(c string) string {
	q.t.Helper()
	cmd := exec.Command("bash", "-c", c)
	cmd.Env = q.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		q.t.Fatalf("the README's %q: %v\n%s", c, err, out)
	}
	return string(out)
}

// init runs the first command, aegis init, and returns the entry it
// printed for Claude Desktop and the public key.
func (q *quickstart) init() (hostEntry, string) {
	q.t.Helper()
	out := q.sh(q.cmds[0])
	_, after, _ := strings.Cut(out, "public key")
	return hostJSON(q.t, []byte(out), "Claude Desktop")["mcpServers"]["server-everything"], strings.Fields(after)[0]
}

// connect starts the entry as a host starts it (npx finds the pinned
// server-everything of .cache/node there, as it would find the
// registry's) and connects a real client.
func (q *quickstart) connect(ctx context.Context, entry hostEntry) *mcp.ClientSession {
	q.t.Helper()
	launch := exec.Command(entry.Command, entry.Args...)
	launch.Env, launch.Dir = q.env, filepath.Join(q.root, ".cache", "node")
	stderr := &syncBuffer{}
	launch.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: launch}, nil)
	if err != nil {
		q.t.Fatalf("start the entry as a host would: %v\n%s", err, stderr)
	}
	return cs
}

// The README's first quickstart works as written, in a fresh HOME: aegis
// init, the printed entry started as a host starts it (npx finds the
// pinned server-everything of .cache/node there, as it would find the
// registry's), a real client using the server through it, then the
// sessions, replay and verify lines, with the public key init printed in
// place of PUBLIC_KEY.
func TestReadmeQuickstartWorksAsWritten(t *testing.T) {
	q := newQuickstart(t, "Quickstart: one server", "aegis init ")
	cmds, sh := q.cmds, q.sh
	entry, pub := q.init()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := q.connect(ctx, entry)
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "quickstart"}}); err != nil || res.IsError {
		t.Fatalf("echo through aegis: %v %+v", err, res)
	}
	cs.Close()

	if s := sh(cmds[1]); !strings.Contains(s, "closed") {
		t.Errorf("%s:\n%s", cmds[1], s)
	}
	if s := sh(cmds[2]); !strings.Contains(s, "echo") {
		t.Errorf("%s:\n%s", cmds[2], s)
	}
	if s := sh(strings.ReplaceAll(cmds[3], "PUBLIC_KEY", pub)); !strings.HasPrefix(s, "Verified (pinned to ") {
		t.Errorf("%s:\n%s", cmds[3], s)
	}
}

// The README's gateway quickstart works as written, in a fresh HOME: aegis
// init --mode gateway; the README's profiles put in place of the starter
// file's; the printed entry started as a host starts it; the agent's
// request for the profile that takes a human, seen with the README's
// aegis approvals and granted with its aegis approve; then its verify
// line.
func TestReadmeGatewayQuickstartWorksAsWritten(t *testing.T) {
	const section = "Quickstart: several servers"
	q := newQuickstart(t, section, "aegis init --mode gateway ")
	cmds, sh, readme, home := q.cmds, q.sh, q.readme, q.home
	entry, pub := q.init()

	// Step 2: the README's profiles in place of the starter's.
	file := filepath.Join(home, ".config", "aegis", "aegis.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(b, []byte("\nprofiles:\n")), bytes.Index(b, []byte("\nactivation:\n"))
	if i < 0 || j < i {
		t.Fatalf("the starter file has no profiles then activation:\n%s", b)
	}
	profiles := strings.Join(readmeBlock(t, readme, section, "yaml"), "\n")
	edited := string(b[:i+1]) + profiles + string(b[j:])
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := q.connect(ctx, entry)
	defer cs.Close()
	served := func() []string {
		t.Helper()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			if strings.HasPrefix(tool.Name, "server-everything__") {
				names = append(names, tool.Name)
			}
		}
		return names
	}
	if got := served(); len(got) != 1 || got[0] != "server-everything__echo" {
		t.Fatalf("the default profile serves %q, not only server-everything__echo", got)
	}
	text := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var s strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				s.WriteString(tc.Text)
			}
		}
		return s.String()
	}
	asked := text("aegis__set_profile", map[string]any{"name": "full"})
	_, id, ok := strings.Cut(asked, "approval=")
	if !ok {
		t.Fatalf("aegis__set_profile full: %s", asked)
	}
	id = strings.Fields(id)[0]
	if s := sh(cmds[1]); !strings.Contains(s, id) {
		t.Errorf("%s does not list %s:\n%s", cmds[1], id, s)
	}
	if !strings.HasSuffix(cmds[2], " ID") {
		t.Fatalf("the approve line: %q", cmds[2])
	}
	sh(strings.TrimSuffix(cmds[2], "ID") + id)
	if s := text("aegis__approval_status", map[string]any{"id": id}); !strings.Contains(s, "approved") {
		t.Fatalf("approval_status %s: %s", id, s)
	}
	if got := served(); len(got) < 2 {
		t.Fatalf("the full profile serves %q", got)
	}
	cs.Close()

	if s := sh(strings.ReplaceAll(cmds[3], "PUBLIC_KEY", pub)); !strings.HasPrefix(s, "Verified (pinned to ") {
		t.Errorf("%s:\n%s", cmds[3], s)
	}
}
