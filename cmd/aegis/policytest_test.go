package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// aegis policy test decides a table of calls as the proxy would: the
// attacks of the cases file (traversal, a lookalike past a deny-list, a
// missing argument) are refused, a rate limit counts across cases, a case
// that wants another verdict fails the run, and a gateway file decides
// through its profiles first.
func TestPolicyTestRunsACasesTable(t *testing.T) {
	dir := filepath.Join("testdata", "policytest")
	code, out, stderr := cmd(t, nil, "policy", "test", filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "cases.yaml"))
	if code != 1 || stderr != "" {
		t.Errorf("exit %d, stderr %q; want 1 (one case not as wanted)", code, stderr)
	}
	golden(t, "policytest/policy.golden", out)
	code, out, stderr = cmd(t, nil, "policy", "test", filepath.Join(dir, "gateway.yaml"), filepath.Join(dir, "gateway-cases.yaml"))
	if code != 0 || stderr != "" {
		t.Errorf("gateway: exit %d, stderr %q", code, stderr)
	}
	golden(t, "policytest/gateway.golden", out)
	code, out, _ = cmd(t, nil, "policy", "test", "--json", filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "cases.yaml"))
	if code != 1 || strings.Count(out, "\n") != 10 || !strings.Contains(out, `"ok":false`) {
		t.Errorf("--json: exit %d\n%s", code, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	for _, tc := range []struct {
		name, policy, cases, says string
	}{
		{"a condition that does not compile", "rules:\n  - {id: a, action: allow, when: 'args.x =='}\n", "cases: [{name: a, tool: t}]", "bad.yaml:2: rules[0].when: does not compile"},
		{"a case with an unknown key", "rules: []\n", "cases: [{name: a, tool: t, argz: {}}]", "cases.yaml:1: cases[0].argz: unknown key"},
		{"a gateway case on a policy file", "rules: []\n", "cases: [{name: a, tool: t, server: fs}]", "names a server or a profile, which only a gateway file has"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writePolicy(t, filepath.Dir(bad), "bad.yaml", tc.policy)
			cases := writePolicy(t, t.TempDir(), "cases.yaml", tc.cases)
			code, _, stderr := cmd(t, nil, "policy", "test", bad, cases)
			if code != 2 || !strings.Contains(stderr, tc.says) {
				t.Errorf("exit %d, stderr %q; want 2 saying %q", code, stderr, tc.says)
			}
		})
	}
}
