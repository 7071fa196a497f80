package proxy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A profile's resources entry "<server>.*" shows and serves every
// resource and resource template of that server, whatever their URIs, and
// nothing of another server: example://readme of the example server stays
// hidden and is refused when read, while server-everything's resources,
// templates and reads pass.
func TestGatewayServerResourcesEntryGrantsOnlyThatServer(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	c := newCLI(t)
	every := mcptest.EverythingServer(t)
	args, _ := json.Marshal(every[1:])
	config := filepath.Join(c.dir, "aegis.yaml")
	os.WriteFile(config, []byte(`version: 1
servers:
  example:
    command: `+bin(t, "aegis-example-server")+`
  everything:
    command: `+every[0]+`
    args: `+string(args)+`
profiles:
  default:
    allow: ["example.*"]
    resources: ["everything.*"]
activation:
  default_profile: default
`), 0o600)
	runtime := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtime, 0o700)
	cmd := exec.Command(bin(t, "aegis"), "gateway", "--config", config, "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	ctx := t.Context()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aegis gateway: %v", err)
	}
	defer cs.Close()

	rs, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var everything string
	for _, r := range rs.Resources {
		if strings.HasPrefix(r.URI, "example:") {
			t.Errorf("the example server's %s is shown by everything.*", r.URI)
		} else if everything == "" {
			everything = r.URI
		}
	}
	if everything == "" {
		t.Fatalf("no resource of server-everything shown: %+v", rs.Resources)
	}
	if rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: everything}); err != nil || len(rr.Contents) == 0 {
		t.Errorf("read %s: %v", everything, err)
	}
	if ts, err := cs.ListResourceTemplates(ctx, nil); err != nil || len(ts.ResourceTemplates) == 0 {
		t.Errorf("server-everything's templates are hidden: %v %+v", err, ts)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "example://readme"}); err == nil || !strings.Contains(err.Error(), "AEGIS_RESOURCE_DENIED") {
		t.Errorf("example://readme read under everything.*: %v", err)
	}
}
