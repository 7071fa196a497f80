package rpc

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the frame reading below everything that decides on it:
// it imports the JSON reading and the standard library only, never the
// relay, the gateway or a decoder of its own.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("go list is slow; skipped in -short")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "github.com/aegis-dev/aegis/proxy/rpc", dep == "github.com/aegis-dev/aegis/proxy/reading":
		case strings.Contains(dep, "."):
			t.Errorf("imports %s: the frame reading stands below every other part of aegis", dep)
		}
	}
	out, err = exec.Command("go", "list", "-f", `{{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if imp == "net" || strings.HasPrefix(imp, "net/") || imp == "os" || strings.HasPrefix(imp, "os/") {
			t.Errorf("imports %s: the frame reading does no I/O", imp)
		}
	}
}
