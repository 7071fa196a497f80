package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const initUsage = `Usage:
  aegis init [--mode wrap|gateway] [--name NAME] [--config-dir DIR]
             [--write-host-config PATH] [--ask] [-- SERVER [ARGS…]]

Sets aegis up in front of one MCP server and prints what to paste into
your MCP host. It
  - makes a signing key in the config folder (~/.config/aegis, or
    $XDG_CONFIG_HOME/aegis), unless one is there, and prints its public key;
  - writes a starter policy for wrap (policy.yaml: every call allowed and
    recorded; edit it to refuse some) or a starter gateway file for the
    gateway (aegis.yaml: one server, one profile that allows its tools),
    unless one is there;
  - names a record file and a state folder of the server's own
    (~/.local/share/aegis/NAME.aarl, ~/.local/state/aegis/NAME);
  - prints the mcpServers entry for Claude Desktop and Cursor, and the
    servers entry for VS Code, with absolute paths to this aegis, the key,
    the record and the server, and the file each host reads it from;
  - prints the aegis verify line for later (and, for the gateway, the
    aegis approvals and approve lines).

It changes no host file unless --write-host-config PATH names one: then it
adds the entry to PATH's JSON (mcpServers, or servers when the file has
that), after copying PATH to PATH.bak-TIME.

With stdin a terminal, or with --ask, it asks for what the flags leave
out; otherwise SERVER is required.

Example:
  $ aegis init -- npx -y @modelcontextprotocol/server-everything
`

// initPlan is what aegis init sets up.
type initPlan struct {
	mode, name      string
	server          []string
	configDir       string
	key, file       string // the signing key; the policy or gateway file
	record, state   string
	pub             string
	keyNew, fileNew bool
	self            string
	hostConfig      string
	interactive     bool
	hosts           hostFiles
}

var serverNameChars = regexp.MustCompile(`[^a-z0-9_-]+`)

func (m *Main) runInit(_ context.Context, args []string) error {
	fs := m.newFlagSet("init")
	mode := fs.String("mode", "", "wrap (one server) or gateway (servers behind profiles)")
	name := fs.String("name", "", "the server's name in the host's configuration")
	dir := fs.String("config-dir", "", "where the key and the starter file go")
	hostConfig := fs.String("write-host-config", "", "add the entry to this host configuration file")
	ask := fs.Bool("ask", false, "ask for what the flags leave out")
	if err := m.parseFlags(fs, initUsage, args); err != nil {
		return err
	}
	p := &initPlan{mode: *mode, name: *name, configDir: *dir, server: fs.Args(), hostConfig: *hostConfig}
	p.interactive = *ask || readsTerminal(m.Stdin)
	in := bufio.NewReader(m.Stdin)
	if len(p.server) == 0 && p.interactive {
		line := m.prompt(in, "The MCP server to put aegis in front of (command and arguments): ")
		p.server = strings.Fields(line)
	}
	if len(p.server) == 0 {
		return usagef("aegis init -- SERVER [ARGS…]   (for example: aegis init -- npx -y @modelcontextprotocol/server-everything)", "init: which MCP server? name it after --")
	}
	if p.mode == "" && p.interactive {
		p.mode = strings.TrimSpace(m.prompt(in, "wrap (record this one server) or gateway (servers behind profiles)? [wrap]: "))
	}
	if p.mode == "" {
		p.mode = "wrap"
	}
	if p.mode != "wrap" && p.mode != "gateway" {
		return usagef("--mode wrap or --mode gateway", "init: unknown mode %q", p.mode)
	}
	if p.name == "" {
		p.name = defaultServerName(p.server)
	}
	// A host starts the server with a PATH of its own, often a short one:
	// the command goes in by its absolute path when this PATH finds it.
	if abs, err := exec.LookPath(p.server[0]); err == nil {
		if abs, err = filepath.Abs(abs); err == nil {
			p.server[0] = abs
		}
	}
	if n := serverNameChars.ReplaceAllString(strings.ToLower(p.name), "-"); n != p.name || n == "" {
		return usagef("--name with lowercase letters, digits, - and _", "init: server name %q", p.name)
	}
	if err := p.paths(m.Getenv); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this aegis binary: %w", err)
	}
	p.self = self
	if err := p.setUp(); err != nil {
		return err
	}
	entry := p.entry()
	if p.hostConfig != "" {
		backup, err := addToHostConfig(p.hostConfig, p.name, entry)
		if err != nil {
			return withHint(fmt.Errorf("write the host configuration %s: %w", p.hostConfig, err), "nothing in it was changed; paste the entry below by hand instead")
		}
		if backup != "" {
			fmt.Fprintf(m.Stderr, "aegis: %s copied to %s\n", p.hostConfig, backup)
		}
	}
	if p.mode == "gateway" && !p.fileNew {
		fmt.Fprintf(m.Stderr, "aegis: note: %s was there and is kept as it is; if %s is not among its servers, add it (aegis help gateway)\n", p.file, p.name)
	}
	p.print(m.Stdout, entry)
	return nil
}

