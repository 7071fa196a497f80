package schemas

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the package pure: the record format is shared by the
// proxy and the offline verifier, and must not pull in code that talks to
// the outside world.
func TestDeps(t *testing.T) {
	forbidden := []struct{ prefix, why string }{
		{"net", "schemas is data; a network stack here would reach the offline verifier"},
		{"os/exec", "schemas runs nothing"},
		{"github.com/nats-io/", "the event store lives in events/, not in the shared formats"},
		{"github.com/modelcontextprotocol/", "MCP framing belongs to proxy/"},
	}
	checkDeps(t, forbidden)
}

func checkDeps(t *testing.T, forbidden []struct{ prefix, why string }) {
	t.Helper()
	if testing.Short() {
		t.Skip("go list is slow; skipped in -short")
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
			if dep == f.prefix || strings.HasPrefix(dep, strings.TrimSuffix(f.prefix, "/")+"/") {
				t.Errorf("imports %s: %s", dep, f.why)
			}
		}
	}
}
