package policy

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// promptGateway has prompts lists on two servers, one profile extending
// another, and a profile that allows every tool of fs but no prompt.
func promptGateway(t testing.TB) *Gateway {
	t.Helper()
	return mustGateway(t, y(
		"servers:",
		"  fs: {command: a}",
		"  fs-admin: {command: a}",
		"  docs: {command: a}",
		"profiles:",
		`  tools: {allow: ["fs.*"]}`,
		`  reader: {prompts: ["docs.review_*", fs.summary]}`,
		`  writer: {extends: reader, prompts: ["fs.*"]}`,
		`  spelled: {prompts: ["fs.x__*"]}`,
		"activation: {default_profile: tools}",
	))
}

// TestPromptAllowed: prompts are shown and served by the profile's
// prompts list alone, with the glob rules of tools.
func TestPromptAllowed(t *testing.T) {
	g := promptGateway(t)
	tests := []struct {
		name                    string
		profile, server, prompt string
		want                    bool
		pattern                 string
	}{
		{"ToolAllowListDoesNotGrantPrompts", "tools", "fs", "summary", false, ""},
		{"ExactEntry", "reader", "fs", "summary", true, "fs.summary"},
		{"ExactEntryNotPrefix", "reader", "fs", "summary2", false, ""},
		{"SuffixGlob", "reader", "docs", "review_pr", true, "docs.review_*"},
		{"GlobDoesNotReachAnotherServer", "reader", "fs", "review_pr", false, ""},
		{"GlobDoesNotReachAServerWithTheSamePrefix", "writer", "fs-admin", "summary", false, ""},
		{"GlobDoesNotSpanDoubleUnderscore", "writer", "fs", "a__b", false, ""},
		{"DoubleUnderscoreSpelledOut", "spelled", "fs", "x__y", true, "fs.x__*"},
		{"InheritedThroughExtends", "writer", "docs", "review_pr", true, "docs.review_*"},
		{"InheritedEntriesFirst", "writer", "fs", "summary", true, "fs.summary"},
		{"OwnEntry", "writer", "fs", "draft", true, "fs.*"},
		{"BaseDoesNotGetTheExtension", "reader", "fs", "draft", false, ""},
		{"InvalidPromptNameSpace", "writer", "fs", "a b", false, ""},
		{"InvalidPromptNameDot", "writer", "fs", "a.b", false, ""},
		{"InvalidPromptNameEmpty", "writer", "fs", "", false, ""},
		{"UnknownProfileDeniesAll", "ghost", "fs", "summary", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, pat := g.PromptAllowed(tc.profile, tc.server, tc.prompt)
			if got != tc.want || pat != tc.pattern {
				t.Errorf("PromptAllowed(%q, %q, %q) = %v, %q, want %v, %q", tc.profile, tc.server, tc.prompt, got, pat, tc.want, tc.pattern)
			}
		})
	}
	if got, want := g.Prompts("writer"), []string{"docs.review_*", "fs.summary", "fs.*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Prompts(writer) = %q, want %q", got, want)
	}
	if got := g.Prompts("ghost"); got != nil {
		t.Errorf("Prompts(ghost) = %q", got)
	}
	if got := g.RequiredPromptProfile("tools", "fs", "draft"); got != "writer" {
		t.Errorf("RequiredPromptProfile(tools, fs, draft) = %q, want writer", got)
	}
	if got := g.RequiredPromptProfile("writer", "fs", "draft"); got != "" {
		t.Errorf("RequiredPromptProfile names the active profile or another: %q", got)
	}
}

