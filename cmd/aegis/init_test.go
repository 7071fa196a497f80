package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hostJSON decodes the JSON object that follows the line starting with
// heading in aegis init's output.
func hostJSON(t *testing.T, out []byte, heading string) map[string]map[string]hostEntry {
	t.Helper()
	i := bytes.Index(out, []byte("\n"+heading))
	if i < 0 {
		t.Fatalf("no %q in:\n%s", heading, out)
	}
	rest := out[i+1:]
	rest = rest[bytes.IndexByte(rest, '\n')+1:]
	var v map[string]map[string]hostEntry
	if err := json.NewDecoder(bytes.NewReader(rest)).Decode(&v); err != nil {
		t.Fatalf("the JSON under %q: %v\n%s", heading, err, rest)
	}
	return v
}

// The entry aegis init prints, pasted into a host's configuration, starts
// aegis as the host starts it (the command and args exactly, the host's
// own short PATH), and a real MCP client lists and calls the server's
// tools through it; the verify line it prints then pins the record to the
// key it made.
func TestInitEntryRunsAsAHostRunsIt(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	bin := bins(t)
	for _, tc := range []struct{ mode, tool string }{
		{"wrap", "echo"},
		{"gateway", "aegis-example-server__echo"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			home := t.TempDir()
			env := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
			cmd := exec.Command(filepath.Join(bin, "aegis"), "init", "--mode", tc.mode, "--", filepath.Join(bin, "aegis-example-server"))
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("aegis init: %v\n%s", err, stderr.String())
			}
			desktop := hostJSON(t, out, "Claude Desktop")["mcpServers"]["aegis-example-server"]
			vscode := hostJSON(t, out, "VS Code")["servers"]["aegis-example-server"]
			if !filepath.IsAbs(desktop.Command) || vscode.Type != "stdio" || vscode.Command != desktop.Command || !slices.Equal(vscode.Args, desktop.Args) {
				t.Fatalf("entries: %+v and %+v", desktop, vscode)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			launch := exec.Command(desktop.Command, desktop.Args...)
			launch.Env = env
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: launch}, nil)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(tools.Tools, func(x *mcp.Tool) bool { return x.Name == tc.tool }) {
				t.Fatalf("no %s among the tools", tc.tool)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{"message": "through init"}})
			if err != nil || res.IsError {
				t.Fatalf("call %s: %v %+v", tc.tool, err, res)
			}
			cs.Close()

			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			verify := strings.Fields(lines[len(lines)-1])
			if len(verify) != 5 || verify[1] != "verify" {
				t.Fatalf("the last line is not the verify line: %q", lines[len(lines)-1])
			}
			// The sessions and replay lines before it run as printed.
			for i, want := range []string{"closed", tc.tool} {
				l := lines[len(lines)-3+i]
				f := strings.Fields(l)
				c := exec.Command(f[0], f[1:]...)
				c.Env = env
				if out, err := c.Output(); err != nil || !strings.Contains(string(out), want) {
					t.Errorf("%s: %v\n%s", l, err, out)
				}
			}
			v := exec.Command(verify[0], verify[1:]...)
			v.Env = env
			vout, err := v.Output()
			if err != nil || !strings.HasPrefix(string(vout), "Verified (pinned to ") {
				t.Errorf("%s: %v\n%s", lines[len(lines)-1], err, vout)
			}

			// A second init keeps the key and the starter file; for the
			// gateway, the file that has the server already is left as it
			// is, and init says so rather than that it is ready.
			again := exec.Command(filepath.Join(bin, "aegis"), "init", "--mode", tc.mode, "--", filepath.Join(bin, "aegis-example-server"))
			again.Env = env
			out2, err := again.Output()
			kept := map[string]int{"wrap": 2, "gateway": 1}[tc.mode]
			if err != nil || strings.Count(string(out2), "(kept: it was there)") != kept || !strings.Contains(string(out2), verify[3]) {
				t.Errorf("a second init: %v\n%s", err, out2)
			}
			if has := strings.Contains(string(out2), "already has aegis-example-server, with this command; nothing was added"); has != (tc.mode == "gateway") {
				t.Errorf("a second init:\n%s", out2)
			}
			// The wrapped server ran and its state folder is there: the
			// same command set up again goes on in the same record and
			// state folder, and says so.
			if tc.mode == "wrap" && (!strings.Contains(string(out2), "It was set up before for this command") || !strings.Contains(string(out2), "aegis-example-server.aarl\n")) {
				t.Errorf("a second wrap init of the same server did not keep its record:\n%s", out2)
			}
		})
	}
}

