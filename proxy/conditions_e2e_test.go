package proxy_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// A when: rule confines the reference filesystem server's write_file to
// one directory of the several it serves: a write there runs; a write
// elsewhere in what the server would accept, or one that climbs out with
// "..", is refused by aegis and never reaches the server (no file
// appears), and the outcome line names the rule.
func TestConditionConfinesFilesystemWrites(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	base := t.TempDir()
	allowed := filepath.Join(base, "allowed")
	if err := os.Mkdir(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	pol := filepath.Join(c.dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(`version: 1
default: allow
rules:
  - id: writes-stay-in-allowed
    action: deny
    tool: write_file
    when: '!within(args.path, "`+allowed+`")'
    reason: writes stay in the allowed directory
`), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{bin(t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--"},
		mcptest.FilesystemServer(t, base)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(argv[0], argv[1:]...), TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	write := func(path string) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": path, "content": "written"}})
		if err == nil && res.IsError {
			err = errors.New("tool error")
		}
		return err
	}
	inside := filepath.Join(allowed, "a.txt")
	if err := write(inside); err != nil {
		t.Fatalf("write inside the allowed directory: %v", err)
	}
	if b, err := os.ReadFile(inside); err != nil || string(b) != "written" {
		t.Fatalf("the allowed write did not happen: %q %v", b, err)
	}
	for _, path := range []string{filepath.Join(base, "b.txt"), allowed + "/../c.txt"} {
		err := write(path)
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != -32042 || !strings.Contains(string(rpc.Data), "writes stay in the allowed directory") {
			t.Errorf("write to %s: %v; want the -32042 refusal with the rule's reason", path, err)
		}
	}
	cs.Close()
	checkWritesRefused(t, c.audit, base)
}

// The same confinement as a gateway configuration's rule: the refused
// writes come back as a tool error naming the rule's reason, no file
// appears, and the outcome line names the rule.
func TestConditionConfinesFilesystemWritesThroughTheGateway(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	base := t.TempDir()
	allowed := filepath.Join(base, "allowed")
	if err := os.Mkdir(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	fsArgv := mcptest.FilesystemServer(t, base)
	config := filepath.Join(c.dir, "aegis.yaml")
	if err := os.WriteFile(config, []byte(`version: 1
servers:
  fs:
    command: `+fsArgv[0]+`
    args: [`+fsArgv[1]+`, `+base+`]
profiles:
  dev:
    allow: [fs.*]
activation:
  default_profile: dev
rules:
  - id: writes-stay-in-allowed
    action: deny
    tool: fs__write_file
    when: '!within(args.path, "`+allowed+`")'
    reason: writes stay in the allowed directory
`), 0o600); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	write := func(path string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "fs__write_file", Arguments: map[string]any{"path": path, "content": "written"}})
	}
	if res, err := write(filepath.Join(allowed, "a.txt")); err != nil || res.IsError {
		t.Fatalf("write inside the allowed directory: %v %+v", err, res)
	}
	for _, path := range []string{filepath.Join(base, "b.txt"), allowed + "/../c.txt"} {
		res, err := write(path)
		if err != nil || !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "writes stay in the allowed directory") {
			t.Errorf("write to %s: %v %+v; want a tool error with the rule's reason", path, err, res)
		}
	}
	cs.Close()
	checkWritesRefused(t, c.audit, base)
}

// checkWritesRefused checks that the two refused writes of the tests
// above left no file in base, and that the record holds two denied
// outcomes, each naming the rule.
func checkWritesRefused(t *testing.T, audit, base string) {
	t.Helper()
	for _, name := range []string{"b.txt", "c.txt"} {
		if _, err := os.Stat(filepath.Join(base, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists: the refused write reached the server", name)
		}
	}
	h := &harness{t: t, audit: audit}
	refused := 0
	for _, o := range ofType(h.lines(), "outcome") {
		if obj(o, "policy")["status"] == "denied" {
			refused++
			if rule := obj(o, "decision_axes")["matched_rule"]; rule != "writes-stay-in-allowed" {
				t.Errorf("refusal names rule %v", rule)
			}
		}
	}
	if refused != 2 {
		t.Errorf("%d refused outcomes, want 2", refused)
	}
}
