package reading

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the reading pure: bytes in, readings out, nothing that
// talks to the outside world and no other JSON decoder to disagree with.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("go list is slow; skipped in -short")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/aegis-dev/aegis/proxy/reading" {
			continue
		}
		for _, f := range []struct{ prefix, why string }{
			{"net", "the reading is pure"},
			{"os", "the reading does no I/O"},
			{"encoding/json", "the reading is the one decoder of frames; it must not lean on another"},
			{"github.com/", "the reading stands below every other part of aegis"},
		} {
			if dep == f.prefix || strings.HasPrefix(dep, f.prefix+"/") || (strings.HasSuffix(f.prefix, "/") && strings.HasPrefix(dep, f.prefix)) {
				t.Errorf("imports %s: %s", dep, f.why)
			}
		}
	}
}
