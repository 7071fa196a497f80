package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/aegis-dev/aegis/events"

	"github.com/aegis-dev/aegis/docs"
)

// Version is the aegis release; builds from a checkout say "dev".
const Version = "0.1.0-dev"

const usage = `aegis — accountable tool calls for MCP

Usage:
  aegis <command> [flags] [args]

Commands:
  init       set aegis up in front of an MCP server and print the host entry
  wrap       run an MCP server and record every tool call it carries
  gateway    front several MCP servers behind default-deny profiles
  keygen     make an Ed25519 signing key for audit records
  verify     check an audit record offline: Verified, Tampered or Indeterminate
  prove      print a proof that a line is in a checkpoint, or that a record only grew
  export     rebuild an audit record from the event stream
  events     list or append events in a state directory's stream
  sessions   list the recorded sessions: calls, refusals, approvals, how they ended
  replay     print a session as a transcript (aegis replay SESSION [--follow])
  recheck    list the recorded calls another policy would decide differently
  policy     try a policy on a table of calls (aegis policy test FILE CASES)
  pins       list the tool pins, or reset them (aegis pins reset --server S)
  rotate     seal the record files and roll the event stream over (bounds the disk)
  hub        enroll a host or an approver in a fleet's NATS hub
  auth       log in to a remote server that requires OAuth (aegis auth login SERVER)
  approvals  list the tool calls that wait for a human decision
  approve    approve a pending tool call (aegis approve APPROVAL_ID)
  deny       deny a pending tool call (aegis deny APPROVAL_ID --reason TEXT)
  console    a web page: sessions, transcripts, approvals (live, on loopback)
  version    print the version (also: aegis -v)
  completion print a shell completion script (aegis completion bash|zsh|fish)
  help       print this help, a command's help (aegis help events), or a
             reference page (aegis help threat-model; aegis help policy --full)

Global behaviour:
  stdout carries MCP (in wrap) or a command's result; everything else,
  including every error, goes to stderr as "aegis: error: …".
  Exit codes: 0 success, 1 failure or no (verify: Tampered), 2 usage
  error or a file to check unreadable, 3 Indeterminate, 4 not a record;
  aegis help errors has the table.

Examples:
  $ aegis init -- npx -y @modelcontextprotocol/server-everything
  $ aegis keygen --out ~/.config/aegis/signing.key
  $ aegis wrap --audit calls.aarl --signing-key ~/.config/aegis/signing.key -- npx -y @modelcontextprotocol/server-everything
  $ aegis verify --key PUBLIC_KEY_HEX calls.aarl
  $ aegis sessions
  $ aegis replay SESSION
`

// Main is the command line. Its fields are the process's environment, so
// tests run it in-process.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Exit ends the process with a code. A signal during a wrap's
	// start-up that cannot end it otherwise (a read blocked in the
	// kernel) ends the process with it; nil leaves it running.
	Exit func(code int)
	// OpenTerminal opens the terminal on which aegis asks a human for a
	// passphrase; nil opens /dev/tty. Tests give one that types for them.
	OpenTerminal func() (Terminal, error)

	// approverWorkFactor is the scrypt work factor of the approver keys
	// keygen writes (0: projector.ApproverWorkFactor). In-process tests
	// lower it, so that they do not take the 256 MiB a real key costs.
	approverWorkFactor int
}

type command struct {
	name  string
	short string
	run   func(m *Main, ctx context.Context, args []string) error
	help  string
}

