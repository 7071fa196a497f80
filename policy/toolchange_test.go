package policy

import (
	"strings"
	"testing"
)

// on_tool_change: what a careful user gets without saying (a human decides
// on a changed tool), each value in both files, and a typo refused with
// its line, never read as the default.
func TestOnToolChange(t *testing.T) {
	gw := func(extra string) string {
		return "version: 1\nservers:\n  s:\n    command: x\nprofiles:\n  p:\n    allow: [s.a]\nactivation:\n  default_profile: p\n" + extra
	}
	for _, tc := range []struct {
		extra string
		want  ToolChange
	}{
		{"", ToolChangePendingApproval},
		{"on_tool_change: pending_approval\n", ToolChangePendingApproval},
		{"on_tool_change: deny\n", ToolChangeDeny},
		{"on_tool_change: allow\n", ToolChangeAllow},
	} {
		s, err := Parse("policy.yaml", []byte("version: 1\n"+tc.extra))
		if err != nil || s.OnToolChange() != tc.want {
			t.Errorf("policy %q: %v %v, want %v", tc.extra, s.OnToolChange(), err, tc.want)
		}
		g, err := ParseGateway("aegis.yaml", []byte(gw(tc.extra)))
		if err != nil || g.OnToolChange() != tc.want {
			t.Errorf("gateway %q: %v, want %v", tc.extra, err, tc.want)
		}
	}
	// The hash covers the setting, and a spelled-out default hashes as
	// the file without it.
	hash := func(extra string) string {
		s, err := Parse("policy.yaml", []byte("version: 1\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		return s.Hash()
	}
	def := hash("")
	if hash("on_tool_change: pending_approval\n") != def || hash("on_tool_change: allow\n") == def ||
		hash("on_tool_change: deny\n") == def || hash("on_tool_change: allow\n") == hash("on_tool_change: deny\n") {
		t.Error("the policy set hash does not cover on_tool_change as it should")
	}
	for _, bad := range []string{"on_tool_change: warn\n", "on_tool_change: Deny\n", "on_tool_change: true\n"} {
		_, err := Parse("policy.yaml", []byte("version: 1\n"+bad))
		if err == nil || !strings.Contains(err.Error(), "policy.yaml:2: on_tool_change") {
			t.Errorf("policy %q: %v", bad, err)
		}
		_, err = ParseGateway("aegis.yaml", []byte(gw(bad)))
		if err == nil || !strings.Contains(err.Error(), "on_tool_change") {
			t.Errorf("gateway %q: %v", bad, err)
		}
	}
}
