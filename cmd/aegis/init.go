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
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const initUsage = `Usage:
  aegis init [--mode wrap|gateway] [--name NAME] [--config-dir DIR]
             [--write-host-config PATH] [--ask] [-- SERVER [ARGS…]]
  aegis init --from claude|cursor|vscode|PATH [--mode wrap|gateway] [--config-dir DIR]
  aegis init --undo [--from claude|cursor|vscode|PATH] [--force]

Sets aegis up in front of one MCP server and prints what to paste into
your MCP host. It
  - makes a signing key in the config folder (~/.config/aegis, or
    $XDG_CONFIG_HOME/aegis), unless one is there, and prints its public key;
  - writes a starter policy for wrap (policy.yaml: every call allowed and
    recorded; edit it to refuse some) or, for the gateway, a starter
    gateway file (aegis.yaml: the server, and a default profile that shows
    its tools, prompts and resources), or adds the server to the
    aegis.yaml that is there (its comments kept) and to its default
    profile, or says it is there already;
  - names the server after what you would call it (the npm package npx
    runs, the script node runs, the module python -m runs, the image
    docker runs; never the interpreter), made unique (-2, -3…) among the
    servers init set up, unless --name names it; the same command set up
    again takes the name it had (servers.json in the config folder notes
    which command each name was given to), so it goes on in its record
    and state folder;
  - names a record file and a state folder of the server's own
    (~/.local/share/aegis/NAME.aarl, ~/.local/state/aegis/NAME);
  - prints the mcpServers entry for Claude Desktop and Cursor, and the
    servers entry for VS Code, with absolute paths to this aegis, the key,
    the record and the server, and env.PATH set to the PATH init runs
    under (a host starts servers with a short PATH, where npx or nvm's
    node are not found), and the file each host reads it from;
  - prints the aegis verify line for later (and, for the gateway, the
    aegis approvals and approve lines).

It changes no host file unless --write-host-config PATH names one: then it
adds the entry to PATH's JSON (mcpServers, or servers when the file has
that), after copying PATH to PATH.bak-TIME. An entry of that name that
does not start aegis is replaced; one that does is refused.

--from puts the servers a host already has behind aegis: it reads the
host's file (claude: Claude Desktop's claude_desktop_config.json, cursor:
~/.cursor/mcp.json, vscode: VS Code's user mcp.json, or the file PATH),
and for each local (stdio) server writes an entry that starts it behind
aegis wrap, under the host's name for it, keeping the entry's other keys
and its env (env.PATH is added when it has none). With --mode gateway,
the servers go into aegis.yaml instead (with their env) and one entry,
aegis-gateway, runs them all. Remote (url) servers and entries that
already start aegis are left as they are, so running it twice changes
nothing. The file is copied to PATH.bak-TIME first and written back
whole (through a temporary file, with its mode); init prints each server
with its record and state folder, and what it left as it was.

--undo puts the host's file back as the latest backup holds it, byte for
byte, and removes that backup; without --from it looks at the three
hosts' files. It refuses, changing nothing, when the file is no longer
what aegis init wrote (the host or you changed it since), unless --force.
The keys, records and state folders are kept.

With stdin a terminal, or with --ask, it asks for what the flags leave
out; otherwise SERVER (or --from) is required.

Examples:
  $ aegis init -- npx -y @modelcontextprotocol/server-everything
  $ aegis init --from claude
  $ aegis init --undo --from claude
`

// initPlan is what aegis init sets up.
type initPlan struct {
	mode, name      string
	server          []string
	configDir       string
	key, file       string // the signing key; the policy or gateway file
	dataDir         string // where the records go
	stateRoot       string // where the state folders go
	record, state   string
	pub             string
	keyNew, fileNew bool
	known           *initServers // what earlier runs set up, by name
	again           bool         // the name was set up for this command before
	self            string
	hostConfig      string
	interactive     bool
	hosts           hostFiles
	pathEnv         string // the PATH init runs under, for the entries' env
	gateway         gatewayEdit
}

var serverNameChars = regexp.MustCompile(`[^a-z0-9_-]+`)

