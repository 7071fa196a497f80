package policy

import (
	"reflect"
	"testing"
)

// globGateway has one profile per glob under test, on servers fs and gh.
func globGateway(t *testing.T) *Gateway {
	t.Helper()
	return mustGateway(t, y(
		"servers:",
		"  fs: {command: a}",
		"  fs-admin: {command: a}",
		"  gh: {command: a}",
		"profiles:",
		`  fsall: {allow: ["fs.*"]}`,
		`  search: {allow: ["gh.search_*"]}`,
		`  mid: {allow: ["fs.read*file"]}`,
		`  two: {allow: ["fs.*_*"]}`,
		`  spelled: {allow: ["fs.read__*"]}`,
		"  exact: {allow: [fs.read_file]}",
		"activation: {default_profile: exact}",
	))
}

// TestToolGlobOneSegment: '*' stays inside one tool name of one server. It
// never reaches another server (not fs-admin through fs, not gh), never
// spans a "__" inside a tool name, and an exact entry matches only itself.
func TestToolGlobOneSegment(t *testing.T) {
	g := globGateway(t)
	tests := []struct {
		name                  string
		profile, server, tool string
		want                  bool
		pattern               string
	}{
		{"StarMatchesAnyToolOfItsServer", "fsall", "fs", "read_file", true, "fs.*"},
		{"StarMatchesDashes", "fsall", "fs", "list-dir", true, "fs.*"},
		{"StarMatchesSingleUnderscores", "fsall", "fs", "a_b_c", true, "fs.*"},
		{"StarDoesNotReachAnotherServer", "fsall", "gh", "read_file", false, ""},
		{"StarDoesNotReachAServerWithTheSamePrefix", "fsall", "fs-admin", "read_file", false, ""},
		{"StarDoesNotSpanDoubleUnderscore", "fsall", "fs", "read__secret", false, ""},
		{"StarDoesNotSpanLeadingDoubleUnderscore", "fsall", "fs", "__init", false, ""},
		{"StarDoesNotSpanTripleUnderscore", "fsall", "fs", "a___b", false, ""},
		{"SuffixGlob", "search", "gh", "search_code", true, "gh.search_*"},
		{"SuffixGlobEmptyRun", "search", "gh", "search_", true, "gh.search_*"},
		{"SuffixGlobNotPrefix", "search", "gh", "research_code", false, ""},
		{"SuffixGlobDoesNotSpanDoubleUnderscore", "search", "gh", "search__admin", false, ""},
		{"SuffixGlobNotADoubleUnderscoreAfterLiteral", "search", "gh", "search__x", false, ""},
		{"InfixGlob", "mid", "fs", "read_text_file", true, "fs.read*file"},
		{"InfixGlobEmpty", "mid", "fs", "readfile", true, "fs.read*file"},
		{"InfixGlobNotAcrossDoubleUnderscore", "mid", "fs", "read__x__file", false, ""},
		{"TwoStars", "two", "fs", "read_file", true, "fs.*_*"},
		{"TwoStarsNoUnderscore", "two", "fs", "readfile", false, ""},
		{"TwoStarsNotAcrossDoubleUnderscore", "two", "fs", "read__file", false, ""},
		{"DoubleUnderscoreSpelledOut", "spelled", "fs", "read__secret", true, "fs.read__*"},
		{"DoubleUnderscoreSpelledOutNotTwice", "spelled", "fs", "read__a__b", false, ""},
		{"ExactMatch", "exact", "fs", "read_file", true, "fs.read_file"},
		{"ExactNotPrefix", "exact", "fs", "read_file2", false, ""},
		{"ExactCaseSensitive", "exact", "fs", "Read_File", false, ""},
		{"InvalidToolNameDot", "fsall", "fs", "a.b", false, ""},
		{"InvalidToolNameSlash", "fsall", "fs", "a/b", false, ""},
		{"InvalidToolNameSpace", "fsall", "fs", "a b", false, ""},
		{"InvalidToolNameEmpty", "fsall", "fs", "", false, ""},
		{"UnknownProfileDeniesAll", "ghost", "fs", "read_file", false, ""},
		{"UnknownServerDenied", "fsall", "ghost", "read_file", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, pat := g.ToolAllowed(tc.profile, tc.server, tc.tool)
			if got != tc.want || pat != tc.pattern {
				t.Errorf("ToolAllowed(%q, %q, %q) = %v, %q, want %v, %q", tc.profile, tc.server, tc.tool, got, pat, tc.want, tc.pattern)
			}
		})
	}
}

