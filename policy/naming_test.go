package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestNamespaceRoundTrip(t *testing.T) {
	for _, tc := range []struct{ server, tool string }{
		{"filesystem", "read_file"},
		{"fs", "b__c"},  // a "__" inside the tool stays in the tool
		{"fs", "_x"},    // so does a leading underscore
		{"a-b", "x-y"},  // dashes
		{"x1", "Tool9"}, // case and digits in the tool
	} {
		wire := Namespace(tc.server, tc.tool)
		s, tool, ok := SplitName(wire)
		if !ok || s != tc.server || tool != tc.tool {
			t.Errorf("SplitName(Namespace(%q, %q) = %q) = %q, %q, %v", tc.server, tc.tool, wire, s, tool, ok)
		}
	}
	if got := Capability("fs", "read"); got != "fs.read" {
		t.Errorf("Capability = %q", got)
	}
}

func TestSplitNameRefuses(t *testing.T) {
	for _, wire := range []string{
		"",
		"read_file",                       // no separator
		"__read",                          // no server
		"fs__",                            // no tool
		"FS__read",                        // uppercase server
		"fs__a.b",                         // dot in the tool
		"fs__a b",                         // space
		"aegis__set_profile",              // the reserved namespace
		"aegis.set_profile",               // a meta-tool is not a downstream tool
		"fs__" + strings.Repeat("x", 125), // wire name over 128 bytes
	} {
		if s, tool, ok := SplitName(wire); ok {
			t.Errorf("SplitName(%q) = %q, %q, true", wire, s, tool)
		}
	}
	// The first "__" is the separator: "a___b" is server "a", tool "_b".
	if s, tool, ok := SplitName("a___b"); !ok || s != "a" || tool != "_b" {
		t.Errorf("SplitName(a___b) = %q, %q, %v, want a, _b", s, tool, ok)
	}
}

func TestValidNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"fs", true}, {"a-b_c", true}, {"0x", true}, {strings.Repeat("a", 64), true},
		{"", false}, {"a__b", false}, {"a_", false}, {"_a", false}, {"-a", false}, {"A", false},
		{"a.b", false}, {"aegis", false}, {strings.Repeat("a", 65), false}, {"a b", false}, {"é", false},
	} {
		if got := ValidServerName(tc.name); got != tc.ok {
			t.Errorf("ValidServerName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"read_file", true}, {"A-Z_09", true}, {"__x", true}, {strings.Repeat("a", 128), true},
		{"", false}, {"a.b", false}, {"a/b", false}, {"a b", false}, {strings.Repeat("a", 129), false},
	} {
		if got := ValidToolName(tc.name); got != tc.ok {
			t.Errorf("ValidToolName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestWireNameCollision: ("a", "b__c") and ("a__b", "c") both give
// "a__b__c"; the second is refused and the first keeps the name (upstream
// naming_test). Here the second is already refused for its server name,
// which is why no two accepted pairs can ever share a wire name.
func TestWireNameCollision(t *testing.T) {
	err := CheckCollisions(map[string][]string{
		"a":    {"b__c"},
		"a__b": {"c"},
	})
	var ne *NameError
	if !errors.As(err, &ne) {
		t.Fatalf("CheckCollisions = %v, want a *NameError", err)
	}
	if len(ne.Problems) != 1 {
		t.Fatalf("problems = %v, want one", ne.Problems)
	}
	p := ne.Problems[0]
	if p.Server != "a__b" || p.Tool != "c" || p.Wire != "a__b__c" {
		t.Errorf("refused %+v, want a__b/c: the first pair keeps the name", p)
	}
	if s, tool, ok := SplitName("a__b__c"); !ok || s != "a" || tool != "b__c" {
		t.Errorf("SplitName(a__b__c) = %q, %q, %v, want the kept pair a, b__c", s, tool, ok)
	}
	want := `tool names: tool "c" of server "a__b": server name must not contain "__", the wire-name separator`
	if err.Error() != want {
		t.Errorf("Error() =\n%s\nwant\n%s", err, want)
	}
}

// TestWireNameCollisionTrailingUnderscore: ("a", "_b") and ("a_", "b")
// would both be "a___b"; a server name may not end in "_".
func TestWireNameCollisionTrailingUnderscore(t *testing.T) {
	err := CheckCollisions(map[string][]string{"a": {"_b"}, "a_": {"b"}})
	var ne *NameError
	if !errors.As(err, &ne) || len(ne.Problems) != 1 || ne.Problems[0].Server != "a_" {
		t.Fatalf("CheckCollisions = %v, want a_ refused", err)
	}
}

func TestCheckCollisions(t *testing.T) {
	if err := CheckCollisions(map[string][]string{
		"fs": {"read_file", "write_file", "b__c"},
		"gh": {"read_file", "search"},
	}); err != nil {
		t.Fatalf("CheckCollisions(valid) = %v", err)
	}
	if err := CheckCollisions(nil); err != nil {
		t.Fatalf("CheckCollisions(nil) = %v", err)
	}
	err := CheckCollisions(map[string][]string{
		"gh":    {"search", "search", "a.b", "", "ok"},
		"aegis": {"set_profile"},
		"Bad":   {"x"},
		"long":  {strings.Repeat("t", 123)},
	})
	var ne *NameError
	if !errors.As(err, &ne) {
		t.Fatalf("CheckCollisions = %v", err)
	}
	var got []string
	for _, p := range ne.Problems {
		got = append(got, p.Server+"/"+p.Tool+": "+p.Msg)
	}
	want := []string{
		"Bad/x: server name may hold only a-z, 0-9, _ and - (it prefixes every wire name)",
		`aegis/set_profile: server name "aegis" is reserved for aegis's own tools`,
		"gh/search: duplicate tool",
		"gh/a.b: tool name has a character outside [A-Za-z0-9_-]",
		"gh/: empty tool name",
		`long/` + strings.Repeat("t", 123) + `: wire name "long__` + strings.Repeat("t", 123) + `" longer than 128 bytes`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestValidServersNeverCollide: two pairs whose server names are valid
// never share a wire name, checked over a small exhaustive space. (The
// wire-name check of CheckCollisions stays as a second guard.)
func TestValidServersNeverCollide(t *testing.T) {
	alpha := []string{"a", "_", "b"}
	var words []string
	var grow func(s string, n int)
	grow = func(s string, n int) {
		if s != "" {
			words = append(words, s)
		}
		if n == 0 {
			return
		}
		for _, c := range alpha {
			grow(s+c, n-1)
		}
	}
	grow("", 4)
	seen := make(map[string][2]string)
	for _, s := range words {
		if !ValidServerName(s) {
			continue
		}
		for _, tool := range words {
			wire := Namespace(s, tool)
			if prev, dup := seen[wire]; dup {
				t.Fatalf("%q: (%s, %s) and (%s, %s)", wire, prev[0], prev[1], s, tool)
			}
			seen[wire] = [2]string{s, tool}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no pairs checked")
	}
}
