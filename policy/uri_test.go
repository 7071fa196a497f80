package policy

import (
	"errors"
	"strings"
	"testing"
)

// resourceGateway gives each pattern under test its own profile.
func resourceGateway(t testing.TB) *Gateway {
	t.Helper()
	return mustGateway(t, y(
		"servers: {fs: {command: a}}",
		"profiles:",
		`  logs: {resources: ["file:///var/log/app/**"]}`,
		`  conf: {resources: ["file:///etc/conf/*", "https://api.example/health"]}`,
		`  hosts: {resources: ["github://my-repo/pulls/**", "file:///repo/**"]}`,
		`  web: {resources: ["https://API.Example.COM:8443/v1/**", "http://[::1]/x/*"]}`,
		`  root: {resources: ["file:///**"]}`,
		`  repo: {resources: ["github://my-repo/**"]}`,
		`  query: {resources: ["db://main/users?limit=10", "urn:isbn:0451450523"]}`,
		"  none: {}",
		"activation: {default_profile: none}",
	))
}

type uriCase struct {
	name    string
	profile string
	uri     string
	want    bool
}

func runURICases(t *testing.T, cases []uriCase) {
	t.Helper()
	g := resourceGateway(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, pat := g.ResourceAllowed(tc.profile, tc.uri)
			if got != tc.want {
				t.Errorf("ResourceAllowed(%q, %q) = %v (%q), want %v", tc.profile, tc.uri, got, pat, tc.want)
			}
			if got == (pat == "") {
				t.Errorf("ResourceAllowed(%q, %q) = %v with pattern %q", tc.profile, tc.uri, got, pat)
			}
		})
	}
}

// TestResourceTraversal: "../" is refused outright, also where cleaning it
// would land inside the pattern (deny, not normalise-then-allow).
func TestResourceTraversal(t *testing.T) {
	runURICases(t, []uriCase{
		{"InScope", "logs", "file:///var/log/app/today.log", true},
		{"InScopeNested", "logs", "file:///var/log/app/nested/deep.log", true},
		{"PrefixItself", "logs", "file:///var/log/app", true},
		{"PrefixItselfTrailingSlash", "logs", "file:///var/log/app/", true},
		{"SiblingDirectory", "logs", "file:///var/log/other/secret", false},
		{"SiblingWithSamePrefix", "logs", "file:///var/log/application/secret", false},
		{"DotDotEscapes", "logs", "file:///var/log/app/../../etc/passwd", false},
		{"DotDotStaysInside", "logs", "file:///var/log/app/x/../today.log", false},
		{"DotDotAtEnd", "logs", "file:///var/log/app/x/..", false},
		{"DotSegment", "logs", "file:///var/log/app/./today.log", false},
		{"EnforcerDotDot", "hosts", "file:///repo/../etc/passwd", false},
		{"DotDotAboveRoot", "root", "file:///../etc/passwd", false},
		{"DotDotSemicolon", "logs", "file:///var/log/app/..;/..;/etc/passwd", false},
		{"DotDotTrailingDots", "logs", "file:///var/log/app/.../etc", false},
		{"DotDotTrailingSpace", "logs", "file:///var/log/app/..%20/etc", false},
		{"EmptySegment", "hosts", "file:///repo//etc/passwd", false},
		{"BackslashTraversal", "logs", `file:///var/log/app/..\..\etc\passwd`, false},
		{"WindowsDriveInside", "hosts", "file:///repo/C:/Windows/win.ini", false},
		{"AlternateDataStream", "hosts", "file:///repo/a.txt::$DATA", false},
	})
}

