package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/gateway"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// gwProc is a running aegis gateway driven over raw JSON-RPC lines, so that
// a test can close the host's side at any moment.
type gwProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *syncBuffer
	// outTaken says that out is read elsewhere (a taskHost) until it ends.
	outTaken bool
	done     chan error
}

// gatewayEnv is the environment the tests run aegis gateway in: the test's
// own, a runtime directory of its own, and extra.
func gatewayEnv(t *testing.T, extra ...string) []string {
	runtime := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	return append(append(os.Environ(), "XDG_RUNTIME_DIR="+runtime), extra...)
}

// startGateway writes config and starts aegis gateway on it, with flags.
func (c *cli) startGateway(config string, env []string, flags ...string) *gwProc {
	c.t.Helper()
	path := filepath.Join(c.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		c.t.Fatal(err)
	}
	g := &gwProc{t: c.t, stderr: &syncBuffer{}, done: make(chan error, 1)}
	g.cmd = exec.Command(bin(c.t, "aegis"), append([]string{"gateway", "--config", path, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state}, flags...)...)
	g.cmd.Env = env
	g.cmd.Stderr = g.stderr
	var err error
	if g.in, err = g.cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	out, err := g.cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	g.out = bufio.NewReader(out)
	if err := g.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	c.t.Cleanup(func() {
		g.cmd.Process.Kill()
		err := <-g.done
		g.done <- err
	})
	return g
}

func (g *gwProc) send(line string) {
	g.t.Helper()
	if _, err := io.WriteString(g.in, line+"\n"); err != nil {
		g.t.Fatalf("write to aegis gateway: %v", err)
	}
}

// call sends a request and returns the text of its answer.
func (g *gwProc) call(id int, method, params string) string {
	g.t.Helper()
	g.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	want := fmt.Sprintf(`"id":%d,`, id)
	for {
		line, err := g.out.ReadString('\n')
		if err != nil {
			g.t.Fatalf("answer to %s %d: %v; stderr:\n%s", method, id, err, g.stderr)
		}
		if strings.Contains(line, want) {
			return line
		}
	}
}

func (g *gwProc) initialize() {
	g.t.Helper()
	g.call(0, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lifecycle-test","version":"1"}}`)
	g.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// finish closes the host's side and returns aegis's exit status and how
// long it took to exit.
func (g *gwProc) finish(limit time.Duration) (int, time.Duration) {
	g.t.Helper()
	start := time.Now()
	g.in.Close()
	if !g.outTaken {
		go io.Copy(io.Discard, g.out)
	}
	select {
	case err := <-g.done:
		g.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), time.Since(start)
		}
		if err != nil {
			g.t.Fatal(err)
		}
		return 0, time.Since(start)
	case <-time.After(limit):
		g.t.Fatalf("aegis gateway did not exit within %v after the host closed stdin; stderr:\n%s", limit, g.stderr)
	}
	return 0, 0
}

// streamEvent is an envelope as aegis events list --json prints it.
type streamEvent struct {
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
}

// events returns every event of the stream, and the raw listing.
func (c *cli) events() ([]streamEvent, string) {
	c.t.Helper()
	out, stderr, code := c.aegis("events", "list", "--state-dir", c.state, "--json")
	if code != 0 {
		c.t.Fatalf("events list: %d %s", code, stderr)
	}
	var evs []streamEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e streamEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			c.t.Fatalf("events list --json: %v: %q", err, line)
		}
		evs = append(evs, e)
	}
	return evs, out
}

// payloads returns the payloads of the events of kind, decoded.
func payloads(evs []streamEvent, kind string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e.Kind == kind {
			var m map[string]any
			json.Unmarshal(e.Payload, &m)
			out = append(out, m)
		}
	}
	return out
}