// ask prints a question to stderr and reads one line of answer.
func (m *Main) prompt(in *bufio.Reader, q string) string {
	fmt.Fprint(m.Stderr, q)
	line, _ := in.ReadString('\n')
	return strings.TrimSpace(line)
}

// readsTerminal reports whether r is a terminal.
func readsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isTerminal(f)
}

// defaultServerName names a server after its command, or after the npm
// package an npx command runs.
func defaultServerName(argv []string) string {
	name := filepath.Base(argv[0])
	if name == "npx" || name == "uvx" {
		for _, a := range argv[1:] {
			if !strings.HasPrefix(a, "-") {
				name = a
				break
			}
		}
	}
	name = strings.TrimPrefix(name, "@modelcontextprotocol/")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.Index(name, "@"); i > 0 {
		name = name[:i]
	}
	name = strings.Trim(serverNameChars.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if name == "" {
		name = "server"
	}
	return name
}

// paths fills in where everything goes.
func (p *initPlan) paths(getenv func(string) string) error {
	home := getenv("HOME")
	xdg := func(env, fallback string) (string, error) {
		if x := getenv(env); x != "" && filepath.IsAbs(x) {
			return filepath.Join(x, "aegis"), nil
		}
		if home == "" {
			return "", withHint(errors.New("init: HOME is not set"), "pass --config-dir DIR, or set HOME")
		}
		return filepath.Join(home, fallback, "aegis"), nil
	}
	var err error
	if p.configDir == "" {
		if p.configDir, err = xdg("XDG_CONFIG_HOME", ".config"); err != nil {
			return err
		}
	}
	if p.configDir, err = filepath.Abs(p.configDir); err != nil {
		return err
	}
	data, err := xdg("XDG_DATA_HOME", filepath.Join(".local", "share"))
	if err != nil {
		return err
	}
	state, err := xdg("XDG_STATE_HOME", filepath.Join(".local", "state"))
	if err != nil {
		return err
	}
	p.key = filepath.Join(p.configDir, "signing.key")
	p.file = filepath.Join(p.configDir, "policy.yaml")
	if p.mode == "gateway" {
		p.file = filepath.Join(p.configDir, "aegis.yaml")
	}
	p.record = filepath.Join(data, p.name+".aarl")
	p.state = filepath.Join(state, p.name)
	p.hosts = hostConfigFiles(runtime.GOOS, getenv)
	return nil
}

// setUp makes the key and the starter file, keeping those that exist.
func (p *initPlan) setUp() error {
	for _, d := range []string{p.configDir, filepath.Dir(p.record)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	k, err := projector.LoadKeyFile(p.key)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		if k, err = projector.GenerateKey(rand.Reader); err != nil {
			return fmt.Errorf("init: make a signing key: %w", err)
		}
		if err := projector.WriteKeyFile(p.key, k, false); err != nil {
			return fmt.Errorf("init: write the signing key %s: %w", p.key, err)
		}
		p.keyNew = true
	default:
		return withHint(fmt.Errorf("init: the signing key %s is there but cannot be used: %w", p.key, err), "fix it (mode 0600, 64 hex characters), or move it away to make a new one")
	}
	p.pub = schemas.PublicKeyHex(k.PublicKey())
	if _, err := os.Stat(p.file); errors.Is(err, os.ErrNotExist) {
		if err := events.WriteFileAtomic(p.file, []byte(p.starter())); err != nil {
			return fmt.Errorf("init: write %s: %w", p.file, err)
		}
		p.fileNew = true
	} else if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	return nil
}

// starter is the starter policy (wrap) or gateway file.
func (p *initPlan) starter() string {
	if p.mode == "wrap" {
		return `# aegis wrap --policy: decides every tools/call before it reaches the
# server. Every call is recorded whatever the policy says. aegis help wrap
# has the format; this one allows everything. To refuse a tool, add a rule:
#
#   - id: no-delete
#     action: deny            # allow | deny | rate_limit | pending_approval
#     tool: delete_file
#     reason: "deleting is not allowed here"
version: 1
default: allow
rules: []
`
	}
	args, _ := json.Marshal(p.server[1:])
	cmd, _ := json.Marshal(p.server[0])
	return `# aegis gateway: the servers behind aegis, and the profiles that decide
# which of their tools the agent sees. aegis help gateway has every key.
version: 1
servers:
  ` + p.name + `:
    command: ` + string(cmd) + `
    args: ` + string(args) + `
profiles:
  default:
    allow: ["` + p.name + `.*"]   # every tool of the server; narrow it down
  # To keep some tools behind a human, narrow default and uncomment a
  # profile that has them. No profile lists it in allowed_transitions, so
  # a switch to it (the agent's aegis__set_profile tool) waits for
  # 'aegis approve ID'.
  # full:
  #   allow: ["` + p.name + `.*"]
activation:
  default_profile: default
`
}

// hostEntry is one server in a host's configuration.
type hostEntry struct {
	Type    string   `json:"type,omitempty"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// entry is the host configuration entry that runs this aegis.
func (p *initPlan) entry() hostEntry {
	args := []string{"wrap", "--audit", p.record, "--signing-key", p.key, "--state-dir", p.state, "--policy", p.file, "--"}
	args = append(args, p.server...)
	if p.mode == "gateway" {
		args = []string{"gateway", "--config", p.file, "--audit", p.record, "--signing-key", p.key, "--state-dir", p.state}
	}
	return hostEntry{Command: p.self, Args: args}
}

func (p *initPlan) print(w io.Writer, e hostEntry) {
	said := func(isNew bool) string {
		if isNew {
			return "new"
		}
		return "kept: it was there"
	}
	fmt.Fprintf(w, "aegis init: %s is ready behind aegis %s.\n\n", p.name, p.mode)
	fmt.Fprintf(w, "  signing key  %s (%s)\n  public key   %s\n", p.key, said(p.keyNew), p.pub)
	what := "policy      "
	if p.mode == "gateway" {
		what = "gateway file"
	}
	fmt.Fprintf(w, "  %s %s (%s)\n  record       %s\n  state        %s\n\n", what, p.file, said(p.fileNew), p.record, p.state)
	desktop, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]hostEntry{p.name: e}}, "", "  ")
	fmt.Fprintf(w, "Claude Desktop (%s) and Cursor (%s, or .cursor/mcp.json in a project), under mcpServers:\n%s\n\n", p.hosts.desktop, p.hosts.cursor, desktop)
	e.Type = "stdio"
	vscode, _ := json.MarshalIndent(map[string]any{"servers": map[string]hostEntry{p.name: e}}, "", "  ")
	fmt.Fprintf(w, "VS Code (.vscode/mcp.json in a workspace, or %s for all of them), under servers:\n%s\n\n", p.hosts.vscode, vscode)
	fmt.Fprintf(w, "Restart the host and use the server.\n\n")
	if p.mode == "gateway" {
		fmt.Fprintf(w, "When the agent asks for a profile that takes a human (aegis__set_profile), see the request and decide it:\n")
		fmt.Fprintf(w, "  %s approvals --state-dir %s\n  %s approve --state-dir %s ID      (or: deny ID)\n\n", p.self, p.state, p.self, p.state)
	}
	fmt.Fprintf(w, "See what was recorded, and check it against your key:\n")
	fmt.Fprintf(w, "  %s sessions --state-dir %s\n  %s replay --state-dir %s last\n", p.self, p.state, p.self, p.state)
	fmt.Fprintf(w, "  %s verify --key %s %s\n", p.self, p.pub, p.record)
}

// hostFiles are the files in which the hosts keep the MCP servers they
// start, for every project.
type hostFiles struct{ desktop, cursor, vscode string }

// hostConfigFiles returns where Claude Desktop, Cursor and VS Code keep
// their MCP servers on goos, for the user with this environment.
func hostConfigFiles(goos string, getenv func(string) string) hostFiles {
	home := getenv("HOME")
	switch goos {
	case "darwin":
		app := filepath.Join(home, "Library", "Application Support")
		return hostFiles{
			desktop: filepath.Join(app, "Claude", "claude_desktop_config.json"),
			cursor:  filepath.Join(home, ".cursor", "mcp.json"),
			vscode:  filepath.Join(app, "Code", "User", "mcp.json"),
		}
	case "windows":
		app := getenv("APPDATA")
		if app == "" {
			app = `%APPDATA%`
		}
		profile := getenv("USERPROFILE")
		if profile == "" {
			profile = `%USERPROFILE%`
		}
		return hostFiles{
			desktop: app + `\Claude\claude_desktop_config.json`,
			cursor:  profile + `\.cursor\mcp.json`,
			vscode:  app + `\Code\User\mcp.json`,
		}
	}
	config := getenv("XDG_CONFIG_HOME")
	if config == "" || !filepath.IsAbs(config) {
		config = filepath.Join(home, ".config")
	}
	return hostFiles{
		desktop: filepath.Join(config, "Claude", "claude_desktop_config.json"),
		cursor:  filepath.Join(home, ".cursor", "mcp.json"),
		vscode:  filepath.Join(config, "Code", "User", "mcp.json"),
	}
}

// addToHostConfig adds entry under name to the host configuration file at
// path (its "servers" when it has that, as VS Code's does, else its
// "mcpServers"), after copying the file aside. It returns the copy's name
// ("" when there was no file). A name already there is refused.
func addToHostConfig(path, name string, e hostEntry) (string, error) {
	cfg := map[string]json.RawMessage{}
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(bytes.TrimSpace(old)) > 0 {
			if err := json.Unmarshal(old, &cfg); err != nil {
				return "", fmt.Errorf("it is not a JSON object: %w", err)
			}
		}
	case errors.Is(err, os.ErrNotExist):
		old = nil
	default:
		return "", err
	}
	key := "mcpServers"
	if _, ok := cfg["servers"]; ok {
		key, e.Type = "servers", "stdio"
	}
	servers := map[string]json.RawMessage{}
	if raw, ok := cfg[key]; ok {
		if err := json.Unmarshal(raw, &servers); err != nil {
			return "", fmt.Errorf("its %s is not a JSON object: %w", key, err)
		}
	}
	if _, taken := servers[name]; taken {
		return "", fmt.Errorf("it already has a server named %q; choose another with --name", name)
	}
	servers[name], _ = json.Marshal(e)
	cfg[key], _ = json.Marshal(servers)
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	backup := ""
	if old != nil {
		backup = path + ".bak-" + time.Now().UTC().Format("20060102T150405Z")
		if err := events.WriteFileAtomic(backup, old); err != nil {
			return "", fmt.Errorf("copy it aside: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return backup, events.WriteFileAtomic(path, append(out, '\n'))
}
