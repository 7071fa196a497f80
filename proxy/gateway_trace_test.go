package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A host's trace context (params._meta.traceparent, SEP-414) reaches the
// server as the host sent it, and the call's intent line records it, on
// the gateway's own path for plain calls and through the SDK alike; a
// malformed one is passed on but not recorded.
func TestGatewayRecordsTheHostsTraceContext(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	c := newCLI(t)
	seen := filepath.Join(c.dir, "server-input.log")
	gw := c.startGateway(`version: 1
servers:
  example:
    command: /bin/sh
    args: `+quoteArgs([]string{"-c", "tee -a " + seen + " | " + bin(t, "aegis-example-server")})+`
profiles:
  p:
    allow: [example.echo]
activation:
  default_profile: p
`, gatewayEnv(t))
	h := gw.taskHost()
	h.initialize()
	if l := h.request("tools/list", map[string]any{}); toolNamed(l, "example__echo") == nil {
		t.Fatalf("tools/list: %v", l)
	}
	const (
		direct = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		sdk    = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		bad    = "00-XBF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"
	)
	for i, line := range []string{
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"traceparent":"` + direct + `"},"name":"example__echo","arguments":{"message":"direct"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"traceparent":"` + sdk + `"},"name":"example__echo","arguments":{"message":"sdk"},"extra":1}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"traceparent":"` + bad + `"},"name":"example__echo","arguments":{"message":"bad"}}}`,
	} {
		id := 100 + i
		if a := h.rawRequest(id, fmt.Sprintf(line, id)); dig(a, "result", "content") == nil {
			t.Fatalf("call %d: %v", i, a)
		}
	}
	gw.finish(30 * time.Second)

	sent := map[string]string{}
	f, err := os.Open(seen)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Params struct {
				Meta      map[string]any    `json:"_meta"`
				Arguments map[string]string `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Params.Arguments["message"] != "" {
			tp, _ := m.Params.Meta["traceparent"].(string)
			sent[m.Params.Arguments["message"]] = tp
		}
	}
	for msg, want := range map[string]string{"direct": direct, "sdk": sdk, "bad": bad} {
		if sent[msg] != want {
			t.Errorf("the server got traceparent %q with %s, want %q", sent[msg], msg, want)
		}
	}
	rec, err := os.ReadFile(c.audit)
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, line := range strings.Split(string(rec), "\n") {
		if !strings.Contains(line, `"line_type":"intent"`) {
			continue
		}
		switch {
		case strings.Contains(line, `"traceparent":"`+direct+`"`), strings.Contains(line, `"traceparent":"`+sdk+`"`):
			recorded++
		case strings.Contains(line, "traceparent"):
			t.Errorf("an intent line records a malformed trace context: %s", line)
		}
	}
	if recorded != 2 {
		t.Errorf("%d intent lines with the host's trace context, want 2:\n%s", recorded, rec)
	}
}
