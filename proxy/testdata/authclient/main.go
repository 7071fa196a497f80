// Command authclient is a client of the MCP conformance suite's
// authorization scenarios that goes through aegis: given the scenario's
// server url, it writes a gateway file with that server under oauth:,
// runs aegis auth login (answering the authorization server's immediate
// redirect by pasting it, as on a headless machine), then aegis gateway,
// and as the host lists the tools and calls test-tool through it. aegis
// is the binary beside this one.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: authclient SERVER_URL")
	}
	if err := run(os.Args[1]); err != nil {
		log.Fatalf("scenario %s through aegis: %v", os.Getenv("MCP_CONFORMANCE_SCENARIO"), err)
	}
}

func run(serverURL string) error {
	self, _ := os.Executable()
	aegis := filepath.Join(filepath.Dir(self), "aegis")
	dir, err := os.MkdirTemp("", "authclient")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var conf map[string]any
	json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &conf)
	oauth := `{client_metadata_url: "https://conformance-test.local/client-metadata.json"}`
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+dir)
	if id, ok := conf["client_id"].(string); ok {
		oauth = fmt.Sprintf(`{client_id: %q}`, id)
		if secret, ok := conf["client_secret"].(string); ok {
			oauth = fmt.Sprintf(`{client_id: %q, client_secret: {env: CONFORMANCE_CLIENT_SECRET}}`, id)
			env = append(env, "CONFORMANCE_CLIENT_SECRET="+secret)
		}
	}
	config := filepath.Join(dir, "aegis.yaml")
	yaml := fmt.Sprintf("version: 1\nservers:\n  s: {url: %q, oauth: %s}\nprofiles:\n  p: {allow: [\"s.*\"]}\nactivation:\n  default_profile: p\n", serverURL, oauth)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		return err
	}
	state := filepath.Join(dir, "state")
	if err := login(aegis, config, state, env); err != nil {
		return err
	}
	key := filepath.Join(dir, "signing.key")
	if out, err := exec.Command(aegis, "keygen", "--out", key).CombinedOutput(); err != nil {
		return fmt.Errorf("keygen: %v: %s", err, out)
	}
	cmd := exec.Command(aegis, "gateway", "--config", config, "--audit", filepath.Join(dir, "calls.aarl"), "--signing-key", key, "--state-dir", state)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("connect to aegis gateway: %w", err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "s__test-tool", Arguments: map[string]any{}})
	if err != nil {
		return fmt.Errorf("tools/call s__test-tool: %w", err)
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		return fmt.Errorf("tools/call s__test-tool: an error result: %s", b)
	}
	return nil
}

// login runs aegis auth login s; the suite's authorization server
// redirects at once, so the redirect is read and pasted.
func login(aegis, config, state string, env []string) error {
	cmd := exec.Command(aegis, "auth", "login", "s", "--config", config, "--state-dir", state, "--timeout", "30s")
	cmd.Env = env
	stdin, _ := cmd.StdinPipe()
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(stderr)
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(os.Stderr, line)
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "http") {
			resp, err := noRedirect.Get(s)
			if err != nil {
				return fmt.Errorf("open the authorization address: %w", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			io.WriteString(stdin, resp.Header.Get("Location")+"\n")
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("aegis auth login: %w", err)
	}
	return nil
}
