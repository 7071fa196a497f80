package mcptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// interopTimeout bounds a conversation with a Node reference server,
// including node's start-up.
const interopTimeout = 60 * time.Second

// TestEverythingServerDirect talks to the Node reference server
// @modelcontextprotocol/server-everything with a go-sdk client, with no proxy
// in between, to establish the baseline a proxied run is compared with.
func TestEverythingServerDirect(t *testing.T) {
	argv := EverythingServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), interopTimeout)
	defer cancel()

	start := time.Now()
	// server-everything asks the client for roots/list 350ms after the
	// handshake and does not exit on stdin EOF while that request is
	// unanswered, so a short session may end with SIGTERM.
	cs := connectProtocol(t, ctx, argv, "", true)
	init := cs.InitializeResult()
	t.Logf("connected in %v: server %s %s, protocol %s", time.Since(start).Round(time.Millisecond),
		init.ServerInfo.Name, init.ServerInfo.Version, init.ProtocolVersion)

	var tools []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("Tools() = %v", err)
		}
		tools = append(tools, tool.Name)
	}
	t.Logf("%d tools: %s", len(tools), strings.Join(tools, " "))
	if len(tools) == 0 {
		t.Errorf("Tools() listed nothing")
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}})
	if err != nil {
		t.Fatalf("CallTool(echo) = %v", err)
	}
	if got := contentSummary(res.Content); res.IsError || !strings.Contains(got, "hello") {
		t.Errorf("CallTool(echo hello) = %s (isError %v), want text containing hello", got, res.IsError)
	}
	t.Logf("echo -> %s", contentSummary(res.Content))

	nres := 0
	for _, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatalf("Resources() = %v", err)
		}
		nres++
	}
	nprompts := 0
	for _, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatalf("Prompts() = %v", err)
		}
		nprompts++
	}
	t.Logf("%d resources, %d prompts", nres, nprompts)
	if nres == 0 || nprompts == 0 {
		t.Errorf("got %d resources and %d prompts, want some of each", nres, nprompts)
	}
}

// TestFilesystemServerDirect lists a directory through the Node reference
// server @modelcontextprotocol/server-filesystem.
func TestFilesystemServerDirect(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "marker.txt"), []byte("aegis\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := FilesystemServer(t, dir)
	ctx, cancel := context.WithTimeout(t.Context(), interopTimeout)
	defer cancel()
	cs := connect(t, ctx, argv)

	ntools := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("Tools() = %v", err)
		}
		ntools++
	}
	t.Logf("%d tools", ntools)

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_directory", Arguments: map[string]any{"path": dir}})
	if err != nil {
		t.Fatalf("CallTool(list_directory) = %v", err)
	}
	if got := contentSummary(res.Content); res.IsError || !strings.Contains(got, "marker.txt") {
		t.Errorf("CallTool(list_directory %s) = %s (isError %v), want marker.txt listed", dir, got, res.IsError)
	}
}

// TestMissingInteropDeps checks that a missing Node package fails the test
// with the `make interop-deps` hint, or skips it when AEGIS_SKIP_INTEROP=1.
func TestMissingInteropDeps(t *testing.T) {
	cases := []struct {
		name        string
		env         string
		wantFail    bool
		wantSkip    bool
		wantMessage string
	}{
		{name: "fail", env: "", wantFail: true, wantMessage: "run `make interop-deps`"},
		{name: "skip", env: "1", wantSkip: true, wantMessage: "AEGIS_SKIP_INTEROP=1"},
		{name: "other value fails", env: "yes", wantFail: true, wantMessage: "run `make interop-deps`"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(skipInteropEnv, tc.env)
			rec := &recordTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				nodePackage(rec, "@modelcontextprotocol/not-installed")
			}()
			<-done
			if rec.failed != tc.wantFail || rec.skipped != tc.wantSkip {
				t.Errorf("nodePackage(not-installed) with %s=%q: failed %v, skipped %v; want %v, %v",
					skipInteropEnv, tc.env, rec.failed, rec.skipped, tc.wantFail, tc.wantSkip)
			}
			if !strings.Contains(rec.msg, tc.wantMessage) {
				t.Errorf("nodePackage(not-installed) message = %q, want it to contain %q", rec.msg, tc.wantMessage)
			}
		})
	}
}

// recordTB records Fatalf and Skipf instead of acting on the real test; like
// the real ones, they end the calling goroutine.
type recordTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordTB) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
