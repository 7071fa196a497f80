package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// initializeFrame is the host's first frame: a protocol version that every
// aegis and go-sdk server this driver meets understands.
const initializeFrame = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"aegis-ab","version":"0"}}}` + "\n"

const initializedFrame = `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"

// callFrame is a tools/call of tool (echo through wrap, example__echo
// through the gateway) with id.
func callFrame(tool string, id int64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"message":"aegis-ab"}}}`+"\n", id, tool)
}

// config is what one run measures and how much.
type config struct {
	server  string
	calls   int // calls per measured CPU window
	warmup  int
	starts  int // starts per kind for the startup figure
	gwCalls int
	idle    time.Duration
	timeout time.Duration // for one round, both sides
}

// proc is a process the driver speaks JSON-RPC lines to, as a host.
type proc struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *tailBuffer
	nextID int64
	ended  bool // closed or killed
}

// tailBuffer keeps the last 4 KiB written to it, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// spawn starts argv with pipes on its stdin and stdout.
func spawn(name string, argv, env []string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(argv[0], argv[1:]...), stderr: &tailBuffer{}, nextID: 1}
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	in, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.in, p.out = in, bufio.NewReaderSize(out, 64<<10)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	return p, nil
}

// fail wraps err with the process's name and the end of its stderr.
func (p *proc) fail(what string, err error) error {
	if s := p.stderr.String(); s != "" {
		return fmt.Errorf("%s: %s: %w (its stderr: %s)", p.name, what, err, s)
	}
	return fmt.Errorf("%s: %s: %w", p.name, what, err)
}

// answer is what the driver reads of a line: its id and whether it is an
// error.
type answer struct {
	ID     *int64          `json:"id"`
	Error  json.RawMessage `json:"error"`
	Result *struct {
		IsError bool `json:"isError"`
	} `json:"result"`
}

// readAnswer reads lines until the answer to a request (a line with an id;
// notifications are read past) and returns its id; an error answer or a
// failed tool call is an error.
func (p *proc) readAnswer() (int64, error) {
	for {
		line, err := p.out.ReadSlice('\n')
		if err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
		var a answer
		if err := json.Unmarshal(line, &a); err != nil {
			return 0, fmt.Errorf("read %.200q: %w", line, err)
		}
		if a.ID == nil {
			continue
		}
		if len(a.Error) > 0 && string(a.Error) != "null" {
			return *a.ID, fmt.Errorf("answer %d is an error: %s", *a.ID, a.Error)
		}
		if a.Result != nil && a.Result.IsError {
			return *a.ID, fmt.Errorf("answer %d is a failed tool call: %.200s", *a.ID, line)
		}
		return *a.ID, nil
	}
}

// handshake sends initialize, waits for its answer, then sends
// notifications/initialized.
func (p *proc) handshake() error {
	if _, err := io.WriteString(p.in, initializeFrame); err != nil {
		return p.fail("initialize", err)
	}
	if _, err := p.readAnswer(); err != nil {
		return p.fail("initialize", err)
	}
	if _, err := io.WriteString(p.in, initializedFrame); err != nil {
		return p.fail("initialized", err)
	}
	return nil
}

// call makes one call of tool and waits for its answer.
func (p *proc) call(tool string) error {
	id := p.nextID
	p.nextID++
	if _, err := p.in.Write(callFrame(tool, id)); err != nil {
		return p.fail("call", err)
	}
	got, err := p.readAnswer()
	if err != nil {
		return p.fail("call", err)
	}
	if got != id {
		return p.fail("call", fmt.Errorf("answer to %d, want %d", got, id))
	}
	return nil
}

// calls makes n calls of tool with up to k in flight and returns how long
// they took from the first sent to the last answered.
func (p *proc) calls(tool string, n, k int) (time.Duration, error) {
	base := p.nextID
	p.nextID += int64(n)
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = callFrame(tool, base+int64(i))
	}
	slots := make(chan struct{}, k)
	stop := make(chan struct{})
	defer close(stop)
	werr := make(chan error, 1)
	start := time.Now()
	go func() {
		for _, f := range frames {
			select {
			case slots <- struct{}{}:
			case <-stop:
				werr <- nil
				return
			}
			if _, err := p.in.Write(f); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	seen := make([]bool, n)
	for range n {
		id, err := p.readAnswer()
		if err != nil {
			return 0, p.fail("calls", err)
		}
		i := id - base
		if i < 0 || i >= int64(n) || seen[i] {
			return 0, p.fail("calls", fmt.Errorf("unexpected answer id %d", id))
		}
		seen[i] = true
		<-slots
	}
	d := time.Since(start)
	if err := <-werr; err != nil {
		return 0, p.fail("calls", err)
	}
	return d, nil
}

// close closes stdin and waits for the process to end, killing it after
// a grace period; an exit status is not an error (the server's, relayed).
func (p *proc) close() error {
	if p.ended {
		return nil
	}
	p.ended = true
	p.in.Close()
	done := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, p.out)
		done <- p.cmd.Wait()
	}()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s: did not exit within 10s of its stdin closing; killed", p.name)
	}
}

// kill ends the process at once (on a failed run).
func (p *proc) kill() {
	if p.ended {
		return
	}
	p.ended = true
	p.cmd.Process.Kill()
	p.in.Close()
	go p.cmd.Wait()
}

// procCPU is the user plus system CPU time of pid, its threads included.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := parseProcStat(data)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/%w", pid, err)
	}
	return d, nil
}

// procRSS is the VmRSS of pid in kB.
func procRSS(pid int) (int64, error) {
	rss, err := procMemory(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	return rss[0], nil
}

// procMemory returns the given keys of /proc/PID/status in kB, in order.
func procMemory(pid int, keys ...string) ([]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	kbs := make([]int64, len(keys))
	for i, k := range keys {
		if kbs[i], err = parseStatusKB(data, k); err != nil {
			return nil, fmt.Errorf("/proc/%d/%w", pid, err)
		}
	}
	return kbs, nil
}

// rig is one side's binary with its own temporary directory and key.
type rig struct {
	mu    sync.Mutex
	procs []*exec.Cmd // every process started, killed when ctx ends
	aegis string
	dir   string
	key   string
	env   []string
	n     int // state directories made so far
}

// newRig makes a temporary directory under parent with a key from aegis's
// own keygen and a private XDG_RUNTIME_DIR (the gateway's approval
// channel lives there).
func newRig(ctx context.Context, aegis, parent string) (*rig, error) {
	dir, err := os.MkdirTemp(parent, "run-")
	if err != nil {
		return nil, err
	}
	r := &rig{aegis: aegis, dir: dir, key: filepath.Join(dir, "signing.key")}
	run := filepath.Join(dir, "xdg")
	if err := os.Mkdir(run, 0o700); err != nil {
		return nil, err
	}
	r.env = append(os.Environ(), "XDG_RUNTIME_DIR="+run)
	out, err := exec.CommandContext(ctx, aegis, "keygen", "--out", r.key).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s keygen: %w: %s", aegis, err, strings.TrimSpace(string(out)))
	}
	return r, nil
}

// fresh returns a new audit path and state directory.
func (r *rig) fresh() (audit, state string) {
	r.n++
	return filepath.Join(r.dir, fmt.Sprintf("calls-%d.aarl", r.n)), filepath.Join(r.dir, fmt.Sprintf("state-%d", r.n))
}

func (r *rig) wrapArgv(server string) []string {
	audit, state := r.fresh()
	return []string{r.aegis, "wrap", "--audit", audit, "--signing-key", r.key, "--state-dir", state, "--", server}
}

func (r *rig) gatewayArgv(server string) ([]string, error) {
	config := filepath.Join(r.dir, "aegis.yaml")
	yaml := fmt.Sprintf(`version: 1
