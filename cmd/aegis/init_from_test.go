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

	"github.com/aegis-dev/aegis/proxy/mcptest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	t.Parallel()                // it mostly waits on processes (node, npx, python): beside the others
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

// startEntry starts a host file's entry as a host does (its command, args
// and env over a short PATH) and connects a go-sdk client.
func startEntry(t *testing.T, ctx context.Context, home string, e hostEntry) *mcp.ClientSession {
	t.Helper()
	launch := exec.Command(e.Command, e.Args...)
	launch.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	for k, v := range e.Env {
		launch.Env = append(launch.Env, k+"="+v)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: launch}, nil)
	if err != nil {
		t.Fatalf("start the entry as a host would: %v", err)
	}
	return cs
}

// readHostEntries reads the servers of a host's file.
func readHostEntries(t *testing.T, path, key string) map[string]hostEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]map[string]hostEntry
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return cfg[key]
}

// served lists the tools and prompts a gateway shows.
func served(t *testing.T, ctx context.Context, cs *mcp.ClientSession) (tools, prompts []string) {
	t.Helper()
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range tl.Tools {
		tools = append(tools, x.Name)
	}
	pl, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range pl.Prompts {
		prompts = append(prompts, x.Name)
	}
	return tools, prompts
}

// --from --mode gateway puts a host's servers in one gateway file and
// the host's file gets one entry that runs it: the gateway starts from
// it, and its starter profile shows every server's tools and prompts. A
// later init --mode gateway adds its server to that file, keeping the
// user's comments, and refuses a name the file has for another command;
// a second --from finds nothing to do.
func TestInitFromCursorIntoOneGateway(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	bin := bins(t)
	example := filepath.Join(bin, "aegis-example-server")
	home := t.TempDir()
	hostFile := filepath.Join(home, ".cursor", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(hostFile), 0o700); err != nil {
		t.Fatal(err)
	}
	original := `{"mcpServers":{"echo-a":{"command":` + q(example) + `},"Echo B":{"command":` + q(example) + `,"args":[],"env":{"B_TOKEN":"b"}},` +
		`"sse":{"type":"sse","url":"http://127.0.0.1:1/sse"},"with-cwd":{"command":` + q(example) + `,"cwd":"/tmp"},` +
		`"vars":{"command":` + q(example) + `,"env":{"TOKEN":"${input:token}"}}}}`
	if err := os.WriteFile(hostFile, []byte(original), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	out, stderr, err := runAegis(t, env, "init", "--from", "cursor", "--mode", "gateway")
	if err != nil {
		t.Fatalf("init --from cursor --mode gateway: %v\n%s%s", err, out, stderr)
	}
	for _, want := range []string{"2 server(s) of " + hostFile + " are behind aegis gateway", "aegis's name: echo-b", "sse  ", "which one gateway entry cannot carry", "which the host fills in"} {
		if !strings.Contains(out, want) {
			t.Errorf("init does not say %q:\n%s", want, out)
		}
	}
	entries := readHostEntries(t, hostFile, "mcpServers")
	if _, ok := entries["echo-a"]; ok || len(entries) != 4 {
		t.Fatalf("the host's servers after init: %+v", entries)
	}
	gw := entries["aegis-gateway"]
	if len(gw.Args) == 0 || gw.Args[0] != "gateway" || gw.Env["PATH"] != "/usr/bin:/bin" {
		t.Fatalf("the gateway entry: %+v", gw)
	}
	yamlFile := argAfter(gw.Args, "--config")
	y, _ := os.ReadFile(yamlFile)
	if !strings.Contains(string(y), `B_TOKEN: "b"`) {
		t.Errorf("the gateway file lost echo-b's env:\n%s", y)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := startEntry(t, ctx, home, gw)
	tools, prompts := served(t, ctx, cs)
	for _, want := range []string{"echo-a__echo", "echo-b__echo"} {
		if !slices.Contains(tools, want) {
			t.Errorf("the gateway does not show %s: %q", want, tools)
		}
	}
	if !slices.Contains(prompts, "echo-a__greet") || !slices.Contains(prompts, "echo-b__greet") {
		t.Errorf("the starter profile hides the prompts: %q", prompts)
	}
	if rs, err := cs.ListResources(ctx, nil); err != nil || len(rs.Resources) != 1 || rs.Resources[0].URI != "example://readme" {
		t.Errorf("the starter profile's resources: %v %+v", err, rs)
	}
	if rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "example://readme"}); err != nil || len(rr.Contents) == 0 {
		t.Errorf("read example://readme through the starter profile: %v %+v", err, rr)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo-b__echo", Arguments: map[string]any{"message": "b"}}); err != nil || res.IsError {
		t.Errorf("echo-b__echo: %v %+v", err, res)
	}
	cs.Close()

	// The user's comment, then a server added by init -- SERVER.
	y = append([]byte("# my own note, kept\n"), y...)
	if err := os.WriteFile(yamlFile, y, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, err = runAegis(t, env, "init", "--mode", "gateway", "--name", "third", "--", example, "-v")
	if err != nil || !strings.Contains(out, "third is added to the gateway file") || strings.Contains(out, "is ready") {
		t.Fatalf("a gateway init that adds a server: %v\n%s%s", err, out, stderr)
	}
	y2, _ := os.ReadFile(yamlFile)
	if !strings.HasPrefix(string(y2), "# my own note, kept\n") || !strings.Contains(string(y2), `"third.*"`) {
		t.Errorf("the gateway file after adding third:\n%s", y2)
	}
	cs = startEntry(t, ctx, home, gw)
	if tools, _ := served(t, ctx, cs); !slices.Contains(tools, "third__echo") {
		t.Errorf("the gateway does not show third__echo after init added it: %q", tools)
	}
	cs.Close()
	_, stderr, err = runAegis(t, env, "init", "--mode", "gateway", "--name", "third", "--", "/bin/cat")
	if y3, _ := os.ReadFile(yamlFile); err == nil || !strings.Contains(stderr, `already has a server named "third"`) || !bytes.Equal(y3, y2) {
		t.Errorf("a gateway init with a name taken by another command: %v\n%s", err, stderr)
	}

	before, _ := os.ReadFile(hostFile)
	out, _, err = runAegis(t, env, "init", "--from", "cursor", "--mode", "gateway")
	if after, _ := os.ReadFile(hostFile); err != nil || !bytes.Equal(after, before) || !strings.Contains(out, "no server of") {
		t.Errorf("a second --from into the gateway: %v\n%s", err, out)
	}
}

// --undo refuses, changing nothing, when the host's file is no longer what
// aegis wrote, and restores it with --force; aegis is never put in front
// of aegis, whatever path or name starts it.
func TestInitUndoRefusesAFileChangedSince(t *testing.T) {
	bin := bins(t)
	home := t.TempDir()
	hostFile := filepath.Join(home, "mcp.json")
	original := `{"servers":{"ex":{"type":"stdio","command":` + q(filepath.Join(bin, "aegis-example-server")) + `},` +
		`"other-aegis":{"command":"/opt/aegis","args":["wrap","--","x"]},"renamed":{"command":"/opt/bin/aegis-0.2","args":["gateway","--config","x"]},"self":{"command":` + q(filepath.Join(bin, "aegis")) + `,"args":["gateway"]}}}`
	if err := os.WriteFile(hostFile, []byte(original), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	out, stderr, err := runAegis(t, env, "init", "--from", hostFile)
	if err != nil || strings.Count(out, "it is already started by aegis") != 3 || !strings.Contains(out, "1 server(s)") {
		t.Fatalf("init --from: %v\n%s%s", err, out, stderr)
	}
	if e := readHostEntries(t, hostFile, "servers")["ex"]; e.Type != "stdio" || e.Args[0] != "wrap" {
		t.Errorf("the VS Code entry: %+v", e)
	}
	_, stderr, err = runAegis(t, env, "init", "--", filepath.Join(bin, "aegis"), "wrap")
	if err == nil || !strings.Contains(stderr, "aegis is not put in front of itself") {
		t.Errorf("init -- aegis: %v\n%s", err, stderr)
	}

	changed, _ := os.ReadFile(hostFile)
	changed = bytes.Replace(changed, []byte(`"servers"`), []byte(`"theme": "dark", "servers"`), 1)
	if err := os.WriteFile(hostFile, changed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = runAegis(t, env, "init", "--undo", "--from", hostFile)
	if now, _ := os.ReadFile(hostFile); err == nil || !strings.Contains(stderr, "changed since aegis init wrote it") || !strings.Contains(stderr, "--force") || !bytes.Equal(now, changed) {
		t.Fatalf("--undo of a changed file: %v\n%s", err, stderr)
	}
	if _, _, err = runAegis(t, env, "init", "--undo", "--force", "--from", hostFile); err != nil {
		t.Fatalf("--undo --force: %v", err)
	}
	if now, _ := os.ReadFile(hostFile); string(now) != original {
		t.Errorf("--undo --force restored:\n%s", now)
	}
	if _, stderr, err = runAegis(t, env, "init", "--undo", "--from", hostFile); err == nil || !strings.Contains(stderr, "no backup made by aegis init") {
		t.Errorf("a second --undo: %v\n%s", err, stderr)
	}
}

// --write-host-config replaces an entry of the same name that starts the
// server without aegis, keeping its env, after a backup.
func TestInitWriteHostConfigReplacesTheUnprotectedEntry(t *testing.T) {
	bin := bins(t)
	home := t.TempDir()
	hostFile := filepath.Join(home, "claude_desktop_config.json")
	example := filepath.Join(bin, "aegis-example-server")
	before := `{"mcpServers":{"aegis-example-server":{"command":` + q(example) + `,"env":{"TOKEN":"t","PATH":"/opt/x:/usr/bin"}}}}`
	if err := os.WriteFile(hostFile, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	out, stderr, err := runAegis(t, env, "init", "--write-host-config", hostFile, "--", example)
	if err != nil || !strings.Contains(stderr, "is replaced") {
		t.Fatalf("init --write-host-config over an unprotected entry: %v\n%s%s", err, out, stderr)
	}
	e := readHostEntries(t, hostFile, "mcpServers")["aegis-example-server"]
	if e.Args[0] != "wrap" || e.Env["TOKEN"] != "t" || e.Env["PATH"] != "/opt/x:/usr/bin" {
		t.Errorf("the replaced entry: %+v", e)
	}
	if b := backupsOf(hostFile); len(b) != 1 {
		t.Errorf("backups: %q", b)
	}
	// A refusal still prints the entry the hint points at.
	out, stderr, err = runAegis(t, env, "init", "--write-host-config", hostFile, "--name", "aegis-example-server", "--", example)
	if err == nil || !strings.Contains(stderr, "paste the entry printed above") || !strings.Contains(out, `"mcpServers"`) {
		t.Errorf("a refused --write-host-config: %v\n%s%s", err, out, stderr)
	}
}

// A host's file goes back with its keys in their order, the values aegis
// does not change as they were (numbers, unicode, <&>, nesting), and its
// indentation; a file aegis cannot read whole (comments, a second value)
// is refused rather than written back without what it did not read.
func TestInitKeepsTheHostFileAsItWas(t *testing.T) {
	in := "{\n\t\"zeta\": 1.50,\n\t\"mcpServers\": {\"b\": {\"command\": \"x\", \"x-extra\": [1, {\"k\": \"<&> é\"}]}, \"a\": {}},\n\t\"alpha\": null\n}\n"
	o, err := parseJSONObject([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := o.format(fileIndent([]byte(in)))
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	json.Indent(&want, []byte(in), "", "\t")
	if string(out) != want.String() {
		t.Errorf("written back:\n%s\nwant:\n%s", out, want.String())
	}
	for _, bad := range []string{"// a comment\n{}", "{} {}", "[]", `{"a": }`} {
		if _, err := parseJSONObject([]byte(bad)); err == nil {
			t.Errorf("%q read as a JSON object", bad)
		}
	}
}
