package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// Server is one downstream MCP server of the gateway. Env is its
// whole environment, as [ServerEnv] builds it (a confined server gets it
// through the helper); nil gives it the minimal one, ServerEnv of aegis's
// environment with nothing added. Env is never recorded.
type Server struct {
	Name    string
	Argv    []string
	Env     []string
	Confine *sandbox.Profile // nil: not confined
	// Unprefixed shows the server's tools and prompts under their own
	// names, not <server>__<name> (the file's prefix: false).
	Unprefixed bool
	// Alias gives some of its tools another name toward the host (the
	// file's alias:, see [policy.Server]): the server's tool name → the
	// name that replaces it in the wire name.
	Alias map[string]string
	// Remote, when not nil, is a remote server (url:): no process runs,
	// and Argv, Env and Confine are unused (remote.go).
	Remote *RemoteServer
}

// Policy is what the gateway asks of its configuration: profile
// membership of tools, prompts, resources and resource templates,
// transitions, and for verbose error disclosure the profile that would
// allow a refused tool or prompt. *policy.Gateway is one.
type Policy interface {
	HasProfile(name string) bool
	ToolAllowed(profile, server, tool string) (bool, string)
	PromptAllowed(profile, server, prompt string) (bool, string)
	ResourceAllowed(profile, uri string) (bool, string)
	TemplateAllowed(profile, uriTemplate string) (bool, string)
	ServerResourcesAllowed(profile, server string) (bool, string)
	RequiredPromptProfile(active, server, prompt string) string
	Transition(from, to string) bool
	RequiredProfile(active, server, tool string) string
	RuleRequest(profile, server, tool, session string) policy.Request
}

// Config runs the gateway.
type Config struct {
	Servers        []Server
	Policy         Policy
	DefaultProfile string
	Verbose        bool        // error disclosure: verbose (true) or minimal
	Rules          *policy.Set // optional wrap-style rules on top of profiles
	// OnToolChange is the config's on_tool_change (pins.go).
	OnToolChange policy.ToolChange
	// DottedMetaTools lists the meta-tools under the seed's names,
	// aegis.set_profile and aegis.approval_status, instead of the names
	// every host accepts, aegis__set_profile and aegis__approval_status
	// (meta_tool_names, see [policy.MetaToolNames]).
	DottedMetaTools bool
	// Open opens the audit session once every confinement fact is known
	// (server name -> fact); no server runs before it returns.
	Open   func(confinement map[string]sandbox.Fact) (*projector.Session, error)
	Self   string
	Stdin  io.ReadCloser
	Stdout io.WriteCloser
	// Host, when not nil, is the host instead of Stdin and Stdout: a
	// message connection, such as one HTTP client's session of
	// [mcp.StreamableServerTransport], already connected. The caller
	// closes it once Gateway returned (and may first answer the host's
	// initialize with Gateway's error, if nothing answered it).
	Host      mcp.Connection
	Stderr    io.Writer // downstream stderr and prompts
	Approvals func(session string, handle func(proxy.ApprovalOp) proxy.ApprovalReply) (stop func(), err error)
	// Approvers is [WrapConfig.Approvers] for the gateway's tool approvals
	// and escalations alike; an escalation's signed target is
	// [EscalationTarget].
	Approvers   *schemas.Approvers
	ApprovalTTL time.Duration
	// ApprovalLink, when not nil, makes the link that opens pending
	// approval p for a human (aegis console's approval link), or says why
	// it cannot ("" and why: no console runs). Toward a host that
	// declared URL elicitation, a call that waits for approval is then
	// refused with MCP's URLElicitationRequired error carrying the link,
	// and the host is told when the approval is decided (elicit.go).
	ApprovalLink func(p proxy.PendingApproval) (link, why string)
	Now          func() time.Time
	Logger       *slog.Logger
	// Principal, when not nil, is who the session serves (a validated
	// OAuth token of an HTTP session): it is recorded in each call's
	// intent, rules' conditions see it, and approvals name it.
	Principal *schemas.Principal
	// CallerToken, when not nil, is the access token of the session's
	// caller (with Principal), as it sends it now: a url server with
	// oauth: token_exchange: is reached with it exchanged (exchange.go).
	// Without it such a server is refused. It is never recorded.
	CallerToken func() string

	// HostProtocol is the newest protocol version offered to the host:
	// "" offers the session protocol (up to 2025-11-25); "2026-07-28"
	// offers that too, whose hosts are served without sessions, their
	// calls carrying the servers' requests as input requests (mrtr.go).
	// The servers are spoken to in the session protocol either way.
	HostProtocol string

	// Grace is the shutdown grace (default [DefaultGrace]): for the
	// calls in flight when the host leaves, and between the steps that
	// stop a server.
	Grace time.Duration
}

