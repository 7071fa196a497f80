package proxy_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages of proxy import one way, downwards: the gateway and the
// relay stand on proxy (gate, approvals, pins), which stands on rpc and
// reading; the relay and the gateway never import each other, nothing
// imports its caller, and the HTTP front imports nothing of aegis. A
// forbidden import here is a layer that grew a way back up.
func TestPackagesImportOneWay(t *testing.T) {
	if testing.Short() {
		t.Skip("go list is slow; skipped in -short")
	}
	const mod = "github.com/aegis-dev/aegis/"
	// An entry ending in "/" forbids the packages under it; "" forbids
	// every package of aegis.
	forbidden := map[string][]string{
		"proxy":           {"proxy/relay", "proxy/gateway", "proxy/httpfront", "cmd/"},
		"proxy/relay":     {"proxy/gateway", "proxy/httpfront", "cmd/"},
		"proxy/gateway":   {"proxy/relay", "proxy/httpfront", "cmd/"},
		"proxy/rpc":       {"proxy", "proxy/relay", "proxy/gateway", "proxy/httpfront", "policy", "events", "projector", "schemas", "sandbox", "cmd/"},
		"proxy/reading":   {"proxy", "proxy/rpc", "proxy/relay", "proxy/gateway", "proxy/httpfront", "policy", "events", "projector", "schemas", "sandbox", "cmd/"},
		"proxy/httpfront": {""},
	}
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "./"+strings.TrimPrefix(strings.TrimPrefix(pkg, "proxy"), "/")).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(dep, mod)
			if !ok || rel == pkg {
				continue
			}
			for _, b := range bad {
				if b == "" || rel == b || strings.HasSuffix(b, "/") && strings.HasPrefix(rel, b) {
					t.Errorf("%s imports %s: %s", pkg, rel, "imports go one way, downwards (see package proxy's doc)")
				}
			}
		}
	}
}
