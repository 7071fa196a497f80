// Command authclient is a client of the MCP conformance suite's
// authorization scenarios that goes through aegis: given the scenario's
// server url, it writes a gateway file with that server under oauth:,
// runs aegis auth login (answering the authorization server's immediate
// redirect by pasting it, as on a headless machine), then aegis gateway,
// and as the host lists the tools and calls test-tool through it. The
// host takes URL elicitations as a real one does: it opens the url (an
// HTTP client that follows the redirects: the suite's authorization
// server approves at once), waits for notifications/elicitation/complete
// and calls again. At the end, no token stored for the server (after
// the login, and at the end) and no authorization code the host saw may
// appear in the record, in any other file of the run (the event stream's
// among them) or in aegis's stderr. aegis is the binary beside this one.
//
// With AUTHCLIENT_PLAIN_REPORT set to a file, the host declares no
// elicitation and calls test-tool once: the JSON-RPC error's message (or
// "ok") is written to that file.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/gateway"
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
	first, err := gateway.NewTokenStore(state).Load("s")
	if err != nil {
		return fmt.Errorf("read the stored token: %w", err)
	}
	key := filepath.Join(dir, "signing.key")
	if out, err := exec.Command(aegis, "keygen", "--out", key).CombinedOutput(); err != nil {
		return fmt.Errorf("keygen: %v: %s", err, out)
	}
	cmd := exec.Command(aegis, "gateway", "--config", config, "--audit", filepath.Join(dir, "calls.aarl"), "--signing-key", key, "--state-dir", state)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := &host{complete: map[string]chan struct{}{}}
	opts := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			h.completed(r.Params.ElicitationID)
		},
	}
	report := os.Getenv("AUTHCLIENT_PLAIN_REPORT")
	if report != "" {
		opts = nil
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("connect to aegis gateway: %w", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		cs.Close()
		return fmt.Errorf("tools/list: %w", err)
	}
	if report != "" {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "s__test-tool", Arguments: map[string]any{}})
		cs.Close()
		said := "ok"
		if rpc := (*jsonrpc.Error)(nil); errors.As(err, &rpc) {
			said = rpc.Message
		} else if err != nil {
			said = err.Error()
		}
		return os.WriteFile(report, []byte(said), 0o600)
	}
	err = h.call(ctx, cs, "s__test-tool")
	cs.Close()
	if err != nil {
		return err
	}
	return h.leaks(dir, state, first, stderr.Bytes())
}

// host is what the host keeps: the elicitations it waits for, and the
// authorization codes it saw.
type host struct {
	mu       sync.Mutex
	complete map[string]chan struct{} // elicitation id -> closed when complete
	codes    []string
}

func (h *host) waiter(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.complete[id]
	if !ok {
		ch = make(chan struct{})
		h.complete[id] = ch
	}
	return ch
}

func (h *host) completed(id string) {
	ch := h.waiter(id)
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// call calls tool; a URLElicitationRequired answer is shown to the
// "user" (its urls opened), and the call made again once every
// elicitation is complete, at most twice.
func (h *host) call(ctx context.Context, cs *mcp.ClientSession, tool string) error {
	for range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) && rpc.Code == mcp.CodeURLElicitationRequired {
			if err := h.elicit(ctx, rpc.Data); err != nil {
				return fmt.Errorf("tools/call %s: %w", tool, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("tools/call %s: %w", tool, err)
		}
		if res.IsError {
			b, _ := json.Marshal(res.Content)
			return fmt.Errorf("tools/call %s: an error result: %s", tool, b)
		}
		return nil
	}
	return fmt.Errorf("tools/call %s: still asks for an elicitation after two", tool)
}

// elicit opens the url of each url-mode elicitation of data and waits
// until aegis says it is complete.
func (h *host) elicit(ctx context.Context, data json.RawMessage) error {
	var d struct {
		Elicitations []mcp.ElicitParams `json:"elicitations"`
	}
	if err := json.Unmarshal(data, &d); err != nil || len(d.Elicitations) == 0 {
		return fmt.Errorf("URLElicitationRequired without elicitations: %s", data)
	}
	browser := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if c := r.URL.Query().Get("code"); c != "" {
			h.mu.Lock()
			h.codes = append(h.codes, c)
			h.mu.Unlock()
		}
		return nil
	}}
	for _, el := range d.Elicitations {
		if el.Mode != "url" || el.URL == "" || el.ElicitationID == "" {
			return fmt.Errorf("an elicitation that is not url mode: %+v", el)
		}
		done := h.waiter(el.ElicitationID)
		resp, err := browser.Get(el.URL)
		if err != nil {
			return fmt.Errorf("open the elicitation's url: %w", err)
		}
		page, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("the elicitation's url ended %d: %s", resp.StatusCode, page)
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("no notifications/elicitation/complete for %s", el.ElicitationID)
		}
	}
	return nil
}

// leaks fails when a token stored for the server (first) or now, or a
// code the host saw, is in the record, in any other file under dir (the
// event stream's among them; the token files are encrypted) or in
// aegis's stderr.
func (h *host) leaks(dir, state string, first gateway.StoredToken, stderr []byte) error {
	tok, err := gateway.NewTokenStore(state).Load("s")
	if err != nil {
		return fmt.Errorf("read the stored token: %w", err)
	}
	h.mu.Lock()
	secrets := append([]string{first.AccessToken, first.RefreshToken, tok.AccessToken, tok.RefreshToken}, h.codes...)
	h.mu.Unlock()
	found := func(b []byte) bool {
		for _, s := range secrets {
			if len(s) >= 8 && bytes.Contains(b, []byte(s)) {
				return true
			}
		}
		return false
	}
	if found(stderr) {
		return errors.New("a token or code is in aegis's stderr")
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if found(b) {
			return fmt.Errorf("a token or code is in %s", p)
		}
		return nil
	})
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