func (m *Main) commands() []command {
	return []command{
		{"init", "set aegis up in front of an MCP server, for your host", (*Main).runInit, initUsage},
		{"wrap", "record an MCP server's tool calls", (*Main).runWrap, wrapUsage},
		{"gateway", "front several MCP servers behind profiles", (*Main).runGateway, gatewayUsage},
		{"keygen", "make a signing key for audit records", (*Main).runKeygen, keygenUsage},
		{"verify", "check an audit record offline", (*Main).runVerify, verifyUsage},
		{"prove", "print an RFC 6962 proof over a record's checkpoints", (*Main).runProve, proveUsage},
		{"export", "rebuild an audit record from the event stream", (*Main).runExport, exportUsage},
		{"events", "list or append events", (*Main).runEvents, eventsUsage},
		{"sessions", "list the recorded sessions and how they ended", (*Main).runSessions, sessionsUsage},
		{"replay", "print a session as a transcript", (*Main).runReplay, replayUsage},
		{"recheck", "re-evaluate recorded tool calls under another policy", (*Main).runRecheck, recheckUsage},
		{"pins", "list or reset the tool definitions pinned per server", (*Main).runPins, pinsUsage},
		{"policy", "try a policy on a table of calls before deploying it", (*Main).runPolicy, policyUsage},
		{"rotate", "seal the record files and roll the event stream over", (*Main).runRotate, rotateUsage},
		{"hub", "enroll a host or an approver in a fleet's NATS hub", (*Main).runHub, hubUsage},
		{"auth", "log in to a remote server that requires OAuth", (*Main).runAuth, authUsage},
		{"approvals", "list the tool calls that wait for approval", (*Main).runApprovals, approvalsUsage},
		{"approve", "approve a pending tool call", (*Main).runApprove, approveUsage},
		{"deny", "deny a pending tool call", (*Main).runDeny, denyUsage},
		{"console", "serve a web page of sessions and approvals", (*Main).runConsole, consoleUsage},
		{"version", "print the version", (*Main).runVersion, versionHelp},
		{"completion", "print a shell completion script", (*Main).runCompletion, completionUsage},
	}
}

// exitUsage is every command's exit code for a mistake in how it was
// invoked (docs/ERRORS.md, "Exit codes").
const exitUsage = 2

// usageError is a mistake in how aegis was invoked: exit 2, with a hint.
type usageError struct {
	msg  string
	hint string
}

func (e *usageError) Error() string { return e.msg }

func usagef(hint, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), hint: hint}
}

// exitError ends the command with a specific exit code. A nil err means the
// command already said what it had to.
type exitError struct {
	code int
	err  error
	hint string
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// hintError carries a hint with an ordinary failure (exit 1).
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

func withHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &hintError{err: err, hint: hint}
}

// Run runs one command line and returns the process exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	return m.exit(m.dispatch(ctx, args))
}

// exit prints err the way a user reads it (aegis: error: …, aegis: hint: …)
// and returns the exit code it calls for: 0 for nil, 2 for a usage error,
// an exitError's own code, else 1.
func (m *Main) exit(err error) int {
	if err == nil {
		return 0
	}
	var ue *usageError
	var ee *exitError
	var he *hintError
	switch {
	case errors.As(err, &ue):
		m.errorf("%s", ue.msg)
		if ue.hint != "" {
			m.hintf("%s", ue.hint)
		}
		return exitUsage
	case errors.As(err, &ee):
		if ee.err != nil {
			m.errorf("%v", ee.err)
		}
		if ee.hint != "" {
			m.hintf("%s", ee.hint)
		}
		return ee.code
	case errors.As(err, &he):
		m.errorf("%v", he.err)
		m.hintf("%s", he.hint)
		return 1
	case errors.Is(err, events.ErrDamaged):
		m.errorf("%v", err)
		m.hintf("%s", damageHint)
		return 1
	default:
		m.errorf("%v", err)
		return 1
	}
}

// damageHint says what to do about a damaged event stream.
const damageHint = "the event stream denies delete and purge, so those messages were lost from the state directory's files (a torn write, or a block edited, truncated or deleted); nothing was written. Restore the state directory from a backup; or keep it for inspection and start aegis with a new --state-dir, which continues the record file's chain from the file. 'aegis export --salvage' says which sessions and audit lines were lost, and writes what is left with the gaps marked"

func (m *Main) errorf(format string, args ...any) {
	fmt.Fprintf(m.Stderr, "aegis: error: "+format+"\n", args...)
}

func (m *Main) hintf(format string, args ...any) {
	fmt.Fprintf(m.Stderr, "aegis: hint: "+format+"\n", args...)
}

func (m *Main) warnf(format string, args ...any) {
	fmt.Fprintf(m.Stderr, "aegis: warning: "+format+"\n", args...)
}

