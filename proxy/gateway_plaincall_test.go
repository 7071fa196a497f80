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

// serverCall is a tools/call as the server read it.
type serverCall struct {
	ID     any `json:"id"`
	Params struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"params"`
}

// serverCalls reads the tools/calls that reached the server from its
// input, copied to path.
func serverCalls(t *testing.T, path string) []serverCall {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []serverCall
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method != "tools/call" {
			continue
		}
		var c serverCall
		json.Unmarshal(sc.Bytes(), &c)
		calls = append(calls, c)
	}
	return calls
}

// A plain tools/call from a stdio host is taken by the gateway's own
// JSON-RPC layer (no SDK decoding and encoding on the way), and is still
// decided and recorded as every call is: intent before the server sees it,
// outcome before the host does. A call in any other shape goes through
// the SDK as before. Either way the server receives only what was decided,
// and nothing that was refused.
func TestGatewayPlainCallsAreDecidedOnTheDirectPath(t *testing.T) {
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
	// Until the servers are connected every call goes to the SDK (which
	// waits for them); the tool list comes once they are.
	if l := h.request("tools/list", map[string]any{}); toolNamed(l, "example__echo") == nil {
		t.Fatalf("tools/list: %v", l)
	}

	echo := func(m map[string]any) string {
		content, _ := dig(m, "result", "content").([]any)
		if len(content) == 0 {
			return ""
		}
		text, _ := content[0].(map[string]any)["text"].(string)
		return text
	}
	cases := []struct {
		name      string
		line      string
		direct    bool   // taken by the gateway's own layer
		echoed    string // the server's echo, "" if refused
		ambiguous bool   // refused as a frame readers read differently
	}{
		{"a plain call", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"plain"}}}`, true, "plain", false},
		{"with _meta", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"k":"v"},"name":"example__echo","arguments":{"message":"meta"}}}`, true, "meta", false},
		{"a member in another case is refused as ambiguous", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","Arguments":{"message":"case"},"arguments":{"message":"lower"}}}`, false, "", true},
		{"an unknown member goes to the SDK", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"extra"},"extra":1}}`, false, "extra", false},
		{"an unknown top-level member goes to the SDK", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"top"}},"x":1}`, false, "top", false},
		{"a tool the profile hides is refused and never sent", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__add","arguments":{"a":1,"b":2}}}`, false, "", false},
		{"a second name is refused as ambiguous", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__echo","arguments":{"message":"dup"},"name":"example__add"}}`, false, "", true},
	}
	for i, tc := range cases {
		id := 100 + i
		a := h.rawRequest(id, fmt.Sprintf(tc.line, id))
		got := echo(a)
		if tc.ambiguous {
			if code, _ := dig(a, "error", "code").(float64); code != -32600 || !strings.Contains(fmt.Sprint(dig(a, "error", "message")), "read differently") {
				t.Errorf("%s: not refused as ambiguous: %v", tc.name, a)
			}
			continue
		}
		if tc.echoed == "" {
			if dig(a, "result", "isError") != true || !strings.Contains(got, "AEGIS_CAP_DENIED") {
				t.Errorf("%s: not refused: %v", tc.name, a)
			}
			continue
		}
		if !strings.Contains(got, tc.echoed) {
			t.Errorf("%s: answer %v, want the echo of %q", tc.name, a, tc.echoed)
		}
	}
	gw.finish(30 * time.Second)

	// What reached the server: the allowed calls, each once, by the
	// gateway's own id ("aegis-N") when it took the call directly.
	calls := serverCalls(t, seen)
	byMessage := map[string]serverCall{}
	for _, sc := range calls {
		if sc.Params.Name != "echo" {
			t.Errorf("the server was sent %q: %+v", sc.Params.Name, sc)
		}
		msg, _ := sc.Params.Arguments["message"].(string)
		byMessage[msg] = sc
	}
	for _, tc := range cases {
		if tc.echoed == "" {
			continue
		}
		sc, ok := byMessage[tc.echoed]
		if !ok {
			t.Errorf("%s: never reached the server", tc.name)
			continue
		}
		id, _ := sc.ID.(string)
		if direct := strings.HasPrefix(id, "aegis-"); direct != tc.direct {
			t.Errorf("%s: server saw id %v; taken directly: %v, want %v", tc.name, sc.ID, direct, tc.direct)
		}
	}
	if want := 4; len(calls) != want {
		t.Errorf("the server was sent %d calls, want %d", len(calls), want)
	}
	// Every call decided and recorded: an intent and an outcome each, the
	// refusals among them.
	evs, _ := c.events()
	intents, outcomes := payloads(evs, "call.intent"), payloads(evs, "call.outcome")
	if len(intents) != len(cases) || len(outcomes) != len(cases) {
		t.Errorf("%d intents and %d outcomes recorded for %d calls", len(intents), len(outcomes), len(cases))
	}
	refused, ambiguous := 0, 0
	for _, o := range outcomes {
		if strings.Contains(canon(o), "not in active profile") {
			refused++
		}
		if strings.Contains(canon(o), "ambiguous tools/call") {
			ambiguous++
		}
	}
	if refused != 1 || ambiguous != 2 {
		t.Errorf("%d refusals and %d ambiguous calls recorded, want 1 and 2", refused, ambiguous)
	}
}
