package proxy_test

// Helpers for bench_test.go: the bare byte relay (the test binary re-executed
// by TestMain), the binaries the benchmarks run, and a raw JSON-RPC client
// that talks newline-delimited frames over a process's stdin and stdout.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// relayEnv, set to "1", turns the test binary into the bare relay: it runs
// os.Args[1:] as a child and copies bytes between its own stdio and the
// child's, nothing else.
const relayEnv = "AEGIS_BENCH_RELAY"

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
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, relayEnv+"=") })
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
	go func() {
		io.Copy(in, os.Stdin)
		in.Close()
	}()
	io.Copy(os.Stdout, out)
	if err := cmd.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	return 0
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
	key := filepath.Join(dir, "signing.key")
	if out, err := exec.Command(aegis, "keygen", "--out", key).CombinedOutput(); err != nil {
		b.Fatalf("aegis keygen: %v\n%s", err, out)
	}
	return []string{aegis, "wrap", "--audit", filepath.Join(dir, "calls.aarl"), "--signing-key", key,
		"--state-dir", filepath.Join(dir, "state"), "--", server}
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
	const initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"aegis-bench","version":"0"}}}` + "\n"
	line, err := p.roundTrip([]byte(initialize))
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
