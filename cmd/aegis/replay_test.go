package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events/platform"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// cmd runs one command of this package in-process: through the command
// table once the command is in it, else by calling its run function with
// the error handling of Main.Run.
func cmd(t testing.TB, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	return cmdCtx(t, context.Background(), env, args...)
}

func cmdCtx(t testing.TB, ctx context.Context, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := m.runIn(ctx, args)
	return code, out.String(), errb.String()
}

func (m *Main) runIn(ctx context.Context, args []string) int {
	for _, c := range m.commands() {
		if c.name == args[0] {
			return m.Run(ctx, args)
		}
	}
	run := map[string]func(*Main, context.Context, []string) error{
		"sessions": (*Main).runSessions,
		"replay":   (*Main).runReplay,
		"recheck":  (*Main).runRecheck,
	}[args[0]]
	if run == nil {
		panic("no command " + args[0])
	}
	return m.exit(run(m, ctx, args[1:]))
}

var (
	binsOnce sync.Once
	binsDir  string
	binsErr  error
)

// bins builds aegis and the example server once per test binary run, into
// a directory of their own (a confined server is granted read on it),
// named after this process; the directories of runs that are gone are
// removed first. Under make test they are the ones it built for every
// package (AEGIS_TEST_BINDIR), linked once.
func bins(t testing.TB) string {
	t.Helper()
	binsOnce.Do(func() {
		if d := os.Getenv("AEGIS_TEST_BINDIR"); d != "" {
			binsDir = d
			return
		}
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), "aegis-cli-test-bin-*"))
		for _, d := range old {
			if pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "aegis-cli-test-bin-")); err == nil && !platform.Alive(pid) {
				os.RemoveAll(d)
			}
		}
		binsDir = filepath.Join(os.TempDir(), "aegis-cli-test-bin-"+strconv.Itoa(os.Getpid()))
		if binsErr = os.MkdirAll(binsDir, 0o755); binsErr != nil {
			return
		}
		var root string
		if root, binsErr = filepath.Abs(filepath.Join("..", "..")); binsErr != nil {
			return
		}
		// One go build of them all, side by side.
		c := exec.Command("go", "build", "-o", binsDir+string(filepath.Separator), "./cmd/aegis", "./cmd/aegis-example-server", "./cmd/aegis/testdata/openkey")
		c.Dir = root
		if b, err := c.CombinedOutput(); err != nil {
			binsErr = fmt.Errorf("%s: %v\n%s", strings.Join(c.Args, " "), err, b)
			return
		}
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return binsDir
}

// live is one state directory, key, record file and runtime directory for
// real aegis processes.
type live struct {
	t       *testing.T
	dir     string
	bin     string
	state   string
	audit   string
	key     string
	runtime string
	policy  string
	env     []string
}

