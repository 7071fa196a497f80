package verifier

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the verifier offline: it must build and run on a machine
// with nothing but the record, so that a compromised proxy or event store
// cannot influence the verdict.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("go list is slow; skipped in -short")
	}
	forbidden := []struct{ prefix, why string }{
		{"net", "the verifier works offline"},
		{"os/exec", "the verifier runs nothing"},
		{"github.com/nats-io/", "the verifier reads the exported record, never the event store"},
		{"github.com/modelcontextprotocol/", "the verifier has no business with MCP"},
		{"github.com/aegis-dev/aegis/events", "the verifier must not depend on the event store"},
		{"github.com/aegis-dev/aegis/projector", "the verifier must not share code with the writer it checks"},
		{"github.com/aegis-dev/aegis/proxy", "the verifier must not depend on the proxy"},
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps printed nothing")
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			p := strings.TrimSuffix(f.prefix, "/")
			if dep == p || strings.HasPrefix(dep, p+"/") {
				t.Errorf("imports %s: %s", dep, f.why)
			}
		}
	}
}
