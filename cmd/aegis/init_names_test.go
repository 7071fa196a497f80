package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/policy"
)

// A server is named after what the user would call it, never after the
// interpreter that runs it: two servers run by node (or python, or
// docker) would otherwise share one record and one state folder.
func TestInitNamesServersAfterWhatTheyRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"npx package is named without scope and version", []string{"npx", "-y", "@scope/server-foo@1.2"}, "server-foo"},
		{"npx of the reference server keeps its package name", []string{"/usr/bin/npx", "-y", "@modelcontextprotocol/server-everything"}, "server-everything"},
		{"npx --package names the package, not the bin", []string{"npx", "--package=@acme/mcp-tools", "acme-mcp"}, "mcp-tools"},
		{"pnpm dlx is not named pnpm", []string{"pnpm", "dlx", "mcp-remote@0.1"}, "mcp-remote"},
		{"node script is not named node", []string{"node", "/x/y/index.js"}, "y"},
		{"node script of a package's dist is named after the package", []string{"/usr/bin/node", "/n/server-filesystem/dist/index.js", "/srv"}, "server-filesystem"},
		{"node script with a name of its own keeps it", []string{"node", "--enable-source-maps", "/x/tools/weather.mjs"}, "weather"},
		{"python module is not named python3", []string{"python3", "-m", "mcp_server_git", "--repo", "."}, "mcp_server_git"},
		{"python -m with a dotted module is sanitized", []string{"python3.12", "-u", "-m", "acme.mcp.Server"}, "acme-mcp-server"},
		{"python script named main is named after its directory", []string{"python", "/opt/notes/main.py"}, "notes"},
		{"uvx package is named without its version", []string{"uvx", "mcp-server-fetch==1.0"}, "mcp-server-fetch"},
		{"uv run python -m is named after the module", []string{"uv", "run", "--with", "mcp", "python", "-m", "weather_srv"}, "weather_srv"},
		{"docker image is not named docker", []string{"docker", "run", "-i", "--rm", "-e", "TOKEN", "-v", "/a:/b", "ghcr.io/org/img:tag"}, "img"},
		{"docker image by digest drops the digest", []string{"podman", "run", "-i", "mcp/github@sha256:abcd"}, "github"},
		{"deno npm: specifier is named after the package", []string{"deno", "run", "-A", "npm:@x/server-y@2"}, "server-y"},
		{"a binary of its own keeps its name", []string{"/usr/local/bin/GitHub-MCP-Server.exe", "stdio"}, "github-mcp-server"},
		{"bash -c alone falls back to server, not bash", []string{"bash"}, "server"},
		{"cmd /c npx on Windows is named after the package, not cmd", []string{`C:\Windows\System32\cmd.exe`, "/c", "npx", "-y", "@x/server-z"}, "server-z"},
		{"sh -c with a command line is named after what it runs", []string{"sh", "-c", "exec python3 -m weather_srv"}, "weather_srv"},
		{"env with variables is named after what it runs", []string{"/usr/bin/env", "-i", "A=b", "node", "/srv/notes/index.js"}, "notes"},
		{"a server named aegis does not take aegis's reserved name", []string{"/opt/aegis/bin/aegis-tools/index.js"}, "aegis-tools"},
		{"a name with __ would split wire names: it is folded", []string{"node", "/x/a__b.js"}, "a_b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := defaultServerName(tc.argv)
			if got != tc.want {
				t.Errorf("defaultServerName(%q) = %q, want %q", tc.argv, got, tc.want)
			}
			if !policy.ValidServerName(got) {
				t.Errorf("%q is not a name the gateway accepts", got)
			}
		})
	}
	for _, tc := range []struct{ in, want string }{
		{"My Server!", "my-server"},
		{"aegis", "aegis-server"},
		{"__x__", "x"},
		{"", "server"},
		{"Ünïcode", "n-code"},
		{"node", "server"},
	} {
		if got := sanitizeName(tc.in); got != tc.want || !policy.ValidServerName(got) {
			t.Errorf("sanitizeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Two servers with the same name get their own record and state folder:
// the second is NAME-2, the third NAME-3.
func TestInitNamesAreUnique(t *testing.T) {
	home := t.TempDir()
	p := &initPlan{dataDir: filepath.Join(home, "data"), stateRoot: filepath.Join(home, "state")}
	if err := os.MkdirAll(filepath.Join(p.stateRoot, "notes"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dataDir, "notes-2.aarl"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{"notes-3": true}
	if got := uniqueName("notes", p.nameTaken(used)); got != "notes-4" {
		t.Errorf("a state folder, a record and a name of this run taken: got %q, want notes-4", got)
	}
	if got := uniqueName("fresh", p.nameTaken(used)); got != "fresh" {
		t.Errorf("a free name: got %q", got)
	}
}

// Setting up the same server again, by hand or from the host's file after
// --undo, keeps its name, so its record and state folder go on where they
// were instead of beside new ones; another command with the same name
// still gets NAME-2.
func TestInitSetUpAgainKeepsTheName(t *testing.T) {
	t.Parallel()
	bin := bins(t)
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	server := filepath.Join(bin, "aegis-example-server")
	state := filepath.Join(home, ".local", "state", "aegis")
	initOnce := func(args ...string) string {
		t.Helper()
		out, stderr, err := runAegis(t, env, append([]string{"init"}, args...)...)
		if err != nil {
			t.Fatalf("init %q: %v\n%s%s", args, err, out, stderr)
		}
		return out
	}
	used := func(name string) { // as the first run of the server would
		if err := os.MkdirAll(filepath.Join(state, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	out := initOnce("--", server)
	if !strings.Contains(out, "aegis-example-server is ready") {
		t.Fatalf("first init:\n%s", out)
	}
	used("aegis-example-server")
	if out = initOnce("--", server); !strings.Contains(out, "aegis-example-server is ready behind aegis wrap. It was set up before for this command") ||
		!strings.Contains(out, filepath.Join(state, "aegis-example-server")+"\n") {
		t.Errorf("the same server again:\n%s", out)
	}
	if out = initOnce("--", server, "--flag"); !strings.Contains(out, "aegis-example-server-2 is ready behind aegis wrap.\n") {
		t.Errorf("another command of the same name:\n%s", out)
	}

	hostFile := filepath.Join(home, "claude_desktop_config.json")
	if err := os.WriteFile(hostFile, []byte(`{"mcpServers":{"ex":{"command":`+q(server)+`}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	initOnce("--from", hostFile)
	used("ex")
	initOnce("--undo", "--from", hostFile)
	initOnce("--from", hostFile)
	if e := readHostEntries(t, hostFile, "mcpServers")["ex"]; argAfter(e.Args, "--state-dir") != filepath.Join(state, "ex") {
		t.Errorf("adopted again after --undo: %+v", e)
	}

	// A file that is not init's is refused with a hint, not overwritten.
	if err := os.WriteFile(filepath.Join(home, ".config", "aegis", "servers.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runAegis(t, env, "init", "--", server); err == nil || !strings.Contains(stderr, "servers.json is not what aegis init writes") || !strings.Contains(stderr, "move it away") {
		t.Errorf("a damaged servers.json: %v\n%s", err, stderr)
	}
}
