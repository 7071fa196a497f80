// Command stdiohost is a client of the MCP conformance suite's client
// scenarios that goes through aegis gateway over stdio: given the
// scenario's server url, it writes a gateway file with that server (url:,
// names unprefixed, everything allowed), starts aegis gateway as its MCP
// server over stdin and stdout, and as the host (the go-sdk's client) does
// what the go-sdk's conformance client (conformance/everything-client) does
// in that scenario over HTTP. aegis is STDIOHOST_AEGIS, else the binary
// beside this one; the gateway's record, state and key go in STDIOHOST_DIR (a folder of its
// own for each run is made in it), and STDIOHOST_PROTOCOL (such as
// 2026-07-28) is passed to aegis gateway --protocol and is the protocol
// the host asks for (else the session protocol), unless
// STDIOHOST_HOST_PROTOCOL names another.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: stdiohost SERVER_URL")
	}
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	if err := run(os.Args[1], scenario); err != nil {
		log.Fatalf("scenario %s through aegis gateway over stdio: %v", scenario, err)
	}
}

func run(serverURL, scenario string) error {
	aegis := os.Getenv("STDIOHOST_AEGIS")
	if aegis == "" {
		self, _ := os.Executable()
		aegis = filepath.Join(filepath.Dir(self), "aegis")
	}
	dir, err := os.MkdirTemp(os.Getenv("STDIOHOST_DIR"), "run")
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(`version: 1
servers:
  s:
    url: %s
    prefix: false
profiles:
  all:
    allow: ["s.*"]
    prompts: ["s.*"]
    resources: ["s.*"]
activation:
  default_profile: all
`, serverURL)
	if err := os.WriteFile(filepath.Join(dir, "aegis.yaml"), []byte(conf), 0o600); err != nil {
		return err
	}
	key := filepath.Join(dir, "signing.key")
	if out, err := exec.Command(aegis, "keygen", "--out", key).CombinedOutput(); err != nil {
		return fmt.Errorf("aegis keygen: %v\n%s", err, out)
	}
	args := []string{"gateway", "--config", filepath.Join(dir, "aegis.yaml"), "--audit", filepath.Join(dir, "calls.aarl"),
		"--signing-key", key, "--state-dir", filepath.Join(dir, "state")}
	opts := &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	if v := os.Getenv("STDIOHOST_PROTOCOL"); v != "" {
		args = append(args, "--protocol", v)
		opts.ProtocolVersion = v
	}
	if v := os.Getenv("STDIOHOST_HOST_PROTOCOL"); v != "" {
		opts.ProtocolVersion = v
	}
	gw := exec.Command(aegis, args...)
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		return err
	}
	defer stderr.Close()
	gw.Stderr = stderr

	ctx := context.Background()
	copts := &mcp.ClientOptions{}
	switch scenario {
	case "elicitation-sep1034-client-defaults":
		copts.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		}
	case "sep-2322-client-request-state":
		copts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}
		copts.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}}, nil
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1.0.0"}, copts)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: gw}, opts)
	if err != nil {
		return fmt.Errorf("connect to aegis gateway: %w", err)
	}
	defer cs.Close()
	return scenarioSteps(ctx, cs, scenario)
}

// scenarioSteps does what the go-sdk's conformance client does in scenario.
func scenarioSteps(ctx context.Context, cs *mcp.ClientSession, scenario string) error {
	callNamed := func(name string, args map[string]any) error {
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == name }) {
			return fmt.Errorf("tool %q not found", name)
		}
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		return err
	}
	switch scenario {
	case "initialize", "json-schema-ref-no-deref":
		_, err := cs.ListTools(ctx, nil)
		if scenario == "json-schema-ref-no-deref" {
			return nil
		}
		return err
	case "request-metadata":
		return nil
	case "tools_call":
		return callNamed("add_numbers", map[string]any{"a": 5, "b": 3})
	case "elicitation-sep1034-client-defaults":
		return callNamed("test_client_elicitation_defaults", map[string]any{})
	case "sse-retry":
		return callNamed("test_reconnection", map[string]any{})
	case "json-schema-2020-12-preservation":
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "json_schema_2020_12_tool" })
		if i < 0 {
			return fmt.Errorf("tool json_schema_2020_12_tool not found")
		}
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "json_schema_echo", Arguments: map[string]any{"schema": tools.Tools[i].InputSchema}})
		return err
	case "sep-2322-client-request-state":
		for _, name := range []string{"test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_unrelated", "test_mrtr_no_result_type"} {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}}); err != nil {
				log.Printf("%s: %v (expected for some)", name, err)
			}
		}
		return nil
	case "http-standard-headers":
		if tools, err := cs.ListTools(ctx, nil); err == nil && len(tools.Tools) > 0 {
			cs.CallTool(ctx, &mcp.CallToolParams{Name: tools.Tools[0].Name, Arguments: map[string]any{}})
		}
		if res, err := cs.ListResources(ctx, nil); err == nil && len(res.Resources) > 0 {
			cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: res.Resources[0].URI})
		}
		if prompts, err := cs.ListPrompts(ctx, nil); err == nil && len(prompts.Prompts) > 0 {
			cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompts.Prompts[0].Name, Arguments: map[string]string{}})
		}
		return nil
	case "http-custom-headers":
		if _, err := cs.ListTools(ctx, nil); err != nil {
			return err
		}
		var conf struct {
			ToolCalls []struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"toolCalls"`
		}
		json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &conf)
		for _, c := range conf.ToolCalls {
			if c.Arguments == nil {
				c.Arguments = map[string]any{}
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.Name, Arguments: c.Arguments}); err != nil {
				log.Printf("%s: %v", c.Name, err)
			}
		}
		return nil
	case "http-invalid-tool-headers":
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			return err
		}
		for _, t := range tools.Tools {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.Name, Arguments: map[string]any{"region": "us-west1"}}); err != nil {
				log.Printf("%s: %v", t.Name, err)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown scenario %q", scenario)
}
