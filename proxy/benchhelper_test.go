package proxy_test

// Helpers for bench_test.go: the bare byte relay (the test binary re-executed
// by TestMain), the binaries the benchmarks run, and a raw JSON-RPC client
// that talks newline-delimited frames over a process's stdin and stdout.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis-benchreport/benchjson"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// relayEnv, set to "1", turns the test binary into the bare relay: it runs
// os.Args[1:] as a child and copies bytes between its own stdio and the
// child's, nothing else. With recordEnv set to a file as well it is the
// least a relay that appends to its record and fsyncs it can do: before it
// passes on each line, either way, it appends 300 bytes to that file and
// fsyncs it. With recordEnv set
// to "jetstream:DIR" it instead appends a 1 KB event to an event store in
// DIR (events.Store.Append, waiting for the durable ack), about the size of
// aegis's commits: the same spine as aegis, with none of its relay logic.
const (
	relayEnv  = "AEGIS_BENCH_RELAY"
	recordEnv = "AEGIS_BENCH_RELAY_RECORD"
)

func TestMain(m *testing.M) {
	if os.Getenv(relayEnv) == "1" {
		os.Exit(runRelay(os.Args[1:]))
	}
	code := m.Run()
	if benchBinDir != "" {
		os.RemoveAll(benchBinDir)
	}
	removeBins()
	os.Exit(code)
}

// runRelay is the lower bound for any stdio relay: two io.Copy, one per
// direction, through pipes it owns (passing its own stdin to the child
// would relay nothing).
func runRelay(argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "relay: no command")
		return 2
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, relayEnv+"=") || strings.HasPrefix(kv, recordEnv+"=")
	})
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	record, done, err := relayRecorder(os.Getenv(recordEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		cmd.Process.Kill()
		return 1
	}
	defer done()
	if record == nil {
		go func() {
			io.Copy(in, os.Stdin)
			in.Close()
		}()
		io.Copy(os.Stdout, out)
	} else {
		go func() {
			copyRecorded(in, os.Stdin, record)
			in.Close()
		}()
		copyRecorded(os.Stdout, out, record)
	}
	if err := cmd.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	return 0
}

// relayRecorder returns what the relay does before it passes on a line,
// as recordEnv says (nil: nothing), and how to finish it. Both directions
// call record, one at a time.
func relayRecorder(spec string) (record func(), done func(), err error) {
	var mu sync.Mutex
	if dir, ok := strings.CutPrefix(spec, "jetstream:"); ok {
		st, err := events.Open(context.Background(), events.Config{Dir: dir})
		if err != nil {
			return nil, nil, err
		}
		sess, err := st.NewSession()
		if err != nil {
			st.Close(context.Background())
			return nil, nil, err
		}
		payload := []byte(`{"text":"` + strings.Repeat("x", 1000) + `"}`)
		return func() {
			mu.Lock()
			defer mu.Unlock()
			ev, err := st.NewEvent(sess, schemas.KindNote, payload)
			if err == nil {
				_, err = st.Append(context.Background(), ev)
			}
			if err != nil {
				panic(err)
			}
		}, func() { st.Close(context.Background()) }, nil
	}
	if spec == "" {
		return nil, func() {}, nil
	}
	f, err := os.OpenFile(spec, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	rec := make([]byte, 300)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if _, err := f.Write(rec); err != nil {
			panic(err)
		}
		if err := f.Sync(); err != nil {
			panic(err)
		}
	}, func() { f.Close() }, nil
}

// copyRecorded copies src to dst line by line, calling record before it
// writes each line (or the first piece of a line longer than its buffer).
func copyRecorded(dst io.Writer, src io.Reader, record func()) {
	br := bufio.NewReaderSize(src, 64<<10)
	whole := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if whole {
				record()
			}
			if _, werr := dst.Write(line); werr != nil {
				return
			}
		}
		whole = err != bufio.ErrBufferFull
		if err != nil && whole {
			return
		}
	}
}

var (
	benchBinOnce sync.Once
	benchBinDir  string
	benchBinErr  error
)

// benchBinaries builds aegis and the example server once per test binary
// run, into a temporary directory that TestMain removes, and returns the
// paths of the two binaries.
func benchBinaries(b *testing.B) (aegis, server string) {
	b.Helper()
	benchBinOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			benchBinErr = err
			return
		}
		dir, err := os.MkdirTemp("", "aegis-bench-bin-")
		if err != nil {
			benchBinErr = err
			return
		}
		benchBinDir = dir
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, pkg := range []string{"cmd/aegis", "cmd/aegis-example-server"} {
			wg.Go(func() {
				cmd := exec.Command(gobin, "build", "-o", filepath.Join(dir, filepath.Base(pkg)), "github.com/aegis-dev/aegis/"+pkg)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				}
			})
		}
		wg.Wait()
		benchBinErr = errors.Join(errs...)
	})
	if benchBinErr != nil {
		b.Fatal(benchBinErr)
	}
	return filepath.Join(benchBinDir, "aegis"), filepath.Join(benchBinDir, "aegis-example-server")
}

