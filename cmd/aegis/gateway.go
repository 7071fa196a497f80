package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/telemetry"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/gateway"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

const gatewayUsage = `Usage:
  aegis gateway --config FILE --audit PATH --signing-key PATH [--state-dir DIR] [--approval-ttl D]
                [--max-state-size SIZE] [--hub URL[,URL…] [--host NAME] [--hub-nkey FILE | --hub-creds FILE] [--hub-ca FILE]]
                [--checkpoint-lines N] [--checkpoint-interval D]
                [--witness-policy FILE [--witness-interval D]] [--approvers FILE] [--protocol VERSION]
                [--listen ADDR [--token-file FILE] [--allow-origin ORIGIN]… [--stdio]
                 [--idle-timeout D] [--max-sessions N] [--listen-without-token]
                 [--max-conns N] [--max-conns-per-client N] [--header-timeout D]
                 [--body-timeout D] [--conn-idle-timeout D]
                 [--oauth-issuer URL [--oauth-resource URL] [--oauth-audience AUD]…
                  [--oauth-scope SCOPE]… [--oauth-claim NAME]…
                  [--oauth-introspect-client ID --oauth-introspect-secret-file FILE]]]
                 [--metrics-listen ADDR [--metrics-allow-remote]] [--otlp-endpoint URL]
  aegis            (with AEGIS_CONFIG, default ./aegis.yaml, AEGIS_AUDIT and AEGIS_SIGNING_KEY;
                    AEGIS_STATE_DIR, AEGIS_MAX_STATE_SIZE and AEGIS_APPROVERS are optional)

Runs one MCP server for the host that fronts every server in FILE. Their
tools appear as <server>__<tool>, and only those the active profile allows;
resources and resource templates are filtered by the profile's URI
patterns; prompts appear as <server>__<prompt>, only those the profile's
prompts globs allow. Every tools/call (meta-tools included) is recorded as an
intent before it is forwarded and a signed outcome before the answer returns,
with decision_axes.role = the active profile. The agent switches profiles
with the meta-tool aegis__set_profile: along an allowed_transitions edge at
once, otherwise a human runs 'aegis approve ID' and the agent confirms with
aegis__approval_status. Each server's tools are pinned to the digest of
their definitions when first listed; a tool that later changes (or is
added) is hidden and refused until 'aegis approve ID' pins its new
definition (see 'aegis help pins').

FILE is strict YAML; docs/gateway.md describes every key. In short:

  version: 1
  servers:                      # a stdio subprocess, or a remote server (url)
    NAME:
      command: PROG             # args: [..], transport: stdio
      env: {VAR: value, TOKEN: {file: /abs/path}}   # file: read at start
      env_passthrough: [VAR]    # copied from aegis's environment
      confine: {allow_read: [..], allow_write: [..], allow_net: [HOST:PORT]}
      alias: {TOOL: SHORT}      # shown as NAME__SHORT, for a name hosts refuse
    REMOTE:
      url: https://HOST/mcp     # instead of command; http:// only to loopback
      transport: streamable     # falls back to legacy SSE; or sse
      headers: {Authorization: {file: /abs/path}}   # or {env: VAR}; never recorded
      ca_file: /abs/ca.pem      # TLS is always verified; then only these CAs
      oauth: {}                 # or {client_id: ID}: log in once with aegis auth login REMOTE
  profiles:
    NAME:
      allow: ["SERVER.TOOL_GLOB"]          # what the profile shows and runs
      resources: ["scheme://host/path/**"]  # URI patterns it may read
      prompts: ["SERVER.PROMPT_GLOB"]       # prompts it shows; none by default
      extends: PROFILE                      # inherit allow, resources, prompts
      allowed_transitions: [PROFILE]        # switches without a human
  activation: {default_profile: NAME}
  error_disclosure: verbose     # or minimal
  rules: [..]                   # optional wrap-style rules on top
  on_tool_change: pending_approval   # or deny, allow (see 'aegis help pins')
  meta_tool_names: host_safe    # aegis__set_profile; dotted: aegis.set_profile

Every tool name listed matches ^[a-zA-Z0-9_-]{1,64}$, which every host
accepts. A server's tool whose name would not (too long once prefixed,
another character) is not listed, and stderr says how to name it with
alias:; the gateway starts with the server's other tools.

Unknown keys are errors with their line. Each server gets a minimal
environment (PATH, HOME, USER, LOGNAME, SHELL, LANG, LC_*, TZ, TMPDIR,
TERM, XDG_RUNTIME_DIR), its env and the variables its env_passthrough
names; nothing else of aegis's environment, and no value is recorded. An
env file that group or others may access, or that is missing, refuses the
start.

An invalid file, a missing key or an unusable store refuse to start; a
server that fails to start is skipped, said on stderr, recorded and shown
by aegis sessions and aegis replay; when no server starts, the gateway
refuses to start (exit 1) and says which failed and why. A state directory
whose event stream lost messages is refused (see docs/FILES.md). SIGINT or
SIGTERM ends the gateway; one that comes before the servers start ends it
at once, with 128+N, and starts none. A second one while the gateway
stops, or 9 s after the first, ends aegis at once (128+N), saying so.

When the host closes its stdin, a call in flight has 2 s to finish (its
outcome is recorded; the answer can no longer be delivered); after that it
is cancelled (notifications/cancelled to its server) and recorded so.
Then each server has its stdin closed, 2 s to exit, SIGTERM, 2 s more,
SIGKILL; child.exited names the server, its PID and what ended it. Told to
stop by SIGINT or SIGTERM, aegis sends each server SIGTERM with the close
of its stdin, without the wait.
After the grace, the host's stdout is closed: a server that keeps sending
cannot hold the gateway's end on a pipe the host no longer reads.

--max-state-size SIZE (such as 10GiB) caps the state directory's event
stream, as for aegis wrap. At the cap the gateway fails closed: nothing more
can be recorded, so every call is refused and not run, with an error saying
the directory reached its cap. Nothing is dropped or deleted. Recording
applies backpressure as in wrap, so memory stays bounded under a flood.

Hosts are offered MCP 2026-07-28 beside the session protocol (2025-11-25
and earlier): a host that asks for 2025-11-25 or earlier in its initialize
(the TypeScript SDK, Claude Desktop) gets a session as ever; a host that
speaks 2026-07-28 is served without one (server/discover, each request
with its own _meta), and a server's sampling, elicitation or roots
request during a call comes back as that call's input_required result,
whose retry the gateway ties to the call as decided and recorded. Local
servers are still spoken to in 2025-11-25; a remote server (url:,
streamable HTTP) is asked for 2026-07-28 first, and its input_required
results are answered through the host. With --listen, such a host's
requests (no session id) share one session per principal (its servers,
record, profile and approvals), their Mcp-Method, Mcp-Name and
Mcp-Protocol-Version headers checked against the body.
--protocol 2025-11-25 offers hosts only the session protocol, and speaks
only it to remote servers too. See docs/GATEWAY-PARITY.md.

--listen ADDR (such as 127.0.0.1:8787) serves hosts over MCP's streamable
HTTP at http://ADDR/mcp instead of stdio (with --stdio, as well). Each
request needs "Authorization: Bearer TOKEN": a token printed once at
start, or the one in --token-file (mode 0600). A request for a Host that
is not loopback (on a loopback listener: DNS rebinding) or from an Origin
other than the listener's own or an --allow-origin one is refused. Each
HTTP client session (of a host of the session protocol; a 2026-07-28 host
has none, see above) runs its own servers and is its own recorded
session, with its own profile and approvals; sessions at once write
calls.aarl, calls-2.aarl, ... An address that is not loopback must be
named and is warned about. --listen-without-token (loopback only, warned)
is for test suites that cannot send a header.

No client, with the token or without, can take aegis's descriptors or
hold a connection without sending: --max-conns (2048) connections at
once, --max-conns-per-client (1024) from one IP address; past either, a
connection is answered 503 saying which, and closed. A request's headers
have --header-timeout (10s) to arrive, its body --body-timeout (30s); a
kept-alive connection without a request is closed after
--conn-idle-timeout (2m). aegis raises its open file limit to the hard
one, and lowers --max-conns (saying so) to keep room for --max-sessions
sessions' servers and records. --max-sessions (32) sessions at once: at
the cap the one idle longest (--idle-timeout, 1h, ends one idle that
long) makes room, and when none is idle within a second a new one is
refused with 503.
See docs/http.md.

--oauth-issuer URL makes --listen an OAuth 2.1 resource server instead of
taking one static token: each client sends an access token of that
authorization server, checked as a JWT against its keys (or by
introspection, with --oauth-introspect-client), for --oauth-audience
(default --oauth-resource, default http://ADDR/mcp), holding every
--oauth-scope (else 403 insufficient_scope). A refusal is 401 with
WWW-Authenticate naming the protected resource metadata, served at
/.well-known/oauth-protected-resource/mcp. Each session serves the caller
its token names (issuer, subject, client, scopes, the --oauth-claim
claims): recorded in its open line and each call's intent, shown by
sessions, replay, approvals and the console, and the principal of rules'
when: conditions and of profiles' for_groups and for_scopes. No token is
ever logged or recorded. See aegis help oauth.

--hub, --host, --hub-nkey, --hub-creds and --hub-ca link the event store to a fleet's
NATS hub, as for aegis wrap (aegis help hub). --checkpoint-lines and
--checkpoint-interval set how often the record gets a signed checkpoint,
and --witness-policy (or the config's witnesses:) and --witness-interval
which witnesses cosign the anchor log's checkpoints, as for aegis wrap.

--approvers FILE (AEGIS_APPROVERS for a bare aegis) takes approvals, of
tool calls and of escalations alike, only when signed with a key the file
lists, as for aegis wrap: see 'aegis help approve'. An escalation's signed
target is "aegis.set_profile FROM -> TO", as 'aegis approvals' lists it.
Without it, any process of this user can approve.

` + telemetryHelp + `For a gateway, a call's server is the <server> of its tool's name, and
with --listen the sessions open are counted by front (stdio or http).
A bare aegis exports when the OTEL_EXPORTER_OTLP_* variables say so.

Example (Claude Desktop / Cursor "mcpServers" entry):
  "aegis": {"command": "aegis", "args": ["gateway", "--config", "/etc/aegis/aegis.yaml",
            "--audit", "/var/log/aegis/calls.aarl", "--signing-key", "/etc/aegis/signing.key"]}
`