func TestParseGatewayPromptsRefuses(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"PromptsUnknownServer", gw([]string{"p:", "    prompts:", "      - fs.a", "      - gh.review"}, defaultP), `aegis.yaml:7: profiles.p.prompts[1]: unknown server "gh" in prompts entry "gh.review"`},
		{"PromptsNoDot", gw([]string{"p: {prompts: [review]}"}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "review": want "<server>.<prompt>", such as docs.review or docs.*`},
		{"PromptsWireName", gw([]string{"p: {prompts: [fs__review]}"}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "fs__review": want "<server>.<prompt>", such as docs.review or docs.*`},
		{"PromptsServerGlob", gw([]string{`p: {prompts: ["*.review"]}`}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "*.review": the server part cannot be a glob: name one declared server`},
		{"PromptsEmptyName", gw([]string{`p: {prompts: ["fs."]}`}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "fs.": empty prompt part; write "fs.*" for all of its prompts`},
		{"PromptsDoubleStar", gw([]string{`p: {prompts: ["fs.**"]}`}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "fs.**": "**" is not a prompt glob: '*' already matches any run of one prompt name`},
		{"PromptsDotInName", gw([]string{`p: {prompts: [fs.a.b]}`}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "fs.a.b": a prompt name has no '.': one entry is <server>.<prompt>`},
		{"PromptsSpace", gw([]string{`p: {prompts: ["fs.a b"]}`}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "fs.a b": a character outside [A-Za-z0-9_-] and '*' in the prompt part`},
		{"PromptsQuestionMark", gw([]string{`p: {prompts: ["fs.a?"]}`}, defaultP), `aegis.yaml:4: profiles.p.prompts[0]: bad prompts entry "fs.a?": a character outside [A-Za-z0-9_-] and '*' in the prompt part`},
		{"PromptsDuplicate", gw([]string{"p:", "    prompts:", "      - fs.a", "      - fs.a"}, defaultP), `aegis.yaml:7: profiles.p.prompts[1]: duplicate entry "fs.a" (first at line 6)`},
		{"PromptsString", gw([]string{"p: {prompts: fs.a}"}, defaultP), "aegis.yaml:4: profiles.p.prompts: expected a sequence of strings, got a string"},
		{"PromptsNull", gw([]string{"p: {prompts: [~]}"}, defaultP), "aegis.yaml:4: profiles.p.prompts[0]: expected a string, got null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ParseGateway("aegis.yaml", []byte(tc.src))
			var pe *ParseError
			if err == nil || g != nil || !errors.As(err, &pe) {
				t.Fatalf("ParseGateway = %v, %v; want a *ParseError", g, err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("ParseGateway error\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

// TestTemplateAllowed: a resource template is listed when the profile's
// resource patterns can allow a URI it expands to, and hidden when none
// can: another directory, host, scheme or depth.
func TestTemplateAllowed(t *testing.T) {
	g := resourceGateway(t)
	tests := []struct {
		name, profile, template string
		want                    bool
		pattern                 string
	}{
		{"UnderTheGlob", "logs", "file:///var/log/app/{name}", true, "file:///var/log/app/**"},
		{"DeeperUnderTheGlob", "logs", "file:///var/log/app/{year}/{name}", true, "file:///var/log/app/**"},
		{"WiderThanTheGlobStillReachesIt", "logs", "file:///{+path}", true, "file:///var/log/app/**"},
		{"OtherDirectoryHidden", "logs", "file:///etc/{name}", false, ""},
		{"SiblingWithTheSamePrefixHidden", "logs", "file:///var/log/application/{name}", false, ""},
		{"HostSpoofHidden", "logs", "file://evil-host/var/log/app/{name}", false, ""},
		{"OtherSchemeHidden", "logs", "github://{repo}/pulls/{n}", false, ""},
		{"SchemeCaseFolded", "logs", "FILE:///var/log/app/{name}", true, "file:///var/log/app/**"},
		{"HostCaseFolded", "hosts", "github://MY-REPO/pulls/{n}", true, "github://my-repo/pulls/**"},
		{"ExpressionInTheHost", "hosts", "github://{repo}/pulls/{n}", true, "github://my-repo/pulls/**"},
		{"PathCaseNotFolded", "logs", "file:///VAR/log/app/{name}", false, ""},
		{"OneSegmentGlob", "conf", "file:///etc/conf/{name}", true, "file:///etc/conf/*"},
		{"OneSegmentGlobNoDeeper", "conf", "file:///etc/conf/sub/{name}", false, ""},
		{"PrefixOfAnExactPattern", "conf", "https://api.example/{what}", true, "https://api.example/health"},
		{"PastAnExactPattern", "conf", "https://api.example/health/{x}", false, ""},
		{"NoExpressionAllowedURI", "conf", "https://api.example/health", true, "https://api.example/health"},
		{"NoExpressionOtherURI", "conf", "https://api.example/other", false, ""},
		{"NoExpressionTraversal", "logs", "file:///var/log/app/../../etc/passwd", false, ""},
		{"ExpressionFirstReachesAnyPattern", "logs", "{+uri}", true, "file:///var/log/app/**"},
		{"BackslashInThePrefixHidden", "root", `file:///a\b/{x}`, false, ""},
		{"ControlCharacterInThePrefixHidden", "root", "file:///a\x01/{x}", false, ""},
		{"NoResourcesNoTemplates", "none", "file:///{path}", false, ""},
		{"UnknownProfileNoTemplates", "ghost", "file:///{path}", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, pat := g.TemplateAllowed(tc.profile, tc.template)
			if got != tc.want || pat != tc.pattern {
				t.Errorf("TemplateAllowed(%q, %q) = %v, %q, want %v, %q", tc.profile, tc.template, got, pat, tc.want, tc.pattern)
			}
		})
	}
}

// expand fills every expression of an RFC 6570 template with fill; an
// unclosed '{' takes the rest.
func expand(tmpl, fill string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		b.WriteString(fill)
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return b.String()
		}
		tmpl = tmpl[i+j+1:]
	}
}

