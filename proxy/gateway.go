package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
)

// GatewayServer is one downstream MCP server of the gateway. Env is its
// whole environment, as [ServerEnv] builds it (a confined server gets it
// through the helper); nil gives it the minimal one, ServerEnv of aegis's
// environment with nothing added. Env is never recorded.
type GatewayServer struct {
	Name    string
	Argv    []string
	Env     []string
	Confine *sandbox.Profile // nil: not confined
	// Unprefixed shows the server's tools and prompts under their own
	// names, not <server>__<name> (the file's prefix: false).
	Unprefixed bool
	// Remote, when not nil, is a remote server (url:): no process runs,
	// and Argv, Env and Confine are unused (gateway_remote.go).
	Remote *RemoteServer
}

// GatewayPolicy is what the gateway asks of its configuration: profile
// membership of tools, prompts, resources and resource templates,
// transitions, and for verbose error disclosure the profile that would
// allow a refused tool or prompt. *policy.Gateway is one.
type GatewayPolicy interface {
	HasProfile(name string) bool
	ToolAllowed(profile, server, tool string) (bool, string)
	PromptAllowed(profile, server, prompt string) (bool, string)
	ResourceAllowed(profile, uri string) (bool, string)
	TemplateAllowed(profile, uriTemplate string) (bool, string)
	RequiredPromptProfile(active, server, prompt string) string
	Transition(from, to string) bool
	RequiredProfile(active, server, tool string) string
	RuleRequest(profile, server, tool, session string) policy.Request
}

// GatewayConfig runs the gateway.
type GatewayConfig struct {
	Servers        []GatewayServer
	Policy         GatewayPolicy
	DefaultProfile string
	Verbose        bool        // error disclosure: verbose (true) or minimal
	Rules          *policy.Set // optional wrap-style rules on top of profiles
	// OnToolChange is the config's on_tool_change (gateway_pins.go).
	OnToolChange policy.ToolChange
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
	Approvals func(session string, handle func(ApprovalOp) ApprovalReply) (stop func(), err error)
	// Approvers is [WrapConfig.Approvers] for the gateway's tool approvals
	// and escalations alike; an escalation's signed target is
	// [EscalationTarget].
	Approvers   *schemas.Approvers
	ApprovalTTL time.Duration
	Now         func() time.Time
	Logger      *slog.Logger

	// Grace is the shutdown grace (default [DefaultGatewayGrace]): for the
	// calls in flight when the host leaves, and between the steps that
	// stop a server.
	Grace time.Duration
}

// GatewayInstructions tell the agent how names work behind the gateway.
const GatewayInstructions = "You are operating behind aegis. Every tool is prefixed with its server origin via a double underscore (e.g. filesystem__read_file). Use the prefixed names exactly as listed. Some profile switches require human approval: call aegis.set_profile, then aegis.approval_status."

type downstream struct {
	name string
	cs   *mcp.ClientSession
	cmd  *exec.Cmd
	tree *sandbox.Tree // the server's process group and every process it starts
	proc *serverProc   // its stdin, its PID, its exit
	raw  *downRaw      // the gateway's own requests (tasks)
	// remote is a remote server's session; cmd, tree, proc and raw are
	// then nil (gateway_remote_conn.go).
	remote *remoteDown
}

type toolEntry struct {
	server, tool string
	def          *mcp.Tool
}