// TestResourceTraversalEncoded: encoded traversal is refused, whatever
// the encoding: %2e%2e, mixed case, half-encoded, double-encoded, encoded
// slashes and backslashes, overlong UTF-8, Unicode dots.
func TestResourceTraversalEncoded(t *testing.T) {
	runURICases(t, []uriCase{
		{"PercentDotDot", "logs", "file:///var/log/app/%2e%2e/%2e%2e/etc/passwd", false},
		{"PercentDotDotUpper", "logs", "file:///var/log/app/%2E%2E/%2E%2E/etc/passwd", false},
		{"HalfEncodedDotDot", "logs", "file:///var/log/app/.%2e/.%2e/etc/passwd", false},
		{"PercentDot", "logs", "file:///var/log/app/%2e/today.log", false},
		{"DoubleEncodedDotDot", "logs", "file:///var/log/app/%252e%252e/%252e%252e/etc/passwd", false},
		{"DoubleEncodedPercent", "logs", "file:///var/log/app/%25/x", false},
		{"EncodedSlash", "logs", "file:///var/log/app/..%2f..%2fetc%2fpasswd", false},
		{"EncodedSlashAlone", "logs", "file:///var/log/app/a%2Fb", false},
		{"EncodedBackslash", "logs", "file:///var/log/app/..%5c..%5cetc%5cpasswd", false},
		{"DoubleEncodedSlash", "logs", "file:///var/log/app/..%252f..%252fetc", false},
		{"OverlongUTF8Dot", "logs", "file:///var/log/app/%c0%ae%c0%ae/etc/passwd", false},
		{"OverlongUTF8Slash", "logs", "file:///var/log/app/..%c0%af..%c0%afetc", false},
		{"EncodedNUL", "logs", "file:///var/log/app/today.log%00.txt", false},
		{"EncodedNewline", "logs", "file:///var/log/app/today.log%0a", false},
		{"MalformedEscape", "logs", "file:///var/log/app/%zz", false},
		{"TruncatedEscape", "logs", "file:///var/log/app/%2", false},
		{"FullwidthDots", "logs", "file:///var/log/app/%EF%BC%8E%EF%BC%8E/etc", false},
		{"FullwidthDotsRaw", "logs", "file:///var/log/app/．．/etc", false},
		{"OneDotLeader", "logs", "file:///var/log/app/\u2024\u2024/etc", false},
		{"TwoDotLeader", "logs", "file:///var/log/app/\u2025/etc", false},
		{"FullwidthSolidus", "logs", "file:///var/log/app/..\uff0fetc", false},
		{"EncodedUnicodeInsideIsFine", "logs", "file:///var/log/app/r%C3%A9sum%C3%A9.log", true},
		{"RawUnicodeInsideIsFine", "logs", "file:///var/log/app/résumé.log", true},
		{"EncodedLettersAreDecoded", "logs", "file:///var/log/%61pp/today.log", true},
	})
}

