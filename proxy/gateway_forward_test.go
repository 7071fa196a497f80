package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// gatewayCmd is `aegis gateway` over a config holding servers (name ->
// argv) and one profile that allows allow, resources, and every prompt.
func gatewayCmd(t *testing.T, c *cli, servers map[string][]string, allow []string, resources []string) *exec.Cmd {
	t.Helper()
	q := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	var y strings.Builder
	y.WriteString("version: 1\nservers:\n")
	for _, n := range sortedNames(servers) {
		argv := servers[n]
		fmt.Fprintf(&y, "  %s:\n    command: %s\n    args: %s\n", n, q(argv[0]), q(argv[1:]))
	}
	fmt.Fprintf(&y, "profiles:\n  all:\n    allow: %s\n", q(allow))
	// Every prompt of every server, as a direct connection shows them.
	var prompts []string
	for _, n := range sortedNames(servers) {
		prompts = append(prompts, n+".*")
	}
	fmt.Fprintf(&y, "    prompts: %s\n", q(prompts))
	if len(resources) > 0 {
		fmt.Fprintf(&y, "    resources: %s\n", q(resources))
	}
	y.WriteString("activation:\n  default_profile: all\n")
	config := filepath.Join(c.dir, "aegis.yaml")
	if err := os.WriteFile(config, []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	return cmd
}

func sortedNames[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileHas(path, s string) func() bool {
	return func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), s)
	}
}

// A server adds a tool at run time, and a second tool under a name it
// already lists: the gateway lists it again, shows the new tool (the host
// is told the list changed), and refuses the shadow, keeping the tool the
// host already saw and saying so on stderr.
func TestGatewayListChangedRefusesShadowTool(t *testing.T) {
	c := newCLI(t)
	log := filepath.Join(c.dir, "grow.log")
	cmd := gatewayCmd(t, c, map[string][]string{"grow": {bin(t, "growserver"), "-log", log}}, []string{"grow.*"}, nil)
	// A tool added after the server's tools were pinned is a change
	// (docs/pins.md); this test is about shadowing, so its config accepts
	// changes.
	if f, err := os.OpenFile(filepath.Join(c.dir, "aegis.yaml"), os.O_APPEND|os.O_WRONLY, 0); err == nil {
		f.WriteString("on_tool_change: allow\n")
		f.Close()
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := t.Context()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	defer cs.Close()
	tools := func() map[string]string {
		t.Helper()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, tl := range res.Tools {
			m[tl.Name] = tl.Description
		}
		return m
	}
	before := tools()
	if _, ok := before["grow__grow"]; !ok || before["grow__fresh"] != "" {
		t.Fatalf("tools before: %v", before)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "grow__grow"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the host was not told that the tool list changed\n%s", stderr)
	}
	after := tools()
	if _, ok := after["grow__fresh"]; !ok {
		t.Errorf("the new tool is not listed: %v", after)
	}
	if after["grow__grow"] != before["grow__grow"] {
		t.Errorf("the shadow replaced the tool the host saw: %q, was %q", after["grow__grow"], before["grow__grow"])
	}
	if !strings.Contains(stderr.String(), "tool grow refused") {
		t.Errorf("no refusal on stderr:\n%s", stderr)
	}
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "grow__fresh"}); err != nil || r.IsError {
		t.Errorf("the new tool cannot be called: %v %v", r, err)
	}
	cs.Close()
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Errorf("the race detector found a race in the gateway:\n%s", stderr)
	}
}

// A host cancels a call in flight: the server gets notifications/cancelled
// for it, and the gateway does not answer the cancelled id.
func TestGatewayCancelReachesServerNoAnswer(t *testing.T) {
	c := newCLI(t)
	log := filepath.Join(c.dir, "grow.log")
	cmd := gatewayCmd(t, c, map[string][]string{"grow": {bin(t, "growserver"), "-log", log}}, []string{"grow.*"}, nil)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	in, _ := cmd.StdinPipe()
	outR, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	frames := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				frames <- m
			}
		}
		close(frames)
	}()
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(in, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	// answer reads frames until the answer to id, failing on an answer to
	// the cancelled id 2.
	answer := func(id float64) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m, ok := <-frames:
				if !ok {
					t.Fatalf("the gateway closed stdout\n%s", stderr)
				}
				if m["id"] == 2.0 && m["method"] == nil {
					t.Errorf("the gateway answered the cancelled request: %v", m)
				}
				if m["id"] == id && m["method"] == nil {
					return
				}
			case <-timeout:
				t.Fatalf("no answer to %v\n%s", id, stderr)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	answer(1)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"grow__hang","arguments":{}}}`)
	waitFor(t, 10*time.Second, "the call to reach the server", fileHas(log, `"name":"hang"`))
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"the user stopped it"}}`)
	waitFor(t, 10*time.Second, "notifications/cancelled to reach the server", fileHas(log, `notifications/cancelled`))
	time.Sleep(300 * time.Millisecond)
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	answer(3)
	time.Sleep(300 * time.Millisecond)
	send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	answer(4)
	in.Close()
	cmd.Wait()
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Errorf("the race detector found a race in the gateway:\n%s", stderr)
	}
}