func (m *Main) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		// The seed's bare 'aegis' runs the gateway of AEGIS_CONFIG or
		// ./aegis.yaml; without one it is a usage error.
		if err := m.runBareGateway(ctx); !errors.Is(err, errNoGateway) {
			return err
		}
		fmt.Fprint(m.Stderr, usage)
		return &exitError{code: exitUsage}
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			return m.help(args[1:])
		}
		fmt.Fprint(m.Stdout, usage)
		return nil
	case "-v", "-version", "--version":
		name = "version"
	}
	for _, c := range m.commands() {
		if c.name == name {
			return c.run(m, ctx, args[1:])
		}
	}
	return usagef("run 'aegis help' for the list of commands", "unknown command %q", name)
}

// newFlagSet returns a flag set that reports errors through usageError
// instead of printing and exiting.
func (m *Main) newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("aegis "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args and turns -h and flag mistakes into the command's
// help or a usage error.
func (m *Main) parseFlags(fs *flag.FlagSet, help string, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(m.Stdout, help)
			return &exitError{code: 0}
		}
		name := strings.TrimPrefix(fs.Name(), "aegis ")
		top, _, _ := strings.Cut(name, " ")
		return usagef("run 'aegis help "+top+"' for its flags", "%s: %v", name, err)
	}
	return nil
}

// helpHelp is the help of aegis help.
const helpHelp = `Usage:
  aegis help [COMMAND]
  aegis COMMAND -h | --help
  aegis help TOPIC
  aegis help COMMAND --full

Prints the list of commands, or COMMAND's help: what it does, its flags,
and an example. aegis help TOPIC prints a reference page (the same as
the docs folder of the source): confine, confinement, record, errors,
files, resources, threat-model, gateway-parity, oauth, benchmarks; and with
--full, the whole reference of a command that has one (wrap, policy,
gateway, verify, replay, events, approvals). Help goes to stdout and
exits 0.

Examples:
  $ aegis help verify
  $ aegis help threat-model
  $ aegis help policy --full
`

// help prints a command's help or a reference page.
func (m *Main) help(args []string) error {
	topic, full := args[0], len(args) > 1 && args[1] == "--full"
	if topic == "help" || topic == "-h" || topic == "--help" {
		fmt.Fprint(m.Stdout, helpHelp)
		return nil
	}
	if !full {
		for _, c := range m.commands() {
			if c.name == topic {
				fmt.Fprint(m.Stdout, c.help)
				return nil
			}
		}
	}
	if page, ok := helpPages()[topic]; ok {
		b, err := docs.Pages.ReadFile(page)
		if err != nil {
			return err
		}
		m.Stdout.Write(b)
		return nil
	}
	return usagef("run 'aegis help' for the commands; the topics are "+strings.Join(helpTopics(), ", "), "unknown command or topic %q", topic)
}

// helpPages maps each help topic to its page: the page's file name,
// lowercased, without .md.
func helpPages() map[string]string {
	pages := map[string]string{}
	entries, _ := docs.Pages.ReadDir(".")
	for _, e := range entries {
		pages[strings.ToLower(strings.TrimSuffix(e.Name(), ".md"))] = e.Name()
	}
	return pages
}