func (m *Main) runInit(_ context.Context, args []string) error {
	fs := m.newFlagSet("init")
	mode := fs.String("mode", "", "wrap (one server) or gateway (servers behind profiles)")
	name := fs.String("name", "", "the server's name in the host's configuration")
	dir := fs.String("config-dir", "", "where the key and the starter file go")
	hostConfig := fs.String("write-host-config", "", "add the entry to this host configuration file")
	ask := fs.Bool("ask", false, "ask for what the flags leave out")
	from := fs.String("from", "", "put the servers of this host's file behind aegis: claude, cursor, vscode or a PATH")
	undo := fs.Bool("undo", false, "put the host's file back as the latest backup holds it")
	force := fs.Bool("force", false, "with --undo: restore even when the file changed since aegis init wrote it")
	if err := m.parseFlags(fs, initUsage, args); err != nil {
		return err
	}
	p := &initPlan{mode: *mode, name: *name, configDir: *dir, server: fs.Args(), hostConfig: *hostConfig, pathEnv: m.Getenv("PATH")}
	if *undo || *from != "" {
		if len(p.server) > 0 || *name != "" || *hostConfig != "" || *ask {
			return usagef("aegis init --from claude|cursor|vscode|PATH, or aegis init --undo [--from …]", "init: --from and --undo take neither a SERVER, --name, --write-host-config nor --ask (the host's file names the servers)")
		}
		if *force && !*undo {
			return usagef("aegis init --undo --force", "init: --force goes with --undo")
		}
		if *undo && *mode != "" {
			return usagef("aegis init --undo [--from claude|cursor|vscode|PATH] [--force]", "init: --undo takes no --mode")
		}
		if p.mode == "" {
			p.mode = "wrap"
		}
		if p.mode != "wrap" && p.mode != "gateway" {
			return usagef("--mode wrap or --mode gateway", "init: unknown mode %q", p.mode)
		}
		if err := p.paths(m.Getenv); err != nil {
			return err
		}
		if *undo {
			return m.initUndo(p, *from, *force)
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this aegis binary: %w", err)
		}
		p.self = self
		return m.initFrom(p, *from)
	}
	if *force {
		return usagef("aegis init --undo --force", "init: --force goes with --undo")
	}
	p.interactive = *ask || readsTerminal(m.Stdin)
	in := bufio.NewReader(m.Stdin)
	if len(p.server) == 0 && p.interactive {
		line := m.prompt(in, "The MCP server to put aegis in front of (command and arguments): ")
		p.server = strings.Fields(line)
	}
	if len(p.server) == 0 {
		return usagef("aegis init -- SERVER [ARGS…]   (for example: aegis init -- npx -y @modelcontextprotocol/server-everything), or aegis init --from claude", "init: which MCP server? name it after --")
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
	if p.name != "" {
		if n := serverNameChars.ReplaceAllString(strings.ToLower(p.name), "-"); n != p.name || sanitizeName(n) != n {
			return usagef("--name with lowercase letters, digits, - and _ (starting with a letter or digit, not aegis)", "init: server name %q", p.name)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this aegis binary: %w", err)
	}
	p.self = self
	// A host starts the server with a PATH of its own, often a short one:
	// the command goes in by its absolute path when this PATH finds it.
	p.server[0], _ = lookPathIn(p.server[0], p.pathEnv)
	if p.isAegis(p.server[0]) {
		return usagef("aegis init -- SERVER, the MCP server itself", "init: %s is aegis: aegis is not put in front of itself", p.server[0])
	}
	if err := p.paths(m.Getenv); err != nil {
		return err
	}
	if err := p.nameServer(); err != nil {
		return err
	}
	if err := p.setUp(); err != nil {
		return err
	}
	if p.mode == "gateway" {
		if p.gateway, err = p.addToGateway([]gwServer{{name: p.name, argv: p.server}}); err != nil {
			return err
		}
	}
	entry := p.entry()
	if p.hostConfig != "" {
		res, err := addToHostConfig(p.hostConfig, p.name, entry, p.isAegis)
		if err != nil {
			p.print(m.Stdout, entry)
			return withHint(fmt.Errorf("write the host configuration %s: %w", p.hostConfig, err), "nothing in it was changed; paste the entry printed above by hand instead")
		}
		if res.backup != "" {
			fmt.Fprintf(m.Stderr, "aegis: %s copied to %s\n", p.hostConfig, res.backup)
		}
		if res.replaced {
			fmt.Fprintf(m.Stderr, "aegis: the entry %s of %s, which started the server without aegis, is replaced (aegis init --undo puts it back)\n", p.name, p.hostConfig)
		}
	}
	if p.mode == "wrap" {
		p.remember(m.Stderr, map[string][]string{p.name: p.server})
	}
	p.print(m.Stdout, entry)
	return nil
}

// nameServer names the server (unless --name did) and where its record
// and state go. A wrapped server's name is made unique among the state
// folders and records there are; a gateway's is the name the gateway file
// has for the same command, or one it does not have yet.
func (p *initPlan) nameServer() (err error) {
	fixed := p.name != ""
	if !fixed {
		p.name = defaultServerName(p.server)
	}
	if p.mode == "gateway" {
		existing, err := gatewayServers(p.file)
		if err != nil {
			return err
		}
		if p.name, err = gatewayName(existing, p.name, p.server, fixed, nil); err != nil {
			return err
		}
	} else if !fixed {
		if p.known, err = loadInitServers(p.configDir); err != nil {
			return err
		}
		p.name, p.again = p.known.name(p.name, p.server, nil, p.nameTaken(nil))
	}
	p.record, p.state = p.serverPaths(p.name)
	return nil
}

// remember notes in the configuration folder which command the server's
// name was given to (see initServers); failing that costs only the name
// of a later run for the same command.
func (p *initPlan) remember(w io.Writer, names map[string][]string) {
	if p.known == nil {
		var err error
		if p.known, err = loadInitServers(p.configDir); err != nil {
			fmt.Fprintf(w, "aegis: note: %v\n", err)
			return
		}
	}
	for n, argv := range names {
		p.known.add(n, argv)
	}
	if err := p.known.save(); err != nil {
		fmt.Fprintf(w, "aegis: note: could not note in %s which command %s was set up for (%v); set up again, it would get a new name\n", p.known.path, strings.Join(slices.Sorted(maps.Keys(names)), ", "), err)
	}
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
	p.dataDir, p.stateRoot = data, state
	p.hosts = hostConfigFiles(runtime.GOOS, getenv)
	return nil
}

// serverPaths are the record and the state folder of the server name.
func (p *initPlan) serverPaths(name string) (record, state string) {
	return filepath.Join(p.dataDir, name+".aarl"), filepath.Join(p.stateRoot, name)
}

// setUp makes the key and, for wrap, the starter policy, keeping those
// that exist (the gateway file is addToGateway's).
func (p *initPlan) setUp() error {
	for _, d := range []string{p.configDir, p.dataDir} {
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
	if p.mode == "gateway" {
		return nil
	}
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

// starter is the starter policy of wrap.
func (p *initPlan) starter() string {
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

// hostEntry is one server in a host's configuration.
type hostEntry struct {
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env,omitempty"`
}

// wrapArgs are the arguments of aegis wrap in front of argv.
func (p *initPlan) wrapArgs(record, state string, argv []string) []string {
	args := []string{"wrap", "--audit", record, "--signing-key", p.key, "--state-dir", state, "--policy", p.file, "--"}
	return append(args, argv...)
}

// gatewayArgs are the arguments of aegis gateway.
func (p *initPlan) gatewayArgs(record, state string) []string {
	return []string{"gateway", "--config", p.file, "--audit", record, "--signing-key", p.key, "--state-dir", state}
}

// entry is the host configuration entry that runs this aegis.
func (p *initPlan) entry() hostEntry {
	e := hostEntry{Command: p.self, Args: p.wrapArgs(p.record, p.state, p.server)}
	if p.mode == "gateway" {
		e.Args = p.gatewayArgs(p.record, p.state)
	}
	if p.pathEnv != "" {
		e.Env = map[string]string{"PATH": p.pathEnv}
	}
	return e
}

func (p *initPlan) print(w io.Writer, e hostEntry) {
	fileSaid := said(p.fileNew)
	switch g := p.gateway; {
	case p.mode == "wrap" && p.again:
		fmt.Fprintf(w, "aegis init: %s is ready behind aegis wrap. It was set up before for this command: its record and state folder are kept.\n\n", p.name)
	case p.mode == "wrap" || g.created:
		fmt.Fprintf(w, "aegis init: %s is ready behind aegis %s.\n\n", p.name, p.mode)
	case len(g.added) > 0:
		fileSaid = "kept, with " + p.name + " added; the old one is " + g.backup
		fmt.Fprintf(w, "aegis init: %s is added to the gateway file %s. A host that already runs it serves %s after a restart; the entry below is for a host that does not.\n\n", p.name, p.file, p.name)
		if g.noProfile {
			fmt.Fprintf(w, "note: it has no profile named default: add %s.* to a profile's allow to let the agent use its tools.\n\n", p.name)
		}
	default:
		fileSaid = "kept: it has " + p.name + " already"
		fmt.Fprintf(w, "aegis init: the gateway file %s already has %s, with this command; nothing was added to it.\n\n", p.file, p.name)
	}
	fmt.Fprintf(w, "  signing key  %s (%s)\n  public key   %s\n", p.key, said(p.keyNew), p.pub)
	what := "policy      "
	if p.mode == "gateway" {
		what = "gateway file"
	}
	fmt.Fprintf(w, "  %s %s (%s)\n  record       %s\n  state        %s\n\n", what, p.file, fileSaid, p.record, p.state)
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

// hostConfigWrite is what addToHostConfig did.
type hostConfigWrite struct {
	backup   string // where the old file went ("" when there was none)
	replaced bool   // an entry of that name, not started by aegis, was replaced
}

// addToHostConfig adds entry under name to the host configuration file at
// path (its "servers" when it has that, as VS Code's does, else its
// "mcpServers"), after copying the file aside, keeping the order and every
// other key of the file. An entry of that name that does not start aegis
// (isAegis) is replaced, keeping its other keys and its env (whose values
// win over the entry's); one that does is refused.
func addToHostConfig(path, name string, e hostEntry, isAegis func(string) bool) (hostConfigWrite, error) {
	var res hostConfigWrite
	real, old, mode, err := readHostFile(path)
	if err != nil {
		return res, err
	}
	cfg := jsonObject{}
	if len(bytes.TrimSpace(old)) > 0 {
		if cfg, err = parseJSONObject(old); err != nil {
			return res, fmt.Errorf("it is not a JSON object: %w", err)
		}
	}
	key := "mcpServers"
	if cfg.has("servers") && !cfg.has("mcpServers") {
		key, e.Type = "servers", "stdio"
	}
	servers, err := cfg.object(key)
	if err != nil {
		return res, fmt.Errorf("its %s is not a JSON object: %w", key, err)
	}
	entry := jsonObject{}
	if e.Type != "" {
		entry = append(entry, jsonField{"type", jsonString(e.Type)})
	}
	entry = append(entry, jsonField{"command", jsonString(e.Command)}, jsonField{"args", jsonValue(e.Args)})
	env := jsonObject{}
	if was := servers.get(name); was != nil {
		prev, err := parseJSONObject(was)
		if err != nil {
			return res, fmt.Errorf("its entry %q is not a JSON object", name)
		}
		if cmd, _ := prev.str("command"); isAegis(cmd) {
			return res, fmt.Errorf("it already has a server named %q, which starts aegis; choose another name with --name, or aegis init --undo to put the file back", name)
		}
		if env, err = prev.object("env"); err != nil {
			return res, fmt.Errorf("the env of its entry %q is not a JSON object", name)
		}
		entry = prev.del("url").set("command", jsonString(e.Command)).set("args", jsonValue(e.Args))
		res.replaced = true
	}
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		if !env.has(k) {
			env = append(env, jsonField{k, jsonString(e.Env[k])})
		}
	}
	if len(env) > 0 {
		entry = entry.set("env", env.raw())
	}
	servers = servers.set(name, entry.raw())
	out, err := cfg.set(key, servers.raw()).format(fileIndent(old))
	if err != nil {
		return res, err
	}
	if old == nil {
		mode = 0o600
	}
	w, err := writeHostFile(real, old, out, mode)
	res.backup = w.backup
	return res, err
}