type downstream struct {
	name string
	cs   *mcp.ClientSession // a local server's session; a remote one's is remote.session()
	cmd  *exec.Cmd
	tree *sandbox.Tree // the server's process group and every process it starts
	proc *serverProc   // its stdin, its PID, its exit
	raw  *downRaw      // the gateway's own requests (tasks)
	// remote is a remote server's session; cmd, tree, proc and raw are
	// then nil (remote_conn.go).
	remote *remoteDown
}

// session is d's session with its server: for a remote server, the one
// that runs now (it is replaced when the server is reconnected).
func (d *downstream) session() *mcp.ClientSession {
	if d.remote != nil {
		return d.remote.session()
	}
	return d.cs
}

type toolEntry struct {
	server, tool string // the server, and its own name for the tool (what it is called by)
	// name is what profiles, rules and the record call the tool: its
	// alias when the gateway file gives one, else tool.
	name string
	def  *mcp.Tool
}

type gateway struct {
	cfg     Config
	sess    *projector.Session
	srv     *mcp.Server
	log     *slog.Logger
	gate    *proxy.Gate
	downs   map[string]*downstream
	tools   map[string]toolEntry // wire name -> entry
	res     map[string]string    // resource URI -> server
	resDefs map[string]*mcp.Resource

	// pmu serializes profile changes: check against a clone of the state,
	// record the event durably, then fold it into the state.
	pmu sync.Mutex

	smu     sync.Mutex
	skipped map[string]string // server -> why it was skipped (scrubbed)

	life lifecycle // the host leaving, and the calls in flight then

	mu      sync.Mutex
	state   *policy.ProfileState // a fold of the session's profile events
	visible map[string]bool      // wire names registered with the server
	visRes  map[string]bool

	pt promptTable // prompts and resource templates
	fw forwarder   // what is forwarded besides calls, and the list_changed relisting
	tk *tasker     // tasks, which the SDK does not carry
	mr *mrtr       // the calls of 2026-07-28 hosts across their requests
	// stateless: the host's first request was a 2026-07-28 one (hello.go),
	// so a server's roots/list before the host's session exists waits for
	// its first call (mrtr.go).
	stateless atomic.Bool

	pins *gatewayPins // the servers' tool pins (pins.go)

	el elicits // approvals shown to the host through URL elicitation (elicit.go)
}

// active returns the active profile.
func (g *gateway) active() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state.Active()
}

// profileEvent records ev as an event of kind and folds it into the
// profile state, only if the state accepts it: the live state is always the
// fold of what is on disk.
func (g *gateway) profileEvent(ev policy.ProfileEvent, kind schemas.Kind, extra map[string]any) error {
	return g.recordProfileEvent(ev, extra, func(payload map[string]any) (*events.Receipt, error) {
		return g.sess.Fact(kind, payload)
	})
}

// recordError is a profile event the state accepted but that could not be
// recorded.
type recordError struct{ err error }