// TestResourceHostSpoofing: the authority is part of the match, compared
// case-insensitively, and every way of making one host look like another
// is refused (upstream TestResourceHostScopingNotBypassable, extended).
func TestResourceHostSpoofing(t *testing.T) {
	runURICases(t, []uriCase{
		{"RightRepo", "hosts", "github://my-repo/pulls/5", true},
		{"OtherRepo", "hosts", "github://attacker-repo/pulls/5", false},
		{"LocalFile", "hosts", "file:///repo/a.txt", true},
		{"InjectedHost", "hosts", "file://evil-host/repo/a.txt", false},
		{"LocalhostIsAnotherHost", "hosts", "file://localhost/repo/a.txt", false},
		{"NoAuthorityIsNotEmptyAuthority", "hosts", "file:/repo/a.txt", false},
		{"UserinfoSpoof", "hosts", "github://my-repo@attacker-repo/pulls/5", false},
		{"UserinfoSpoofReverse", "hosts", "github://attacker-repo@my-repo/pulls/5", false},
		{"EmptyUserinfo", "hosts", "github://@my-repo/pulls/5", false},
		{"EncodedAt", "hosts", "github://my-repo%40attacker-repo/pulls/5", false},
		{"EncodedHost", "hosts", "github://%6dy-repo/pulls/5", false},
		{"BackslashAuthority", "hosts", `github://attacker-repo\@my-repo/pulls/5`, false},
		{"HostSuffix", "hosts", "github://my-repo.attacker/pulls/5", false},
		{"TrailingDotHost", "hosts", "github://my-repo./pulls/5", false},
		{"EmptyLabel", "hosts", "github://my..repo/pulls/5", false},
		{"HostCaseFolded", "hosts", "GitHub://MY-REPO/pulls/5", true},
		{"PathCaseKept", "hosts", "github://my-repo/PULLS/5", false},
		{"PortIsAnotherHost", "hosts", "github://my-repo:8080/pulls/5", false},
		{"IDNHomoglyph", "hosts", "github://my-rеpo/pulls/5", false}, // Cyrillic е
		{"FullwidthHost", "hosts", "github://ｍｙ-repo/pulls/5", false},
		{"PunycodeIsAnotherHost", "hosts", "github://xn--my-rpo-1nf/pulls/5", false},
		{"HostWithSpace", "hosts", "github://my-repo /pulls/5", false},
		{"PortMatches", "web", "https://api.example.com:8443/v1/users", true},
		{"PortCaseFolded", "web", "HTTPS://api.EXAMPLE.com:8443/v1/users", true},
		{"DefaultPortIsNotOmitted", "web", "https://api.example.com/v1/users", false},
		{"OtherPort", "web", "https://api.example.com:443/v1/users", false},
		{"LeadingZeroPort", "web", "https://api.example.com:08443/v1/users", false},
		{"EmptyPort", "web", "https://api.example.com:/v1/users", false},
		{"IPv6Literal", "web", "http://[::1]/x/y", true},
		{"IPv6OtherLiteral", "web", "http://[::2]/x/y", false},
		{"IPv6ZoneID", "web", "http://[::1%25eth0]/x/y", false},
		{"IPv6Unclosed", "web", "http://[::1/x/y", false},
		{"RepoRootWithoutPath", "repo", "github://my-repo", true},
		{"RepoRootSlash", "repo", "github://my-repo/", true},
		{"OtherRepoRoot", "repo", "github://my-repo2", false},
	})
}

// TestResourceSingleSegmentAndExact: "/*" is exactly one more non-empty
// segment; a pattern without a glob is exact (upstream
// TestResourceSingleSegmentAndExactGlob).
func TestResourceSingleSegmentAndExact(t *testing.T) {
	runURICases(t, []uriCase{
		{"OneSegment", "conf", "file:///etc/conf/app.ini", true},
		{"TwoSegments", "conf", "file:///etc/conf/nested/app.ini", false},
		{"EmptySegment", "conf", "file:///etc/conf/", false},
		{"PrefixItself", "conf", "file:///etc/conf", false},
		{"OneSegmentTrailingSlash", "conf", "file:///etc/conf/app/", false},
		{"Exact", "conf", "https://api.example/health", true},
		{"ExactNotPrefix", "conf", "https://api.example/health/sub", false},
		{"ExactNoTrailingSlash", "conf", "https://api.example/health/", false},
		{"ExactNoQueryAdded", "conf", "https://api.example/health?x=1", false},
		{"ExactNoFragmentAdded", "conf", "https://api.example/health#x", false},
		{"ExactQuery", "query", "db://main/users?limit=10", true},
		{"ExactOtherQuery", "query", "db://main/users?limit=1000", false},
		{"ExactMissingQuery", "query", "db://main/users", false},
		{"ExactURN", "query", "urn:isbn:0451450523", true},
		{"GlobIgnoresNoQuery", "logs", "file:///var/log/app/x.log?../../etc/passwd", false},
		{"GlobIgnoresNoFragment", "logs", "file:///var/log/app/x.log#frag", false},
		{"OneSegmentIPv6", "web", "http://[::1]/x/y/z", false},
		{"RootCoversEverythingLocal", "root", "file:///etc/shadow", true},
		{"RootNotOtherHosts", "root", "file://host/etc/shadow", false},
	})
}

