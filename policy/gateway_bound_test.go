package policy

import (
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

const boundGateway = `version: 1
servers:
  fs: {command: /bin/fs}
profiles:
  reader:
    allow: [fs.read_file]
  eng:
    extends: reader
    allow: [fs.write_file]
    for_groups: [eng, platform]
  admin:
    allow: ["fs.*"]
    for_groups: [eng]
    for_scopes: [mcp:admin]
activation:
  default_profile: reader
`

// A profile bound to groups or scopes is only for the callers it names:
// a caller of another group, one without a token, one whose token lacks
// the scope, and one whose token keeps no groups claim start in the
// default profile and may not switch into it.
func TestProfilesBoundToCallers(t *testing.T) {
	g, err := ParseGateway("aegis.yaml", []byte(boundGateway))
	if err != nil {
		t.Fatal(err)
	}
	p := func(groups []any, scopes ...string) *schemas.Principal {
		claims := map[string]any{}
		if groups != nil {
			claims["groups"] = groups
		}
		return schemas.NewPrincipal("https://id.example", "u", "cli", scopes, claims, []string{"groups"})
	}
	for _, tc := range []struct {
		attack string
		p      *schemas.Principal
		start  string
		admin  bool
	}{
		{"an engineer", p([]any{"eng"}), "eng", false},
		{"an engineer with the admin scope", p([]any{"eng"}, "mcp:admin"), "eng", true},
		{"a caller of the second group", p([]any{"platform"}), "eng", false},
		{"a caller of another group", p([]any{"sales"}), "reader", false},
		{"a caller of another group with the admin scope", p([]any{"sales"}, "mcp:admin"), "reader", false},
		{"a token that keeps no groups claim", p(nil, "mcp:admin"), "reader", false},
		{"a session without a token", nil, "reader", false},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			if got := g.StartProfile(tc.p); got != tc.start {
				t.Errorf("starts in %s, want %s", got, tc.start)
			}
			if got := g.Admits("admin", tc.p); got != tc.admin {
				t.Errorf("admin admits: %v, want %v", got, tc.admin)
			}
			if !g.Admits("reader", tc.p) {
				t.Error("the default profile refuses a caller")
			}
		})
	}
	for _, tc := range []struct{ name, yaml, says string }{
		{"the default profile bound", strings.Replace(boundGateway, "default_profile: reader", "default_profile: eng", 1), "default profile"},
		{"an empty binding", strings.Replace(boundGateway, "for_groups: [eng, platform]", "for_groups: []", 1), "at least one group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseGateway("aegis.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}
