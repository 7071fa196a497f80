package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// TestGatewayEndsOnSIGTERMWhileAServerKeepsSending: a host that closes as
// the TypeScript SDK does (stdin end, 2 s, SIGTERM) while a call of
// server-everything's long-running operation keeps sending progress:
// aegis gateway (stdio) ends within seconds of the SIGTERM, and does not
// need a SIGKILL.
func TestGatewayEndsOnSIGTERMWhileAServerKeepsSending(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway and server-everything")
	}
	t.Parallel() // it mostly waits on processes: beside the others
	every := mcptest.EverythingServer(t)
	l := newLive(t, "")
	path := filepath.Join(l.dir, "aegis.yaml")
	config := "version: 1\nservers:\n  everything:\n    command: " + every[0] + "\n    args: [" + strings.Join(quoteAll(every[1:]), ", ") + "]\n" +
		"profiles:\n  p:\n    allow: [\"everything.*\"]\nactivation:\n  default_profile: p\n"
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	errFile, err := os.Create(filepath.Join(l.dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	c := exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", path, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state)
	c.Env, c.Stderr = l.env, errFile
	in, _ := c.StdinPipe()
	outPipe, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	t.Cleanup(func() { c.Process.Kill() })
	out := bufio.NewReader(outPipe)
	stderr := func() string { b, _ := os.ReadFile(errFile.Name()); return string(b) }
	readUntil := func(want string) {
		t.Helper()
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("waiting for %s: %v\n%s", want, err, stderr())
			}
			if strings.Contains(line, want) {
				return
			}
		}
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ts-like","version":"1"}}}`+"\n")
	readUntil(`"id":0`)
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"everything__trigger-long-running-operation","arguments":{"duration":60,"steps":60000},"_meta":{"progressToken":"p1"}}}`+"\n")
	readUntil(`notifications/progress`)
	readUntil(`notifications/progress`)
	// Nobody reads aegis's stdout any more: the progress fills the pipe
	// (64 KiB on Linux), and aegis's next write to it blocks.
	if !waitPipeFull(outPipe.(*os.File), 60<<10, 5*time.Second) {
		t.Log("could not see the pipe to the host fill")
	}
	// The host leaves as the TypeScript SDK's stdio client does.
	in.Close()
	time.Sleep(2 * time.Second)
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		t.Logf("aegis gateway ended %v after SIGTERM: %v", time.Since(start), err)
		if err != nil || strings.Contains(stderr(), "aegis: error") {
			t.Errorf("aegis gateway ended with %v:\n%s", err, stderr())
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("aegis gateway took %v to end after SIGTERM", d)
		}
	case <-time.After(15 * time.Second):
		c.Process.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
		t.Fatalf("aegis gateway did not end within 15 s of SIGTERM (needs SIGKILL):\n%s", stderr())
	}
}

func quoteAll(ss []string) []string {
	var q []string
	for _, s := range ss {
		q = append(q, `"`+strings.ReplaceAll(s, `"`, `\"`)+`"`)
	}
	return q
}

// TestHTTPGatewayStopsManySessionsInTime: SIGTERM with many HTTP sessions
// open, each with a call in flight: aegis gateway --listen ends within
// 10 s, every session closed in its record (closed and recorded side by
// side, not one after another).
// AEGIS_TEST_SESSIONS=300 measures with that many sessions,
// AEGIS_TEST_DEBUG=1 logs aegis's debug lines (how long each step took).
func TestHTTPGatewayStopsManySessionsInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway --listen")
	}
	t.Parallel() // it mostly waits on processes: beside the others
	n := 40
	var h0 *httpGW
	if v := os.Getenv("AEGIS_TEST_SESSIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	l := newLive(t, "")
	config := "version: 1\nservers:\n  example:\n    command: " + filepath.Join(l.bin, "aegis-example-server") + "\n" +
		"profiles:\n  p:\n    allow: [\"example.*\"]\nactivation:\n  default_profile: p\n"
	if os.Getenv("AEGIS_TEST_DEBUG") != "" {
		l.env = append(l.env, "AEGIS_DEBUG=1")
		defer func() { t.Log(h0.stderr.String()) }()
	}
	h := l.httpGateway(config, "--max-sessions", strconv.Itoa(n))
	h0 = h
	ctx := context.Background()
	var wg sync.WaitGroup
	calls := make(chan error, n)
	t0 := time.Now()
	// The sessions begin eight at a time; each then has a call in flight.
	sem := make(chan struct{}, 8)
	var begun sync.WaitGroup
	for range n {
		begun.Add(1)
		sem <- struct{}{}
		go func() {
			c := mcp.NewClient(&mcp.Implementation{Name: "many", Version: "1"}, nil)
			// Each its own HTTP session: a host of the session protocol.
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(h.token)}, sessionHost)
			if err == nil {
				wg.Add(1)
				defer wg.Done()
			}
			<-sem
			begun.Done()
			if err != nil {
				calls <- err
				return
			}
			defer cs.Close()
			_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__slow", Arguments: map[string]any{"ms": 10000}})
			calls <- err
		}()
	}
	begun.Wait()
	t.Logf("%d sessions in %v", n, time.Since(t0))
	for len(calls) > 0 {
		if err := <-calls; err != nil {
			t.Fatalf("a session before SIGTERM: %v\n%s", err, h.stderr.String())
		}
	}
	time.Sleep(500 * time.Millisecond) // the calls reach their servers
	start := time.Now()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.done:
		h.done <- err
		t.Logf("aegis gateway --listen with %d sessions ended %v after SIGTERM: %v", n, time.Since(start), err)
	case <-time.After(30 * time.Second):
		t.Fatalf("aegis gateway --listen with %d sessions did not end within 30 s of SIGTERM", n)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("aegis gateway --listen with %d sessions took %v to end after SIGTERM", n, d)
	}
	if strings.Contains(h.stderr.String(), "ended at once") {
		t.Errorf("the sessions were not closed in time, aegis ended at once:\n%s", h.stderr.String())
	}
	wg.Wait()
	_, out, _ := l.in("sessions", "--json")
	var sessions []struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &sessions); err != nil {
		t.Fatalf("sessions --json: %v\n%s", err, out)
	}
	closed := 0
	for _, s := range sessions {
		if s.State == "closed" {
			closed++
		}
	}
	if len(sessions) != n || closed != n {
		t.Errorf("%d sessions recorded, %d closed; want %d closed", len(sessions), closed, n)
	}
}

// TestGatewaySecondSIGTERMEndsAtOnce: SIGTERM always wins: a second one
// while the gateway stops (a call in flight has its grace, the server
// its own) ends aegis at once, with 128+15, saying so.
func TestGatewaySecondSIGTERMEndsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway")
	}
	t.Parallel() // it mostly waits on processes: beside the others
	l := newLive(t, "")
	w := l.gateway("version: 1\nservers:\n  example:\n    command: " + filepath.Join(l.bin, "aegis-example-server") + "\n" +
		"profiles:\n  p:\n    allow: [\"example.*\"]\nactivation:\n  default_profile: p\n")
	w.initialize()
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":10000}}}`)
	time.Sleep(300 * time.Millisecond) // the call reaches its server
	w.c.Process.Signal(syscall.SIGTERM)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	w.c.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-w.done:
		w.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("aegis gateway did not end after a second SIGTERM")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("aegis gateway ended %v after the second SIGTERM, want at once", d)
	}
	var said []string
	for p := range w.prompts {
		said = append(said, p)
	}
	if w.c.ProcessState.ExitCode() != 143 || !strings.Contains(strings.Join(said, "\n"), "again while stopping: ended at once") {
		t.Errorf("exit %v, stderr:\n%s", err, strings.Join(said, "\n"))
	}
}