func (e *recordError) Error() string { return "record profile event: " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

// recordProfileEvent checks ev against the state, has record write the one
// event that carries it (payload: ev and extra), waits until it is durable
// and folds ev into the state, all under pmu, so that two requests can
// never both pass the check. An error from the state comes back as it is;
// a failure to record as a *recordError.
func (g *gateway) recordProfileEvent(ev policy.ProfileEvent, extra map[string]any, record func(payload map[string]any) (*events.Receipt, error)) error {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	g.mu.Lock()
	test := g.state.Clone()
	g.mu.Unlock()
	if err := test.Apply(ev); err != nil {
		return err
	}
	payload := map[string]any{"profile_event": ev}
	if ev.Kind == policy.EventSwitched || ev.Kind == policy.EventSwitchApplied {
		payload["profile"] = ev.To // what replay and sessions show as the active profile
	}
	for k, v := range extra {
		payload[k] = v
	}
	rc, err := record(payload)
	if err == nil {
		_, err = rc.Wait(context.Background())
	}
	if err != nil {
		return &recordError{err}
	}
	g.mu.Lock()
	err = g.state.Apply(ev)
	g.mu.Unlock()
	if ev.Kind == policy.EventSwitched || ev.Kind == policy.EventSwitchApplied {
		g.applyProfile()
	}
	return err
}

// Gateway runs the gateway until the host disconnects: it starts and
// connects every downstream server (a server that fails is skipped, said on
// stderr and recorded; when none is left, Gateway returns a
// *[NoServerError] and serves nothing), aggregates their tools (as
// server__tool), resources and prompts, and serves the host (over stdio,
// or cfg.Host), showing only what the active profile allows. Every tools/call,
// meta-tools included, is recorded as an intent before it is forwarded and
// an outcome before the host gets the answer; denials are never silent.
// When the host leaves, the calls in flight finish within the grace or are
// cancelled, then every server is stopped (see [DefaultGrace]).
func Run(ctx context.Context, cfg Config) (*projector.Session, error) {
	g := newGateway(ctx, cfg)
	cfg = g.cfg
	starts, facts, remotes, ends, err := g.prepareServers(ctx)
	// The child's ends are closed after it starts (startServers); on a
	// failure before, here.
	defer func() {
		for _, f := range ends {
			f.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	sess, err := cfg.Open(facts)
	if err != nil {
		for _, st := range starts {
			if st.child != nil && st.err == nil {
				st.child.Abort()
			}
		}
		return nil, &proxy.OpenError{Err: err}
	}
	g.sess = sess
	g.gate.Number(policy.NewApprovalIDs(sess.Seq()))
	g.pins = newGatewayPins(g)
	g.gate.Pins = g.pins
	running, failed := g.startServers(starts)

	// The servers are told the host's capabilities, so the host's first
	// frame (its initialize) is read before they are initialized.
	host, caps, hostTasks := g.readHost(ctx)
	g.tk.hostCaps = hostTasks
	g.pins.setCaps(caps)
	g.el.hostURL = caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
	failed = g.connectServers(ctx, running, caps, hostTasks, failed)
	failed = g.connectRemotes(ctx, remotes, caps, failed)
	if len(g.downs) == 0 {
		// Nothing to serve but the meta-tools: refuse, as for a bad file.
		return sess, &NoServerError{Failed: failed}
	}
	defer g.shutdown()
	// A stop (the caller's ctx) is the host leaving too: the calls in
	// flight get the grace.
	defer context.AfterFunc(ctx, func() { g.leave("aegis was told to stop") })()
	if g.cfg.Host == nil {
		// A host that left reads nothing more: once the grace is over its
		// stdout is closed, so that a write it never reads (a server's
		// progress, into a full pipe) cannot hold the gateway's ending. A
		// non-blocking stdout's pending write ends with the close.
		defer context.AfterFunc(g.life.drained, func() { g.cfg.Stdout.Close() })()
	}

	if err := g.aggregate(ctx); err != nil {
		return sess, err
	}

	g.srv = g.newServer()
	g.addMetaTools()
	g.addPrompts(ctx)
	g.addTemplates(ctx)
	g.applyProfile()
	g.srv.AddReceivingMiddleware(g.middleware)
	if g.cfg.Host != nil {
		g.tk.addPlainMethod(g.srv)
	}

	if cfg.Approvals != nil {
		stop, err := cfg.Approvals(sess.ID(), g.handleApproval)
		if err != nil {
			return sess, fmt.Errorf("serve approvals: %w", err)
		}
		defer stop()
	}
	g.tk.ready.Store(true)
	err = g.srv.Run(ctx, host)
	// The task requests in flight have the grace, as the calls do.
	if ctx.Err() == nil {
		g.leave("the host's connection ended")
	}
	// The host can no longer answer the servers' requests put to it.
	g.tk.hostRaw.fail(io.EOF)
	g.tk.close()
	// A write to the stdout closed after the grace (the host had left)
	// is no failure either.
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "EOF") &&
		!(g.left() && errors.Is(err, os.ErrClosed)) {
		return sess, err
	}
	return sess, nil
}

// skip records a downstream server that could not be used.
func (g *gateway) skip(name, stage string, err error) {
	err = g.scrubbed(name, err)
	fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s skipped: %s: %v\n", name, stage, err)
	g.smu.Lock()
	if g.skipped == nil {
		g.skipped = map[string]string{}
	}
	g.skipped[name] = err.Error()
	g.smu.Unlock()
	if _, rerr := g.sess.Fact(schemas.KindNote, map[string]string{"server": name, "skipped": stage, "error": err.Error()}); rerr != nil {
		g.log.Warn("record skipped server", "err", rerr)
	}
}

// skippedFor is the skipped server whose prefix tool (a wire name) has,
// and why it was skipped; "" when it has none.
func (g *gateway) skippedFor(tool string) (string, string) {
	server, _, ok := strings.Cut(tool, "__")
	if !ok {
		return "", ""
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	return server, g.skipped[server]
}

// aggregate lists every downstream's tools and resources, namespacing
// tools, and notes which server owns each prompt and URI template; a
// duplicate, a wire-name collision or a tool that would shadow a meta-tool
// fails start-up.
func (g *gateway) aggregate(ctx context.Context) error {
	names := make([]string, 0, len(g.downs))
	for n := range g.downs {
		names = append(names, n)
	}
	sort.Strings(names)
	origin := map[string]string{} // wire -> server.tool
	for _, n := range names {
		d := g.downs[n]
		var listed []*mcp.Tool
		complete := true
		for t, err := range d.session().Tools(ctx, nil) {
			if err != nil {
				g.skip(n, "tools/list", err)
				complete = false
				break
			}
			def := g.toolDef(n, t)
			wire := def.Name
			if prev, dup := origin[wire]; dup {
				return fmt.Errorf("tool name collision: %s.%s and %s both become %q; rename a server, keep prefixes (prefix: false keeps a server's own names), or give one an alias:", n, t.Name, prev, wire)
			}
			if isMeta(wire) {
				return fmt.Errorf("tool %s.%s would shadow the gateway's meta-tools as %q; rename the server, or give the tool an alias:", n, t.Name, wire)
			}
			if why := g.shadows(n, t.Name, wire, nil); why != "" {
				g.refuseTool(n, t.Name, wire, "tool_name", why)
				continue
			}
			listed = append(listed, t)
			origin[wire] = n + "." + t.Name
			g.tools[wire] = toolEntry{server: n, tool: t.Name, name: g.toolName(n, t.Name), def: def}
		}
		if complete {
			g.pins.observe(n, listed) // a listing cut short says nothing of what was removed
		}
		g.noteOwners(ctx, n, d.session())
		if r := d.session().InitializeResult(); r != nil {
			g.pins.observeInstructions(n, r.Instructions)
		}
		for r, err := range d.session().Resources(ctx, nil) {
			if err != nil {
				break // a server without resources
			}
			if _, taken := g.res[r.URI]; taken {
				continue
			}
			g.res[r.URI] = n
			def := *r
			g.resDefs[r.URI] = &def
		}
	}
	return nil
}

// addTemplates aggregates resource templates; applyPrompts shows those
// the active profile can reach. A read through one is routed to the
// server that offered it and, like every read, checked against the active
// profile's URI patterns in the middleware.
func (g *gateway) addTemplates(ctx context.Context) {
	seen := map[string]bool{}
	for _, n := range sortedDowns(g.downs) {
		d := g.downs[n]
		var listed []any
		complete := true
		for rt, err := range d.session().ResourceTemplates(ctx, nil) {
			if err != nil {
				complete = false
				break
			}
			listed = append(listed, rt)
			if seen[rt.URITemplate] {
				continue
			}
			seen[rt.URITemplate] = true
			def := *rt
			g.pt.templates = append(g.pt.templates, &templateEntry{server: n, def: &def, down: d})
		}
		if complete && len(listed) > 0 {
			g.pins.observeKind(schemas.PinKindResourceTemplate, n, listed)
		}
	}
}

func sortedDowns(m map[string]*downstream) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// addPrompts aggregates prompts as <server>__<prompt>, servers in name
// order; applyPrompts shows those the active profile allows. A prompt
// whose wire name is taken is refused and recorded.
func (g *gateway) addPrompts(ctx context.Context) {
	if g.pt.prompts == nil {
		g.pt.prompts = map[string]promptEntry{}
	}
	for _, n := range sortedDowns(g.downs) {
		d := g.downs[n]
		var listed []any
		complete := true
		for p, err := range d.session().Prompts(ctx, nil) {
			if err != nil {
				complete = false
				break
			}
			listed = append(listed, p)
			wire := g.wireName(n, p.Name)
			if prev, dup := g.pt.prompts[wire]; dup {
				g.notePrompt(fmt.Sprintf("prompt %s.%s refused: %s.%s already has the name %q", n, p.Name, prev.server, prev.prompt, wire),
					map[string]string{"server": n, "prompt": p.Name, "refused": "name collision with " + prev.server + "." + prev.prompt})
				continue
			}
			def := *p
			def.Name = wire
			g.pt.prompts[wire] = promptEntry{server: n, prompt: p.Name, def: &def, down: d}
		}
		if complete && len(listed) > 0 {
			g.pins.observeKind(schemas.PinKindPrompt, n, listed)
		}
	}
}

// applyProfile makes the server's tool, resource, prompt and resource
// template lists those of the active profile; the SDK tells the host that
// the lists changed.
func (g *gateway) applyProfile() {
	profile := g.active()
	var add []*mcp.Tool
	var remove []string
	for wire, e := range g.tools {
		ok, _ := g.cfg.Policy.ToolAllowed(profile, e.server, e.name)
		ok = ok && !g.pins.hidden(e.server, e.tool)
		if ok && !g.visible[wire] {
			add = append(add, e.def)
			g.visible[wire] = true
		} else if !ok && g.visible[wire] {
			remove = append(remove, wire)
			delete(g.visible, wire)
		}
	}
	if len(remove) > 0 {
		g.srv.RemoveTools(remove...)
	}
	for _, t := range add {
		e := g.tools[t.Name]
		g.srv.AddTool(t, g.forwardTool(e, g.downs[e.server]))
	}
	var rremove []string
	for uri, server := range g.res {
		ok, _ := g.cfg.Policy.ResourceAllowed(profile, uri)
		if !ok {
			ok, _ = g.cfg.Policy.ServerResourcesAllowed(profile, server)
		}
		if ok && !g.visRes[uri] {
			g.srv.AddResource(g.resDefs[uri], readFrom(g.downs[server]))
			g.visRes[uri] = true
		} else if !ok && g.visRes[uri] {
			rremove = append(rremove, uri)
			delete(g.visRes, uri)
		}
	}
	if len(rremove) > 0 {
		g.srv.RemoveResources(rremove...)
	}
	g.applyPrompts(profile)
}