// quoteArgs renders a YAML flow sequence of strings.
func quoteArgs(ss []string) string {
	var q []string
	for _, s := range ss {
		b, _ := json.Marshal(s)
		q = append(q, string(b))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// A token given to one server (env: {file: …}) reaches that server and no
// other; a variable of aegis's environment reaches only the server whose
// env_passthrough names it; nothing else of aegis's environment reaches
// any server; and no value is written to the record, the events or the
// state directory. A token file that others may read refuses the start.
func TestGatewayServerEnvironmentIsolated(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	const token = "tok-5b1e9c7d2a"
	const unlisted = "unlisted-3f9a0c"
	tokenFile := filepath.Join(t.TempDir(), "a.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(tokenPath string) string {
		return `version: 1
servers:
  a:
    command: ` + every[0] + `
    args: ` + quoteArgs(every[1:]) + `
    env:
      AEGIS_TEST_TOKEN: {file: ` + tokenPath + `}
    env_passthrough: [AEGIS_TEST_SHARED]
  b:
    command: ` + every[0] + `
    args: ` + quoteArgs(every[1:]) + `
profiles:
  p:
    allow: ["a.*", "b.*"]
activation:
  default_profile: p
`
	}
	env := gatewayEnv(t, "AEGIS_TEST_UNLISTED="+unlisted, "AEGIS_TEST_SHARED=shared-ok")
	// getEnv returns the server's environment as its get-env tool shows
	// it (a JSON object in the text of the answer).
	getEnv := func(g *gwProc, id int, server string) map[string]string {
		t.Helper()
		a := g.call(id, "tools/call", `{"name":"`+server+`__get-env","arguments":{}}`)
		var frame struct {
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		var env map[string]string
		if json.Unmarshal([]byte(a), &frame) != nil || len(frame.Result.Content) == 0 {
			t.Fatalf("%s__get-env: %s", server, a)
		}
		text := frame.Result.Content[0].Text
		if i := strings.IndexByte(text, '{'); i < 0 || json.Unmarshal([]byte(text[i:]), &env) != nil || env["PATH"] == "" {
			t.Fatalf("%s__get-env shows no environment with PATH: %s", server, a)
		}
		return env
	}

	// b, the server without env or passthrough, sees none of them; the
	// session's record holds no value.
	c := newCLI(t)
	g := c.startGateway(config(tokenFile), env)
	g.initialize()
	b := getEnv(g, 1, "b")
	for name, value := range b {
		if strings.HasPrefix(name, "AEGIS_TEST_") || value == token || value == unlisted {
			t.Errorf("server b sees %s", name)
		}
	}
	if code, _ := g.finish(30 * time.Second); code != 0 {
		t.Fatalf("aegis gateway exited %d:\n%s", code, g.stderr)
	}
	_, listing := c.events()
	exported, stderr, code := c.aegis("export", "--state-dir", c.state, "--out", "-")
	if code != 0 {
		t.Fatalf("export: %d %s", code, stderr)
	}
	audit, _ := os.ReadFile(c.audit)
	for what, text := range map[string]string{"events list": listing, "export": exported, "audit record": string(audit), "stderr": g.stderr.String()} {
		if strings.Contains(text, token) || strings.Contains(text, unlisted) {
			t.Errorf("the %s holds an environment value", what)
		}
	}
	filepath.WalkDir(c.state, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(token)) {
				t.Errorf("%s holds the token", path)
			}
		}
		return nil
	})

	// a, in a session of its own (its answer holds the token), sees the
	// token, trimmed, and the variable it passes through; not the rest.
	c2 := newCLI(t)
	g2 := c2.startGateway(config(tokenFile), env)
	g2.initialize()
	a := getEnv(g2, 1, "a")
	if a["AEGIS_TEST_TOKEN"] != token || a["AEGIS_TEST_SHARED"] != "shared-ok" {
		t.Errorf("server a sees AEGIS_TEST_TOKEN %q (want the file's content, trimmed) and AEGIS_TEST_SHARED %q", a["AEGIS_TEST_TOKEN"], a["AEGIS_TEST_SHARED"])
	}
	if _, ok := a["AEGIS_TEST_UNLISTED"]; ok {
		t.Error("server a sees a variable nobody passed through")
	}
	for name := range a {
		if !slices.Contains(gateway.BaseEnv, name) && !strings.HasPrefix(name, "LC_") && name != "AEGIS_TEST_TOKEN" && name != "AEGIS_TEST_SHARED" {
			t.Logf("server a's environment also holds %s (set by node or the server itself)", name)
		}
	}
	g2.finish(30 * time.Second)

	// A token file that group or others may read: nothing starts.
	if err := os.Chmod(tokenFile, 0o640); err != nil {
		t.Fatal(err)
	}
	c3 := newCLI(t)
	g3 := c3.startGateway(config(tokenFile), env)
	code, _ = g3.finish(30 * time.Second)
	if out, _ := io.ReadAll(g3.out); code != 1 || len(out) != 0 {
		t.Errorf("with a group-readable token file: exit %d, stdout %q", code, out)
	}
	if s := g3.stderr.String(); !strings.Contains(s, "server a: env AEGIS_TEST_TOKEN: unusable env file: "+tokenFile+" is accessible by group or others") || strings.Contains(s, token) {
		t.Errorf("stderr:\n%s", s)
	}
	if _, err := os.Stat(c3.state); err == nil {
		t.Errorf("a refused start made a state directory")
	}
}