// relayArgv returns the argv that runs the bare relay around argv, and the
// environment it needs.
func relayArgv(b *testing.B, argv []string) ([]string, []string) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	return append([]string{self}, argv...), append(os.Environ(), relayEnv+"=1")
}

// wrapArgv makes a signing key in dir and returns the argv of aegis wrap
// around server, with its state directory dir/state and record dir/calls.aarl.
func wrapArgv(b *testing.B, aegis, server, dir string) []string {
	argv, _ := wrapArgvKey(b, aegis, server, dir)
	return argv
}

// wrapArgvKey is wrapArgv that also returns the public key keygen printed.
func wrapArgvKey(b *testing.B, aegis, server, dir string) (argv []string, pub string) {
	key := filepath.Join(dir, "signing.key")
	out, err := exec.Command(aegis, "keygen", "--out", key).Output()
	if err != nil {
		b.Fatalf("aegis keygen: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "public_key "); ok {
			pub = strings.TrimSpace(v)
		}
	}
	if pub == "" {
		b.Fatalf("aegis keygen printed no public_key:\n%s", out)
	}
	return []string{aegis, "wrap", "--audit", filepath.Join(dir, "calls.aarl"), "--signing-key", key,
		"--state-dir", filepath.Join(dir, "state"), "--", server}, pub
}

// syncBuffer collects a process's stderr for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf.Len() < 64<<10 {
		s.buf.Write(p)
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// rpcProc is a process spoken to with raw JSON-RPC lines.
type rpcProc struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *syncBuffer
	nextID int64
	closed bool
}

// startRPC starts argv and performs the MCP handshake (initialize with
// protocol version 2025-11-25, then notifications/initialized). The process
// is stopped when the benchmark ends if close was not called.
func startRPC(b *testing.B, name string, argv, env []string) *rpcProc {
	b.Helper()
	p := &rpcProc{name: name, cmd: exec.Command(argv[0], argv[1:]...), stderr: &syncBuffer{}, nextID: 1}
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	in, err := p.cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	p.in, p.out = in, bufio.NewReaderSize(out, 64<<10)
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("%s: start: %v", name, err)
	}
	b.Cleanup(func() {
		if !p.closed {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	line, err := p.roundTrip([]byte(initializeFrame))
	if err != nil {
		b.Fatalf("%s: initialize: %v\nstderr:\n%s", name, err, p.stderr)
	}
	if err := checkResponse(line, 0); err != nil {
		b.Fatalf("%s: initialize: %v", name, err)
	}
	if _, err := io.WriteString(p.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		b.Fatalf("%s: initialized: %v", name, err)
	}
	return p
}

// roundTrip writes one frame and reads one line back.
func (p *rpcProc) roundTrip(frame []byte) ([]byte, error) {
	if _, err := p.in.Write(frame); err != nil {
		return nil, err
	}
	return p.out.ReadSlice('\n')
}

// close closes the process's stdin and waits for it to exit.
func (p *rpcProc) close(b *testing.B) {
	b.Helper()
	p.closed = true
	p.in.Close()
	done := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, p.out)
		done <- p.cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			b.Errorf("%s: exit: %v\nstderr:\n%s", p.name, err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
		b.Errorf("%s: did not exit 30s after stdin was closed\nstderr:\n%s", p.name, p.stderr)
	}
}

// The frames the benchmarks send, one line each.

const initializeFrame = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"aegis-bench","version":"0"}}}` + "\n"

func echoFrame(id int64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"benchmark"}}}`+"\n", id)
}

func pingFrame(id int64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", id)
}