func (m *Main) runGateway(ctx context.Context, args []string) error {
	fs := m.newFlagSet("gateway")
	config := fs.String("config", "", "gateway file")
	audit := fs.String("audit", "", "record file")
	keyPath := fs.String("signing-key", "", "signing key file")
	stateDir := fs.String("state-dir", "", "state directory")
	approvalTTL := fs.Duration("approval-ttl", proxy.DefaultApprovalTTL, "how long a pending approval can be acted on")
	approversPath := fs.String("approvers", "", "approvers file: only their signed approvals are taken")
	protocol := fs.String("protocol", defaultHostProtocol, "newest MCP protocol version offered to hosts: 2026-07-28 (the default) or 2025-11-25")
	var maxState sizeFlag
	fs.Var(&maxState, "max-state-size", "cap on the state directory's event stream, such as 10GiB")
	hubf := addHubFlags(fs)
	cpf := addCheckpointFlags(fs)
	lf := addListenFlags(fs)
	tf := addTelemetryFlags(fs)
	if err := m.parseFlags(fs, gatewayUsage, args); err != nil {
		return err
	}
	tcfg, err := tf.config(m)
	if err != nil {
		return err
	}
	lo, err := lf.opts()
	if err != nil {
		return err
	}
	checkpoints, err := cpf.policy()
	if err != nil {
		return err
	}
	witnesses, err := cpf.witnesses()
	if err != nil {
		return err
	}
	maxBytes, err := stateSizeCap(maxState)
	if err != nil {
		return err
	}
	hub, err := hubf.config()
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'aegis help gateway'", "gateway: unexpected argument %q", fs.Arg(0))
	}
	if *config == "" || *audit == "" || *keyPath == "" {
		return usagef("aegis gateway --config aegis.yaml --audit calls.aarl --signing-key KEY", "gateway needs --config, --audit and --signing-key")
	}
	approvers, err := m.loadApprovers(*approversPath)
	if err != nil {
		return err
	}
	hostProtocol := ""
	switch *protocol {
	case "2025-11-25":
	case "2026-07-28":
		hostProtocol = *protocol
	default:
		return usagef("aegis gateway --protocol 2025-11-25 (or 2026-07-28, the default)", "gateway: --protocol %q is not a protocol version aegis offers", *protocol)
	}
	return m.gateway(ctx, *config, *audit, *keyPath, *stateDir, *approvalTTL, maxBytes, hub, checkpoints, anchorWitnesses{witnesses, *cpf.witnessInterval}, approvers, lo, tcfg, hostProtocol)
}