// When the host closes its stdin, the reference servers exit on their own,
// with status 0: the gateway closes each one's stdin and keeps reading its
// stdout until it exits (server-everything died of "write EPIPE" when its
// stdout was closed first). child.exited names the server and its PID.
func TestGatewayReferenceServersExitCleanly(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	root := t.TempDir()
	every := mcptest.EverythingServer(t)
	fsArgv := mcptest.FilesystemServer(t, root)
	c := newCLI(t)
	g := c.startGateway(`version: 1
servers:
  everything:
    command: `+every[0]+`
    args: `+quoteArgs(every[1:])+`
  fs:
    command: `+fsArgv[0]+`
    args: `+quoteArgs(fsArgv[1:])+`
profiles:
  p:
    allow: [everything.echo, fs.list_allowed_directories]
activation:
  default_profile: p
`, gatewayEnv(t))
	g.initialize()
	if a := g.call(1, "tools/call", `{"name":"everything__echo","arguments":{"message":"hi"}}`); !strings.Contains(a, "hi") {
		t.Fatalf("echo: %s", a)
	}
	code, took := g.finish(30 * time.Second)
	if code != 0 {
		t.Fatalf("aegis gateway exited %d:\n%s", code, g.stderr)
	}
	t.Logf("aegis gateway exited %v after the host closed stdin", took)
	if s := g.stderr.String(); strings.Contains(s, "EPIPE") {
		t.Errorf("a server died of EPIPE:\n%s", s)
	}
	evs, _ := c.events()
	started := map[string]float64{}
	for _, p := range payloads(evs, "child.started") {
		started[p["server"].(string)] = p["pid"].(float64)
	}
	exits := payloads(evs, "child.exited")
	if len(exits) != 2 {
		t.Fatalf("%d child.exited events, want 2: %v", len(exits), exits)
	}
	for i, want := range []string{"everything", "fs"} {
		p := exits[i]
		if p["server"] != want || p["pid"] != started[want] || p["pid"] == nil || p["code"] != 0.0 || p["ended_by"] != "stdin closed" {
			t.Errorf("child.exited %d = %v, want server %s, pid %v, code 0, ended by stdin closed", i, p, want, started[want])
		}
	}
}