func newLive(t *testing.T, policy string) *live {
	t.Helper()
	dir := t.TempDir()
	l := &live{t: t, dir: dir, bin: bins(t), state: filepath.Join(dir, "state"), audit: filepath.Join(dir, "calls.aarl"),
		key: filepath.Join(dir, "signing.key"), runtime: filepath.Join(dir, "run")}
	if err := os.Mkdir(l.runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	l.env = append(os.Environ(), "XDG_RUNTIME_DIR="+l.runtime, "USER=tester")
	if policy != "" {
		l.policy = filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(l.policy, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(filepath.Join(l.bin, "aegis"), "keygen", "--out", l.key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	return l
}

// aegis runs the aegis binary and returns its combined output and exit code.
func (l *live) aegis(args ...string) (string, int) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandLimit)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(l.bin, "aegis"), args...)
	c.Env = l.env
	b, err := c.CombinedOutput()
	if ctx.Err() != nil {
		l.t.Fatalf("aegis %v did not end within %v (killed):\n%s", args, commandLimit, b)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(b), ee.ExitCode()
	}
	if err != nil {
		l.t.Fatalf("aegis %v: %v", args, err)
	}
	return string(b), 0
}

// commandLimit bounds one aegis command of a test: one that hangs fails
// the test and is killed, rather than outliving it.
const commandLimit = 3 * time.Minute

// aegisStdout runs the aegis binary and returns its stdout, stderr and
// exit code.
func (l *live) aegisStdout(args ...string) (string, string, int) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandLimit)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(l.bin, "aegis"), args...)
	c.Env = l.env
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		l.t.Fatalf("aegis %v did not end within %v (killed):\n%s", args, commandLimit, errb.Bytes())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	if err != nil {
		l.t.Fatalf("aegis %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// in runs an aegis command in-process against the state directory.
func (l *live) in(args ...string) (int, string, string) {
	l.t.Helper()
	return cmd(l.t, nil, append([]string{args[0], "--state-dir", l.state}, args[1:]...)...)
}

// wrapProc is a running aegis wrap driven over raw JSON-RPC lines.
type wrapProc struct {
	l       *live
	c       *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	prompts chan string
	sent    [][]byte // every line written, without '\n'
	got     [][]byte // every line read
	done    chan error
}

func (l *live) wrap(confine bool) *wrapProc {
	l.t.Helper()
	args := []string{"wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state}
	if l.policy != "" {
		args = append(args, "--policy", l.policy)
	}
	if confine {
		args = append(args, "--confine", "--allow-exec-support", "--allow-read", l.bin)
	}
	args = append(args, "--", filepath.Join(l.bin, "aegis-example-server"))
	return l.start(exec.Command(filepath.Join(l.bin, "aegis"), args...))
}

// start runs c with the live environment, its stdin and stdout piped, and
// its stderr lines sent to the process's prompts channel.
func (l *live) start(c *exec.Cmd) *wrapProc {
	l.t.Helper()
	c.Env = l.env
	w := &wrapProc{l: l, c: c, prompts: make(chan string, 64), done: make(chan error, 1)}
	var err error
	if w.in, err = c.StdinPipe(); err != nil {
		l.t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	w.out = bufio.NewReader(out)
	stderr, err := c.StderrPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { c.Process.Kill(); <-w.done })
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case w.prompts <- sc.Text():
			default:
			}
		}
		w.done <- c.Wait()
		close(w.prompts)
	}()
	return w
}

// send writes one line.
func (w *wrapProc) send(line string) {
	w.l.t.Helper()
	w.sent = append(w.sent, []byte(line))
	if _, err := io.WriteString(w.in, line+"\n"); err != nil {
		w.l.t.Fatalf("write to aegis wrap: %v", err)
	}
}

// call sends a request and returns the answer with its id.
func (w *wrapProc) call(id int, method, params string) string {
	w.l.t.Helper()
	w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	want := fmt.Sprintf(`"id":%d,`, id)
	for {
		line, err := w.out.ReadBytes('\n')
		if err != nil {
			w.l.t.Fatalf("answer to %s %d: %v", method, id, err)
		}
		w.got = append(w.got, bytes.TrimSuffix(line, []byte{'\n'}))
		if bytes.Contains(line, []byte(want)) {
			return string(line)
		}
	}
}

func (w *wrapProc) initialize() {
	w.l.t.Helper()
	w.call(0, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"replay-test","version":"1"}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// approvalID waits for the approval prompt on stderr.
func (w *wrapProc) approvalID() string {
	w.l.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case p, ok := <-w.prompts:
			if !ok {
				w.l.t.Fatal("aegis wrap exited without an approval prompt")
			}
			if i := strings.Index(p, "run: aegis approve "); i >= 0 {
				return strings.Fields(p[i+len("run: aegis approve "):])[0]
			}
		case <-timeout:
			w.l.t.Fatal("no approval prompt on stderr")
		}
	}
}