// --write-host-config adds the entry to the host's file after copying it
// aside, keeps what the file had, and refuses a name already there
// without changing anything.
func TestInitWritesHostConfigWithBackup(t *testing.T) {
	bin := bins(t)
	home := t.TempDir()
	hostFile := filepath.Join(home, "claude_desktop_config.json")
	before := `{"globalShortcut":"Ctrl+Space","mcpServers":{"other":{"command":"/usr/bin/other","args":[]}}}`
	if err := os.WriteFile(hostFile, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	initCmd := func() (string, string, error) {
		cmd := exec.Command(filepath.Join(bin, "aegis"), "init", "--write-host-config", hostFile, "--", filepath.Join(bin, "aegis-example-server"))
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), err
	}
	if _, stderr, err := initCmd(); err != nil || !strings.Contains(stderr, "copied to "+hostFile+".bak-") {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	var cfg struct {
		GlobalShortcut string               `json:"globalShortcut"`
		MCPServers     map[string]hostEntry `json:"mcpServers"`
	}
	b, _ := os.ReadFile(hostFile)
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.GlobalShortcut != "Ctrl+Space" || cfg.MCPServers["other"].Command != "/usr/bin/other" ||
		cfg.MCPServers["aegis-example-server"].Args[0] != "wrap" {
		t.Fatalf("the host file after init: %v\n%s", err, b)
	}
	backups := backupsOf(hostFile)
	if len(backups) != 1 {
		t.Fatalf("backups: %v", backups)
	}
	if saved, _ := os.ReadFile(backups[0]); string(saved) != before {
		t.Errorf("the backup holds %q", saved)
	}
	_, stderr, err := initCmd()
	if after, _ := os.ReadFile(hostFile); err == nil || !strings.Contains(stderr, `already has a server named "aegis-example-server"`) || !bytes.Equal(after, b) {
		t.Errorf("a second init with the same name: %v\n%s", err, stderr)
	}
}

// With --ask (or a terminal on stdin), init asks for what the flags leave
// out: the server, then the mode.
func TestInitAsks(t *testing.T) {
	bin := bins(t)
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "aegis"), "init", "--ask")
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(filepath.Join(bin, "aegis-example-server") + "\ngateway\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("init --ask: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "The MCP server to put aegis in front of") || !strings.Contains(stderr.String(), "wrap (record this one server) or gateway") {
		t.Errorf("init --ask did not ask: %q", stderr.String())
	}
	e := hostJSON(t, out, "Claude Desktop")["mcpServers"]["aegis-example-server"]
	if len(e.Args) == 0 || e.Args[0] != "gateway" {
		t.Errorf("the answers did not make a gateway entry: %+v", e)
	}
	if b, err := os.ReadFile(filepath.Join(home, ".config", "aegis", "aegis.yaml")); err != nil || !strings.Contains(string(b), filepath.Join(bin, "aegis-example-server")) {
		t.Errorf("the gateway file: %v\n%s", err, b)
	}
}

// The entry is printed with the file each host reads it from, where that
// host keeps it on the system aegis runs on.
func TestInitNamesTheHostFilesOfEachSystem(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name, goos string
		getenv     func(string) string
		want       hostFiles
	}{
		{"linux", "linux", env("HOME", "/home/u"), hostFiles{
			"/home/u/.config/Claude/claude_desktop_config.json", "/home/u/.cursor/mcp.json", "/home/u/.config/Code/User/mcp.json"}},
		{"linux with XDG_CONFIG_HOME", "linux", env("HOME", "/home/u", "XDG_CONFIG_HOME", "/cfg"), hostFiles{
			"/cfg/Claude/claude_desktop_config.json", "/home/u/.cursor/mcp.json", "/cfg/Code/User/mcp.json"}},
		{"linux with a relative XDG_CONFIG_HOME, which the spec says to ignore", "linux", env("HOME", "/home/u", "XDG_CONFIG_HOME", "cfg"), hostFiles{
			"/home/u/.config/Claude/claude_desktop_config.json", "/home/u/.cursor/mcp.json", "/home/u/.config/Code/User/mcp.json"}},
		{"macOS", "darwin", env("HOME", "/Users/u"), hostFiles{
			"/Users/u/Library/Application Support/Claude/claude_desktop_config.json", "/Users/u/.cursor/mcp.json", "/Users/u/Library/Application Support/Code/User/mcp.json"}},
		{"windows", "windows", env("APPDATA", `C:\Users\u\AppData\Roaming`, "USERPROFILE", `C:\Users\u`), hostFiles{
			`C:\Users\u\AppData\Roaming\Claude\claude_desktop_config.json`, `C:\Users\u\.cursor\mcp.json`, `C:\Users\u\AppData\Roaming\Code\User\mcp.json`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hostConfigFiles(tc.goos, tc.getenv); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(bins(t), "aegis"), "init", "--", "true")
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Claude Desktop (" + filepath.Join(home, ".config", "Claude", "claude_desktop_config.json") + ") and Cursor (" + filepath.Join(home, ".cursor", "mcp.json"),
		"or " + filepath.Join(home, ".config", "Code", "User", "mcp.json") + " for all of them",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("init does not say %q:\n%s", want, out)
		}
	}
}