type gateway struct {
	cfg     GatewayConfig
	sess    *projector.Session
	srv     *mcp.Server
	log     *slog.Logger
	gate    *gate
	downs   map[string]*downstream
	tools   map[string]toolEntry // wire name -> entry
	res     map[string]string    // resource URI -> server
	resDefs map[string]*mcp.Resource

	// pmu serializes profile changes: check against a clone of the state,
	// record the event durably, then fold it into the state.
	pmu sync.Mutex

	life lifecycle // the host leaving, and the calls in flight then

	mu      sync.Mutex
	state   *policy.ProfileState // a fold of the session's profile events
	visible map[string]bool      // wire names registered with the server
	visRes  map[string]bool

	pt promptTable // prompts and resource templates
	fw forwarder   // what is forwarded besides calls, and the list_changed relisting
	tk *tasker     // tasks, which the SDK does not carry

	pins *gatewayPins // the servers' tool pins (gateway_pins.go)
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
// cancelled, then every server is stopped (see [DefaultGatewayGrace]).
func Gateway(ctx context.Context, cfg GatewayConfig) (*projector.Session, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	g := &gateway{cfg: cfg, log: cfg.Logger, downs: map[string]*downstream{}, tools: map[string]toolEntry{},
		res: map[string]string{}, resDefs: map[string]*mcp.Resource{}, visible: map[string]bool{}, visRes: map[string]bool{},
		state: policy.NewProfileState(cfg.DefaultProfile)}
	g.life.init()
	g.initTasks(ctx)
	if cfg.Rules != nil {
		g.gate = newGate(cfg.Rules, cfg.ApprovalTTL)
	} else {
		g.gate = &gate{ttl: cfg.ApprovalTTL, pending: map[string]*PendingApproval{}, resolved: map[string]string{}, allow: map[string][]allowance{}}
		if g.gate.ttl <= 0 {
			g.gate.ttl = DefaultApprovalTTL
		}
	}

	// Start every helper (confined) first: their facts go into the open line.
	type starting struct {
		srv   GatewayServer
		cmd   *exec.Cmd
		tree  *sandbox.Tree
		child *sandbox.Child
		inW   *os.File
		outR  *os.File
		ends  [2]*os.File // the child's ends: its stdin and stdout
		err   error
	}
	var starts []*starting
	facts := map[string]sandbox.Fact{}
	var remotes []GatewayServer // connected once the host's initialize is read
	for _, s := range cfg.Servers {
		if s.Remote != nil {
			remotes = append(remotes, s)
			continue
		}
		st := &starting{srv: s}
		starts = append(starts, st)
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		st.inW, st.outR, st.ends = inW, outR, [2]*os.File{inR, outW}
		if s.Env == nil {
			s.Env, _ = ServerEnv(os.Environ(), policy.Server{Name: s.Name}) // no file: no error
		}
		if s.Confine != nil {
			child, err := sandbox.Command(ctx, cfg.Self, *s.Confine, s.Argv)
			if err != nil {
				st.err = err
			} else {
				st.child, st.cmd = child, child.Cmd
				st.cmd.Stdin, st.cmd.Stdout, st.cmd.Stderr, st.cmd.Env = inR, outW, cfg.Stderr, s.Env
				fact, err := child.Start()
				if err != nil {
					st.err = err
				} else {
					facts[s.Name] = fact
				}
			}
		} else {
			st.cmd = exec.Command(s.Argv[0], s.Argv[1:]...)
			st.cmd.Stdin, st.cmd.Stdout, st.cmd.Stderr, st.cmd.Env = inR, outW, cfg.Stderr, s.Env
		}
		// The child's ends are closed after it starts (below); on failure now.
		defer inR.Close()
		defer outW.Close()
	}
	sess, err := cfg.Open(facts)
	if err != nil {
		for _, st := range starts {
			if st.child != nil && st.err == nil {
				st.child.Abort()
			}
		}
		return nil, &OpenError{Err: err}
	}
	g.sess = sess
	g.gate.number(policy.NewApprovalIDs(sess.Seq()))
	g.pins = newGatewayPins(g)
	g.gate.pins = g.pins

	var failed []ServerFailure
	var running []*starting
	for _, st := range starts {
		if st.err == nil {
			if st.child != nil {
				st.err, st.tree = st.child.Go(), st.child.Tree()
			} else {
				st.tree, st.err = sandbox.StartTree(st.cmd)
			}
		}
		// Only the child holds its ends now: a server that dies while it
		// starts is seen at once (EOF), not after the connect timeout.
		st.ends[0].Close()
		st.ends[1].Close()
		if st.err != nil {
			g.skip(st.srv.Name, "start", st.err)
			failed = append(failed, ServerFailure{Server: st.srv.Name, Stage: "start", Err: st.err})
			continue
		}
		g.sess.Fact(schemas.KindChildStarted, map[string]any{"server": st.srv.Name, "pid": st.cmd.Process.Pid, "argv": st.srv.Argv})
		running = append(running, st)
	}

	// The servers are told the host's capabilities, so the host's first
	// frame (its initialize) is read before they are initialized.
	var host mcp.Transport
	var caps *mcp.ClientCapabilities
	var hostTasks json.RawMessage
	if cfg.Host != nil {
		hc := g.hostConnOf(ctx, cfg.Host)
		caps, hostTasks = hc.await(ctx, helloWait)
		host = connTransport{hc}
	} else {
		hostR, hostW := g.hostTransport()
		first := readHello(hostR)
		caps, hostTasks = first.await(ctx, helloWait)
		host = &mcp.IOTransport{Reader: first, Writer: hostW}
	}
	g.tk.hostCaps = hostTasks
	g.pins.setCaps(caps)
	for _, st := range running {
		client := g.newClient(st.srv.Name, caps)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		stdin := newDownWriter(st.inW)
		raw := newDownRaw(st.srv.Name, stdin)
		cs, err := client.Connect(cctx, &mcp.IOTransport{Reader: g.tk.serverReader(raw, st.outR), Writer: &serverOut{w: stdin, tasks: hostTasks}}, downstreamSession)
		cancel()
		if err != nil {
			stdin.closeStdin()
			st.tree.Kill()
			go st.tree.Wait()
			g.skip(st.srv.Name, "connect", err)
			failed = append(failed, ServerFailure{Server: st.srv.Name, Stage: "connect", Err: err})
			continue
		}
		g.downs[st.srv.Name] = &downstream{name: st.srv.Name, cs: cs, cmd: st.cmd, tree: st.tree, proc: newServerProc(st.cmd, st.tree, stdin), raw: raw}
	}
	failed = g.connectRemotes(ctx, remotes, caps, failed)
	if len(g.downs) == 0 {
		// Nothing to serve but the meta-tools: refuse, as for a bad file.
		return sess, &NoServerError{Failed: failed}
	}
	defer g.shutdown()
	// A stop (the caller's ctx) is the host leaving too: the calls in
	// flight get the grace.
	defer context.AfterFunc(ctx, func() { g.leave("aegis was told to stop") })()

	if err := g.aggregate(ctx); err != nil {
		return sess, err
	}

	g.srv = g.newServer()
	g.addMetaTools()
	g.addPrompts(ctx)
	g.addTemplates(ctx)
	g.applyProfile()
	g.srv.AddReceivingMiddleware(g.middleware)

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
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "EOF") {
		return sess, err
	}
	return sess, nil
}

