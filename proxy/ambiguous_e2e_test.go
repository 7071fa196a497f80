package proxy_test

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
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// rawSession runs argv and talks newline-delimited JSON-RPC to it: the
// frames are written exactly as given, and every line it writes back is
// collected until each frame and a last ping have been answered (answers
// may come in any order).
func rawSession(t *testing.T, ctx context.Context, argv []string, frames []string) []map[string]any {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	in, out := startPiped(t, cmd)
	defer cmd.Wait()
	defer in.Close()
	handshake := []string{
		`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"aegis-e2e","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	end := `{"jsonrpc":"2.0","id":"end","method":"ping"}`
	go func() {
		for _, f := range append(append(handshake, frames...), end) {
			if _, err := io.WriteString(in, f+"\n"); err != nil {
				return
			}
		}
	}()
	waiting := map[string]bool{`"end"`: true}
	for _, f := range frames {
		waiting[idOf(f)] = true
	}
	var got []map[string]any
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%v wrote a line that is not JSON: %q", argv, sc.Text())
		}
		got = append(got, m)
		id, _ := json.Marshal(m["id"])
		delete(waiting, string(id))
		if len(waiting) == 0 {
			return got
		}
	}
	t.Fatalf("%v closed its output with %v unanswered (%v)", argv, waiting, sc.Err())
	return nil
}

// A tools/call whose members JSON parsers read differently must not reach
// the server: server-everything (JSON.parse, exact names, the last
// duplicate wins) runs a tool that aegis's own reading (encoding/json,
// names matched regardless of case) would not have named. Directly, the
// server runs echo for each frame below; through aegis wrap with a policy
// that denies echo, each is refused with -32042 and recorded, and the
// server never sees it.
func TestAmbiguousCallsCannotSmuggleAToolPastPolicy(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	server := mcptest.EverythingServer(t)
	attacks := []struct{ name, frame string }{
		{"a duplicate params.name hides the tool the server runs",
			`{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"add","name":"echo","arguments":{"message":"smuggled-21"}}}`},
		{"params.Name in another case renames the tool for aegis only",
			`{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"echo","Name":"add","arguments":{"message":"smuggled-22"}}}`},
		{"params.Arguments in another case swaps the arguments aegis sees",
			`{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"echo","arguments":{"message":"smuggled-23"},"Arguments":{"message":"x"}}}`},
	}
	var frames []string
	for _, a := range attacks {
		frames = append(frames, a.frame)
	}

	// The attacks are real: the server runs echo for each of them.
	direct := rawSession(t, ctx, server, frames)
	for _, a := range attacks {
		if !strings.Contains(textOf(direct), "smuggled-"+idOf(a.frame)) {
			t.Fatalf("control: server-everything did not run %s directly, so this test proves nothing: %v", a.name, direct)
		}
	}

	c := newCLI(t)
	pol := filepath.Join(c.dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\ndefault: allow\nrules:\n  - id: no-echo\n    action: deny\n    tool: echo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{bin(t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--"}, server...)
	via := rawSession(t, ctx, argv, frames)
	if s := textOf(via); strings.Contains(s, "smuggled") {
		t.Fatalf("a smuggled echo ran through aegis: %s", s)
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			var refusal map[string]any
			for _, m := range via {
				if id, ok := m["id"].(float64); ok && strconv.FormatFloat(id, 'f', -1, 64) == idOf(a.frame) {
					refusal = m
				}
			}
			e, _ := refusal["error"].(map[string]any)
			if e == nil || e["code"] != float64(-32042) {
				t.Fatalf("answer %v, want the -32042 refusal", refusal)
			}
			if code := e["data"].(map[string]any)["aegis"].(map[string]any)["code"]; code != "HOST_DENIED" {
				t.Errorf("refusal code %v, want HOST_DENIED", code)
			}
		})
	}
	h := &harness{t: t, audit: c.audit}
	outcomes := ofType(h.lines(), "outcome")
	if len(outcomes) != len(attacks) {
		t.Fatalf("%d outcomes, want one per refused call (%d)", len(outcomes), len(attacks))
	}
	for i, o := range outcomes {
		if p := obj(o, "policy"); p["status"] != "denied" || !strings.HasPrefix(p["reason"].(string), "ambiguous tools/call: params has ") {
			t.Errorf("outcome %d policy %v, want denied as ambiguous", i, p)
		}
		if e := obj(o, "execution"); e["status"] != "host_denied" || e["reason"] != "not executed" {
			t.Errorf("outcome %d execution %v, want host_denied, not executed", i, e)
		}
	}
	if out, _, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
}

// textOf is every text content of the answers, joined.
func textOf(answers []map[string]any) string {
	var b strings.Builder
	for _, m := range answers {
		r, _ := m["result"].(map[string]any)
		cs, _ := r["content"].([]any)
		for _, c := range cs {
			if t, ok := c.(map[string]any)["text"].(string); ok {
				b.WriteString(t + "\n")
			}
		}
	}
	return b.String()
}

// idOf is the number after the first "id": of a frame.
func idOf(frame string) string {
	_, rest, ok := strings.Cut(frame, `"id":`)
	if !ok {
		return frame
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return rest
	}
	return rest[:end]
}
