package policy

import (
	"errors"
	"strings"
	"testing"
)

// y joins lines into a YAML file, so that line numbers in the wants below
// can be counted.
func y(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		// The document.
		{"EmptyFile", "", "policy.yaml: empty policy file"},
		{"OnlyComments", y("# nothing yet"), "policy.yaml: empty policy file"},
		{"NullDocument", y("---", "~"), "policy.yaml: empty policy file"},
		{"TwoDocuments", y("version: 1", "---", "default: deny"), "policy.yaml:2: a second YAML document; a policy file holds exactly one"},
		{"InvalidYAML", y("rules: [", "  {id: a"), "policy.yaml:2: invalid YAML: did not find expected ',' or '}'"},
		{"MisindentedRuleKey", y("version: 1", "default: allow", "rules:", "  - id: a", "    action: deny", "   tool: x"), "policy.yaml:6: invalid YAML: did not find expected '-' indicator"},
		{"TopLevelSequence", y("- id: a"), "policy.yaml:1: expected a mapping, got a sequence"},
		{"TopLevelScalar", y("allow"), "policy.yaml:1: expected a mapping, got a string"},
		{"UnknownTopKey", y("version: 1", "defaults: deny"), "policy.yaml:2: defaults: unknown key; want one of version, default, rules, on_tool_change, witnesses"},
		{"UnknownKeyQuoted", y(`"de fault": deny`), `policy.yaml:1: ["de fault"]: unknown key; want one of version, default, rules, on_tool_change, witnesses`},
		{"NonStringKey", y("1: deny"), "policy.yaml:1: keys must be strings, got an integer"},
		{"DuplicateTopKey", y("default: allow", "version: 1", "default: deny"), "policy.yaml:3: default: duplicate key (first at line 1)"},
		{"CustomTag", y("!policy {version: 1}"), `policy.yaml:1: expected a mapping, got a mapping tagged "!policy"`},

		// version and default.
		{"Version2", y("version: 2"), "policy.yaml:1: version: unsupported version 2; this aegis reads version 1"},
		{"Version0", y("version: 0"), "policy.yaml:1: version: unsupported version 0; this aegis reads version 1"},
		{"VersionString", y(`version: "1"`), "policy.yaml:1: version: expected an integer, got a string"},
		{"VersionFloat", y("version: 1.0"), "policy.yaml:1: version: expected an integer, got a number with a fraction or exponent"},
		{"VersionHex", y("version: 0x1"), `policy.yaml:1: version: expected a plain decimal integer, got "0x1"`},
		{"VersionNull", y("version:"), "policy.yaml:1: version: expected an integer, got null"},
		{"VersionHuge", y("version: 99999999999999999999"), "policy.yaml:1: version: must be between -9223372036854775808 and 9223372036854775807, got 99999999999999999999"},
		{"DefaultUnknown", y("default: block"), `policy.yaml:1: default: unknown default "block"; want allow or deny`},
		{"DefaultBool", y("default: false"), "policy.yaml:1: default: expected a string, got a boolean"},
		{"DefaultNull", y("default: ~"), "policy.yaml:1: default: expected a string, got null"},

		// rules.
		{"RulesMapping", y("rules:", "  id: a"), "policy.yaml:2: rules: expected a sequence of rules, got a mapping"},
		{"RulesNull", y("rules:"), "policy.yaml:1: rules: expected a sequence of rules, got null"},
		{"RuleNotMapping", y("rules:", "  - deny-all"), "policy.yaml:2: rules[0]: expected a mapping, got a string"},
		{"UnknownRuleKey", y("rules:", "  - id: a", "    action: allow", "    tools: echo"), "policy.yaml:4: rules[0].tools: unknown key; want one of id, action, tool, capability, role, when, priority, reason, rate, limits, park, timeout_seconds"},
		{"UnknownKeyInSecondRule", y("rules:", "  - {id: a, action: allow}", "  - id: b", "    action: deny", "    unless: always"), "policy.yaml:5: rules[1].unless: unknown key; want one of id, action, tool, capability, role, when, priority, reason, rate, limits, park, timeout_seconds"},
		{"DuplicateRuleKey", y("rules:", "  - id: a", "    action: allow", "    action: deny"), "policy.yaml:4: rules[0].action: duplicate key (first at line 3)"},
		{"DuplicateIDs", y("rules:", "  - id: a", "    action: allow", "  - id: b", "    action: allow", "  - id: a", "    action: deny"), `policy.yaml:6: rules[2].id: duplicate rule id "a" (first at line 2)`},
		{"MissingID", y("rules:", "  - action: allow"), `policy.yaml:2: rules[0]: missing required key "id"`},
		{"MissingAction", y("rules:", "  - id: a", "    tool: echo"), `policy.yaml:2: rules[0]: missing required key "action"`},
		{"EmptyID", y("rules:", `  - {id: "", action: deny}`), "policy.yaml:2: rules[0].id: must not be empty"},
		{"ControlInID", y("rules:", `  - {id: "a\nb", action: deny}`), `policy.yaml:2: rules[0].id: rule id "a\nb" contains a control character`},
		{"IntegerID", y("rules:", "  - {id: 7, action: deny}"), "policy.yaml:2: rules[0].id: expected a string, got an integer"},
		{"UnknownAction", y("rules:", "  - {id: a, action: block}"), `policy.yaml:2: rules[0].action: unknown action "block"; want allow, deny, rate_limit or pending_approval`},
		{"ActionCase", y("rules:", "  - {id: a, action: Deny}"), `policy.yaml:2: rules[0].action: unknown action "Deny"; want allow, deny, rate_limit or pending_approval`},
		{"NullTool", y("rules:", "  - id: a", "    action: deny", "    tool:"), "policy.yaml:4: rules[0].tool: expected a string, got null"},
		{"EmptyTool", y("rules:", `  - {id: a, action: deny, tool: ""}`), `policy.yaml:2: rules[0].tool: must not be empty; omit it or write "*" to match any`},
		{"EmptyRole", y("rules:", `  - {id: a, action: deny, role: ""}`), `policy.yaml:2: rules[0].role: must not be empty; omit it or write "*" to match any`},
		{"ToolList", y("rules:", "  - {id: a, action: deny, tool: [a, b]}"), "policy.yaml:2: rules[0].tool: expected a string, got a sequence"},
		{"EmptyReason", y("rules:", `  - {id: a, action: deny, reason: ""}`), "policy.yaml:2: rules[0].reason: must not be empty; omit it for the default reason"},
		{"PriorityFloat", y("rules:", "  - {id: a, action: deny, priority: 1.5}"), "policy.yaml:2: rules[0].priority: expected an integer, got a number with a fraction or exponent"},
		{"PriorityOverflow", y("rules:", "  - {id: a, action: deny, priority: 2147483648}"), "policy.yaml:2: rules[0].priority: must be between -2147483648 and 2147483647, got 2147483648"},
		{"PriorityLeadingZero", y("rules:", "  - {id: a, action: deny, priority: 010}"), `policy.yaml:2: rules[0].priority: expected a plain decimal integer, got "010"`},
		{"PriorityUnderscore", y("rules:", "  - {id: a, action: deny, priority: 1_0}"), `policy.yaml:2: rules[0].priority: expected a plain decimal integer, got "1_0"`},
		{"AnchorAndAlias", y("rules:", "  - &r {id: a, action: deny}", "  - *r"), "policy.yaml:2: YAML anchors and aliases are not supported in a policy file"},
		{"MergeKey", y("rules:", "  - id: a", "    action: deny", "    <<: {tool: x}"), "policy.yaml:4: rules[0]: keys must be strings, got a merge key (<<)"},

		// rate.
		{"RateOnAllow", y("rules:", "  - id: a", "    action: allow", "    rate: {max: 1, per_seconds: 1}"), "policy.yaml:4: rules[0].rate: only valid on a rate_limit action"},
		{"RateBeforeDeny", y("rules:", "  - id: a", "    rate: {max: 1, per_seconds: 1}", "    action: deny"), "policy.yaml:3: rules[0].rate: only valid on a rate_limit action"},
		{"RateLimitWithoutRate", y("rules:", "  - {id: a, action: rate_limit}"), "policy.yaml:2: rules[0]: a rate_limit action requires a rate block"},
		{"RateMaxZero", y("rules:", "  - id: a", "    action: rate_limit", "    rate:", "      max: 0", "      per_seconds: 60"), "policy.yaml:5: rules[0].rate.max: must be > 0, got 0"},
		{"RatePerNegative", y("rules:", "  - {id: a, action: rate_limit, rate: {max: 5, per_seconds: -1}}"), "policy.yaml:2: rules[0].rate.per_seconds: must be > 0, got -1"},
		{"RatePerTooLarge", y("rules:", "  - {id: a, action: rate_limit, rate: {max: 5, per_seconds: 4294967296}}"), "policy.yaml:2: rules[0].rate.per_seconds: must be between 1 and 4294967295, got 4294967296"},
		{"RateMissingPer", y("rules:", "  - {id: a, action: rate_limit, rate: {max: 5}}"), `policy.yaml:2: rules[0].rate: missing required key "per_seconds"`},
		{"RateUnknownKey", y("rules:", "  - id: a", "    action: rate_limit", "    rate:", "      max: 5", "      per_second: 60"), "policy.yaml:6: rules[0].rate.per_second: unknown key; want one of max, per_seconds"},
		{"RateQuotedNumber", y("rules:", `  - {id: a, action: rate_limit, rate: {max: "5", per_seconds: 60}}`), "policy.yaml:2: rules[0].rate.max: expected an integer, got a string"},

		// limits.
		{"LimitsOnDeny", y("rules:", "  - id: a", "    action: deny", "    limits: {max_wall_ms: 10}"), "policy.yaml:4: rules[0].limits: only valid on an allow or rate_limit action"},
		{"LimitsOnPending", y("rules:", "  - id: a", "    action: pending_approval", "    limits: {max_wall_ms: 10}"), "policy.yaml:4: rules[0].limits: only valid on an allow or rate_limit action"},
		{"LimitsEmpty", y("rules:", "  - {id: a, action: allow, limits: {}}"), "policy.yaml:2: rules[0].limits: must set at least one of max_memory_bytes, max_wall_ms, max_output_bytes"},
		{"LimitsZero", y("rules:", "  - {id: a, action: allow, limits: {max_wall_ms: 0}}"), "policy.yaml:2: rules[0].limits.max_wall_ms: must be > 0, got 0"},
		{"LimitsBeyondAuditIntegers", y("rules:", "  - {id: a, action: allow, limits: {max_output_bytes: 9007199254740992}}"), "policy.yaml:2: rules[0].limits.max_output_bytes: must be between 1 and 9007199254740991, got 9007199254740992"},
		{"LimitsUnknownKey", y("rules:", "  - {id: a, action: allow, limits: {max_cpu_ms: 5}}"), "policy.yaml:2: rules[0].limits.max_cpu_ms: unknown key; want one of max_memory_bytes, max_wall_ms, max_output_bytes"},

		// park and timeout_seconds.
		{"ParkOnDeny", y("rules:", "  - id: a", "    action: deny", "    park: true"), "policy.yaml:4: rules[0].park: only valid on a pending_approval action"},
		{"ParkFalseOnAllow", y("rules:", "  - id: a", "    action: allow", "    park: false"), "policy.yaml:4: rules[0].park: only valid on a pending_approval action"},
		{"TimeoutOnRateLimit", y("rules:", "  - id: a", "    action: rate_limit", "    rate: {max: 1, per_seconds: 1}", "    timeout_seconds: 5"), "policy.yaml:5: rules[0].timeout_seconds: only valid on a pending_approval action"},
		{"ParkWithoutTimeout", y("rules:", "  - id: a", "    action: pending_approval", "    park: true"), "policy.yaml:4: rules[0].park: park: true requires timeout_seconds, so that a parked call cannot wait forever"},
		{"TimeoutWithoutPark", y("rules:", "  - id: a", "    action: pending_approval", "    timeout_seconds: 30"), "policy.yaml:4: rules[0].timeout_seconds: only valid with park: true"},
		{"TimeoutWithParkFalse", y("rules:", "  - id: a", "    action: pending_approval", "    park: false", "    timeout_seconds: 30"), "policy.yaml:5: rules[0].timeout_seconds: only valid with park: true"},
		{"TimeoutZero", y("rules:", "  - {id: a, action: pending_approval, park: true, timeout_seconds: 0}"), "policy.yaml:2: rules[0].timeout_seconds: must be > 0, got 0"},
		{"ParkYes", y("rules:", "  - {id: a, action: pending_approval, park: yes, timeout_seconds: 5}"), "policy.yaml:2: rules[0].park: expected true or false, got a string"},
		{"ParkString", y("rules:", `  - {id: a, action: pending_approval, park: "true", timeout_seconds: 5}`), "policy.yaml:2: rules[0].park: expected true or false, got a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := Parse("policy.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse(%q) = set %s, want error %q", tc.src, set.Hash(), tc.want)
			}
			if set != nil {
				t.Errorf("Parse(%q) returned a Set with an error", tc.src)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error %T, want *ParseError", tc.src, err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("Parse(%q) error\n got %s\nwant %s", tc.src, got, tc.want)
			}
		})
	}
}