// runBareGateway is the seed's bare 'aegis': the gateway from AEGIS_CONFIG
// (default ./aegis.yaml). It returns errNoGateway when there is nothing to
// run, so that a bare aegis still prints its usage.
func (m *Main) runBareGateway(ctx context.Context) error {
	config := m.Getenv("AEGIS_CONFIG")
	if config == "" {
		if _, err := os.Stat("aegis.yaml"); err != nil {
			return errNoGateway
		}
		config = "aegis.yaml"
	}
	audit, key := m.Getenv("AEGIS_AUDIT"), m.Getenv("AEGIS_SIGNING_KEY")
	if audit == "" || key == "" {
		return withHint(fmt.Errorf("gateway %s: AEGIS_AUDIT and AEGIS_SIGNING_KEY must name the record file and the signing key", config), "or run: aegis gateway --config "+config+" --audit PATH --signing-key KEY")
	}
	var maxState sizeFlag
	if v := m.Getenv("AEGIS_MAX_STATE_SIZE"); v != "" {
		if err := maxState.Set(v); err != nil {
			return usagef("for example AEGIS_MAX_STATE_SIZE=10GiB", "AEGIS_MAX_STATE_SIZE: %v", err)
		}
	}
	maxBytes, err := stateSizeCap(maxState)
	if err != nil {
		return err
	}
	approvers, err := m.loadApprovers(m.Getenv("AEGIS_APPROVERS"))
	if err != nil {
		return err
	}
	return m.gateway(ctx, config, audit, key, m.Getenv("AEGIS_STATE_DIR"), proxy.DefaultApprovalTTL, maxBytes, nil, projector.CheckpointPolicy{}, anchorWitnesses{}, approvers, nil, telemetry.Config{Getenv: m.Getenv, Version: Version, Log: m.logger()}, defaultHostProtocol)
}