// finish closes the host's side and waits for aegis to exit.
func (w *wrapProc) finish() {
	w.l.t.Helper()
	w.in.Close()
	select {
	case err := <-w.done:
		if err != nil {
			w.l.t.Fatalf("aegis wrap: %v", err)
		}
		w.done <- nil
	case <-time.After(30 * time.Second):
		w.l.t.Fatal("aegis wrap did not exit")
	}
}

// kill SIGKILLs aegis wrap (the server then sees EOF and exits).
func (w *wrapProc) kill() {
	w.c.Process.Signal(syscall.SIGKILL)
	err := <-w.done
	w.done <- err
}

// normalizer replaces what differs between runs (ids, times, digests,
// pids, paths, durations) with placeholders.
type normalizer struct {
	paths [][2]string
}

var normRules = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b`), "<ID>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<TIME>"},
	{regexp.MustCompile(`\b[0-9a-f]{64}\b`), "<DIGEST>"},
	{regexp.MustCompile(`key [0-9a-f]{12}…`), "key <KEY>…"},
	{regexp.MustCompile(`(?m)^(<ID>  )?\s*[+-]\d+\.\d{3}s`), "${1}+<T>"},
	{regexp.MustCompile(`pid \d+`), "pid <PID>"},
	{regexp.MustCompile(`"(pos|intent_pos)":\{"index":\d+,"seq":\d+\}`), `"$1":<POS>`},
	{regexp.MustCompile(`"(pid|offset_ms|wall_ms)":-?\d+`), `"$1":<N>`},
	{regexp.MustCompile(`"version":"[^"]*"`), `"version":<VERSION>`},
	{regexp.MustCompile(` in \d+ ms`), " in <N> ms"},
	{regexp.MustCompile(`landlock ABI \d+`), "landlock ABI <N>"},
	{regexp.MustCompile(`"(landlock_abi|fs_rules)":\d+`), `"$1":<N>`},
	{regexp.MustCompile(`\(\d+ fs rules`), "(<N> fs rules"},
}

func (n *normalizer) norm(s string) string {
	for _, p := range n.paths {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	host, _ := os.Hostname()
	if host != "" {
		s = strings.ReplaceAll(s, "tester@"+host, "tester@<HOST>")
	}
	for _, r := range normRules {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	return s
}

// normJSONLines normalises JSON steps: the confinement fact itself (paths,
// kernel and architecture details) becomes "<FACT>"; the summary stays.
func (n *normalizer) normJSONLines(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if c, ok := m["confinement"].(map[string]any); ok {
			c["fact"] = "<FACT>"
		}
		if m["kind"] == "record.checkpoint" {
			// Over lines that hold times: the size is what is stable.
			if p, ok := m["payload"].(map[string]any); ok {
				p["root"], p["note"], p["bytes"] = "<ROOT>", "<NOTE>", "<BYTES>"
				if a, ok := p["anchor"].(map[string]any); ok {
					a["note"] = "<ANCHOR NOTE>"
				}
			}
		}
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		enc.Encode(m)
		b.WriteString(n.norm(out.String()))
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -run '%s' -update rewrites it)\n--- got\n%s\n--- want\n%s", name, t.Name(), got, want)
	}
}

const scriptedPolicy = `version: 1
rules:
  - id: no-fail
    action: deny
    tool: fail
    reason: fail is disabled here
  - id: gate-add
    action: pending_approval
    tool: add
`