// A host of MCP 2026-07-28 on the TypeScript SDK's 2.x client starts
// aegis once only to probe server/discover, then closes its stdin and
// sends SIGTERM at once, SIGKILLs it 1 s later, and starts aegis again
// for its session. So:
//   - when the host leaves, a server's roots/list that waits for the
//     host's next call (server-everything asks 350 ms after it is
//     initialized) is answered with the gateway's own empty list: no call
//     will come, and the server, answered, exits on its stdin's end
//     instead of waiting 60 s for an answer until aegis SIGTERMs it;
//   - told to stop (SIGTERM), the gateway ends its servers at once, with
//     SIGTERM as their stdin is closed, not after the settle and a grace;
//     its session is closed in the record, and no server is left behind.
func TestGatewayProbeOfA2026HostEndsAtOnce(t *testing.T) {
	parallel(t)
	every := mcptest.EverythingServer(t)
	config := `version: 1
servers:
  everything:
    command: ` + every[0] + `
    args: ` + quoteArgs(every[1:]) + `
profiles:
  p:
    allow: [everything.echo]
activation:
  default_profile: p
`
	probe := `{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"probe","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"elicitation":{"url":{}}}}}}`
	for _, tc := range []struct {
		name   string
		signal bool // SIGTERM with the stdin's close, as the probing client does
		wait   time.Duration
		endBy  string
	}{
		{"the host leaves after the server asked for its roots", false, 2 * time.Second, "stdin closed"},
		{"told to stop as the host leaves", true, 0, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			g := c.startGateway(config, gatewayEnv(t))
			g.send(probe)
			for {
				line, err := g.out.ReadString('\n')
				if err != nil {
					t.Fatalf("no answer to server/discover: %v; stderr:\n%s", err, g.stderr)
				}
				if strings.Contains(line, `"server-discover-probe-1"`) {
					break
				}
			}
			time.Sleep(tc.wait)
			if tc.signal {
				g.in.Close()
				g.cmd.Process.Signal(syscall.SIGTERM)
			}
			code, took := g.finish(30 * time.Second)
			t.Logf("aegis gateway exited %d after %v", code, took)
			if code != 0 {
				t.Fatalf("aegis gateway exited %d:\n%s", code, g.stderr)
			}
			evs, _ := c.events()
			started := payloads(evs, "child.started")
			exits := payloads(evs, "child.exited")
			if len(exits) != 1 || len(started) != 1 || exits[0]["ended_by"] != tc.endBy {
				t.Errorf("child.exited %v, want one, ended by %s", exits, tc.endBy)
			}
			if len(started) == 1 {
				pid := int(started[0]["pid"].(float64))
				if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
					t.Errorf("the server (pid %d) still runs", pid)
				}
			}
			if out, stderr, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
				t.Errorf("verify: %d %s %s", code, out, stderr)
			}
		})
	}
}

// A call in flight when the host leaves is not cut short with "context
// canceled", nor left without an outcome: one that the server answers
// within the grace is recorded as answered (and the answer as not
// delivered); one that it does not is cancelled, notifications/cancelled
// goes to the server, and the outcome says so. Then the server exits on
// its stdin's end.
func TestGatewayCallsInFlightWhenTheHostLeaves(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	c := newCLI(t)
	calls := filepath.Join(c.dir, "calls.log")
	g := c.startGateway(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
    args: [-calls, `+calls+`]
profiles:
  p:
    allow: [example.slow]
activation:
  default_profile: p
`, gatewayEnv(t))
	g.initialize()
	g.call(1, "tools/list", `{}`)
	g.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":700}}}`)
	g.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":9000}}}`)
	// Both calls reach the server before the host leaves.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(calls); bytes.Count(b, []byte("\n")) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not receive both calls")
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, took := g.finish(30 * time.Second)
	if code != 0 {
		t.Fatalf("aegis gateway exited %d:\n%s", code, g.stderr)
	}
	if took > 8*time.Second {
		t.Errorf("aegis took %v to end after the host left; the 9 s call should have been cancelled after the 2 s grace", took)
	}
	// The two calls run concurrently: which one got call-1 is not fixed.
	h := &harness{t: t, audit: c.audit}
	var answered, cut string
	for _, o := range ofType(h.lines(), "outcome") {
		e := obj(o, "execution")
		msg, _ := e["message"].(string)
		switch {
		case e["status"] == "success":
			answered = str(o, "call_id")
		case e["status"] == "trap" && strings.Contains(msg, "the host closed its stdin and the server did not answer within the 2s grace; aegis sent it notifications/cancelled"):
			cut = str(o, "call_id")
		default:
			t.Errorf("outcome %s: %v", str(o, "call_id"), e)
		}
	}
	if answered == "" || cut == "" {
		t.Fatalf("want one call answered within the grace and one cut by it; got %q and %q", answered, cut)
	}
	evs, _ := c.events()
	var undelivered []any
	for _, p := range payloads(evs, "note") {
		if p["undelivered"] != nil {
			undelivered = append(undelivered, p["call_id"])
		}
	}
	if len(undelivered) != 1 || undelivered[0] != answered {
		t.Errorf("undelivered notes for %v, want %s", undelivered, answered)
	}
	cancels := payloads(evs, "call.cancelled")
	if len(cancels) != 1 || cancels[0]["call_id"] != cut || cancels[0]["by"] != "aegis" || cancels[0]["notified"] != true {
		t.Errorf("call.cancelled events: %v", cancels)
	}
	exits := payloads(evs, "child.exited")
	if len(exits) != 1 || exits[0]["server"] != "example" || exits[0]["code"] != 0.0 || exits[0]["ended_by"] != "stdin closed" {
		t.Errorf("child.exited: %v", exits)
	}
	if out, stderr, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Errorf("verify: %s %s", out, stderr)
	}
}