// defaultHostProtocol is the newest protocol version a gateway offers its
// hosts unless --protocol says otherwise: 2026-07-28, beside the session
// protocol, which a host that asks for 2025-11-25 or earlier still gets
// (hosts choose; the servers keep their 2025-11-25 sessions either way).
const defaultHostProtocol = "2026-07-28"

var errNoGateway = errors.New("no gateway configured")

func (m *Main) gateway(ctx context.Context, config, audit, keyPath, stateDirFlag string, ttl time.Duration, maxBytes int64, hub *events.HubConfig, checkpoints projector.CheckpointPolicy, wit anchorWitnesses, approvers *schemas.Approvers, lo *listenOpts, tcfg telemetry.Config, hostProtocol string) error {
	data, err := os.ReadFile(config)
	if err != nil {
		return withHint(fmt.Errorf("could not read gateway file: %w", err), "--config (or AEGIS_CONFIG) names the YAML file")
	}
	gw, err := policy.ParseGateway(config, data)
	if err != nil {
		return withHint(fmt.Errorf("invalid gateway file: %w", err), "fix the file; nothing was started")
	}
	key, err := m.loadKey(keyPath)
	if err != nil {
		return err
	}
	var servers []gateway.Server
	for _, s := range gw.Servers() {
		if s.URL != "" {
			// A remote server: its header files and variables, and its CA
			// bundle, are read now; no header value is ever recorded.
			rs, err := gateway.RemoteServerOf(s, m.Getenv)
			if err != nil {
				return withHint(fmt.Errorf("gateway %s: %w", config, err), "fix the file, the header file's mode or aegis's environment; nothing was started")
			}
			if s.OAuth != nil && s.OAuth.Exchange != nil {
				// Reached on behalf of each --listen caller: its token is the
				// caller's, exchanged in each session.
				if rs.Exchange, err = gateway.TokenExchangeOf(s, m.Getenv, nil); err != nil {
					return withHint(fmt.Errorf("gateway %s: %w", config, err), "fix the file, the secret file's mode or aegis's environment; nothing was started")
				}
			} else if s.OAuth != nil {
				// Its token is the one aegis auth login stored, encrypted,
				// in the state directory; none yet skips the server.
				dir, err := m.stateDir(stateDirFlag)
				if err != nil {
					return err
				}
				if rs.OAuth, err = gateway.OAuthOf(s, gateway.NewTokenStore(dir), m.Getenv, nil); err != nil {
					return withHint(fmt.Errorf("gateway %s: %w", config, err), "fix the file, the secret file's mode or aegis's environment; nothing was started")
				}
			}
			servers = append(servers, gateway.Server{Name: s.Name, Remote: rs, Unprefixed: s.Unprefixed, Alias: s.Alias})
			continue
		}
		// Each server gets a minimal environment and what the file gives
		// it, never aegis's whole environment; env files are read now.
		env, err := gateway.ServerEnv(os.Environ(), s)
		if err != nil {
			return withHint(fmt.Errorf("gateway %s: %w", config, err), "fix the file or its mode; nothing was started")
		}
		gs := gateway.Server{Name: s.Name, Argv: append([]string{s.Command}, s.Args...), Env: env, Unprefixed: s.Unprefixed, Alias: s.Alias}
		if s.Confine != nil {
			if err := confineSupported(runtime.GOOS, fmt.Sprintf("confine: (server %s in %s)", s.Name, config)); err != nil {
				return err
			}
			c := s.Confine
			p := &sandbox.Profile{ReadPaths: c.AllowRead, WritePaths: c.AllowWrite, ExecSupport: c.AllowExecSupport,
				BestEffort: c.BestEffort, AllowUDP: c.AllowUDP, AllowMPTCP: c.AllowMPTCP}
			for _, n := range c.AllowNet {
				p.Net = append(p.Net, sandbox.NetGrant{Host: n.Host, Port: n.Port})
			}
			if err := m.protect(p, keyPath, audit, stateDirFlag); err != nil {
				return err
			}
			gs.Confine = p
		}
		servers = append(servers, gs)
	}
	// As in wrap: until the servers start, a signal ends aegis at once
	// and none is started; from then on it ends the gateway.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	start := m.watchStart(ctx, sigs)
	defer start.done()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// From the session's start, the first signal stops the gateway and a
	// second one, or the deadline, ends aegis (watchStop).
	ended := make(chan struct{})
	defer close(ended)

	store, err := m.openStoreToRecord(start.ctx, stateDirFlag, true, maxBytes, hub)
	if err != nil {
		return start.err(err)
	}
	defer store.Close(context.Background())
	tx, err := m.startTelemetry(start.ctx, store, tcfg)
	if err != nil {
		return start.err(err)
	}
	defer m.closeTelemetry(tx)
	log := m.logger()
	if gw.Witnesses() != nil {
		if wit.policy != nil {
			return usagef("name the witnesses once: in the config's witnesses: or with --witness-policy", "--witness-policy and the config's witnesses: both name witnesses")
		}
		wit.policy = gw.Witnesses()
		if wit.interval == 0 {
			wit.interval = projector.DefaultWitnessInterval
		}
	}
	anchor, stopWitnessing, err := startAnchor(store, key, wit.policy, wit.interval, log)
	if err != nil {
		return start.err(err)
	}
	defer stopWitnessing()
	abs, _ := filepath.Abs(config)
	if lo != nil {
		self, _ := os.Executable()
		base := gateway.Config{
			Servers: servers, Policy: gw, DefaultProfile: gw.DefaultProfile(), Verbose: gw.Disclosure() == policy.DisclosureVerbose,
			Rules: gw.Rules(), OnToolChange: gw.OnToolChange(), DottedMetaTools: gw.DottedMetaTools(), Self: self, Stderr: m.Stderr,
			Approvals: m.approvalServer(store), Approvers: approvers, ApprovalTTL: ttl, Logger: log, HostProtocol: hostProtocol,
			ApprovalLink: m.approvalLinker(store.Dir()),
		}
		rec := projector.SessionConfig{Store: store, Key: key, AuditPath: audit, Argv: []string{"gateway", abs}, Version: Version,
			Profile: gw.DefaultProfile(), Logger: log, IndexEvery: indexEvery, Checkpoints: checkpoints, Anchor: anchor}
		return m.listenGateway(ctx, sigs, ended, start, lo, base, rec)
	}
	open := func(facts map[string]sandbox.Fact) (*projector.Session, error) {
		cfg := projector.SessionConfig{Store: store, Key: key, AuditPath: audit, Argv: []string{"gateway", abs}, Version: Version,
			Profile: gw.DefaultProfile(), Logger: log, IndexEvery: indexEvery, Checkpoints: checkpoints, Anchor: anchor}
		if len(facts) > 0 {
			cfg.Confinement = facts
		}
		sess, err := start.openSession(cfg)
		if err != nil {
			return nil, err
		}
		m.watchStop(sigs, stop, ended)
		return sess, nil
	}
	self, _ := os.Executable()
	stdout, restore := hostStdout()
	defer restore()
	sess, err := gateway.Run(ctx, gateway.Config{
		Servers: servers, Policy: gw, DefaultProfile: gw.DefaultProfile(), Verbose: gw.Disclosure() == policy.DisclosureVerbose,
		Rules: gw.Rules(), OnToolChange: gw.OnToolChange(), DottedMetaTools: gw.DottedMetaTools(), Open: open, Self: self, Stdin: os.Stdin, Stdout: stdout, Stderr: m.Stderr,
		Approvals: m.approvalServer(store), Approvers: approvers, ApprovalTTL: ttl, Logger: log, HostProtocol: hostProtocol,
		ApprovalLink: m.approvalLinker(store.Dir()),
	})
	var oe *proxy.OpenError
	if errors.As(err, &oe) {
		return openSessionError(oe.Err, audit)
	}
	var ns *gateway.NoServerError
	if errors.As(err, &ns) {
		err = withHint(err, "check each server's command, args and env (url, headers and ca_file for a remote one) in "+config+"; nothing was served")
	}
	if errors.Is(err, events.ErrFull) {
		err = withHint(err, fullHint(store.Dir()))
	} else if errors.Is(err, events.ErrDiskFull) {
		err = withHint(err, diskFullHint(store.Dir()))
	}
	if sess != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cerr := sess.Close(cctx); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}