// scriptedSession runs the scripted session of the golden files: the
// example server (confined when confine is set), an allowed call, a
// refused call, a call pending approval, its approval from a second
// process, and the approved call.
func scriptedSession(t *testing.T, confine bool) (*live, *wrapProc) {
	l := newLive(t, scriptedPolicy)
	w := l.wrap(confine)
	w.initialize()
	w.call(1, "tools/list", `{}`)
	if a := w.call(2, "tools/call", `{"name":"echo","arguments":{"message":"hello"}}`); !strings.Contains(a, `"hello"`) {
		t.Fatalf("echo: %s", a)
	}
	if a := w.call(3, "tools/call", `{"name":"fail","arguments":{"reason":"boom"}}`); !strings.Contains(a, "POLICY_DENIED") {
		t.Fatalf("fail: %s", a)
	}
	if a := w.call(4, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	if out, code := l.aegis("approve", id); code != 0 {
		t.Fatalf("aegis approve %s: %d %s", id, code, out)
	}
	if a := w.call(5, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	w.finish()
	return l, w
}

func (l *live) normalizer() *normalizer {
	return &normalizer{paths: [][2]string{{l.bin, "<BIN>"}, {l.dir, "<DIR>"}}}
}

// Golden transcripts of a scripted session through real processes: the
// example server confined, a refused call, an approval, the child's exit.
func TestReplayGoldenScriptedSession(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	if os.Geteuid() != 0 {
		t.Skip("the scripted session confines its server; confinement tests run as root (CI does)")
	}
	l, w := scriptedSession(t, true)
	n := l.normalizer()

	code, out, stderr := l.in("replay", "last")
	if code != 0 || stderr != "" {
		t.Fatalf("replay: exit %d, stderr %q", code, stderr)
	}
	golden(t, "replay-scripted.golden", n.norm(out))

	code, out, _ = l.in("replay", "--json", "last")
	if code != 0 {
		t.Fatalf("replay --json: exit %d", code)
	}
	golden(t, "replay-scripted.json.golden", n.normJSONLines(t, out))

	code, out, _ = l.in("sessions")
	if code != 0 {
		t.Fatalf("sessions: exit %d", code)
	}
	golden(t, "sessions-scripted.golden", n.norm(out))

	// --frames prints every frame exactly as it crossed the wire.
	code, out, _ = l.in("replay", "--frames", "last")
	if code != 0 {
		t.Fatalf("replay --frames: exit %d", code)
	}
	var frames [][]byte
	for _, line := range strings.Split(out, "\n") {
		if b, ok := strings.CutPrefix(line, "    > "); ok {
			frames = append(frames, []byte(b))
		}
	}
	wire := append(append([][]byte{}, w.sent...), w.got...)
	sortBytes(wire)
	sortBytes(frames)
	if len(frames) != len(wire) {
		t.Fatalf("--frames printed %d frames, %d crossed the wire", len(frames), len(wire))
	}
	for i := range wire {
		if !bytes.Equal(frames[i], wire[i]) {
			t.Errorf("frame %d: printed %q, on the wire %q", i, frames[i], wire[i])
		}
	}
	// And in JSON, as base64.
	_, out, _ = l.in("replay", "--json", "--frames", "last")
	n64 := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var st struct {
			Frame *struct {
				Bytes string `json:"bytes"`
			} `json:"frame"`
		}
		json.Unmarshal([]byte(line), &st)
		if st.Frame != nil {
			if _, err := base64.StdEncoding.DecodeString(st.Frame.Bytes); err != nil || st.Frame.Bytes == "" {
				t.Errorf("frame bytes %q", st.Frame.Bytes)
			}
			n64++
		}
	}
	if n64 != len(wire) {
		t.Errorf("--json --frames: %d frames", n64)
	}
}

func sortBytes(b [][]byte) {
	sort.Slice(b, func(i, j int) bool { return bytes.Compare(b[i], b[j]) < 0 })
}

// A session killed mid-call replays with the call marked in flight and the
// session as killed; while it still ran, it replayed (from a snapshot) as
// running.
func TestReplayKilledMidCall(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"before"}}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"ms":10000}}}`)
	// The store is held by the running wrap: sessions lists from the
	// index the wrap keeps (or, before its first save, a snapshot) and
	// sees the slow call in flight.
	var running []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, stderr := l.in("sessions", "--json")
		if code != 0 {
			t.Fatalf("sessions while running: exit %d, %s", code, stderr)
		}
		if !strings.Contains(stderr, "listing from the index it keeps") && !strings.Contains(stderr, "reading a snapshot") {
			t.Fatalf("sessions while running did not say what it read: %q", stderr)
		}
		running = nil
		json.Unmarshal([]byte(out), &running)
		if len(running) == 1 && running[0]["in_flight"] == float64(1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow call never showed in flight: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if running[0]["state"] != "running" || running[0]["pid"] != float64(w.c.Process.Pid) {
		t.Fatalf("while running: %v", running[0])
	}
	code, out, _ := l.in("replay", "last")
	if code != 0 || !strings.Contains(out, "in-flight call-2 slow: in flight") || !strings.Contains(out, "end       running: aegis process") {
		t.Fatalf("replay while running: exit %d\n%s", code, out)
	}
	if left, _ := filepath.Glob(filepath.Join(l.state, "readers", "*")); len(left) != 0 {
		t.Errorf("snapshots left behind: %v", left)
	}
	w.kill()
	n := l.normalizer()
	code, out, stderr := l.in("replay", "last")
	if code != 0 || strings.Contains(stderr, "aegis:") { // the embedded server may warn that it recovers from the crash
		t.Fatalf("replay after the kill: exit %d, stderr %q", code, stderr)
	}
	golden(t, "replay-killed.golden", n.norm(out))
	_, out, _ = l.in("sessions")
	if !strings.Contains(out, " killed ") {
		t.Errorf("sessions after the kill:\n%s", out)
	}
	// aegis verify agrees: one call in flight.
	if vout, code := l.aegis("verify", l.audit); code != 3 || !strings.Contains(vout, "in_flight call-2") {
		t.Errorf("verify: exit %d\n%s", code, vout)
	}
}

// --follow prints a running session as it grows and stops by itself when
// it closes; without SESSION it follows across aegis processes.
func TestReplayFollow(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"one"}}`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		code        int
		out, stderr string
	}
	one := make(chan result, 1)
	all := make(chan result, 1)
	go func() {
		code, out, stderr := cmdCtx(t, ctx, nil, "replay", "--state-dir", l.state, "--follow", "last")
		one <- result{code, out, stderr}
	}()
	go func() {
		code, out, stderr := cmdCtx(t, ctx, nil, "replay", "--state-dir", l.state, "--follow")
		all <- result{code, out, stderr}
	}()
	time.Sleep(time.Second)
	w.call(2, "tools/call", `{"name":"echo","arguments":{"message":"two"}}`)
	// The followers never take the lock: a second wrap could start now
	// if this one were gone; they do not block this one's writes.
	w.finish()
	var r result
	select {
	case r = <-one:
	case <-time.After(20 * time.Second):
		t.Fatal("replay --follow SESSION did not stop when the session closed")
	}
	_, whole, _ := l.in("replay", "last")
	if r.code != 0 || r.out != whole {
		t.Errorf("follow: exit %d, stderr %q\n--- followed\n%s\n--- replayed\n%s", r.code, r.stderr, r.out, whole)
	}
	// A second aegis process, while the follower without SESSION runs.
	w2 := l.wrap(false)
	w2.initialize()
	w2.call(1, "tools/call", `{"name":"echo","arguments":{"message":"three"}}`)
	w2.finish()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ := l.in("sessions", "--json")
		var list []map[string]any
		json.Unmarshal([]byte(out), &list)
		if code == 0 && len(list) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("second session not in the stream")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Room for a few polls: under the race detector on a busy machine a
	// poll that copies and reopens the stream takes more than one period.
	time.Sleep(10 * followPoll)
	cancel()
	select {
	case r = <-all:
	case <-time.After(20 * time.Second):
		t.Fatal("replay --follow did not stop when cancelled")
	}
	if r.code != 0 || strings.Count(r.out, " closed    close line") != 2 || !strings.Contains(r.out, "echo id=2") {
		t.Errorf("follow all: exit %d, stderr %q\n%s", r.code, r.stderr, r.out)
	}
	if left, _ := filepath.Glob(filepath.Join(l.state, "readers", "*")); len(left) != 0 {
		t.Errorf("snapshots left behind: %v", left)
	}
}