// A gateway none of whose servers starts would serve only its meta-tools:
// it refuses to start, exits 1, says which servers failed and why, and
// writes nothing to the host. One working server is enough, and the
// skipped one is recorded.
func TestGatewayWithNoWorkingServerRefusesToStart(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	missing := filepath.Join(t.TempDir(), "no-such-server")
	c := newCLI(t)
	g := c.startGateway(`version: 1
servers:
  gone:
    command: `+missing+`
  broken:
    command: /bin/false
profiles:
  p:
    allow: ["gone.*", "broken.*"]
activation:
  default_profile: p
`, gatewayEnv(t))
	g.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	code, _ := g.finish(60 * time.Second)
	out, _ := io.ReadAll(g.out)
	stderr := g.stderr.String()
	if code != 1 || len(out) != 0 {
		t.Errorf("exit %d, stdout %q; want 1 and nothing served", code, out)
	}
	for _, want := range []string{"no server could be started", "gone: start: ", "no-such-server", "broken: connect: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}

	// With a working server beside them, the gateway serves it.
	c2 := newCLI(t)
	g2 := c2.startGateway(`version: 1
servers:
  gone:
    command: `+missing+`
  example:
    command: `+bin(t, "aegis-example-server")+`
profiles:
  p:
    allow: ["example.*"]
activation:
  default_profile: p
`, gatewayEnv(t))
	g2.initialize()
	if a := g2.call(1, "tools/call", `{"name":"example__echo","arguments":{"message":"still here"}}`); !strings.Contains(a, "still here") {
		t.Fatalf("echo: %s", a)
	}
	if code, _ := g2.finish(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, g2.stderr)
	}
	evs, _ := c2.events()
	notes := payloads(evs, "note")
	if len(notes) != 1 || notes[0]["server"] != "gone" || notes[0]["skipped"] != "start" {
		t.Errorf("skipped notes: %v", notes)
	}
}

// A call the host cancels (notifications/cancelled) is cancelled at once:
// the server is sent notifications/cancelled, and the outcome says the
// host cancelled it, not "context canceled".
func TestGatewayHostCancelsACall(t *testing.T) {
	c := newCLI(t)
	calls := filepath.Join(c.dir, "calls.log")
	g := c.startGateway(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
    args: [-calls, `+calls+`]
profiles:
  p:
    allow: [example.slow, example.echo]
activation:
  default_profile: p
`, gatewayEnv(t))
	g.initialize()
	g.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":9000}}}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(calls); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not receive the call")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	g.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"the user gave up"}}`)
	// The gateway goes on serving; the next call is answered long before
	// the cancelled one would have ended.
	if a := g.call(8, "tools/call", `{"name":"example__echo","arguments":{"message":"next"}}`); !strings.Contains(a, "next") {
		t.Fatalf("echo after the cancellation: %s", a)
	}
	if code, _ := g.finish(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, g.stderr)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the cancelled call held the gateway for %v", took)
	}
	h := &harness{t: t, audit: c.audit}
	var cancelled []string
	for _, o := range ofType(h.lines(), "outcome") {
		e := obj(o, "execution")
		if msg, _ := e["message"].(string); e["status"] == "trap" {
			if !strings.Contains(msg, "cancelled by the host at +") || !strings.Contains(msg, "(notifications/cancelled)") {
				t.Errorf("outcome of the cancelled call: %v", e)
			}
			cancelled = append(cancelled, str(o, "call_id"))
		}
	}
	evs, _ := c.events()
	cancels := payloads(evs, "call.cancelled")
	if len(cancelled) != 1 || len(cancels) != 1 || cancels[0]["call_id"] != cancelled[0] || cancels[0]["by"] != nil || cancels[0]["notified"] != true {
		t.Errorf("cancelled outcomes %v, call.cancelled events %v", cancelled, cancels)
	}
}