// skip records a downstream server that could not be used.
func (g *gateway) skip(name, stage string, err error) {
	err = g.scrubbed(name, err)
	fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s skipped: %s: %v\n", name, stage, err)
	if _, rerr := g.sess.Fact(schemas.KindNote, map[string]string{"server": name, "skipped": stage, "error": err.Error()}); rerr != nil {
		g.log.Warn("record skipped server", "err", rerr)
	}
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
		for t, err := range d.cs.Tools(ctx, nil) {
			if err != nil {
				g.skip(n, "tools/list", err)
				complete = false
				break
			}
			listed = append(listed, t)
			def := g.toolDef(n, t)
			wire := def.Name
			if prev, dup := origin[wire]; dup {
				return fmt.Errorf("tool name collision: %s.%s and %s both become %q; rename a server, or keep prefixes (prefix: false keeps a server's own names)", n, t.Name, prev, wire)
			}
			if strings.HasPrefix(wire, metaPrefix) {
				return fmt.Errorf("tool %s.%s would shadow the gateway's meta-tools as %q; rename the server", n, t.Name, wire)
			}
			origin[wire] = n + "." + t.Name
			g.tools[wire] = toolEntry{server: n, tool: t.Name, def: def}
		}
		if complete {
			g.pins.observe(n, listed) // a listing cut short says nothing of what was removed
		}
		g.noteOwners(ctx, n, d.cs)
		for r, err := range d.cs.Resources(ctx, nil) {
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
		for rt, err := range d.cs.ResourceTemplates(ctx, nil) {
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
			g.pt.templates = append(g.pt.templates, &templateEntry{server: n, def: &def, cs: d.cs})
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
		for p, err := range d.cs.Prompts(ctx, nil) {
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
			g.pt.prompts[wire] = promptEntry{server: n, prompt: p.Name, def: &def, cs: d.cs}
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
		ok, _ := g.cfg.Policy.ToolAllowed(profile, e.server, e.tool)
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
		g.srv.AddTool(t, g.forwardTool(e, g.downs[e.server].cs))
	}
	var rremove []string
	for uri, server := range g.res {
		ok, _ := g.cfg.Policy.ResourceAllowed(profile, uri)
		if ok && !g.visRes[uri] {
			cs := g.downs[server].cs
			g.srv.AddResource(g.resDefs[uri], func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
			})
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

// capDenied is the AEGIS_CAP_DENIED payload.
func (g *gateway) capDenied(server, tool, profile string) string {
	m := map[string]string{"code": "AEGIS_CAP_DENIED", "capability": server + "." + tool, "active_profile": profile,
		"hint": "capability requires a profile that allows it"}
	if g.cfg.Verbose {
		if rp := g.cfg.Policy.RequiredProfile(profile, server, tool); rp != "" {
			m["required_profile"] = rp
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func textResult(s string, isErr bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, IsError: isErr}
}

// middleware records and enforces tools/call, prompts/get and
// resources/read (see gateway_prompts.go); what they refuse or fail with
// reaches the host as a JSON-RPC error with a real code (gateway_refusal.go).
func (g *gateway) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call":
			r, ok := req.(*mcp.CallToolRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			return g.toolsCall(ctx, method, r, next)
		case "prompts/get":
			r, ok := req.(*mcp.GetPromptRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			return g.promptsGet(ctx, method, r, next)
		case "resources/read":
			r, ok := req.(*mcp.ReadResourceRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			return g.resourcesRead(ctx, method, r, next)
		}
		return next(ctx, method, req)
	}
}

// toolsCall records one tools/call: intent before anything runs, outcome
// before the answer goes back.
func (g *gateway) toolsCall(ctx context.Context, method string, r *mcp.CallToolRequest, next mcp.MethodHandler) (mcp.Result, error) {
	res, err := g.decideCall(ctx, method, r.Params.Name, r.Params.Arguments, func(cctx context.Context, _ schemas.WrapCall, _ toolEntry) (any, error) {
		return next(cctx, method, r)
	})
	if err != nil {
		return nil, err
	}
	if r, ok := res.(mcp.Result); ok {
		return r, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: no answer to tools/call (%T)", res)}
}

// callRunner runs a tools/call that decideCall let through, as call wc
// of tool e, under cctx.
type callRunner func(cctx context.Context, wc schemas.WrapCall, e toolEntry) (any, error)

// decideCall decides and records one tools/call of the wire tool name with
// args: intent before anything runs, outcome before the answer goes back.
// run runs it when it is let through. The answer is a *mcp.CallToolResult
// (a meta-tool's, or a refusal) or what run returned.
func (g *gateway) decideCall(ctx context.Context, method, name string, args json.RawMessage, run callRunner) (any, error) {
	// The call runs under cctx (see callContext); recording waits for the
	// store whatever happens to the call or the host.
	cctx, release := g.callContext(ctx)
	defer release()
	ctx = context.WithoutCancel(ctx)
	reqBytes, _ := json.Marshal(map[string]any{"name": name, "arguments": json.RawMessage(orEmptyObject(args))})
	dg := sha(reqBytes)
	profile := g.active()
	policyHash := schemas.WrapPassthroughPolicySetHash
	if g.cfg.Rules != nil {
		policyHash = g.cfg.Rules.Hash()
	}
	wc := schemas.WrapCall{CallID: g.sess.NextCallID(), ToolID: name, RequestDigest: dg, PolicySetHash: policyHash}
	axes := schemas.DecisionAxes{Role: profile}
	rc, err := g.sess.Intent(wc.Intent())
	if err == nil {
		_, err = rc.Wait(ctx)
	}
	if err != nil {
		return nil, auditRefusal(method, fmt.Errorf("record the intent, so the call was not run: %w", err))
	}
	finish := func(o schemas.Outcome, res any) (any, error) {
		rc, err := g.sess.Outcome(o)
		if err == nil {
			_, err = rc.Wait(ctx)
		}
		if err != nil {
			return nil, auditRefusal(method, fmt.Errorf("record the outcome, so the answer is withheld: %w", err))
		}
		return res, nil
	}
	start := g.cfg.Now()
	if strings.HasPrefix(name, "aegis.") {
		axes.Capability = name
		res := g.meta(name, args)
		b, _ := json.Marshal(res)
		o := wc.Answered(sha(b), uint64(g.cfg.Now().Sub(start).Milliseconds()))
		o.DecisionAxes = axes
		return finish(o, res)
	}
	e, known := g.tool(name)
	if !known {
		o := wc.Refused(schemas.PolicyDenied("unknown tool"), "")
		o.DecisionAxes = axes
		return finish(o, textResult(fmt.Sprintf("unknown tool %q", name), true))
	}
	axes.Capability = e.server + "." + e.tool
	allowed, pattern := g.cfg.Policy.ToolAllowed(profile, e.server, e.tool)
	axes.MatchedRule = pattern
	if !allowed {
		o := wc.Refused(schemas.PolicyDenied("not in active profile allow-list"), "")
		o.DecisionAxes = axes
		return finish(o, textResult(g.capDenied(e.server, e.tool, profile), true))
	}
	axes.ToolPin = g.pins.pinOf(e.server, e.tool)
	if d, why, refused := g.pins.refuse(e.server, e.tool, start); refused {
		// Changed since it was pinned: hidden, and refused until re-pinned.
		o := wc.Refused(d.Record(), d.MatchedRule)
		axes.MatchedRule = d.MatchedRule
		o.DecisionAxes = axes
		why["code"], why["capability"], why["active_profile"] = policy.RefusalCode(d), axes.Capability, profile
		b, _ := json.Marshal(why)
		return finish(o, textResult(string(b), true))
	}
	if g.cfg.Rules != nil {
		// Decided and, when an approval lets it through, that approval
		// spent, in one step: concurrent calls never share one.
		gd := g.gate.decideRequest(g.cfg.Policy.RuleRequest(profile, e.server, e.tool, g.sess.ID()), args, start)
		if err := recordLapsed(g.sess, gd.lapsed); err != nil {
			g.log.Error("record approval expiry", "err", err)
		}
		if gd.decision.Verdict != policy.Allow {
			o := wc.Refused(gd.decision.Record(), gd.decision.MatchedRule)
			axes.MatchedRule = gd.decision.MatchedRule
			o.DecisionAxes = axes
			if gd.decision.Verdict == policy.PendingApproval {
				p := PendingApproval{ApprovalID: gd.decision.ApprovalID, ToolID: name, RequestDigest: dg, ArgsDigest: gd.argsDigest,
					Session: g.sess.ID(), RequestedAt: start.UTC(), ExpiresAt: start.Add(g.gate.ttl).UTC(),
					MatchedRule: gd.decision.MatchedRule, Profile: profile}
				p.Args, p.ArgsBytes = argsPreview(canonicalArgs(args))
				g.sess.Fact(schemas.KindApprovalRequested, p)
				g.gate.request(p)
				fmt.Fprint(g.cfg.Stderr, approvalPrompt(p))
			}
			refusal := map[string]string{"code": policy.RefusalCode(gd.decision), "capability": axes.Capability, "active_profile": profile, "reason": gd.decision.Reason}
			if id := gd.decision.ApprovalID; id != "" {
				// Only a pending approval has an id; a denial or a rate
				// limit names none.
				refusal["approval_id"] = id
				refusal["hint"] = "run: aegis approve " + quoteArg(id) + " (or: aegis deny " + quoteArg(id) + "), then call the tool again with the same arguments: the approval lets it through once"
			}
			b, _ := json.Marshal(refusal)
			return finish(o, textResult(string(b), true))
		}
		axes.ApprovalRef = gd.approval
		if gd.decision.MatchedRule != "" {
			axes.MatchedRule = gd.decision.MatchedRule
		}
	}
	res, err := g.runCall(cctx, wc, e, run)
	if err != nil {
		if o, ok := g.cancelledOutcome(cctx, wc, g.downs[e.server], start); ok {
			o.DecisionAxes = axes
			if _, ferr := finish(o, nil); ferr != nil {
				return nil, ferr
			}
			return nil, err
		}
		o := wc.Seed()
		o.Policy = schemas.PolicyAllowed()
		o.Capability = schemas.CapabilityGranted(schemas.DenyAllGrant(name, schemas.WrapGrantPrefix+wc.CallID))
		o.GrantID = schemas.WrapGrantPrefix + wc.CallID
		o.Execution = schemas.ExecutionTrap("downstream error: " + err.Error())
		o.DecisionAxes = axes
		if _, ferr := finish(o, nil); ferr != nil {
			return nil, ferr
		}
		return nil, hostError(err)
	}
	b, _ := json.Marshal(res)
	o := wc.Answered(sha(b), uint64(g.cfg.Now().Sub(start).Milliseconds()))
	o.DecisionAxes = axes
	defer g.undelivered(wc)
	return finish(o, res)
}

func orEmptyObject(b json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

func (g *gateway) addMetaTools() {
	obj := func(prop string) *jsonSchema {
		return &jsonSchema{Type: "object", Properties: map[string]*jsonSchema{prop: {Type: "string"}}, Required: []string{prop}}
	}
	noop := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("meta-tools are answered by the gateway middleware")
	}
	g.srv.AddTool(&mcp.Tool{Name: "aegis.set_profile", Description: "Switch the active aegis profile. Along an allowed transition it switches at once; otherwise a human must approve (see aegis.approval_status).", InputSchema: obj("name")}, noop)
	g.srv.AddTool(&mcp.Tool{Name: "aegis.approval_status", Description: "Ask whether a profile switch was approved; an approved switch is applied now.", InputSchema: obj("id")}, noop)
}

type jsonSchema struct {
	Type       string                 `json:"type"`
	Properties map[string]*jsonSchema `json:"properties,omitempty"`
	Required   []string               `json:"required,omitempty"`
}

// meta answers a meta-tool.
func (g *gateway) meta(name string, args json.RawMessage) *mcp.CallToolResult {
	var a struct {
		Name string `json:"name"`
		ID   string `json:"id"`
	}
	if err := json.Unmarshal(orEmptyObject(args), &a); err != nil {
		return textResult("invalid arguments: "+err.Error(), true)
	}
	now := g.cfg.Now().UTC()
	switch name {
	case "aegis.set_profile":
		from := g.active()
		switch {
		case !g.cfg.Policy.HasProfile(a.Name):
			return textResult(fmt.Sprintf("code=AEGIS_PROFILE_UNKNOWN active=%s approval=", from), false)
		case a.Name == from:
			return textResult(fmt.Sprintf("code=OK active=%s approval=", from), false)
		case g.cfg.Policy.Transition(from, a.Name):
			ev := policy.ProfileEvent{Kind: policy.EventSwitched, From: from, To: a.Name, Source: policy.SourceAgent, At: now}
			if err := g.profileEvent(ev, schemas.KindProfileSwitched, nil); err != nil {
				return textResult("switch failed: "+err.Error(), true)
			}
			return textResult(fmt.Sprintf("code=OK active=%s approval=", a.Name), false)
		}
		id := g.gate.ids.Next("esc")
		exp := now.Add(g.gate.ttl)
		ev := policy.ProfileEvent{Kind: policy.EventSwitchRequested, ID: id, From: from, To: a.Name, Source: policy.SourceAgent, At: now, ExpiresAt: exp}
		if err := g.profileEvent(ev, schemas.KindApprovalRequested, map[string]any{"approval_id": id, "kind": "profile", "from": from, "to": a.Name, "expires_at": exp}); err != nil {
			return textResult("request failed: "+err.Error(), true)
		}
		fmt.Fprintf(g.cfg.Stderr, "aegis: approval needed: switch from profile %q to %q (approval %s)\naegis: hint: run: aegis approve %s   (or: aegis deny %s)\n", from, a.Name, id, quoteArg(id), quoteArg(id))
		return textResult(fmt.Sprintf("code=AEGIS_PENDING_APPROVAL active=%s approval=%s", from, id), false)
	case "aegis.approval_status":
		g.expireDue(now)
		g.mu.Lock()
		e, ok := g.state.Escalation(a.ID)
		g.mu.Unlock()
		if !ok {
			return textResult("unknown: no such approval", false)
		}
		switch e.Status {
		case policy.EscalationApproved:
			ev := policy.ProfileEvent{Kind: policy.EventSwitchApplied, ID: e.ID, From: e.From, To: e.To, Source: policy.SourceHuman, At: now}
			if err := g.profileEvent(ev, schemas.KindProfileSwitched, map[string]any{"approval_id": e.ID}); err != nil {
				if errors.Is(err, policy.ErrApprovalWrongProfile) {
					return textResult(fmt.Sprintf("pending: approved for a switch from %s, but the active profile is %s", e.From, g.active()), false)
				}
				return textResult("not applied: "+err.Error(), false)
			}
			return textResult("approved", false)
		case policy.EscalationApplied:
			return textResult("denied: already used", false)
		}
		return textResult(e.Status.String(), false)
	}
	return textResult(fmt.Sprintf("unknown tool %q", name), true)
}

// expireDue records the expiry of every escalation whose time ran out.
func (g *gateway) expireDue(now time.Time) {
	g.mu.Lock()
	due := g.state.Due(now)
	g.mu.Unlock()
	for _, id := range due {
		ev := policy.ProfileEvent{Kind: policy.EventSwitchExpired, ID: id, At: now}
		if err := g.profileEvent(ev, schemas.KindApprovalExpired, map[string]any{"approval_id": id}); err != nil {
			g.log.Warn("record expiry", "err", err)
		}
	}
}

// handleApproval resolves escalations (esc-…) and tool approvals (apr-…).
// An escalation may be approved or denied whatever profile the agent is
// in by then: the approval stays bound to the profile it was requested
// from, which aegis.approval_status checks when it applies the switch (a
// refused apply does not spend it).
func (g *gateway) handleApproval(op ApprovalOp) ApprovalReply {
	now := g.cfg.Now().UTC()
	if op.Op == "list" {
		g.expireDue(now)
		out := g.gate.list(now)
		g.mu.Lock()
		for _, e := range g.state.Pending() {
			out = append(out, PendingApproval{ApprovalID: e.ID, ToolID: EscalationTarget(e.From, e.To),
				Session: g.sess.ID(), RequestedAt: e.RequestedAt, ExpiresAt: e.ExpiresAt, Profile: e.From})
		}
		g.mu.Unlock()
		return ApprovalReply{OK: true, Pending: out}
	}
	if !strings.HasPrefix(op.ApprovalID, "esc-") {
		return decideApproval(g.sess, g.gate, g.cfg.Approvers, op, now, func(err error) { g.log.Error("approval", "err", err) })
	}
	if op.Op != "approve" && op.Op != "deny" {
		return ApprovalReply{Error: fmt.Sprintf("unknown request %q", op.Op)}
	}
	g.expireDue(now)
	refuse := func(why string) ApprovalReply {
		g.sess.Fact(schemas.KindApprovalRefused, refusedFact(op, why))
		return ApprovalReply{Error: why}
	}
	g.mu.Lock()
	e, ok := g.state.Escalation(op.ApprovalID)
	g.mu.Unlock()
	if !ok {
		return refuse(fmt.Sprintf("no approval %q is pending in this session", op.ApprovalID))
	}
	var approver schemas.Approver
	if g.cfg.Approvers != nil && op.Op == "approve" {
		ap, err := g.cfg.Approvers.Check(schemas.ApprovalClaim{ApprovalID: e.ID, Session: g.sess.ID(), Target: EscalationTarget(e.From, e.To)}, op.Approver)
		if err != nil {
			return refuse(err.Error())
		}
		approver = ap
	}
	kind := policy.EventSwitchApproved
	if op.Op == "deny" {
		kind = policy.EventSwitchDenied
	}
	ev := policy.ProfileEvent{Kind: kind, ID: op.ApprovalID, Source: policy.SourceHuman, At: now}
	d := schemas.Decision{ApprovalID: e.ID, ApproverKeyID: approver.KeyID}
	msg := fmt.Sprintf("approved %s: the switch from %s to %s applies when the agent asks aegis.approval_status", e.ID, e.From, e.To)
	if active := g.active(); active != e.From {
		// Approved all the same: the binding to e.From is checked when the
		// switch is applied, so the decision waits for the agent's return.
		msg += fmt.Sprintf(" from profile %s (the agent is in %s now; until %s)", e.From, active, e.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if op.Op == "approve" {
		d.Verdict = schemas.Approved(schemas.ApprovalScope{ToolID: "aegis.set_profile"})
	} else {
		reason := op.Reason
		if reason == "" {
			reason = "denied by operator"
		}
		d.Verdict = schemas.Rejected(reason)
		msg = "denied " + e.ID
	}
	// One event says it all: the signed decision line and the profile
	// event it resolves. The state must accept the verdict before anything
	// is signed, and the check and the record are one step, so a second
	// approve or deny of the same escalation is refused, never recorded.
	if approver.KeyID != "" && op.Op == "approve" {
		msg += "; signed by " + approver.Label()
	}
	resolved := map[string]any{"from": e.From, "to": e.To}
	for k, v := range resolvedFact(op, e.ID, approver) {
		resolved[k] = v
	}
	err := g.recordProfileEvent(ev, resolved,
		func(payload map[string]any) (*events.Receipt, error) { return g.sess.DecisionWith(d, payload) })
	var re *recordError
	switch {
	case errors.As(err, &re):
		return ApprovalReply{Error: "could not record the decision: " + re.err.Error()}
	case err != nil:
		return refuse(err.Error())
	}
	return ApprovalReply{OK: true, Message: msg, Decided: &PendingApproval{ApprovalID: e.ID, ToolID: EscalationTarget(e.From, e.To),
		Session: g.sess.ID(), RequestedAt: e.RequestedAt, ExpiresAt: e.ExpiresAt, Profile: e.From}}
}

// EscalationTarget is what an escalation from one profile to another is
// listed as, and what an approver signs as its target.
func EscalationTarget(from, to string) string { return "aegis.set_profile " + from + " -> " + to }

// frameTap records the host's frames as they are read.
type frameTap struct {
	r    io.ReadCloser
	g    *gateway
	kind schemas.Kind
	buf  []byte
}

func (t *frameTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil {
		// Before the SDK sees the end, so that it is not taken for a
		// cancellation of the calls in flight.
		defer t.g.leave("the host closed its stdin")
	}
	t.buf = append(t.buf, p[:n]...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.g.recordFrame(t.kind, t.buf[:i])
		t.buf = t.buf[i+1:]
	}
	return n, err
}

func (t *frameTap) Close() error { return t.r.Close() }

// frameTapW records the frames written to the host.
type frameTapW struct {
	w   io.WriteCloser
	g   *gateway
	buf []byte
}

func (t *frameTapW) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.g.recordFrame(schemas.KindFrameS2C, t.buf[:i])
		t.buf = t.buf[i+1:]
	}
	return t.w.Write(p)
}

func (t *frameTapW) Close() error { return t.w.Close() }

func (g *gateway) recordFrame(kind schemas.Kind, b []byte) {
	if len(b) > MaxFrame {
		return
	}
	// A copy: the store keeps it until the commit that takes it.
	if err := g.sess.LazyFrame(kind, append([]byte(nil), b...)); err != nil {
		g.log.Warn("record frame", "err", err)
	}
}
