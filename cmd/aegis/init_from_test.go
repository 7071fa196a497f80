package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// pyEnvServer is an MCP server over stdio, written by hand in Python (no
// package of PyPI): its one tool, env, answers the value of the
// environment variable it is given.
const pyEnvServer = `import json, os, sys

def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if mid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "py-env", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{
            "name": "env", "description": "a variable of the server's environment",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}]}})
    elif method == "tools/call":
        name = msg["params"].get("arguments", {}).get("name", "")
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": os.environ.get(name, "")}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
`

// runAegis runs the aegis binary with env and returns stdout, stderr and
// the error.
func runAegis(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bins(t), "aegis"), args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// argAfter is the argument that follows flag in args.
func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// aegis init --from claude on a real Claude Desktop file holding three
// servers (npx, a node script, a python module) beside a remote one: the
// file written back starts all three behind aegis wrap under the host's
// short PATH (the entries carry init's PATH and the servers' own env), a
// TypeScript SDK client lists and calls a tool of each as Claude Desktop
// would, each record verifies against the printed key, a second --from
// changes nothing, and --undo restores the original byte for byte.
func TestInitFromClaudeDesktopFile(t *testing.T) {
	mcptest.EverythingServer(t) // npx finds it in .cache/node, where the host starts it
	filesystem := mcptest.FilesystemServer(t)
	node, sdk := mcptest.TypeScriptSDK(t)
	nodeDir, _ := filepath.Abs(filepath.Join("..", "..", ".cache", "node"))
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol", "server-everything")); err != nil {
		t.Fatalf("the node install: %v", err)
	}

	home := t.TempDir()
	pyDir := filepath.Join(t.TempDir(), "py")
	files := filepath.Join(t.TempDir(), "files")
	extraBin := filepath.Join(t.TempDir(), "nvm", "bin") // a PATH entry the host's short PATH lacks
	for _, d := range []string{pyDir, files, extraBin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pyDir, "mcp_env_py.py"), []byte(pyEnvServer), 0o644); err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(home, ".config", "Claude", "claude_desktop_config.json")
	if err := os.MkdirAll(filepath.Dir(hostFile), 0o700); err != nil {
		t.Fatal(err)
	}
	original := `{
  "mcpServers": {
    "everything": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-everything"]
    },
    "filesystem": {
      "command": "node",
      "args": [` + strings.Join([]string{q(filesystem[1]), q(files)}, ", ") + `]
    },
    "py-env": {
      "command": "python3",
      "args": ["-m", "mcp_env_py"],
      "env": {"PYTHONPATH": ` + q(pyDir) + `, "GREETING": "from the host's entry"},
      "disabled": false
    },
    "docs": {"url": "https://mcp.example.com/mcp"}
  },
  "globalShortcut": "Ctrl+Space"
}
`
	if err := os.WriteFile(hostFile, []byte(original), 0o640); err != nil {
		t.Fatal(err)
	}
	initPATH := extraBin + ":/usr/bin:/bin"
	env := []string{"HOME=" + home, "PATH=" + initPATH}

	out, stderr, err := runAegis(t, env, "init", "--from", "claude")
	if err != nil {
		t.Fatalf("init --from claude: %v\n%s\n%s", err, out, stderr)
	}
	_, after, _ := strings.Cut(out, "public key")
	pub := strings.Fields(after)[0]
	for _, want := range []string{"3 server(s) of " + hostFile + " are behind aegis wrap", "docs", "a remote server (url)", "init --undo --from " + hostFile} {
		if !strings.Contains(out, want) {
			t.Errorf("init does not say %q:\n%s", want, out)
		}
	}
	written, err := os.ReadFile(hostFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(hostFile); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the host file's mode after init: %v %v", fi.Mode(), err)
	}
	var cfg struct {
		MCPServers     map[string]json.RawMessage `json:"mcpServers"`
		GlobalShortcut string                     `json:"globalShortcut"`
	}
	var docs bytes.Buffer
	if err := json.Unmarshal(written, &cfg); err != nil || cfg.GlobalShortcut != "Ctrl+Space" ||
		json.Compact(&docs, cfg.MCPServers["docs"]) != nil || docs.String() != `{"url":"https://mcp.example.com/mcp"}` {
		t.Fatalf("the file init wrote lost what it had: %v\n%s", err, written)
	}
	if !strings.Contains(string(written), `"disabled": false`) {
		t.Errorf("the py-env entry lost its disabled key:\n%s", written)
	}

	for _, tc := range []struct {
		key, tool, args, want string
	}{
		{"everything", "echo", `{"message":"through init --from"}`, "through init --from"},
		{"filesystem", "list_allowed_directories", `{}`, files},
		{"py-env", "env", `{"name":"PATH"}`, initPATH},
		{"py-env", "env", `{"name":"GREETING"}`, "from the host's entry"},
	} {
		var e hostEntry
		if err := json.Unmarshal(cfg.MCPServers[tc.key], &e); err != nil {
			t.Fatal(err)
		}
		if len(e.Args) < 2 || e.Args[0] != "wrap" || e.Env["PATH"] != initPATH {
			t.Fatalf("the %s entry: %+v", tc.key, e)
		}
		cmd := exec.Command(node, filepath.Join("testdata", "tshost.mjs"))
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "MCP_SDK_DIR=" + sdk, "HOST_FILE=" + hostFile, "SERVER=" + tc.key,
			"SERVER_CWD=" + nodeDir, "TOOL=" + tc.tool, "ARGS=" + tc.args, "NPM_CONFIG_UPDATE_NOTIFIER=false"}
		var cerr bytes.Buffer
		cmd.Stderr = &cerr
		res, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s as Claude Desktop starts it: %v\n%s", tc.key, err, cerr.String())
		}
		var got struct {
			Tools   []string `json:"tools"`
			IsError bool     `json:"isError"`
			Text    string   `json:"text"`
		}
		if err := json.Unmarshal(res, &got); err != nil || got.IsError || !slices.Contains(got.Tools, tc.tool) || !strings.Contains(got.Text, tc.want) {
			t.Fatalf("%s: %s with %s: %v %+v, want %q\n%s", tc.key, tc.tool, tc.args, err, got, tc.want, cerr.String())
		}

		record := argAfter(e.Args, "--audit")
		if !strings.Contains(out, "verify --key "+pub+" "+record) {
			t.Errorf("init printed no verify line for %s", record)
		}
		vout, verr, err := runAegis(t, env, "verify", "--key", pub, record)
		if err != nil || !strings.HasPrefix(vout, "Verified") {
			t.Errorf("verify %s: %v\n%s%s", record, err, vout, verr)
		}
	}

	// A second --from finds every server behind aegis: nothing changes,
	// and aegis is not put in front of itself.
	out2, stderr2, err := runAegis(t, env, "init", "--from", "claude")
	if again, _ := os.ReadFile(hostFile); err != nil || !bytes.Equal(again, written) || !strings.Contains(out2, "no server of") || strings.Count(out2, "already started by aegis") != 3 {
		t.Errorf("a second init --from: %v\n%s%s", err, out2, stderr2)
	}
	if n := len(backupsOf(hostFile)); n != 1 {
		t.Errorf("%d backups after a second init --from that changed nothing", n)
	}

	uout, uerr, err := runAegis(t, env, "init", "--undo")
	if err != nil || !strings.Contains(uout, "restored "+hostFile+" from "+hostFile+".bak-") {
		t.Fatalf("init --undo: %v\n%s%s", err, uout, uerr)
	}
	if restored, _ := os.ReadFile(hostFile); string(restored) != original {
		t.Errorf("--undo restored:\n%s\nnot the original:\n%s", restored, original)
	}
	if fi, err := os.Stat(hostFile); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the host file's mode after --undo: %v %v", fi.Mode(), err)
	}
}

func q(s string) string { return string(jsonString(s)) }
