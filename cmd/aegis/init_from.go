package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
)

// hostFileFor is the file --from names: a host's (claude, cursor, vscode),
// where it keeps it on this system, or a path.
func (p *initPlan) hostFileFor(from string) (string, error) {
	switch strings.ToLower(from) {
	case "claude", "claude-desktop":
		return p.hosts.desktop, nil
	case "cursor":
		return p.hosts.cursor, nil
	case "vscode", "code":
		return p.hosts.vscode, nil
	}
	return filepath.Abs(from)
}

// adoptedServer is one of the host's servers that aegis init put behind
// aegis.
type adoptedServer struct {
	key, name     string // the host's name for it; aegis's
	argv          []string
	record, state string
}

// skippedServer is one of the host's entries left as it was, and why.
type skippedServer struct{ key, why string }

// hostServer is one entry of a host's file, as aegis init reads it.
type hostServer struct {
	entry jsonObject
	argv  []string
	env   jsonObject // nil when it has none
}

// readHostServer reads entry e of a host's file, or says why aegis init
// leaves it as it is.
func (p *initPlan) readHostServer(raw json.RawMessage) (hostServer, string) {
	var s hostServer
	e, err := parseJSONObject(raw)
	if err != nil {
		return s, "it is not a JSON object"
	}
	s.entry = e
	typ, _ := e.str("type")
	for _, k := range []string{"url", "serverUrl", "httpUrl"} {
		if e.has(k) {
			return s, "a remote server (" + k + "): aegis init puts local (stdio) servers behind aegis; a gateway file can hold it (url:, aegis help gateway)"
		}
	}
	if typ != "" && typ != "stdio" {
		return s, "a " + typ + " server: aegis init puts local (stdio) servers behind aegis"
	}
	cmd, ok := e.str("command")
	if !ok || cmd == "" {
		return s, "it has no command"
	}
	var args []string
	if a := e.get("args"); a != nil && json.Unmarshal(a, &args) != nil {
		return s, "its args are not a list of strings"
	}
	s.argv = append([]string{cmd}, args...)
	if p.isAegis(cmd) || strings.HasPrefix(commandBase(cmd), "aegis") && len(args) > 0 && (args[0] == "wrap" || args[0] == "gateway") {
		return s, "it is already started by aegis"
	}
	if s.env, err = e.object("env"); err != nil {
		return s, "its env is not a JSON object"
	}
	return s, ""
}