// FuzzTemplateAllowed checks template visibility against the resource
// matcher:
//
//   - it never panics; an answer carries a pattern of the profile exactly
//     when it allows;
//   - a template without an expression is answered as ResourceAllowed
//     answers the URI;
//   - no false hiding: when an expansion of the template is a URI that
//     the profile allows, and whose canonical form is the URI as written
//     (scheme and host aside), the template is visible.
func FuzzTemplateAllowed(f *testing.F) {
	for _, s := range []string{
		"file:///var/log/app/{name}",
		"file:///{+path}",
		"file:///etc/conf/{name}",
		"FILE:///var/log/app/{name}",
		"github://{repo}/pulls/{n}",
		"github://my-repo{/path}",
		"https://API.Example.COM:8443/v1/{x}",
		"http://[::1]/x/{y}",
		"db://main/users?limit={n}",
		"urn:isbn:{id}",
		"https://api.example/health",
		"{+uri}",
		"file:///var/log/app/{",
		"file:///a\\b/{x}",
		"",
	} {
		f.Add(s)
	}
	g := resourceGateway(f)
	f.Fuzz(func(t *testing.T, tmpl string) {
		for _, p := range append(g.Profiles(), "ghost") {
			ok, pat := g.TemplateAllowed(p, tmpl)
			if ok != (pat != "") || ok && !contains(g.Resources(p), pat) {
				t.Fatalf("TemplateAllowed(%s, %q) = %v, %q", p, tmpl, ok, pat)
			}
			if !strings.Contains(tmpl, "{") {
				if rok, rpat := g.ResourceAllowed(p, tmpl); rok != ok || rpat != pat {
					t.Fatalf("TemplateAllowed(%s, %q) = %v, %q but ResourceAllowed = %v, %q", p, tmpl, ok, pat, rok, rpat)
				}
				continue
			}
			for _, fill := range []string{"x", "x/y", ""} {
				uri := expand(tmpl, fill)
				canon, err := CanonicalURI(uri)
				if err != nil || canon != foldAuthority(uri) {
					continue
				}
				if rok, _ := g.ResourceAllowed(p, uri); rok && !ok {
					t.Fatalf("TemplateAllowed(%s, %q) hides a template whose expansion %q is allowed", p, tmpl, uri)
				}
			}
		}
	})
}

// TestPromptDeniedDisclosure: a denied prompt names the profile that would
// grant it under verbose disclosure only, like a denied tool.
func TestPromptDeniedDisclosure(t *testing.T) {
	src := func(mode string) string {
		return y(
			"servers: {docs: {command: a}}",
			"profiles:",
			"  default: {}",
			`  writer: {prompts: ["docs.*"]}`,
			"activation: {default_profile: default}",
			"error_disclosure: "+mode,
		)
	}
	verbose := decode(t, mustGateway(t, src("verbose")).PromptDenied("default", "docs", "review"))
	want := map[string]any{
		"code":             "AEGIS_PROMPT_DENIED",
		"prompt":           "docs.review",
		"active_profile":   "default",
		"hint":             "prompt requires a profile that allows it",
		"required_profile": "writer",
	}
	if !reflect.DeepEqual(verbose, want) {
		t.Errorf("verbose payload = %v, want %v", verbose, want)
	}
	minimal := decode(t, mustGateway(t, src("minimal")).PromptDenied("default", "docs", "review"))
	delete(want, "required_profile")
	if !reflect.DeepEqual(minimal, want) {
		t.Errorf("minimal payload = %v, want %v", minimal, want)
	}
}

// TestSamplePrompts: the sample file's prompts lists mean what its
// comments say, against the prompts the reference servers list.
func TestSamplePrompts(t *testing.T) {
	g := readGateway(t, sampleFile)
	prompts := map[string][]string{
		"example":    {"greet"},
		"everything": {"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"},
	}
	for _, tc := range []struct {
		profile string
		want    []string
	}{
		{"observer", []string{"everything.simple-prompt", "example.greet"}},
		{"developer", []string{"everything.simple-prompt", "example.greet"}},
		{"deploy", []string{"everything.args-prompt", "everything.completable-prompt", "everything.resource-prompt", "everything.simple-prompt", "example.greet"}},
	} {
		var got []string
		for server, list := range prompts {
			for _, p := range list {
				if ok, _ := g.PromptAllowed(tc.profile, server, p); ok {
					got = append(got, server+"."+p)
				}
			}
		}
		slices.Sort(got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s shows prompts %q, want %q", tc.profile, got, tc.want)
		}
	}
	// Templates follow the resources patterns.
	for _, tc := range []struct {
		profile, template string
		want              bool
	}{
		{"observer", "demo://resource/dynamic/text/{resourceId}", false},
		{"developer", "demo://resource/dynamic/text/{resourceId}", true},
		{"developer", "demo://resource/dynamic/blob/{resourceId}", false},
		{"deploy", "demo://resource/dynamic/blob/{resourceId}", true},
	} {
		if got, _ := g.TemplateAllowed(tc.profile, tc.template); got != tc.want {
			t.Errorf("TemplateAllowed(%s, %s) = %v, want %v", tc.profile, tc.template, got, tc.want)
		}
	}
}