// TestGlobToolAgainstNaive checks the fast paths of globTool against the
// dynamic-programming path on every pattern and name of a small alphabet.
func TestGlobToolAgainstNaive(t *testing.T) {
	alpha := []string{"a", "_", "b"}
	var names []string
	var grow func(s string, n int)
	grow = func(s string, n int) {
		names = append(names, s)
		if n == 0 {
			return
		}
		for _, c := range alpha {
			grow(s+c, n-1)
		}
	}
	grow("", 5)
	pats := []string{"*", "a*", "*a", "a*b", "_*", "*_", "a_*", "*_b", "a__*", "*__b", "a*_*b", "**"}
	for _, pat := range pats {
		stars := 0
		for i := range len(pat) {
			if pat[i] == '*' {
				stars++
			}
		}
		for _, name := range names {
			fast := globTool(pat, stars, name)
			slow := globTool(pat, 99, name) // forces the general path
			if fast != slow {
				t.Errorf("globTool(%q, %q): fast %v, general %v", pat, name, fast, slow)
			}
			if fast && stars > 0 {
				// Whatever the stars took, no "__" may have been inside it:
				// removing the literal parts leaves no "__" spanning.
				if !literalDoubleUnderscores(pat, name) {
					t.Errorf("globTool(%q, %q) matched a \"__\" through a star", pat, name)
				}
			}
		}
	}
}

// literalDoubleUnderscores reports whether name matches pat with some
// assignment in which every '_' next to another '_' is matched by a
// literal of pat (a brute-force oracle).
func literalDoubleUnderscores(pat, name string) bool {
	var rec func(pi, ni int) bool
	rec = func(pi, ni int) bool {
		if pi == len(pat) {
			return ni == len(name)
		}
		if pat[pi] != '*' {
			return ni < len(name) && pat[pi] == name[ni] && rec(pi+1, ni+1)
		}
		for k := ni; k <= len(name); k++ {
			ok := true
			for j := ni; j < k; j++ {
				if name[j] == '_' && (j > 0 && name[j-1] == '_' || j+1 < len(name) && name[j+1] == '_') {
					ok = false
				}
			}
			if ok && rec(pi+1, k) {
				return true
			}
		}
		return false
	}
	return rec(0, 0)
}

// extendsGateway is the upstream glob + extends matrix, with servers.
func extendsGateway(t *testing.T) *Gateway {
	t.Helper()
	return mustGateway(t, y(
		"servers:",
		"  filesystem: {command: a}",
		"  github: {command: a}",
		"  sonarqube: {command: a}",
		"profiles:",
		"  default:",
		`    allow: [filesystem.read_file, "github.search_*"]`,
		"    allowed_transitions: [code-review]",
		"  code-review:",
		"    extends: default",
		`    allow: ["sonarqube.*"]`,
		"    allowed_transitions: [default, deploy]",
		"  deploy:",
		"    extends: code-review",
		"    allow: [github.deploy]",
		"    allowed_transitions: [default]",
		"  frontend-dev:",
		"    allow: [github.search_code]",
		"  db-analytics:",
		"    allow: [sonarqube.query]",
		"  default-plus:",
		"    extends: default",
		"activation: {default_profile: default}",
	))
}

func TestToolAllowedExtendsMatrix(t *testing.T) {
	g := extendsGateway(t)
	tests := []struct {
		profile, cap string
		want         bool
	}{
		{"default", "filesystem.read_file", true},
		{"default", "filesystem.write_file", false},
		{"default", "github.search_code", true},
		{"default", "sonarqube.scan", false},
		{"code-review", "sonarqube.scan", true},
		{"code-review", "filesystem.read_file", true}, // inherited
		{"code-review", "github.deploy", false},
		{"deploy", "filesystem.read_file", true}, // inherited twice
		{"deploy", "github.deploy", true},
		{"frontend-dev", "sonarqube.query", false},
		{"db-analytics", "sonarqube.query", true},
	}
	for _, tc := range tests {
		server, tool, _ := cut(tc.cap)
		if got, _ := g.ToolAllowed(tc.profile, server, tool); got != tc.want {
			t.Errorf("ToolAllowed(%q, %q) = %v, want %v", tc.profile, tc.cap, got, tc.want)
		}
	}
}

func cut(cap string) (string, string, bool) {
	for i := range len(cap) {
		if cap[i] == '.' {
			return cap[:i], cap[i+1:], true
		}
	}
	return cap, "", false
}

