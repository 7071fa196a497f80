package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// cli is an aegis installation for end-to-end tests: the real binary, a key
// made by its keygen, a state directory and a record path.
type cli struct {
	t     *testing.T
	dir   string
	key   string
	pub   string
	state string
	audit string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	dir := t.TempDir()
	c := &cli{t: t, dir: dir, key: filepath.Join(dir, "signing.key"), state: filepath.Join(dir, "state"), audit: filepath.Join(dir, "calls.aarl")}
	out, err := exec.Command(bin(t, "aegis"), "keygen", "--out", c.key).Output()
	if err != nil {
		t.Fatalf("aegis keygen: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 4 || f[0] != "public_key" || f[2] != "key_id" {
		t.Fatalf("keygen stdout %q", out)
	}
	c.pub = f[1]
	return c
}

func (c *cli) wrapArgv(server ...string) []string {
	return append([]string{bin(c.t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--"}, server...)
}

func (c *cli) aegis(args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(bin(c.t, "aegis"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("aegis %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// teeWriter records what the client wrote, byte for byte.
type teeWriter struct {
	w  io.WriteCloser
	mu sync.Mutex
	b  bytes.Buffer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.b.Write(p)
	t.mu.Unlock()
	return t.w.Write(p)
}
func (t *teeWriter) Close() error { return t.w.Close() }

// startPiped starts cmd with pipes to its stdin and from its stdout, and
// its stderr on the test's.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return in, out
}

// connectTee starts argv and connects a go-sdk client whose outgoing bytes
// are captured.
func connectTee(t *testing.T, ctx context.Context, argv []string) (*mcp.ClientSession, *teeWriter, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	in, out := startPiped(t, cmd)
	tee := &teeWriter{w: in}
	client := mcp.NewClient(&mcp.Implementation{Name: "aegis-e2e", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: out, Writer: tee}, nil)
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("connect through %v: %v", argv, err)
	}
	return cs, tee, cmd
}

// A real go-sdk client gets the same results through aegis wrap as
// directly; the record verifies pinned, has one intent and one outcome per
// call, and each request_digest is SHA-256 of the exact bytes the client
// wrote.
func TestEndToEndSameResultsAsDirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	server := bin(t, "aegis-example-server")
	direct, err := mcptest.Connect(ctx, []string{server}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	want, err := mcptest.Script(ctx, direct)
	direct.Close()
	if err != nil {
		t.Fatal(err)
	}

	c := newCLI(t)
	cs, tee, cmd := connectTee(t, ctx, c.wrapArgv(server))
	got, err := mcptest.Script(ctx, cs)
	if err != nil {
		t.Fatalf("script through aegis: %v", err)
	}
	cs.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("aegis wrap exited with %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("through aegis:\n%v\ndirect:\n%v", got, want)
	}

	var calls []string
	for _, line := range strings.Split(tee.b.String(), "\n") {
		var m struct{ Method string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Method == "tools/call" {
			calls = append(calls, sha([]byte(line)))
		}
	}
	h := &harness{t: t, audit: c.audit}
	ls := h.lines()
	intents, outcomes := ofType(ls, "intent"), ofType(ls, "outcome")
	if len(calls) != 4 || len(intents) != len(calls) || len(outcomes) != len(calls) {
		t.Fatalf("%d tools/call sent, %d intents, %d outcomes", len(calls), len(intents), len(outcomes))
	}
	for i := range calls {
		if d := str(intents[i], "request_digest"); d != calls[i] {
			t.Errorf("intent %d digest %s, client's bytes hash to %s", i, d, calls[i])
		}
	}
	out, _, code := c.aegis("verify", "--key", c.pub, c.audit)
	if code != 0 || !strings.HasPrefix(out, "Verified (pinned to ") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	// The stream rebuilds the file byte for byte.
	_, stderr, code := c.aegis("export", "--state-dir", c.state, "--audit", c.audit, "--out", filepath.Join(c.dir, "rebuilt.aarl"))
	a, _ := os.ReadFile(c.audit)
	b, _ := os.ReadFile(filepath.Join(c.dir, "rebuilt.aarl"))
	if code != 0 || !bytes.Equal(a, b) {
		t.Fatalf("export: exit %d %s; identical=%v", code, stderr, bytes.Equal(a, b))
	}
}

// The official reference server behaves the same through aegis: tools,
// resources and prompts, and a tool call.
func TestEndToEndEverythingServerInterop(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	argv := mcptest.EverythingServer(t)
	snapshot := func(cs *mcp.ClientSession) map[string]any {
		snap := map[string]any{}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		var names []string
		for _, tl := range tools.Tools {
			names = append(names, tl.Name)
		}
		sort.Strings(names)
		snap["tools"] = names
		res, err := cs.ListResources(ctx, nil)
		if err != nil {
			t.Fatalf("resources/list: %v", err)
		}
		var uris []string
		for _, r := range res.Resources {
			uris = append(uris, r.URI)
		}
		sort.Strings(uris)
		snap["resources"] = uris
		prompts, err := cs.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatalf("prompts/list: %v", err)
		}
		var pn []string
		for _, p := range prompts.Prompts {
			pn = append(pn, p.Name)
		}
		sort.Strings(pn)
		snap["prompts"] = pn
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "through aegis"}})
		if err != nil {
			t.Fatalf("tools/call echo: %v", err)
		}
		b, _ := json.Marshal(r.Content)
		snap["echo"] = string(b)
		return snap
	}
	direct, err := mcptest.Connect(ctx, argv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot(direct)
	direct.Close()

	c := newCLI(t)
	via, err := mcptest.Connect(ctx, c.wrapArgv(argv...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := snapshot(via)
	via.Close()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("through aegis %v\ndirect %v", got, want)
	}
	t.Logf("server-everything through aegis: %d tools, %d resources, %d prompts", len(got["tools"].([]string)), len(got["resources"].([]string)), len(got["prompts"].([]string)))
	h := &harness{t: t, audit: c.audit}
	if n := len(ofType(h.lines(), "outcome")); n != 1 {
		t.Errorf("%d outcomes, want 1 (the echo call)", n)
	}
	out, _, code := c.aegis("verify", "--key", c.pub, c.audit)
	if code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
}

// kill -9 of aegis while a call is at the server: the stream holds
// everything acknowledged, export rebuilds it, verify says Indeterminate
// and names the call in flight, and the next run finishes the record file
// from the stream before it appends.
func TestKill9MidCallLosesNothingAcknowledged(t *testing.T) {
	c := newCLI(t)
	cmd := exec.Command(c.wrapArgv(bin(t, "aegis-example-server"))[0], c.wrapArgv(bin(t, "aegis-example-server"))[1:]...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	send := func(s string) { io.WriteString(in, s+"\n") }
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"before"}}}`)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("echo: %v", err)
	}
	slow := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"ms":10000}}}`
	send(slow)
	// The intent reaches the record file only after it is durable; once it
	// is there the call is at (or on its way to) the server.
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(c.audit)
		if bytes.Contains(b, []byte(`"call_id":"call-2","line_type":"intent"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow call's intent never reached the record")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	in.Close()

	rebuilt := filepath.Join(c.dir, "rebuilt.aarl")
	if _, stderr, code := c.aegis("export", "--state-dir", c.state, "--out", rebuilt); code != 0 {
		t.Fatalf("export after kill: %d %s", code, stderr)
	}
	vout, _, code := c.aegis("verify", "--key", c.pub, rebuilt)
	if code != 3 || !strings.HasPrefix(vout, "Indeterminate: session 0 has no close record") || !strings.Contains(vout, "in_flight call-2\n") {
		t.Fatalf("verify of the export after kill -9: exit %d\n%s", code, vout)
	}
	// No relayed tools/call lacks its intent: every tools/call frame in the
	// stream has an intent with its digest in the export.
	digests := map[string]bool{}
	h := &harness{t: t, audit: rebuilt}
	for _, l := range ofType(h.lines(), "intent") {
		digests[str(l, "request_digest")] = true
	}
	s, err := events.Open(context.Background(), events.Config{Dir: c.state})
	if err != nil {
		t.Fatal(err)
	}
	sh := &harness{t: t, store: s}
	for _, f := range sh.frames("frame.c2s") {
		if bytes.Contains(f, []byte(`"tools/call"`)) && !digests[sha(f)] {
			t.Errorf("tools/call frame %q has no intent", f)
		}
	}
	s.Close(context.Background())
	if !digests[sha([]byte(slow))] {
		t.Fatal("the in-flight call's intent is missing")
	}

	// The next run completes the record file from the stream, links to its
	// real tail, and the whole file verifies.
	run := exec.Command(c.wrapArgv(bin(t, "aegis-example-server"))[0], c.wrapArgv(bin(t, "aegis-example-server"))[1:]...)
	run.Stdin = strings.NewReader("")
	if b, err := run.CombinedOutput(); err != nil {
		t.Fatalf("second wrap: %v\n%s", err, b)
	}
	vout, _, code = c.aegis("verify", "--key", c.pub, c.audit)
	if code != 0 {
		t.Fatalf("verify after the next run: exit %d\n%s", code, vout)
	}
	if _, _, code := c.aegis("export", "--state-dir", c.state, "--out", rebuilt); code != 0 {
		t.Fatal("export")
	}
	a, _ := os.ReadFile(c.audit)
	b, _ := os.ReadFile(rebuilt)
	if !bytes.Equal(a, b) {
		t.Fatal("after the next run the record file differs from the export")
	}
}

// A wrap that cannot record never starts its server.
func TestWrapRefusesBeforeServerStarts(t *testing.T) {
	c := newCLI(t)
	marker := filepath.Join(c.dir, "server-ran")
	server := []string{"sh", "-c", "touch " + marker}
	loose := filepath.Join(c.dir, "loose.key")
	kb, _ := os.ReadFile(c.key)
	os.WriteFile(loose, kb, 0o644)
	os.Chmod(loose, 0o644)
	garbled := filepath.Join(c.dir, "garbled.key")
	os.WriteFile(garbled, []byte("ABCDEF\n"), 0o600)

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"key readable by others", []string{"wrap", "--audit", c.audit, "--signing-key", loose, "--state-dir", c.state, "--"}, 1, "chmod 600"},
		{"malformed key", []string{"wrap", "--audit", c.audit, "--signing-key", garbled, "--state-dir", c.state, "--"}, 1, "expected 64 characters"},
		{"missing key", []string{"wrap", "--audit", c.audit, "--signing-key", filepath.Join(c.dir, "nope"), "--state-dir", c.state, "--"}, 1, "aegis keygen"},
		{"no audit flag", []string{"wrap", "--signing-key", c.key, "--state-dir", c.state, "--"}, 2, "both --audit and --signing-key"},
		{"no separator", append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key}, server...), 2, "no positional arguments"},
		{"shared state dir", []string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.dir, "--"}, 1, "chmod 700"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args[len(args)-1] == "--" {
				args = append(args, server...)
			}
			_, stderr, code := c.aegis(args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "aegis: error: ") {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tc.code, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the server ran")
			}
		})
	}
	t.Run("record file others can write", func(t *testing.T) {
		shared := filepath.Join(c.dir, "shared.aarl")
		os.WriteFile(shared, nil, 0o666)
		os.Chmod(shared, 0o666)
		_, stderr, code := c.aegis(append([]string{"wrap", "--audit", shared, "--signing-key", c.key, "--state-dir", c.state, "--"}, server...)...)
		want := "aegis: error: audit file " + shared + " is readable or writable by group or others (mode 0666); refusing to write the signed record into it\n" +
			"aegis: hint: chmod 600 " + shared + ", or choose a file in a directory only you can write"
		if code != 1 || !strings.HasPrefix(stderr, want) {
			t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the server ran")
		}
		if b, _ := os.ReadFile(shared); len(b) != 0 {
			t.Errorf("the refused record file was written to: %q", b)
		}
	})
	t.Run("state dir held by another process", func(t *testing.T) {
		s, err := events.Open(context.Background(), events.Config{Dir: c.state})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		_, stderr, code := c.aegis(append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--"}, server...)...)
		if code != 1 || !strings.Contains(stderr, "is in use by aegis process") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the server ran")
		}
	})
	t.Run("record that diverged from the stream", func(t *testing.T) {
		if _, _, code := c.aegis(append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--"}, "true")...); code != 0 {
			t.Fatal("first run failed")
		}
		b, _ := os.ReadFile(c.audit)
		os.WriteFile(c.audit, bytes.Replace(b, []byte(`"line_type":"close"`), []byte(`"line_type":"clos3"`), 1), 0o600)
		_, stderr, code := c.aegis(append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--"}, server...)...)
		if code != 1 || !strings.Contains(stderr, "does not match the event stream") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the server ran")
		}
		// The same file through a symbolic link is the same record: the
		// catch-up used to compare path strings, so a link escaped it.
		link := filepath.Join(c.dir, "link.aarl")
		if err := os.Symlink(c.audit, link); err != nil {
			t.Fatal(err)
		}
		_, stderr, code = c.aegis(append([]string{"wrap", "--audit", link, "--signing-key", c.key, "--state-dir", c.state, "--"}, server...)...)
		if code != 1 || !strings.Contains(stderr, "does not match the event stream") {
			t.Errorf("through a link: exit %d, stderr %q", code, stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the server ran")
		}
	})
}

// verify's exit codes for the cases a user meets first.
func TestVerifyExitCodes(t *testing.T) {
	c := newCLI(t)
	if _, _, code := c.aegis(append([]string{"wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--"}, "true")...); code != 0 {
		t.Fatal("wrap true failed")
	}
	other := strings.Repeat("ab", 32)
	cases := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"pinned", []string{"--key", c.pub, c.audit}, 0, "Verified (pinned to "},
		{"unpinned", []string{c.audit}, 0, "Verified (unpinned)"},
		{"untrusted key", []string{"--key", other, c.audit}, 1, "Tampered: session opened at"},
		{"key_id instead of key", []string{"--key", "XYZ", c.audit}, 2, ""},
		{"unreadable record", []string{filepath.Join(c.dir, "missing.aarl")}, 2, ""},
		// Several files are one rotated record, oldest first: the same
		// file twice does not chain on from itself.
		{"a record given twice as a rotated set", []string{c.audit, c.audit}, 1, "Tampered: open at session 1 seq 0 has no prev_session_tail"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := c.aegis(append([]string{"verify"}, tc.args...)...)
			if code != tc.code || !strings.HasPrefix(out, tc.out) {
				t.Errorf("exit %d stdout %q stderr %q; want %d %q", code, out, stderr, tc.code, tc.out)
			}
			if tc.out == "" && out != "" {
				t.Errorf("stdout %q, want none", out)
			}
			// An unpinned Verified says on stderr what it does not prove.
			if unpinned := strings.HasPrefix(out, "Verified (unpinned)"); unpinned != strings.Contains(stderr, "aegis: warning: unpinned") ||
				unpinned && !strings.Contains(stderr, "aegis: hint: pin the key you trust: aegis verify --key ") {
				t.Errorf("stderr %q for stdout %q", stderr, out)
			}
		})
	}
}