func TestParseErrorFields(t *testing.T) {
	_, err := Parse("/etc/aegis/policy.yaml", []byte(y("rules:", "  - id: a", "    action: allow", "    rate: {max: 1, per_seconds: 1}")))
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("Parse error %v, want *ParseError", err)
	}
	want := ParseError{File: "/etc/aegis/policy.yaml", Line: 4, Key: "rules[0].rate", Msg: "only valid on a rate_limit action"}
	if *pe != want {
		t.Errorf("Parse error = %#v, want %#v", *pe, want)
	}
}

// TestParseAccepts covers files that must load, with the projection each
// must give.
func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // canonical projection
	}{
		{
			"NoRulesIsDefaultAllow",
			y("version: 1"),
			`{"default":"allow","format":"aegis-policy-set/1","rules":[],"version":"1"}`,
		},
		{
			"EmptyRules",
			y("default: deny", "rules: []"),
			`{"default":"deny","format":"aegis-policy-set/1","rules":[],"version":"1"}`,
		},
		{
			"DefaultsSpelledOut",
			y("version: 1", "default: allow", "rules:", `  - {id: a, action: deny, tool: "*", capability: "*", role: "*", priority: 0}`),
			`{"default":"allow","format":"aegis-policy-set/1","rules":[{"action":"deny","capability":"*","id":"a","priority":"0","role":"*","tool":"*"}],"version":"1"}`,
		},
		{
			"EveryField",
			y(
				"rules:",
				"  - id: r",
				"    action: rate_limit",
				"    tool: search",
				"    capability: net.fetch",
				"    role: analyst",
				"    priority: -7",
				"    reason: slow down",
				"    rate: {per_seconds: 60, max: 100}",
				"    limits: {max_output_bytes: 1048576, max_memory_bytes: 33554432, max_wall_ms: 5000}",
				"  - id: p",
				"    action: pending_approval",
				"    park: true",
				"    timeout_seconds: 300",
				"  - id: q",
				"    action: pending_approval",
				"    park: false",
			),
			`{"default":"allow","format":"aegis-policy-set/1","rules":[` +
				`{"action":"rate_limit","capability":"net.fetch","id":"r","limits":{"max_memory_bytes":"33554432","max_output_bytes":"1048576","max_wall_ms":"5000"},"priority":"-7","rate":{"max":"100","per_seconds":"60"},"reason":"slow down","role":"analyst","tool":"search"},` +
				`{"action":"pending_approval","capability":"*","id":"p","park":true,"priority":"0","role":"*","timeout_seconds":"300","tool":"*"},` +
				`{"action":"pending_approval","capability":"*","id":"q","priority":"0","role":"*","tool":"*"}` +
				`],"version":"1"}`,
		},
		{
			"QuotedNumericTool",
			y("rules:", `  - {id: "1", action: allow, tool: "123"}`),
			`{"default":"allow","format":"aegis-policy-set/1","rules":[{"action":"allow","capability":"*","id":"1","priority":"0","role":"*","tool":"123"}],"version":"1"}`,
		},
		{
			"BoolCapitalised",
			y("rules:", "  - {id: a, action: pending_approval, park: True, timeout_seconds: 1}"),
			`{"default":"allow","format":"aegis-policy-set/1","rules":[{"action":"pending_approval","capability":"*","id":"a","park":true,"priority":"0","role":"*","timeout_seconds":"1","tool":"*"}],"version":"1"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := Parse("policy.yaml", []byte(tc.src))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tc.src, err)
			}
			got, err := set.Projection().Canonical()
			if err != nil {
				t.Fatalf("Projection().Canonical() error: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Parse(%q) projection\n got %s\nwant %s", tc.src, got, tc.want)
			}
			if h, _ := set.Projection().Hash(); set.Hash() != h {
				t.Errorf("Hash() = %s, want the projection's hash %s", set.Hash(), h)
			}
		})
	}
}

// TestHashIgnoresLayout stops a hash over the YAML text: comments, key
// order, flow style and spelled-out defaults must not change it.
func TestHashIgnoresLayout(t *testing.T) {
	a := y(
		"# production policy",
		"rules:",
		"  - id: deny-exec",
		"    action: deny",
		"    tool: exec",
		"  - id: rate-search   # per minute",
		"    action: rate_limit",
		"    tool: search",
		"    rate:",
		"      max: 100",
		"      per_seconds: 60",
	)
	b := y(
		`{version: 1, default: allow, rules: [`,
		`  {tool: exec, action: deny, id: deny-exec, priority: 0, role: "*"},`,
		`  {rate: {per_seconds: 60, max: 100}, id: rate-search, tool: "search", action: rate_limit, capability: "*"}]}`,
	)
	sa, err := Parse("a.yaml", []byte(a))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Parse("b.yaml", []byte(b))
	if err != nil {
		t.Fatal(err)
	}
	if sa.Hash() != sb.Hash() {
		t.Errorf("Hash() differs for two layouts of one policy: %s vs %s", sa.Hash(), sb.Hash())
	}
}

// TestHashCoversEvaluatedFields stops a projection that leaves out a field
// evaluation reads: changing any one of them must change the hash.
func TestHashCoversEvaluatedFields(t *testing.T) {
	base := []string{
		"default: allow",
		"rules:",
		"  - {id: r, action: rate_limit, tool: t, rate: {max: 5, per_seconds: 60}, limits: {max_wall_ms: 10}}",
		"  - {id: p, action: pending_approval, tool: u, park: true, timeout_seconds: 30}",
		"  - {id: d, action: deny, tool: v}",
	}
	variants := map[string][2]string{
		"default":         {"default: allow", "default: deny"},
		"id":              {"id: d,", "id: d2,"},
		"action":          {"action: deny, tool: v", "action: allow, tool: v"},
		"tool":            {"tool: v}", "tool: w}"},
		"capability":      {"tool: v}", "tool: v, capability: c}"},
		"role":            {"tool: v}", "tool: v, role: admin}"},
		"priority":        {"tool: v}", "tool: v, priority: 1}"},
		"reason":          {"tool: v}", "tool: v, reason: no}"},
		"rate.max":        {"max: 5", "max: 6"},
		"rate.per":        {"per_seconds: 60", "per_seconds: 61"},
		"limits":          {"max_wall_ms: 10", "max_wall_ms: 11"},
		"limits.key":      {"max_wall_ms: 10", "max_output_bytes: 10"},
		"park":            {"park: true, timeout_seconds: 30", "park: false"},
		"timeout_seconds": {"timeout_seconds: 30", "timeout_seconds: 31"},
	}
	baseSet, err := Parse("base.yaml", []byte(y(base...)))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{baseSet.Hash(): "base"}
	for name, v := range variants {
		src := strings.Replace(y(base...), v[0], v[1], 1)
		if src == y(base...) {
			t.Fatalf("variant %s: %q not found", name, v[0])
		}
		s, err := Parse(name, []byte(src))
		if err != nil {
			t.Fatalf("variant %s: %v", name, err)
		}
		if prev, dup := seen[s.Hash()]; dup {
			t.Errorf("variant %s hashes like %s: %s", name, prev, s.Hash())
		}
		seen[s.Hash()] = name
	}
	// Rule order.
	swapped := []string{base[0], base[1], base[3], base[2], base[4]}
	s, err := Parse("swapped", []byte(y(swapped...)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Hash() == baseSet.Hash() {
		t.Errorf("swapping two rules kept the hash %s", s.Hash())
	}
}