// A server asks for sampling during a call of a host that has no sampling
// capability: the gateway refuses the request as a client without the
// capability would (-32601), and the host is never asked. Each host asks
// in its own way:
//   - a session host (2025-11-25) that probed with server/discover before
//     its initialize, as the go-sdk's client does, in front of a gateway
//     that offers only the session protocol (--protocol 2025-11-25): its
//     first frame was no initialize, so the servers were told every
//     capability the gateway carries, and server-everything offers its
//     trigger-sampling-request;
//   - a session host that initializes at 2025-11-25 (the TypeScript SDK,
//     Claude Desktop): growserver asks for a sample during a prompts/get
//     although it was not told the host can sample;
//   - a host of 2026-07-28 (the default), whose requests' clientCapabilities
//     name no sampling: the same prompt, and no input_required round of
//     it is put to the host or recorded.
func TestGatewayRefusesSamplingTheHostDidNotAnnounce(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	every := mcptest.EverythingServer(t)
	for _, tc := range []struct {
		name     string
		protocol string // the gateway's --protocol; "" for the default
		host     string // the host's protocol version: "" for the go-sdk client's default
		want     string // the version the host is served at
		prompt   bool   // growserver's prompt asks, else server-everything's tool
	}{
		{"SessionHostThatProbedFirst", "2025-11-25", "", "2025-11-25", false},
		{"SessionHost", "", "2025-11-25", "2025-11-25", true},
		{"StatelessHost", "", "", "2026-07-28", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			log := filepath.Join(t.TempDir(), "grow.log")
			cmd := gatewayCmd(t, c, map[string][]string{"everything": every, "grow": {bin(t, "growserver"), "-reads", "-log", log}}, []string{"everything.*"}, nil)
			if tc.protocol != "" {
				cmd.Args = append(cmd.Args, "--protocol", tc.protocol)
			}
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
				Capabilities: &mcp.ClientCapabilities{},
				// An input_required result comes back to the test as it is.
				MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
			})
			ctx := t.Context()
			seen := &syncBuffer{} // every message the host sent and got
			transport := &mcp.LoggingTransport{Transport: &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, Writer: seen}
			cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: tc.host})
			if err != nil {
				t.Fatalf("connect: %v\n%s", err, stderr)
			}
			defer cs.Close()
			if v := cs.InitializeResult().ProtocolVersion; v != tc.want {
				t.Fatalf("the host is served at %s, want %s", v, tc.want)
			}
			if tc.prompt {
				res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "grow__ask", Arguments: map[string]string{"topic": "bees"}})
				if err != nil || res.NeedsInput() {
					t.Fatalf("prompts/get: %v %+v; want the prompt, the host not asked", err, res)
				}
				// What the server got for its sampling request: a refusal
				// (the gateway's client, which was not told the host can
				// sample, refuses as the SDK's client without it does).
				waitFor(t, 10*time.Second, "the refusal to reach the server", fileHas(log, `"id":"g-4"`))
				b, _ := os.ReadFile(log)
				var refusal string
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, `"id":"g-4"`) {
						refusal = line
					}
				}
				if !strings.Contains(refusal, `"error":{"code":-3`) || strings.Contains(refusal, `"result"`) {
					t.Errorf("the server's sampling request was answered %s; want a refusal", refusal)
				}
			} else {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: map[string]any{"prompt": "hi"}})
				var text string
				if res != nil {
					for _, ct := range res.Content {
						if tc, ok := ct.(*mcp.TextContent); ok {
							text += tc.Text
						}
					}
				}
				// The go-sdk host would answer "client does not support CreateMessage";
				// the gateway answers as a client without the method.
				if err == nil && !res.IsError || !strings.Contains(fmt.Sprint(err)+text, "-32601") {
					t.Errorf("sampling for a host without the capability: %v %q", err, text)
				}
			}
			cs.Close()
			if strings.Contains(seen.String(), `"method":"sampling/createMessage"`) || strings.Contains(seen.String(), `"inputRequests"`) {
				t.Errorf("the host was asked:\n%s", seen)
			}
			evs, _ := c.events()
			// Decided and recorded once: a prompts/get has its call.verdict,
			// a tools/call its intent.
			decided := "call.intent"
			if tc.prompt {
				decided = "call.verdict"
			}
			if n := len(payloads(evs, decided)); n != 1 {
				t.Errorf("%d %s events; want 1", n, decided)
			}
			for _, n := range payloads(evs, "note") {
				if n["mrtr"] != nil {
					t.Errorf("a round was recorded for a request the host cannot take: %v", n)
				}
			}
		})
	}
}
