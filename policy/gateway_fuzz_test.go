package policy

import (
	"errors"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseGateway checks the gateway parser on arbitrary bytes:
//
//   - it never panics; an error is a *ParseError naming the file, with a
//     nil Gateway;
//   - parsing is deterministic;
//   - an accepted Gateway is coherent: every environment name is valid and
//     set from one place (env, an env file, env_passthrough), every env
//     file an absolute, clean path; the default profile exists, every
//     transition leads to a profile, every allow entry names a declared
//     server, every ToolAllowed answer carries a pattern of the profile,
//     RequiredProfile names another profile that allows the tool, and no
//     resource pattern lets a URI with a ".." segment through.
func FuzzParseGateway(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "gateway", "*.yaml"))
	files = append(files, sampleFile)
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2]) // truncated mid-file
	}
	for _, s := range []string{
		"",
		"~",
		"{}",
		"servers: {fs: {command: a}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: {fs: {command: a}}\nprofiles: {p: {extends: p}}\nactivation: {default_profile: p}",                         // self cycle
		"servers: {fs: {command: a}}\nprofiles: {p: {allow: [\"fs.*\"]}}\nactivation: {default_profile: q}",                  // unknown default
		"servers: {a__b: {command: a}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",                                 // separator in a server name
		"servers: {fs: {command: a}}\nprofiles: {p: {resources: [\"file:///a/../b/**\"]}}\nactivation: {default_profile: p}", // traversal in a pattern
		"servers: {fs: {command: a}}\nprofiles: {p: {resources: [\"file:///**\"]}}\nactivation: {default_profile: p}",
		"servers: {fs: {command: a, confine: {allow_net: [\"[::1]:1\"]}}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: {fs: {command: a}}\nprofiles: {p: {}}\nactivation: {default_profile: p}\nrules: [{id: a, action: deny, tool: fs__x}]",
		"servers: {fs: {command: a}}\nprofiles: {p: {}}\nactivation: {default_profile: p}\nrules: [{id: a, action: deny, role: q}]",
		"servers: {fs: {command: a}}\nprofiles: {p: {prompts: [\"fs.review_*\", fs.x__y]}, q: {extends: p, prompts: [\"fs.*\"]}}\nactivation: {default_profile: p}",
		"servers: {fs: {command: a}}\nprofiles: {p: {prompts: [\"gh.*\"]}}\nactivation: {default_profile: p}", // undeclared server
		"servers: {fs: {command: a, env: {T: {file: /run/t}, U: u}, env_passthrough: [HOME]}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: {fs: {command: a, env: {T: {file: /run/t}}, env_passthrough: [T]}}\nprofiles: {p: {}}\nactivation: {default_profile: p}", // one name, two sources
		"servers: {fs: {command: a, env: {T: {file: ../t}}}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: &a {fs: {command: a}}",
		"servers:\n  fs:\n    command: a\n    command: b\n",
		"servers: {fs: {command: a, alias: {\"a.b\": ab, c: ab}}}\nprofiles: {p: {}}\nactivation: {default_profile: p}\nmeta_tool_names: dotted", // two tools, one alias
		// Remote servers.
		"servers: {r: {url: \"https://mcp.example.com/mcp?t=1\", headers: {Authorization: {file: /run/t}, X-K: {env: K}, X-T: v}, ca_file: /etc/ca.pem}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: {r: {url: \"http://[::1]:8080/mcp\", transport: sse}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: {r: {url: \"http://mcp.example.com/mcp\"}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",                     // cleartext to a network host
		"servers: {r: {url: \"https://u:p@mcp.example.com/\"}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",                   // userinfo
		"servers: {r: {url: \"https://a.example/\", insecure_skip_verify: true}}\nprofiles: {p: {}}\nactivation: {default_profile: p}", // no way to skip TLS
		"servers: {r: {url: \"https://a.example/\", headers: {Mcp-Session-Id: x, host: y}}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
		"servers: {r: {url: \"https://a.example/\", command: a, args: [b]}}\nprofiles: {p: {}}\nactivation: {default_profile: p}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGateway("f.yaml", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "f.yaml" {
				t.Fatalf("error %T %v is not a *ParseError for f.yaml", err, err)
			}
			if g != nil {
				t.Fatal("a Gateway with an error")
			}
			return
		}
		again, err := ParseGateway("f.yaml", data)
		if err != nil || !reflect.DeepEqual(g, again) {
			t.Fatalf("parsing twice differs: %v", err)
		}
		if !g.HasProfile(g.DefaultProfile()) {
			t.Fatalf("default profile %q is not a profile", g.DefaultProfile())
		}
		if g.Rules() == nil || g.Rules().Hash() == "" {
			t.Fatal("no rule set hash")
		}
		servers := make(map[string]bool)
		for _, s := range g.Servers() {
			if !ValidServerName(s.Name) || (s.Command == "") == (s.URL == "") {
				t.Fatalf("server %s: want exactly one of command and url", s.Name)
			}
			// A remote server: https, or http to loopback, verified TLS,
			// headers that are tokens the transport does not own, each
			// from one source; and nothing of a process.
			if s.URL != "" {
				u, err := url.Parse(s.URL)
				if err != nil || u.User != nil || u.Fragment != "" || u.Host == "" {
					t.Fatalf("server %s: url %q", s.Name, s.URL)
				}
				host := strings.ToLower(u.Hostname())
				if strings.Contains(host, ":") {
					host = "[" + host + "]"
				}
				if u.Scheme == "http" && !loopbackHost(host) {
					t.Fatalf("server %s: http to a host that is not loopback: %q", s.Name, s.URL)
				}
				if u.Scheme != "http" && u.Scheme != "https" || s.Transport != TransportStreamable && s.Transport != TransportSSE {
					t.Fatalf("server %s: scheme %q, transport %q", s.Name, u.Scheme, s.Transport)
				}
				if len(s.Args)+len(s.Env)+len(s.EnvFiles)+len(s.EnvPassthrough) > 0 || s.Confine != nil {
					t.Fatalf("server %s: a url server with process keys", s.Name)
				}
				seen := map[string]bool{}
				for _, h := range s.Headers {
					low := strings.ToLower(h.Name)
					sources := boolInt(h.Value != "") + boolInt(h.File != "") + boolInt(h.Env != "")
					if !httpToken(h.Name) || ownedHeader(low) || seen[low] || sources != 1 {
						t.Fatalf("server %s: header %q", s.Name, h.Name)
					}
					seen[low] = true
				}
			} else if s.Transport != TransportStdio || len(s.Headers) > 0 || s.CAFile != "" {
				t.Fatalf("server %s: a command server with transport %q or connection keys", s.Name, s.Transport)
			}
			servers[s.Name] = true
			// Every environment name is a name, set from one place; every
			// env file an absolute, clean path.
			names := map[string]bool{}
			once := func(name string) {
				if !envName(name) || names[name] {
					t.Fatalf("server %s: environment name %q invalid or set twice", s.Name, name)
				}
				names[name] = true
			}
			for _, e := range s.Env {
				name, _, ok := strings.Cut(e, "=")
				if !ok || strings.IndexByte(e, 0) >= 0 {
					t.Fatalf("server %s: env entry without '=' or with a NUL", s.Name)
				}
				once(name)
			}
			for _, e := range s.EnvFiles {
				once(e.Name)
				if !strings.HasPrefix(e.Path, "/") || path.Clean(e.Path) != e.Path {
					t.Fatalf("server %s: env file %q", s.Name, e.Path)
				}
			}
			for _, name := range s.EnvPassthrough {
				once(name)
			}
			// Every alias is a name hosts accept, one per tool.
			taken := map[string]bool{}
			for tool, a := range s.Alias {
				if tool == "" || !HostSafeName(a) || taken[a] {
					t.Fatalf("server %s: alias %q of %q", s.Name, a, tool)
				}
				taken[a] = true
			}
		}
		for _, p := range g.Profiles() {
			for _, to := range g.Transitions(p) {
				if !g.HasProfile(to) || to == p {
					t.Fatalf("%s -> %q", p, to)
				}
			}
			for _, a := range g.Allow(p) {
				server, tool, _ := strings.Cut(a, ".")
				if !servers[server] {
					t.Fatalf("%s allows %q of an undeclared server", p, a)
				}
				for _, name := range []string{strings.ReplaceAll(tool, "*", "x"), strings.ReplaceAll(tool, "*", ""), strings.ReplaceAll(tool, "*", "a__b")} {
					ok, pat := g.ToolAllowed(p, server, name)
					if ok != (pat != "") || ok && !contains(g.Allow(p), pat) {
						t.Fatalf("ToolAllowed(%s, %s, %s) = %v, %q", p, server, name, ok, pat)
					}
					if ok && strings.Contains(name, "__") && !strings.Contains(pat, "__") {
						t.Fatalf("ToolAllowed(%s, %s, %s) spans a \"__\" with %q", p, server, name, pat)
					}
					if req := g.RequiredProfile(p, server, name); req != "" {
						if req == p {
							t.Fatalf("RequiredProfile names the active profile %q", p)
						}
						if ok, _ := g.ToolAllowed(req, server, name); !ok {
							t.Fatalf("RequiredProfile %q does not allow %s.%s", req, server, name)
						}
					}
				}
			}
			for _, a := range g.Prompts(p) {
				server, prompt, _ := strings.Cut(a, ".")
				if !servers[server] {
					t.Fatalf("%s allows prompt %q of an undeclared server", p, a)
				}
				for _, name := range []string{strings.ReplaceAll(prompt, "*", "x"), strings.ReplaceAll(prompt, "*", "a__b")} {
					ok, pat := g.PromptAllowed(p, server, name)
					if ok != (pat != "") || ok && !contains(g.Prompts(p), pat) {
						t.Fatalf("PromptAllowed(%s, %s, %s) = %v, %q", p, server, name, ok, pat)
					}
					if ok && strings.Contains(name, "__") && !strings.Contains(pat, "__") {
						t.Fatalf("PromptAllowed(%s, %s, %s) spans a \"__\" with %q", p, server, name, pat)
					}
					if req := g.RequiredPromptProfile(p, server, name); req != "" {
						if ok, _ := g.PromptAllowed(req, server, name); !ok || req == p {
							t.Fatalf("RequiredPromptProfile(%s) = %q, which does not allow %s.%s", p, req, server, name)
						}
					}
				}
			}
			for _, r := range g.Resources(p) {
				base := strings.TrimSuffix(strings.TrimSuffix(r, "*"), "*")
				for _, uri := range []string{base + "x", base + "../x", base + "x/../../y", base + "%2e%2e/x", base + "x/..", base} {
					if ok, _ := g.ResourceAllowed(p, uri); ok && hasDotDot(uri) {
						t.Fatalf("ResourceAllowed(%s, %q) allowed traversal through %q", p, uri, r)
					}
				}
			}
		}
	})
}