// TestLateralProfileSpread: a switch is autonomous only along an edge the
// profile itself declares. Edges are not inherited through extends, not
// transitive, and a profile reachable from an edge does not lend its own
// edges (upstream ADR 002).
func TestLateralProfileSpread(t *testing.T) {
	g := extendsGateway(t)
	tests := []struct {
		name     string
		from, to string
		want     bool
	}{
		{"DeclaredEdge", "default", "code-review", true},
		{"DeclaredEdgeBack", "code-review", "default", true},
		{"EscalationNotAnEdge", "default", "deploy", false},
		{"NotTransitive", "default", "deploy", false},
		{"DisjointSameLevelProfiles", "frontend-dev", "db-analytics", false},
		{"DisjointSameLevelProfilesBack", "db-analytics", "frontend-dev", false},
		{"ExtendsDoesNotInheritEdges", "deploy", "code-review", false},
		{"ExtendingProfileGetsNoEdges", "default-plus", "code-review", false},
		{"UnknownFrom", "ghost", "default", false},
		{"UnknownTo", "default", "ghost", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := g.Transition(tc.from, tc.to); got != tc.want {
				t.Errorf("Transition(%q, %q) = %v, want %v", tc.from, tc.to, got, tc.want)
			}
		})
	}
	if got, want := g.Transitions("code-review"), []string{"default", "deploy"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Transitions(code-review) = %q, want %q", got, want)
	}
}

func TestDecideSwitch(t *testing.T) {
	g := extendsGateway(t)
	tests := []struct {
		name           string
		active, target string
		src            SwitchSource
		want           SwitchOutcome
	}{
		{"AgentAlongEdge", "default", "code-review", SourceAgent, SwitchNow},
		{"AgentEscalationNeedsHuman", "default", "deploy", SourceAgent, SwitchNeedsApproval},
		{"AgentLateralSpreadNeedsHuman", "frontend-dev", "db-analytics", SourceAgent, SwitchNeedsApproval},
		{"AgentUnknownTarget", "default", "ghost", SourceAgent, SwitchUnknownProfile},
		{"AgentSameProfile", "default", "default", SourceAgent, SwitchAlreadyActive},
		{"HumanAnywhere", "default", "deploy", SourceHuman, SwitchNow},
		{"HumanUnknownTarget", "default", "ghost", SourceHuman, SwitchUnknownProfile},
		{"ZeroSourceIsTheAgent", "frontend-dev", "deploy", SwitchSource(0), SwitchNeedsApproval},
		{"UnknownActiveNeedsHuman", "ghost", "default", SourceAgent, SwitchNeedsApproval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := g.DecideSwitch(tc.active, tc.target, tc.src); got != tc.want {
				t.Errorf("DecideSwitch(%q, %q, %v) = %v, want %v", tc.active, tc.target, tc.src, got, tc.want)
			}
		})
	}
}

// TestRequiredProfile: the profile a verbose denial names is one reachable
// along an edge when there is one, else the one granting the fewest tools,
// never the active profile, "" when none grants it.
func TestRequiredProfile(t *testing.T) {
	g := mustGateway(t, y(
		"servers: {fs: {command: a}, gh: {command: a}}",
		"profiles:",
		"  observer: {allow: [fs.read], allowed_transitions: [developer]}",
		"  developer: {extends: observer, allow: [fs.write, gh.search]}",
		`  admin: {allow: ["fs.*", "gh.*"]}`,
		"  auditor: {allow: [gh.search]}",
		"activation: {default_profile: observer}",
	))
	tests := []struct {
		name                 string
		active, server, tool string
		want                 string
	}{
		{"PrefersAnEdge", "observer", "fs", "write", "developer"},
		{"ThenLeastPrivilege", "admin", "gh", "search", "auditor"},
		{"EdgeOverLeastPrivilege", "observer", "gh", "search", "developer"},
		{"OnlyOne", "observer", "gh", "deploy", "admin"},
		{"NotTheActiveProfile", "admin", "fs", "rm", ""},
		{"GlobGrant", "observer", "fs", "format", "admin"},
		{"Nothing", "observer", "ghost", "x", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := g.RequiredProfile(tc.active, tc.server, tc.tool); got != tc.want {
				t.Errorf("RequiredProfile(%q, %q, %q) = %q, want %q", tc.active, tc.server, tc.tool, got, tc.want)
			}
		})
	}
}

func TestStringers(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{DisclosureVerbose.String(), "verbose"},
		{DisclosureMinimal.String(), "minimal"},
		{SourceAgent.String(), "agent"},
		{SourceHuman.String(), "human"},
		{SwitchNow.String(), "switch"},
		{SwitchNeedsApproval.String(), "needs_approval"},
		{SwitchUnknownProfile.String(), "unknown_profile"},
		{SwitchAlreadyActive.String(), "already_active"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
	var s SwitchSource
	if err := s.UnmarshalText([]byte("human")); err != nil || s != SourceHuman {
		t.Errorf("UnmarshalText(human) = %v, %v", s, err)
	}
	if err := s.UnmarshalText([]byte("root")); err == nil {
		t.Error("UnmarshalText(root) accepted")
	}
}