// --follow of one session, while the aegis that records it runs, reads
// that process's stream through its reader identity: each call shows as
// soon as it is stored, and no snapshot copy of the stream is made.
func TestReplayFollowReadsTheLiveStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"one"}}`)
	list := l.sessionsJSON()
	if len(list) != 1 {
		t.Fatalf("sessions: %+v", list)
	}
	id := list[0].ID
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		m := &Main{Stdin: strings.NewReader(""), Stdout: out, Stderr: io.Discard, Getenv: func(k string) string {
			return map[string]string{"XDG_RUNTIME_DIR": l.runtime}[k]
		}}
		done <- m.runIn(ctx, []string{"replay", "--state-dir", l.state, "--follow", id})
	}()
	waitFor := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), what); {
			if time.Now().After(deadline) {
				t.Fatalf("the follower never printed %q:\n%s", what, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("echo id=1")
	w.call(2, "tools/call", `{"name":"echo","arguments":{"message":"two"}}`)
	waitFor("echo id=2") // while the session runs
	if snaps, _ := filepath.Glob(filepath.Join(l.state, "readers", "*")); len(snaps) != 0 {
		t.Errorf("the live follower made snapshot copies: %v", snaps)
	}
	w.finish()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("follow: exit %d\n%s", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replay --follow did not stop when the session closed")
	}
	_, whole, _ := l.in("replay", id)
	if out.String() != whole {
		t.Errorf("--- followed\n%s\n--- replayed\n%s", out.String(), whole)
	}
}

func TestReplayUsageAndErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay"}, 2, "replay: which session?"},
		{[]string{"replay", "a", "b"}, 2, "replay: want one SESSION, got 2"},
		{[]string{"replay", "a.>"}, 2, `replay: bad SESSION "a.>"`},
		{[]string{"replay", "--bogus", "x"}, 2, "replay: flag provided but not defined: -bogus"},
		{[]string{"replay", "--state-dir", dir, "last"}, 1, "no event stream in " + dir},
		{[]string{"sessions", "x"}, 2, `sessions: unexpected argument "x"`},
		{[]string{"sessions", "--state-dir", dir}, 1, "no event stream in " + dir},
		{[]string{"export", "--state-dir", dir, "--out", filepath.Join(t.TempDir(), "out.aarl")}, 1, "no event stream in " + dir},
	}
	for _, c := range cases {
		code, out, stderr := cmd(t, nil, c.args...)
		if code != c.code || out != "" || !strings.Contains(stderr, "aegis: error: "+c.want) || !strings.Contains(stderr, "aegis: hint: ") {
			t.Errorf("aegis %q: exit %d, stdout %q, stderr %q; want %d and %q", c.args, code, out, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("reading created the state directory %s", dir)
	}
	for _, name := range []string{"replay", "sessions", "recheck"} {
		code, out, stderr := cmd(t, nil, name, "-h")
		if code != 0 || !strings.HasPrefix(out, "Usage:\n  aegis "+name) || stderr != "" {
			t.Errorf("aegis %s -h: exit %d, stdout %q, stderr %q", name, code, out, stderr)
		}
	}
}

func TestPrintableBytes(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"b"}`:            `{"a":"b"}`,
		"\x1b[2J\r\x00":        `\x1b[2J\x0d\x00`,
		"caf\xc3\xa9 \xff\x7f": `café \xff\x7f`,
		"\u009b1m":             `\u009b1m`,
	} {
		if got := string(printableBytes([]byte(in))); got != want {
			t.Errorf("printableBytes(%q) = %q, want %q", in, got, want)
		}
	}
}