// hasDotDot reports whether the path of uri, decoded once or twice as
// net/url reads it, has a "." or ".." segment; an unparseable URI counts.
func hasDotDot(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return true
	}
	p := u.Path
	if u.Opaque != "" {
		p = u.Opaque
	}
	for range 2 {
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "." || seg == ".." {
				return true
			}
		}
		if p, err = url.PathUnescape(p); err != nil {
			return false
		}
	}
	return false
}

// FuzzResourceAllowed checks the resource matcher against net/url as an
// independent reader of the same URI, over a fixed set of patterns:
//
//   - it never panics;
//   - an allowed URI parses with net/url, has no userinfo and no
//     backslash, has no "." or ".." segment however decoded, and has the
//     scheme and host (case-insensitively) of the pattern that allowed it;
//   - a URI that CanonicalURI refuses is allowed by no profile; an
//     accepted one has a canonical form that is a fixed point and that
//     every profile answers alike.
func FuzzResourceAllowed(f *testing.F) {
	for _, s := range []string{
		"file:///var/log/app/today.log",
		"file:///var/log/app/nested/deep.log",
		"file:///var/log/other/secret",
		"file:///var/log/app/../../etc/passwd",
		"file:///var/log/app/%2e%2e/%2e%2e/etc/passwd",
		"file:///var/log/app/.%2e/x",
		"file:///var/log/app/%252e%252e/x",       // double encoding
		"file:///var/log/app/..%2f..%2fetc",      // encoded slash
		"file:///var/log/app/..%5c..%5cetc",      // encoded backslash
		"file:///var/log/app/..;/etc",            // path parameter
		"file:///var/log/app/%c0%ae%c0%ae/etc",   // overlong UTF-8
		"file:///var/log/app/%EF%BC%8E%EF%BC%8E", // fullwidth dots
		"file:///etc/conf/app.ini",
		"file:///etc/conf/nested/app.ini",
		"file:///etc/conf/",
		"https://api.example/health",
		"https://api.example/health/sub",
		"github://my-repo/pulls/5",
		"github://attacker-repo/pulls/5",
		"github://my-repo@attacker-repo/pulls/5", // userinfo
		"github://MY-REPO/pulls/5",
		"github://my-repo./pulls/5", // trailing dot
		"file:///repo/a.txt",
		"file://evil-host/repo/a.txt",
		"file:/repo/a.txt",
		"https://API.example.com:8443/v1/x",
		"http://[::1]/x/y",
		"http://[::1%25lo]/x/y",
		"db://main/users?limit=10",
		"urn:isbn:0451450523",
		"file:///repo//etc/passwd",
		"",
		"file:",
		"\x00",
	} {
		f.Add(s)
	}
	g := resourceGateway(f)
	patternOf := map[string]string{} // pattern text -> itself, for lookups
	for _, p := range g.Profiles() {
		for _, r := range g.Resources(p) {
			patternOf[r] = r
		}
	}
	f.Fuzz(func(t *testing.T, raw string) {
		canon, cerr := CanonicalURI(raw)
		for _, p := range g.Profiles() {
			ok, pat := g.ResourceAllowed(p, raw)
			if ok != (pat != "") {
				t.Fatalf("ResourceAllowed(%s, %q) = %v, %q", p, raw, ok, pat)
			}
			if cerr != nil {
				if ok {
					t.Fatalf("ResourceAllowed(%s, %q) allowed a URI CanonicalURI refuses: %v", p, raw, cerr)
				}
				continue
			}
			if ok2, _ := g.ResourceAllowed(p, canon); ok2 != ok {
				t.Fatalf("profile %s: %q -> %v but its canonical %q -> %v", p, raw, ok, canon, ok2)
			}
			if !ok {
				continue
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("allowed %q, which net/url refuses: %v", raw, err)
			}
			if u.User != nil || strings.ContainsRune(raw, '\\') {
				t.Fatalf("allowed %q with userinfo or a backslash", raw)
			}
			if hasDotDot(raw) {
				t.Fatalf("allowed %q, whose decoded path has a dot segment", raw)
			}
			pu, err := url.Parse(strings.TrimSuffix(strings.TrimSuffix(patternOf[pat], "*"), "*"))
			if err != nil {
				t.Fatalf("pattern %q: %v", pat, err)
			}
			if !strings.EqualFold(u.Scheme, pu.Scheme) || !strings.EqualFold(u.Host, pu.Host) {
				t.Fatalf("allowed %q (scheme %q host %q) through %q (scheme %q host %q)", raw, u.Scheme, u.Host, pat, pu.Scheme, pu.Host)
			}
		}
		if cerr == nil {
			if again, err := CanonicalURI(canon); err != nil || again != canon {
				t.Fatalf("CanonicalURI(%q) = %q, but CanonicalURI(%q) = %q, %v", raw, canon, canon, again, err)
			}
		}
	})
}

// FuzzSplitName: SplitName accepts exactly the wire names Namespace builds
// from valid names, and the two are inverse.
func FuzzSplitName(f *testing.F) {
	for _, s := range []string{"fs__read_file", "a__b__c", "a___b", "__x", "x__", "aegis__set_profile", "FS__x", "fs__a.b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, wire string) {
		server, tool, ok := SplitName(wire)
		if !ok {
			return
		}
		if !ValidServerName(server) || !ValidToolName(tool) || Namespace(server, tool) != wire {
			t.Fatalf("SplitName(%q) = %q, %q", wire, server, tool)
		}
		if err := CheckCollisions(map[string][]string{server: {tool}}); err != nil {
			t.Fatalf("CheckCollisions refuses what SplitName accepts: %v", err)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