servers:
  example:
    command: %q
profiles:
  bench:
    allow: [example.echo]
activation:
  default_profile: bench
error_disclosure: minimal
`, server)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	audit, state := r.fresh()
	return []string{r.aegis, "gateway", "--config", config, "--audit", audit, "--signing-key", r.key, "--state-dir", state}, nil
}

// spawn starts argv and keeps it to kill when the run's context ends.
func (r *rig) spawn(name string, argv []string) (*proc, error) {
	p, err := spawn(name, argv, r.env)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procs = append(r.procs, p.cmd)
	r.mu.Unlock()
	return p, nil
}

// killAll kills every process the rig started (an ended one ignores it),
// which ends any read the driver is blocked in.
func (r *rig) killAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.procs {
		c.Process.Kill()
	}
}

// start spawns argv and does the handshake.
func (r *rig) start(name string, argv []string) (*proc, error) {
	p, err := r.spawn(name, argv)
	if err != nil {
		return nil, err
	}
	if err := p.handshake(); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// A step measures some of the figures of one side.
type step struct {
	name string
	run  func(context.Context, config, *rig, Figures) error
}

// steps are what a round measures of each side, in order.
var steps = []step{{"startup", measureStartup}, {"wrap", measureWrap}, {"gateway", measureGateway}}

// measureRound measures every figure of both sides once, step by step,
// each step of A and of B back to back in the order rotation gives it
// (round r's steps are slots r·len(steps) on), so that the sides take
// turns going first. It returns the figures of A and B and, per step, the
// order it ran them in. Each side has its own directory and key for the
// round; everything it started is killed when ctx ends or the round
// outlasts cfg.timeout.
func measureRound(ctx context.Context, cfg config, bins [2]string, parent string, round int, log io.Writer) ([2]Figures, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	var rigs [2]*rig
	for s := range rigs {
		r, err := newRig(ctx, bins[s], parent)
		if err != nil {
			return [2]Figures{}, nil, err
		}
		defer os.RemoveAll(r.dir)
		stop := context.AfterFunc(ctx, r.killAll)
		defer stop()
		rigs[s] = r
	}
	figs := [2]Figures{{}, {}}
	order := rotation((round + 1) * len(steps))[2*round*len(steps):]
	var done []string
	for j, st := range steps {
		pair := order[2*j : 2*j+2]
		for _, s := range pair {
			fmt.Fprintf(log, "aegis-ab: round %d: %s of %s\n", round+1, st.name, s)
			if err := ctx.Err(); err != nil {
				return [2]Figures{}, nil, err
			}
			if err := st.run(ctx, cfg, rigs[s], figs[s]); err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("%w (the round's -timeout is %v)", context.Cause(ctx), cfg.timeout)
				}
				return [2]Figures{}, nil, fmt.Errorf("%s of %s: %w", st.name, s, err)
			}
		}
		done = append(done, fmt.Sprintf("%s %s %s", st.name, pair[0], pair[1]))
	}
	return figs, done, nil
}

// timeToInitialize spawns argv, sends initialize, and returns the time from
// the spawn to its answer.
func (r *rig) timeToInitialize(name string, argv []string) (time.Duration, error) {
	t0 := time.Now()
	p, err := r.spawn(name, argv)
	if err != nil {
		return 0, err
	}
	if _, err := io.WriteString(p.in, initializeFrame); err != nil {
		p.kill()
		return 0, p.fail("initialize", err)
	}
	if _, err := p.readAnswer(); err != nil {
		p.kill()
		return 0, p.fail("initialize", err)
	}
	d := time.Since(t0)
	return d, p.close()
}

// measureStartup: spawn to the initialize answer through aegis wrap on a
// new state directory, minus the bare server's, medians of interleaved
// starts (one of each untimed first).
func measureStartup(_ context.Context, cfg config, r *rig, fig Figures) error {
	var bare, wrap []time.Duration
	for i := range cfg.starts + 1 {
		b, err := r.timeToInitialize("server", []string{cfg.server})
		if err != nil {
			return err
		}
		w, err := r.timeToInitialize("aegis wrap", r.wrapArgv(cfg.server))
		if err != nil {
			return err
		}
		if i > 0 {
			bare, wrap = append(bare, b), append(wrap, w)
		}
	}
	fig["startup-ms"] = ms(medianDuration(wrap) - medianDuration(bare))
	fig["startup-wrap-ms"] = ms(medianDuration(wrap))
	fig["startup-server-ms"] = ms(medianDuration(bare))
	return nil
}

// measureWrap: one aegis wrap on a new state directory: its idle RSS
// after the handshake and 10 calls, then its CPU per call with 1 and with
// 64 in flight and its calls/s with 64.
func measureWrap(_ context.Context, cfg config, r *rig, fig Figures) error {
	p, err := r.start("aegis wrap", r.wrapArgv(cfg.server))
	if err != nil {
		return err
	}
	defer p.kill()
	pid := p.cmd.Process.Pid
	for range 10 {
		if err := p.call("echo"); err != nil {
			return err
		}
	}
	time.Sleep(cfg.idle)
	// VmRSS, and its two parts: the process's own memory (RssAnon: heap,
	// stacks) and the pages of files it maps (RssFile: mostly its own
	// binary, which the kernel may map whole, and which every process
	// running the same binary shares).
	kb, err := procMemory(pid, "VmRSS", "RssAnon", "RssFile")
	if err != nil {
		return err
	}
	fig["idle-rss-MiB"] = float64(kb[0]) / 1024
	fig["idle-rss-anon-MiB"] = float64(kb[1]) / 1024
	fig["idle-rss-file-MiB"] = float64(kb[2]) / 1024

	for _, k := range []int{1, 64} {
		if _, err := p.calls("echo", cfg.warmup, k); err != nil {
			return err
		}
		c0, err := procCPU(pid)
		if err != nil {
			return err
		}
		d, err := p.calls("echo", cfg.calls, k)
		if err != nil {
			return err
		}
		c1, err := procCPU(pid)
		if err != nil {
			return err
		}
		fig[fmt.Sprintf("cpu%d-µs", k)] = us(c1-c0) / float64(cfg.calls)
		fig[fmt.Sprintf("rate%d-calls/s", k)] = float64(cfg.calls) / d.Seconds()
	}
	return p.close()
}

// gatewayBatch is how many sequential calls go to one of the two
// processes before the other has its turn.
const gatewayBatch = 50

// measureGateway: sequential recorded calls through aegis gateway and
// through aegis wrap, both on new state directories, in alternating
// batches after a warm-up; the difference of the median latencies.
func measureGateway(_ context.Context, cfg config, r *rig, fig Figures) error {
	w, err := r.start("aegis wrap", r.wrapArgv(cfg.server))
	if err != nil {
		return err
	}
	defer w.kill()
	gargv, err := r.gatewayArgv(cfg.server)
	if err != nil {
		return err
	}
	g, err := r.start("aegis gateway", gargv)
	if err != nil {
		return err
	}
	defer g.kill()
	type series struct {
		p    *proc
		tool string
		d    []time.Duration
	}
	all := []*series{{p: w, tool: "echo"}, {p: g, tool: "example__echo"}}
	for _, s := range all {
		if _, err := s.p.calls(s.tool, cfg.warmup, 1); err != nil {
			return err
		}
	}
	for done := 0; done < cfg.gwCalls; done += gatewayBatch {
		n := min(gatewayBatch, cfg.gwCalls-done)
		for _, s := range all {
			for range n {
				t0 := time.Now()
				if err := s.p.call(s.tool); err != nil {
					return err
				}
				s.d = append(s.d, time.Since(t0))
			}
		}
	}
	mw, mg := medianDuration(all[0].d), medianDuration(all[1].d)
	fig["wrap-call-p50-µs"] = us(mw)
	fig["gateway-call-p50-µs"] = us(mg)
	fig["gateway-minus-wrap-µs"] = us(mg - mw)
	return errors.Join(w.close(), g.close())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