// isAegis reports whether cmd starts aegis: this binary, or a program
// named aegis.
func (p *initPlan) isAegis(cmd string) bool {
	if commandBase(cmd) == "aegis" {
		return true
	}
	a, err1 := os.Stat(cmd)
	b, err2 := os.Stat(p.self)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// lookPathIn finds file in the directories of pathList (absolute ones
// only), as a shell would; a file with a directory is made absolute.
func lookPathIn(file, pathList string) (string, bool) {
	if strings.ContainsAny(file, `/\`) {
		abs, err := filepath.Abs(file)
		return abs, err == nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		if f, err := exec.LookPath(filepath.Join(dir, file)); err == nil {
			return f, true
		}
	}
	return file, false
}

// entryEnv is the env of the entry for a host: the server's own (whose
// values win) and PATH, the PATH aegis init runs under, so that the
// programs the server runs are found under a host's short PATH.
func (p *initPlan) entryEnv(own jsonObject) jsonObject {
	env := append(jsonObject{}, own...)
	if p.pathEnv != "" && !env.has("PATH") {
		env = append(env, jsonField{"PATH", jsonString(p.pathEnv)})
	}
	return env
}

// initFrom puts the stdio servers of a host's file behind aegis, each
// wrapped or all in one gateway, and writes the file back after a backup.
func (m *Main) initFrom(p *initPlan, from string) error {
	path, err := p.hostFileFor(from)
	if err != nil {
		return err
	}
	real, old, mode, err := readHostFile(path)
	if err != nil {
		return fmt.Errorf("init: read %s: %w", path, err)
	}
	if old == nil {
		return withHint(fmt.Errorf("init: there is no %s", path), "name the host's file: --from PATH (aegis help init lists where each host keeps it)")
	}
	cfg, err := parseJSONObject(old)
	if err != nil {
		return withHint(fmt.Errorf("init: %s is not a JSON object: %w", path, err), "aegis init reads plain JSON (no comments); fix the file, or paste the entries of aegis init -- SERVER by hand")
	}
	key := "mcpServers"
	if cfg.has("servers") && !cfg.has("mcpServers") {
		key = "servers"
	}
	servers, err := cfg.object(key)
	if err != nil || servers == nil {
		return withHint(fmt.Errorf("init: %s has no %s object: no server to put behind aegis", path, key), "add the servers to the host first, or use aegis init -- SERVER")
	}

	var adopted []adoptedServer
	var skipped []skippedServer
	var gw []gwServer
	used := map[string]bool{}
	var existing map[string][]string
	if p.mode == "gateway" {
		if existing, err = gatewayServers(p.file); err != nil {
			return err
		}
	}
	gatewayEntry := "" // the host's entry that runs this gateway already
	if p.known, err = loadInitServers(p.configDir); err != nil {
		return err
	}
	remember := map[string][]string{}
	for i, f := range servers {
		s, why := p.readHostServer(f.val)
		if why != "" {
			if p.mode == "gateway" && s.argv != nil && p.isAegis(s.argv[0]) && gatewayEntry == "" && runsGateway(s.argv, p.file) {
				gatewayEntry = f.key
			}
			skipped = append(skipped, skippedServer{f.key, why})
			continue
		}
		pathList := p.pathEnv
		if v, ok := s.env.str("PATH"); ok {
			pathList = v
		}
		argv := append([]string{}, s.argv...)
		argv[0], _ = lookPathIn(argv[0], pathList)
		a := adoptedServer{key: f.key, argv: argv}
		if p.mode == "wrap" {
			a.name, _ = p.known.name(sanitizeName(f.key), argv, used, p.nameTaken(used))
			used[a.name] = true
			remember[a.name] = argv
			a.record, a.state = p.serverPaths(a.name)
			e := s.entry.set("command", jsonString(p.self))
			e = e.set("args", jsonValue(p.wrapArgs(a.record, a.state, argv)))
			e = e.set("env", p.entryEnv(s.env).raw())
			servers[i].val = e.raw()
			adopted = append(adopted, a)
			continue
		}
		// One gateway runs them all: what the entry held beyond the
		// command, args and env would apply to the gateway, not to it.
		var extra []string
		for _, k := range s.entry {
			if k.key != "command" && k.key != "args" && k.key != "env" && k.key != "type" {
				extra = append(extra, k.key)
			}
		}
		if len(extra) > 0 {
			skipped = append(skipped, skippedServer{f.key, "it has " + strings.Join(extra, ", ") + ", which one gateway entry cannot carry for each of its servers; --mode wrap puts it behind aegis"})
			continue
		}
		if hostVariables(s) {
			skipped = append(skipped, skippedServer{f.key, "its args or env use ${…} variables, which the host fills in and a gateway file cannot; --mode wrap keeps them in the host's entry"})
			continue
		}
		g := gwServer{argv: argv}
		for _, kv := range s.env {
			var v string
			if json.Unmarshal(kv.val, &v) != nil {
				g = gwServer{}
				break
			}
			g.env = append(g.env, [2]string{kv.key, v})
		}
		if g.argv == nil {
			skipped = append(skipped, skippedServer{f.key, "its env has a value that is not a string"})
			continue
		}
		if g.name, err = gatewayName(existing, sanitizeName(f.key), argv, false, used); err != nil {
			return err
		}
		used[g.name] = true
		a.name = g.name
		gw = append(gw, g)
		adopted = append(adopted, a)
	}

	w := m.Stdout
	if len(adopted) == 0 {
		fmt.Fprintf(w, "aegis init: no server of %s to put behind aegis; the file is left as it is.\n", path)
		printSkipped(w, skipped)
		return nil
	}
	if err := p.setUp(); err != nil {
		return err
	}
	var ed gatewayEdit
	var gwRecord, gwState, gwKey string
	if p.mode == "gateway" {
		if ed, err = p.addToGateway(gw); err != nil {
			return err
		}
		for _, a := range adopted {
			servers = servers.del(a.key)
		}
		if gatewayEntry == "" {
			gwKey = uniqueName("aegis-gateway", func(n string) bool { return servers.has(n) })
			// The gateway is named for its file, the servers' for
			// their commands.
			self := []string{p.self, "gateway", "--config", p.file}
			name, _ := p.known.name("aegis-gateway", self, nil, p.nameTaken(nil))
			remember[name] = self
			gwRecord, gwState = p.serverPaths(name)
			e := jsonObject{}
			if key == "servers" {
				e = append(e, jsonField{"type", jsonString("stdio")})
			}
			e = append(e, jsonField{"command", jsonString(p.self)},
				jsonField{"args", jsonValue(p.gatewayArgs(gwRecord, gwState))},
				jsonField{"env", p.entryEnv(nil).raw()})
			servers = append(servers, jsonField{gwKey, e.raw()})
		}
	}

	out, err := cfg.set(key, servers.raw()).format(fileIndent(old))
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	hw, err := writeHostFile(real, old, out, mode)
	if err != nil {
		return withHint(fmt.Errorf("init: write %s: %w", path, err), "the file is as it was, or as its backup "+hw.backup+" holds")
	}

	p.remember(m.Stderr, remember)
	fmt.Fprintf(w, "aegis init: %d server(s) of %s are behind aegis %s now; the file was copied to %s first.\n\n", len(adopted), path, p.mode, hw.backup)
	fmt.Fprintf(w, "  signing key  %s (%s)\n  public key   %s\n", p.key, said(p.keyNew), p.pub)
	if p.mode == "wrap" {
		fmt.Fprintf(w, "  policy       %s (%s)\n\n", p.file, said(p.fileNew))
	} else {
		fmt.Fprintf(w, "  gateway file %s (%s)\n", p.file, gatewayFileSaid(ed))
		if gwKey != "" {
			fmt.Fprintf(w, "  host entry   %s (new)\n  record       %s\n  state        %s\n\n", gwKey, gwRecord, gwState)
		} else {
			fmt.Fprintf(w, "  host entry   %s (it was there: it runs this gateway file)\n\n", gatewayEntry)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, a := range adopted {
		fmt.Fprintf(tw, "  %s\t%s\n", a.key, projector.QuoteArgv(a.argv))
		if a.name != a.key {
			fmt.Fprintf(tw, "  \taegis's name: %s\n", a.name)
		}
		if p.mode == "wrap" {
			fmt.Fprintf(tw, "  \trecord  %s\n  \tstate   %s\n", a.record, a.state)
		}
	}
	tw.Flush()
	if ed.noProfile {
		fmt.Fprintf(w, "\nnote: %s has no profile named default: add NAME.* to a profile's allow to let the agent use a server's tools.\n", p.file)
	}
	printSkipped(w, skipped)
	fmt.Fprintf(w, "\nRestart the host and use the servers as before.\n\nCheck a record against your key:\n")
	if p.mode == "wrap" {
		for _, a := range adopted {
			fmt.Fprintf(w, "  %s verify --key %s %s\n", p.self, p.pub, a.record)
		}
	} else if gwKey != "" {
		fmt.Fprintf(w, "  %s verify --key %s %s\n", p.self, p.pub, gwRecord)
	}
	fmt.Fprintf(w, "\nPut %s back as it was (the records and keys are kept):\n  %s init --undo --from %s\n", path, p.self, proxy.QuoteArg(path))
	return nil
}

// hostVariables reports whether the entry uses the host's ${…}
// variables (VS Code's ${input:…}, ${env:…}, ${workspaceFolder}).
func hostVariables(s hostServer) bool {
	for _, a := range s.argv {
		if strings.Contains(a, "${") {
			return true
		}
	}
	for _, kv := range s.env {
		if bytes.Contains(kv.val, []byte("${")) {
			return true
		}
	}
	return false
}

// runsGateway reports whether argv runs aegis gateway with the gateway
// file file.
func runsGateway(argv []string, file string) bool {
	if len(argv) < 2 || argv[1] != "gateway" {
		return false
	}
	for i := 2; i+1 < len(argv); i++ {
		if argv[i] == "--config" && filepath.Clean(argv[i+1]) == filepath.Clean(file) {
			return true
		}
	}
	return false
}

func said(isNew bool) string {
	if isNew {
		return "new"
	}
	return "kept: it was there"
}

func gatewayFileSaid(ed gatewayEdit) string {
	switch {
	case ed.created:
		return "new"
	case len(ed.added) > 0:
		return "added " + strings.Join(ed.added, ", ") + "; the old one is " + ed.backup
	}
	return "kept: it has them already"
}

func printSkipped(w io.Writer, skipped []skippedServer) {
	if len(skipped) == 0 {
		return
	}
	fmt.Fprintf(w, "\nLeft as they were:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range skipped {
		fmt.Fprintf(tw, "  %s\t%s\n", s.key, s.why)
	}
	tw.Flush()
}

// initUndo restores the latest backup aegis init made of a host's file,
// byte for byte, unless the file changed since aegis wrote it (then only
// with force).
func (m *Main) initUndo(p *initPlan, from string, force bool) error {
	var path string
	if from != "" {
		var err error
		if path, err = p.hostFileFor(from); err != nil {
			return err
		}
	} else {
		var found []string
		for _, f := range []string{p.hosts.desktop, p.hosts.cursor, p.hosts.vscode} {
			if real, _, _, err := readHostFile(f); err == nil && len(backupsOf(real)) > 0 {
				found = append(found, f)
			}
		}
		switch len(found) {
		case 0:
			return withHint(errors.New("init --undo: no host file has a backup aegis init made"), "name the file: aegis init --undo --from claude|cursor|vscode|PATH")
		case 1:
			path = found[0]
		default:
			return withHint(fmt.Errorf("init --undo: several host files have backups: %s", strings.Join(found, ", ")), "name one: aegis init --undo --from claude|cursor|vscode|PATH")
		}
	}
	real, cur, _, err := readHostFile(path)
	if err != nil {
		return fmt.Errorf("init --undo: read %s: %w", path, err)
	}
	backups := backupsOf(real)
	if len(backups) == 0 {
		return withHint(fmt.Errorf("init --undo: %s has no backup made by aegis init (%s%sTIME)", path, path, backupSuffix), "nothing was changed")
	}
	backup := backups[len(backups)-1]
	if !force {
		want, err := os.ReadFile(backup + writtenSuffix)
		sum := sha256.Sum256(cur)
		switch {
		case err != nil:
			return withHint(fmt.Errorf("init --undo: cannot tell whether %s changed since aegis init wrote it (no %s)", path, backup+writtenSuffix),
				"nothing was changed; compare it with "+backup+" and add --force to restore that backup anyway")
		case cur == nil || strings.TrimSpace(string(want)) != hex.EncodeToString(sum[:]):
			return withHint(fmt.Errorf("init --undo: %s changed since aegis init wrote it; restoring %s would lose those changes", path, backup),
				"nothing was changed; compare the two, and add --force to restore the backup anyway")
		}
	}
	b, err := os.ReadFile(backup)
	if err != nil {
		return fmt.Errorf("init --undo: read %s: %w", backup, err)
	}
	fi, err := os.Stat(backup)
	if err != nil {
		return fmt.Errorf("init --undo: %w", err)
	}
	if err := events.WriteFileAtomicMode(real, b, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("init --undo: write %s: %w", path, err)
	}
	if bytes.Equal(b, cur) {
		fmt.Fprintf(m.Stderr, "aegis: note: %s already held what %s holds\n", path, backup)
	}
	os.Remove(backup + writtenSuffix)
	os.Remove(backup)
	fmt.Fprintf(m.Stdout, "aegis init: restored %s from %s (and removed that backup).\n", path, backup)
	fmt.Fprintf(m.Stdout, "The keys, records, state folders and gateway file aegis made are kept. Restart the host.\n")
	if len(backups) > 1 {
		fmt.Fprintf(m.Stdout, "An older backup is there too: %s\n", backups[len(backups)-2])
	}
	return nil
}
