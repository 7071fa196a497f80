package proxy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// What readers of JSON take differently, sent by a host built on the
// official TypeScript SDK client (JSON.stringify writes a lone surrogate
// as \udXXX): a tool name with one is refused as an ambiguous call before
// any rule is asked, and an argument with one is refused by the rule's
// condition, which cannot read it one way. The plain call beside them
// runs, and the record verifies.
func TestWrapRefusesWhatReadersTakeDifferentlyTypeScriptHost(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	node, sdk := mcptest.TypeScriptSDK(t)
	script, err := filepath.Abs(filepath.Join("testdata", "tsclient", "calls.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	pol := filepath.Join(c.dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\ndefault: deny\nrules:\n  - id: short-echo\n    action: allow\n    tool: echo\n    when: size(args.text) < 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	calls := `[{"name":"echo","arguments":{"text":"hi"}},` +
		`{"name":"echo\ud800","arguments":{"text":"hi"}},` +
		`{"name":"echo","arguments":{"text":"\ud800"}},` +
		`{"name":"echo","arguments":{"text":"hi","Text":"x"}}]`
	argv := []string{bin(t, "aegis"), "wrap", "--audit", c.audit, "--signing-key", c.key, "--state-dir", c.state, "--policy", pol, "--", bin(t, "pinserver")}
	cmd := exec.Command(node, append([]string{script}, argv...)...)
	cmd.Env = append(os.Environ(), "MCP_SDK_DIR="+sdk, "CALLS="+calls)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr)
	}
	var got []any
	if err := json.Unmarshal(out, &got); err != nil || len(got) != 4 {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	if got[0] != "ok" {
		t.Fatalf("the plain call: %v", got[0])
	}
	for i, want := range []string{"", "HOST_DENIED", "POLICY_DENIED", "POLICY_DENIED"} {
		if i == 0 {
			continue
		}
		r, _ := got[i].(map[string]any)
		if r == nil || r["code"] != float64(proxy.RefusalCode) || r["aegis"] != want {
			t.Errorf("call %d: %v, want refused %s (%s)", i, got[i], want, out)
		}
	}
	if _, errOut, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Fatalf("verify: exit %d: %s", code, errOut)
	}
}