// responseID returns the id of a successful response line. It fails on
// an error response, a tool error, or anything that is not a response.
func responseID(line []byte) (int64, error) {
	// The go-sdk writes {"jsonrpc":"2.0","id":N,"result":…}; read that
	// shape without decoding, and fall back to JSON otherwise.
	const prefix = `{"jsonrpc":"2.0","id":`
	if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok {
		if i := bytes.IndexByte(rest, ','); i > 0 && bytes.HasPrefix(rest[i:], []byte(`,"result":`)) {
			if id, err := strconv.ParseInt(string(rest[:i]), 10, 64); err == nil {
				if bytes.Contains(rest[i:], []byte(`"isError":true`)) {
					return 0, fmt.Errorf("tool error: %s", line)
				}
				return id, nil
			}
		}
	}
	var msg struct {
		ID     *int64          `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &msg); err != nil {
		return 0, fmt.Errorf("not JSON: %q", line)
	}
	if msg.ID == nil || msg.Error != nil || msg.Result == nil {
		return 0, fmt.Errorf("not a successful response: %s", line)
	}
	var res struct {
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(msg.Result, &res) == nil && res.IsError {
		return 0, fmt.Errorf("tool error: %s", line)
	}
	return *msg.ID, nil
}

func checkResponse(line []byte, id int64) error {
	got, err := responseID(line)
	if err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("answer to id %d, want %d: %s", got, id, line)
	}
	return nil
}

// benchJSONEnv names the JSON file the benchmarks merge their figures into
// (make bench sets it; cmd/aegis-benchreport reads it). A relative path is
// taken from the package directory, where go test runs the benchmarks.
const benchJSONEnv = "AEGIS_BENCH_JSON"

// recordBench merges v, the figures of the benchmark b, into the file named
// by AEGIS_BENCH_JSON (nothing if it is unset) under "benchmarks"/b.Name(),
// and sets "env" to a description of this machine if the file has none.
// Benchmarks run one at a time (go test serializes them across packages),
// so a read-modify-rename is enough.
func recordBench(b *testing.B, v any) {
	b.Helper()
	path := os.Getenv(benchJSONEnv)
	if path == "" {
		return
	}
	if err := benchjson.Merge(path, b.Name(), v, benchEnv); err != nil {
		b.Errorf("%s: %v", benchJSONEnv, err)
	}
}

// benchEnv describes the machine and the build: what docs/BENCHMARKS.md
// states next to the figures.
func benchEnv() map[string]any {
	env := map[string]any{
		"go":     runtime.Version(),
		"goos":   runtime.GOOS,
		"goarch": runtime.GOARCH,
		"nproc":  runtime.NumCPU(),
		"time":   time.Now().UTC().Format(time.RFC3339),
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				env["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		env["kernel"] = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				env["mem"] = strings.TrimSpace(v)
				break
			}
		}
	}
	// The state directories and the fsync probe live under the temp dir.
	env["tmpdir"] = os.TempDir()
	env["tmpdir_fs"] = mountOf(os.TempDir())
	if wd, err := os.Getwd(); err == nil {
		env["workdir_fs"] = mountOf(wd)
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		env["commit"] = strings.TrimSpace(string(out))
	}
	return env
}

// mountOf returns "FSTYPE SOURCE on MOUNTPOINT" for the mount holding path,
// from /proc/self/mountinfo, or "" if that cannot be read.
func mountOf(path string) string {
	abs, err := filepath.EvalSymlinks(path)
	if err != nil {
		abs = path
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	best, desc := -1, ""
	for line := range strings.Lines(string(data)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL…] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		mp := f[4]
		if mp == abs || mp == "/" || strings.HasPrefix(abs, mp+"/") {
			if len(mp) >= best {
				best, desc = len(mp), fmt.Sprintf("%s %s on %s", g[0], g[1], mp)
			}
		}
	}
	return desc
}

// procKB returns a "kB" field such as VmRSS or VmHWM of /proc/PID/status.
func procKB(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// childPIDs returns the children of pid, from /proc/PID/task/*/children.
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// procCPU returns the user and system CPU time of process pid, all its
// threads, from /proc/PID/stat (in USER_HZ ticks of 10 ms on Linux).
func procCPU(pid int) (user, sys time.Duration, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux platform Go supports
	return time.Duration(u) * tick, time.Duration(s) * tick, nil
}

// cpuMeter accumulates the CPU time a process spends over measured spans.
type cpuMeter struct {
	pid       int
	user, sys time.Duration
	u0, s0    time.Duration
}

func (m *cpuMeter) start() {
	if m != nil {
		m.u0, m.s0, _ = procCPU(m.pid)
	}
}

func (m *cpuMeter) stop() {
	if m != nil {
		if u, s, err := procCPU(m.pid); err == nil {
			m.user += u - m.u0
			m.sys += s - m.s0
		}
	}
}

// perOp returns the user and system CPU µs per operation over n operations.
func (m *cpuMeter) perOp(n int) (user, sys float64) {
	if n == 0 {
		return 0, 0
	}
	return us(m.user) / float64(n), us(m.sys) / float64(n)
}