// TestResourceDefaultDeny: an unknown profile, a profile without
// resources, and URIs that are not URIs are all denied.
func TestResourceDefaultDeny(t *testing.T) {
	runURICases(t, []uriCase{
		{"UnknownProfile", "ghost", "file:///var/log/app/x", false},
		{"NoResources", "none", "file:///var/log/app/x", false},
		{"Empty", "root", "", false},
		{"NoScheme", "root", "/etc/passwd", false},
		{"RelativeReference", "root", "//host/etc/passwd", false},
		{"SchemeOnly", "root", "file:", false},
		{"BadScheme", "root", "1file:///x", false},
		{"ControlCharacter", "root", "file:///etc/\x01", false},
		{"Space", "root", "file:///etc/pass wd", false},
		{"InvalidUTF8", "root", "file:///etc/\xff", false},
		{"Bracket", "root", "file:///etc/[x]", false},
		{"Template", "root", "file:///etc/{path}", false},
		{"TooLong", "root", "file:///" + strings.Repeat("a/", 5000), false},
		{"MalformedQueryEscape", "query", "db://main/users?limit=%zz", false},
		{"TruncatedQueryEscape", "query", "db://main/users?limit=%1", false},
		{"SecondFragment", "root", "file:///etc/hosts#a#b", false},
		{"BracketInQuery", "query", "db://main/users?a[]=1", false},
		{"TextAfterIPLiteral", "web", "http://[::1]x/x/y", false},
		{"EmptyIPLiteral", "web", "http://[]/x/y", false},
		{"IPv4InBrackets", "web", "http://[127.0.0.1]/x/y", false},
		{"PortWithoutHost", "root", "file://:80/etc/hosts", false},
		{"PortTooLarge", "web", "https://api.example.com:65536/v1/x", false},
		{"PortNotANumber", "web", "https://api.example.com:8x/v1/x", false},
		{"TwoColonsInHost", "web", "https://api.example.com:84:43/v1/x", false},
		{"BadHostCharacter", "root", "file://a!b/etc/hosts", false},
		{"SchemeCaseFolded", "root", "FILE:///etc/hosts", true},
	})
}

func TestCanonicalURI(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"file:///var/log/app/today.log", "file:///var/log/app/today.log"},
		{"FILE://HOST.Example/a", "file://host.example/a"},
		{"file:///var/%61pp/r%c3%a9sum%c3%a9", "file:///var/app/r%C3%A9sum%C3%A9"},
		{"file:///a%20b/c", "file:///a%20b/c"},
		{"file:///a%3Fb", "file:///a%3Fb"},
		{"https://[::1]:8080/x?q=%2e#f", "https://[::1]:8080/x?q=%2e#f"},
		{"urn:isbn:0451450523", "urn:isbn:0451450523"},
		{"github://my-repo", "github://my-repo"},
		{"file:///", "file:///"},
	} {
		got, err := CanonicalURI(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("CanonicalURI(%q) = %q, %v, want %q", tc.in, got, err, tc.want)
		}
		// The canonical form is a fixed point.
		if again, err := CanonicalURI(got); err != nil || again != got {
			t.Errorf("CanonicalURI(%q) = %q, %v, not a fixed point", got, again, err)
		}
	}
	_, err := CanonicalURI("file:///a/../b")
	var ue *URIError
	if !errors.As(err, &ue) || ue.Reason != "a '.' or '..' segment in the path" {
		t.Errorf("CanonicalURI(traversal) = %v", err)
	}
	if got := err.Error(); got != "resource uri refused: a '.' or '..' segment in the path" {
		t.Errorf("Error() = %q", got)
	}
}

// TestResourcePatternAgreesWithCanonical: two URIs with the same canonical
// form are allowed alike.
func TestResourcePatternAgreesWithCanonical(t *testing.T) {
	g := resourceGateway(t)
	for _, pair := range [][2]string{
		{"file:///var/log/app/x", "FILE:///var/log/%61pp/x"},
		{"github://my-repo/pulls/5", "GITHUB://My-Repo/pulls/%35"},
	} {
		a, _ := CanonicalURI(pair[0])
		b, _ := CanonicalURI(pair[1])
		if a != b {
			t.Fatalf("canonical forms differ: %q %q", a, b)
		}
		for _, p := range g.Profiles() {
			x, _ := g.ResourceAllowed(p, pair[0])
			z, _ := g.ResourceAllowed(p, pair[1])
			if x != z {
				t.Errorf("profile %s: %q -> %v but %q -> %v", p, pair[0], x, pair[1], z)
			}
		}
	}
}
