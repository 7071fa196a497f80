package schemas

import "testing"

func TestPolicySetCanonical(t *testing.T) {
	tests := []struct {
		name string
		set  PolicySet
		want string
	}{
		{
			name: "no rules projects an empty array, not null",
			set:  PolicySet{Format: PolicySetFormat, Version: "1", Default: "allow"},
			want: `{"default":"allow","format":"aegis-policy-set/1","rules":[],"version":"1"}`,
		},
		{
			name: "the documented example",
			set: PolicySet{Format: PolicySetFormat, Version: "1", Default: "deny", Rules: []PolicyRule{{
				ID: "rate-search", Action: "rate_limit", Tool: "search", Capability: "*", Role: "*",
				Priority: "0", Rate: &PolicyRate{Max: "100", PerSeconds: "60"},
			}}},
			want: `{"default":"deny","format":"aegis-policy-set/1","rules":[{"action":"rate_limit","capability":"*","id":"rate-search","priority":"0","rate":{"max":"100","per_seconds":"60"},"role":"*","tool":"search"}],"version":"1"}`,
		},
		{
			name: "absent members are omitted and rule order is kept",
			set: PolicySet{Format: PolicySetFormat, Version: "1", Default: "allow", Rules: []PolicyRule{
				{ID: "z", Action: "pending_approval", Tool: "*", Capability: "*", Role: "*", Priority: "-3", Reason: "ask", Park: true, TimeoutSeconds: "30"},
				{ID: "a", Action: "allow", Tool: "w", Capability: "*", Role: "admin", Priority: "7", Limits: &PolicyLimits{MaxWallMS: "5000"}},
			}},
			want: `{"default":"allow","format":"aegis-policy-set/1","rules":[` +
				`{"action":"pending_approval","capability":"*","id":"z","park":true,"priority":"-3","reason":"ask","role":"*","timeout_seconds":"30","tool":"*"},` +
				`{"action":"allow","capability":"*","id":"a","limits":{"max_wall_ms":"5000"},"priority":"7","role":"admin","tool":"w"}` +
				`],"version":"1"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.set.Canonical()
			if err != nil {
				t.Fatalf("Canonical() error: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Canonical() =\n%s\nwant\n%s", got, tc.want)
			}
			h, err := tc.set.Hash()
			if err != nil {
				t.Fatalf("Hash() error: %v", err)
			}
			if want := HashHex([]byte(tc.want)); h != want {
				t.Errorf("Hash() = %s, want %s", h, want)
			}
		})
	}
}

// TestPolicySetHashCoversOrder stops a projection that sorts rules: file
// order decides ties in evaluation, so swapping two rules must change the
// hash.
func TestPolicySetHashCoversOrder(t *testing.T) {
	a := PolicyRule{ID: "a", Action: "allow", Tool: "*", Capability: "*", Role: "*", Priority: "0"}
	b := PolicyRule{ID: "b", Action: "deny", Tool: "*", Capability: "*", Role: "*", Priority: "0"}
	h1, err1 := PolicySet{Format: PolicySetFormat, Version: "1", Default: "allow", Rules: []PolicyRule{a, b}}.Hash()
	h2, err2 := PolicySet{Format: PolicySetFormat, Version: "1", Default: "allow", Rules: []PolicyRule{b, a}}.Hash()
	if err1 != nil || err2 != nil {
		t.Fatalf("Hash() errors: %v, %v", err1, err2)
	}
	if h1 == h2 {
		t.Errorf("Hash() of [a b] and [b a] are both %s", h1)
	}
}
