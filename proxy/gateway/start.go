package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The steps of [Gateway] before it serves: the gateway with its defaults,
// every local server prepared (a confined one's helper started, so that
// its fact goes into the open line), the session opened, the servers
// started, the host's first frame read, and the servers connected with the
// host's capabilities.

// newGateway is the gateway for cfg, with cfg's defaults filled in.
func newGateway(ctx context.Context, cfg Config) *gateway {
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
		state: policy.NewProfileState(cfg.DefaultProfile), mr: newMRTR()}
	g.life.init()
	g.life.stopped = ctx.Done()
	g.initTasks(ctx)
	g.gate = proxy.NewGate(cfg.Rules, cfg.ApprovalTTL)
	return g
}

// starting is a local server on its way up.
type starting struct {
	srv   Server
	cmd   *exec.Cmd
	tree  *sandbox.Tree
	child *sandbox.Child
	inW   *os.File
	outR  *os.File
	ends  [2]*os.File // the child's ends: its stdin and stdout
	err   error
}

// prepareServers makes the pipes and commands of every local server and
// starts the helpers of the confined ones, whose facts go into the open
// line; remotes are connected once the host's initialize is read. ends
// are the children's ends of the pipes, for the caller to close.
func (g *gateway) prepareServers(ctx context.Context) (starts []*starting, facts map[string]sandbox.Fact, remotes []Server, ends []*os.File, err error) {
	facts = map[string]sandbox.Fact{}
	for _, s := range g.cfg.Servers {
		if s.Remote != nil {
			remotes = append(remotes, s)
			continue
		}
		st := &starting{srv: s}
		starts = append(starts, st)
		inR, inW, err := os.Pipe()
		if err != nil {
			return starts, facts, remotes, ends, err
		}
		ends = append(ends, inR)
		outR, outW, err := os.Pipe()
		if err != nil {
			return starts, facts, remotes, ends, err
		}
		ends = append(ends, outW)
		st.inW, st.outR, st.ends = inW, outR, [2]*os.File{inR, outW}
		if s.Env == nil {
			s.Env, _ = ServerEnv(os.Environ(), policy.Server{Name: s.Name}) // no file: no error
		}
		if s.Confine == nil {
			st.cmd = exec.Command(s.Argv[0], s.Argv[1:]...)
			st.cmd.Stdin, st.cmd.Stdout, st.cmd.Stderr, st.cmd.Env = inR, outW, g.cfg.Stderr, s.Env
			continue
		}
		child, err := sandbox.Command(ctx, g.cfg.Self, *s.Confine, s.Argv)
		if err != nil {
			st.err = err
			continue
		}
		st.child, st.cmd = child, child.Cmd
		st.cmd.Stdin, st.cmd.Stdout, st.cmd.Stderr, st.cmd.Env = inR, outW, g.cfg.Stderr, s.Env
		fact, err := child.Start()
		if err != nil {
			st.err = err
			continue
		}
		facts[s.Name] = fact
	}
	return starts, facts, remotes, ends, nil
}

// startServers runs the prepared servers, once the session is open; a
// server that fails is skipped, said on stderr and recorded.
func (g *gateway) startServers(starts []*starting) (running []*starting, failed []ServerFailure) {
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
	return running, failed
}

// readHost reads the host's first frame (its initialize), over cfg.Host
// or stdio, for the capabilities the servers are told; it waits at most
// helloWait.
func (g *gateway) readHost(ctx context.Context) (host mcp.Transport, caps *mcp.ClientCapabilities, hostTasks json.RawMessage) {
	if g.cfg.Host != nil {
		hc := g.hostConnOf(ctx, g.cfg.Host)
		var stateless bool
		caps, hostTasks, stateless = hc.await(ctx, helloWait, g.cfg.HostProtocol >= newProtocol)
		g.stateless.Store(stateless)
		return connTransport{hc}, caps, hostTasks
	}
	hostR, hostW := g.hostTransport()
	first := readHello(hostR)
	var stateless bool
	caps, hostTasks, stateless = first.await(ctx, helloWait, g.cfg.HostProtocol >= newProtocol)
	g.stateless.Store(stateless)
	return &mcp.IOTransport{Reader: first, Writer: hostW}, caps, hostTasks
}

// connectServers initializes the running servers with the host's
// capabilities; one that does not answer within 30 s is killed, skipped
// and recorded.
func (g *gateway) connectServers(ctx context.Context, running []*starting, caps *mcp.ClientCapabilities, hostTasks json.RawMessage, failed []ServerFailure) []ServerFailure {
	for _, st := range running {
		stdin := newDownWriter(st.inW)
		client := g.newClient(st.srv.Name, caps, stdin)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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
	return failed
}