// helpTopics are the topics, in order.
func helpTopics() []string {
	var ts []string
	for t := range helpPages() {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

const versionHelp = `Usage:
  aegis version
  aegis -v | --version

Prints the release, the module version and VCS revision it was built
from (from the binary's build info: "(devel)" for a build from a
checkout, the tag for go install …@vX.Y.Z), the Go version and the
platform.

Example:
  $ aegis version
  aegis 0.1.0-dev · module (devel) · revision 3f2c9e1d0a7b (modified) · go1.26.0 linux/amd64
`

func (m *Main) runVersion(_ context.Context, args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(m.Stdout, versionHelp)
		return nil
	}
	if len(args) > 0 {
		return usagef("run: aegis version", "version takes no arguments")
	}
	fmt.Fprintln(m.Stdout, versionLine(debug.ReadBuildInfo))
	return nil
}

// versionLine is what aegis version prints, from the build info that read
// returns.
func versionLine(read func() (*debug.BuildInfo, bool)) string {
	module, revision := "unknown", ""
	if bi, ok := read(); ok {
		module = bi.Main.Version
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(revision) > 12 {
			revision = revision[:12]
		}
		if revision != "" && modified {
			revision += " (modified)"
		}
	}
	line := "aegis " + Version + " · module " + module
	if revision != "" {
		line += " · revision " + revision
	}
	return line + " · " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// logger returns the slog.Logger for library packages: warnings and errors
// to stderr, or everything with AEGIS_DEBUG=1.
func (m *Main) logger() *slog.Logger {
	level := slog.LevelWarn
	if m.Getenv("AEGIS_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: level}))
}

// stateDir returns --state-dir or the default.
func (m *Main) stateDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return defaultStateDir(m.Getenv)
}

// stateChoice is --state-dir and --name of a command that reads a state
// directory.
type stateChoice struct{ dir, name *string }

func addStateChoice(fs *flag.FlagSet) stateChoice {
	return stateChoice{
		dir:  fs.String("state-dir", "", "state directory"),
		name: fs.String("name", "", "the server's name given to aegis init: its state directory"),
	}
}

// set says whether either flag was given.
func (c stateChoice) set() bool { return *c.dir != "" || *c.name != "" }

// chooseStateDir sets *c.dir to the state directory the command reads:
// --state-dir; or --name's, the one aegis init made for that server
// (DEFAULT/NAME), which must be there; or findStateDir's.
func (m *Main) chooseStateDir(c stateChoice) error {
	if *c.name == "" {
		*c.dir = m.findStateDir(*c.dir)
		return nil
	}
	if *c.dir != "" {
		return usagef("--state-dir DIR or --name NAME", "--state-dir and --name both name a state directory; give one")
	}
	d, err := m.namedStateDir(*c.name)
	*c.dir = d
	return err
}

// namedStateDir is DEFAULT/NAME, the state directory aegis init made for
// the server NAME, when it holds an event store.
func (m *Main) namedStateDir(name string) (string, error) {
	if name != filepath.Base(name) || name == "." || name == ".." {
		return "", usagef("--name takes the server's name, as aegis init printed it", "--name %q is not a server's name", name)
	}
	d, err := defaultStateDir(m.Getenv)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(d, name)
	if isStateDir(dir) {
		return dir, nil
	}
	hint := "aegis init makes DEFAULT/NAME for the server NAME; its first session fills it. Or pass --state-dir DIR"
	if names := initStateDirs(d); len(names) > 0 {
		hint = "the servers with a state directory under " + d + ": " + strings.Join(names, ", ")
	}
	return "", withHint(fmt.Errorf("no state directory for the server %q: %s holds no event store", name, dir), hint)
}

// initStateDirs are the names of the state directories under d, the
// default: those aegis init made, one per server.
func initStateDirs(d string) []string {
	entries, err := os.ReadDir(d)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && isStateDir(filepath.Join(d, e.Name())) {
			names = append(names, e.Name())
		}
	}
	return names
}

// findStateDir is the state directory a command that reads one uses:
// --state-dir, else the default, else the one state directory under the
// default (aegis init gives each server its own, DEFAULT/NAME), said on
// stderr. With several under it, it says which there are and how to name
// one, and returns the default, so the command fails as it would have.
func (m *Main) findStateDir(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	d, err := defaultStateDir(m.Getenv)
	if err != nil || isStateDir(d) {
		return flagValue
	}
	names := initStateDirs(d)
	switch len(names) {
	case 0:
		return flagValue
	case 1:
		dir := filepath.Join(d, names[0])
		fmt.Fprintf(m.Stderr, "aegis: note: reading %s, the only state directory under %s (--name or --state-dir chooses another)\n", dir, d)
		return dir
	}
	fmt.Fprintf(m.Stderr, "aegis: note: %s holds the state directories of %d servers (%s); name one: --name %s\n",
		d, len(names), strings.Join(names, ", "), names[0])
	return flagValue
}

// isStateDir says whether dir holds an event store ([events.Open] makes
// its jetstream directory).
func isStateDir(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "jetstream"))
	return err == nil && fi.IsDir()
}
