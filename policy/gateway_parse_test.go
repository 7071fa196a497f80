package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// mustGateway parses a gateway file or fails the test.
func mustGateway(t testing.TB, src string) *Gateway {
	t.Helper()
	g, err := ParseGateway("aegis.yaml", []byte(src))
	if err != nil {
		t.Fatalf("ParseGateway: %v", err)
	}
	return g
}

// gw builds a gateway file from a servers block of one server "fs", the
// given profile lines (indented under profiles:) and extra top-level lines.
// The profiles start at line 4.
func gw(profiles []string, extra ...string) string {
	lines := []string{"servers:", "  fs: {command: mcp-fs}", "profiles:"}
	for _, p := range profiles {
		lines = append(lines, "  "+p)
	}
	lines = append(lines, extra...)
	return y(lines...)
}

const defaultP = "activation: {default_profile: p}"

func TestParseGatewayRefuses(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		// The document.
		{"EmptyFile", "", "aegis.yaml: empty gateway file"},
		{"OnlyComments", y("# nothing"), "aegis.yaml: empty gateway file"},
		{"NullDocument", y("---", "~"), "aegis.yaml: empty gateway file"},
		{"TwoDocuments", y("servers: {}", "---", "profiles: {}"), "aegis.yaml:2: a second YAML document; a gateway file holds exactly one"},
		{"InvalidYAML", y("servers: [", "  {fs: a"), "aegis.yaml:2: invalid YAML: did not find expected ',' or '}'"},
		// The YAML parser names where the block began; the error names the
		// misindented line.
		{"MisindentedKey", y("version: 1", "servers:", "  a:", "    command: x", "   args: [1]", "profiles: {}"), "aegis.yaml:5: invalid YAML: did not find expected key"},
		{"TopLevelSequence", y("- fs"), "aegis.yaml:1: expected a mapping, got a sequence"},
		{"UnknownTopKey", y("server: {}"), "aegis.yaml:1: server: unknown key; want one of version, servers, profiles, activation, error_disclosure, rules, on_tool_change, meta_tool_names, witnesses"},
		{"WrapDefaultKey", y("default: deny"), "aegis.yaml:1: default: unknown key; want one of version, servers, profiles, activation, error_disclosure, rules, on_tool_change, meta_tool_names, witnesses"},
		{"DuplicateTopKey", y("servers: {fs: {command: a}}", "servers: {fs: {command: b}}"), "aegis.yaml:2: servers: duplicate key (first at line 1)"},
		{"AnchorAlias", y("servers:", "  fs: &s {command: a}", "  gh: *s"), "aegis.yaml:2: YAML anchors and aliases are not supported in a policy file"},
		{"MergeKey", y("servers:", "  fs:", "    <<: {command: a}"), "aegis.yaml:3: servers.fs: keys must be strings, got a merge key (<<)"},
		{"Version2", gw([]string{"p: {}"}, defaultP, "version: 2"), "aegis.yaml:6: version: unsupported version 2; this aegis reads version 1"},
		{"MissingServers", y("profiles: {p: {}}", defaultP), `aegis.yaml:1: missing required key "servers"`},
		{"MissingProfiles", y("servers: {fs: {command: a}}", defaultP), `aegis.yaml:1: missing required key "profiles"`},
		{"MissingActivation", gw([]string{"p: {}"}), `aegis.yaml:1: missing required key "activation"`},

		// Servers.
		{"ServersEmpty", y("servers: {}"), "aegis.yaml:1: servers: must name at least one server"},
		{"ServersSequence", y("servers: [fs]"), "aegis.yaml:1: servers: expected a mapping of servers, got a sequence"},
		{"ServerNull", y("servers:", "  fs:"), "aegis.yaml:2: servers.fs: expected a mapping, got null"},
		{"ServerNameUppercase", y("servers:", "  FS: {command: a}"), "aegis.yaml:2: servers.FS: invalid server name: may hold only a-z, 0-9, _ and - (it prefixes every wire name)"},
		{"ServerNameDot", y("servers:", "  a.b: {command: a}"), `aegis.yaml:2: servers["a.b"]: invalid server name: may hold only a-z, 0-9, _ and - (it prefixes every wire name)`},
		{"ServerNameSeparator", y("servers:", "  a__b: {command: a}"), `aegis.yaml:2: servers.a__b: invalid server name: must not contain "__", the wire-name separator`},
		{"ServerNameTrailingUnderscore", y("servers:", "  a_: {command: a}"), `aegis.yaml:2: servers.a_: invalid server name: must not end in "_" (server "a_" and tool "b" would share the wire name of server "a" and tool "_b")`},
		{"ServerNameLeadingDash", y("servers:", "  -x: {command: a}"), "aegis.yaml:2: servers.-x: invalid server name: must start with a letter or digit"},
		{"ServerNameReserved", y("servers:", "  aegis: {command: a}"), `aegis.yaml:2: servers.aegis: invalid server name: "aegis" is reserved for aegis's own tools`},
		{"ServerNameEmpty", y("servers:", `  "": {command: a}`), `aegis.yaml:2: servers[""]: invalid server name: must not be empty`},
		{"ServerNameTooLong", y("servers:", "  "+strings.Repeat("a", 65)+": {command: a}"), "aegis.yaml:2: servers." + strings.Repeat("a", 65) + ": invalid server name: longer than 64 bytes"},
		{"ServerDuplicate", y("servers:", "  fs: {command: a}", "  fs: {command: b}"), "aegis.yaml:3: servers.fs: duplicate key (first at line 2)"},
		{"ServerUnknownKey", y("servers:", "  fs:", "    cmd: a"), "aegis.yaml:3: servers.fs.cmd: unknown key; want one of command, args, env, env_passthrough, transport, confine, prefix, alias, url, headers, ca_file, oauth"},
		{"MissingCommand", y("servers:", "  fs:", "    args: [a]"), `aegis.yaml:3: servers.fs: missing required key "command" (a local server) or "url" (a remote server)`},
		{"EmptyCommand", y("servers:", `  fs: {command: ""}`), "aegis.yaml:2: servers.fs.command: must not be empty"},
		{"CommandNUL", y("servers:", `  fs: {command: "a\0b"}`), "aegis.yaml:2: servers.fs.command: contains a NUL byte"},
		{"CommandList", y("servers:", "  fs: {command: [npx, x]}"), "aegis.yaml:2: servers.fs.command: expected a string, got a sequence"},
		{"ArgsNotList", y("servers:", "  fs:", "    command: a", "    args: -y x"), "aegis.yaml:4: servers.fs.args: expected a sequence of strings, got a string"},
		{"ArgsInteger", y("servers:", "  fs:", "    command: a", "    args:", "      - --port", "      - 8080"), "aegis.yaml:6: servers.fs.args[1]: expected a string, got an integer"},
		{"ArgsNUL", y("servers:", `  fs: {command: a, args: ["x\0"]}`), "aegis.yaml:2: servers.fs.args[0]: contains a NUL byte"},
		{"EnvName", y("servers:", "  fs:", "    command: a", "    env:", "      1X: a"), "aegis.yaml:5: servers.fs.env.1X: invalid environment variable name; want [A-Za-z_][A-Za-z0-9_]*"},
		{"EnvNameEquals", y("servers:", "  fs:", "    command: a", "    env:", `      "A=B": a`), `aegis.yaml:5: servers.fs.env["A=B"]: invalid environment variable name; want [A-Za-z_][A-Za-z0-9_]*`},
		{"EnvValueInteger", y("servers:", "  fs:", "    command: a", "    env: {PORT: 8080}"), "aegis.yaml:4: servers.fs.env.PORT: expected a string, got an integer"},
		{"EnvDuplicate", y("servers:", "  fs:", "    command: a", "    env:", "      A: x", "      A: y"), "aegis.yaml:6: servers.fs.env.A: duplicate key (first at line 5)"},
		{"EnvList", y("servers:", "  fs:", "    command: a", "    env: [A=x]"), "aegis.yaml:4: servers.fs.env: expected a mapping of environment variables, got a sequence"},
		{"EnvFileRelative", y("servers:", "  fs:", "    command: a", "    env:", "      TOKEN: {file: token}"), `aegis.yaml:5: servers.fs.env.TOKEN.file: "token" is not an absolute path`},
		{"EnvFileTraversal", y("servers:", "  fs:", "    command: a", "    env:", "      TOKEN: {file: /etc/aegis/../shadow}"), `aegis.yaml:5: servers.fs.env.TOKEN.file: "/etc/aegis/../shadow" is not a clean path; write "/etc/shadow"`},
		{"EnvFileMissingKey", y("servers:", "  fs:", "    command: a", "    env:", "      TOKEN: {}"), `aegis.yaml:5: servers.fs.env.TOKEN: missing required key "file"`},
		{"EnvFileUnknownKey", y("servers:", "  fs:", "    command: a", "    env:", "      TOKEN: {path: /t}"), "aegis.yaml:5: servers.fs.env.TOKEN.path: unknown key; want one of file"},
		{"EnvFileNotString", y("servers:", "  fs:", "    command: a", "    env:", "      TOKEN: {file: [/t]}"), "aegis.yaml:5: servers.fs.env.TOKEN.file: expected a string, got a sequence"},
		{"EnvValueSecretNotEchoed", y("servers:", "  fs:", "    command: a", "    env:", `      TOKEN: "s3cr3t\0"`), "aegis.yaml:5: servers.fs.env.TOKEN: contains a NUL byte"},
		{"PassthroughNotList", y("servers:", "  fs:", "    command: a", "    env_passthrough: HOME"), "aegis.yaml:4: servers.fs.env_passthrough: expected a sequence of strings, got a string"},
		{"PassthroughBadName", y("servers:", "  fs:", "    command: a", "    env_passthrough: [\"A=B\"]"), `aegis.yaml:4: servers.fs.env_passthrough[0]: "A=B" is not an environment variable name; want [A-Za-z_][A-Za-z0-9_]*`},
		{"PassthroughDuplicate", y("servers:", "  fs:", "    command: a", "    env_passthrough: [HTTPS_PROXY, HTTPS_PROXY]"), `aegis.yaml:4: servers.fs.env_passthrough[1]: duplicate entry "HTTPS_PROXY" (first at line 4)`},
		{"PassthroughShadowsEnv", y("servers:", "  fs:", "    command: a", "    env: {TOKEN: {file: /t}}", "    env_passthrough:", "      - TOKEN"), "aegis.yaml:6: servers.fs.env_passthrough[0]: TOKEN is also set in env (line 4); a variable comes from one place"},
		{"PrefixNotABoolean", y("servers:", "  fs: {command: a, prefix: \"no\"}"), `aegis.yaml:2: servers.fs.prefix: expected true or false, got a string`},
		{"TransportSSE", y("servers:", "  fs: {command: a, transport: sse}"), `aegis.yaml:2: servers.fs.transport: sse is for a url server; a command server speaks stdio`},

		// Confinement.
		{"ConfineNull", y("servers:", "  fs:", "    command: a", "    confine:"), "aegis.yaml:4: servers.fs.confine: expected a mapping, got null"},
		{"ConfineTrue", y("servers:", "  fs: {command: a, confine: true}"), "aegis.yaml:2: servers.fs.confine: expected a mapping, got a boolean"},
		{"ConfineUnknownKey", y("servers:", "  fs:", "    command: a", "    confine: {allow_exec: true}"), "aegis.yaml:4: servers.fs.confine.allow_exec: unknown key; want one of allow_read, allow_write, allow_net, allow_exec_support, allow_udp, allow_mptcp, best_effort"},
		{"ConfineRelativePath", y("servers:", "  fs:", "    command: a", "    confine:", "      allow_read: [repo]"), `aegis.yaml:5: servers.fs.confine.allow_read[0]: "repo" is not an absolute path`},
		{"ConfineUncleanPath", y("servers:", "  fs:", "    command: a", "    confine:", "      allow_write: [/srv/../etc]"), `aegis.yaml:5: servers.fs.confine.allow_write[0]: "/srv/../etc" is not a clean path; write "/etc"`},
		{"ConfineTrailingSlash", y("servers:", "  fs:", "    command: a", "    confine:", "      allow_write: [/srv/]"), `aegis.yaml:5: servers.fs.confine.allow_write[0]: "/srv/" is not a clean path; write "/srv"`},
		{"ConfineDuplicatePath", y("servers:", "  fs:", "    command: a", "    confine:", "      allow_read:", "        - /srv", "        - /srv"), `aegis.yaml:7: servers.fs.confine.allow_read[1]: duplicate entry "/srv" (first at line 6)`},
		{"ConfineNetNoPort", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [localhost]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "localhost": want HOST:PORT, such as 127.0.0.1:8080`},
		{"ConfineNetPortZero", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"127.0.0.1:0\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "127.0.0.1:0": the port must be 1 to 65535`},
		{"ConfineNetPortTooLarge", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"127.0.0.1:65536\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "127.0.0.1:65536": the port must be 1 to 65535`},
		{"ConfineNetIPv6Bare", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"::1:80\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "::1:80": write an IPv6 host in brackets: [::1]:8080`},
		{"ConfineNetEmptyHost", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\":80\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant ":80": empty host`},
		{"ConfineNetBracketNoPort", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"[::1]\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "[::1]": want [IPv6]:PORT`},
		{"ConfineNetBracketIPv4", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"[127.0.0.1]:80\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "[127.0.0.1]:80": brackets are for an IPv6 host`},
		{"ConfineNetBracketName", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"[::g]:80\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "[::g]:80": not an IPv6 address`},
		{"ConfineNetBadHost", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"a_b:80\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "a_b:80": not a host name or IP address`},
		{"ConfineNetPortSign", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"h:+80\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "h:+80": the port must be 1 to 65535`},
		{"ConfineNetPortLeadingZero", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [\"h:080\"]}"), `aegis.yaml:4: servers.fs.confine.allow_net[0]: bad grant "h:080": the port must be 1 to 65535`},
		{"ConfineNetInteger", y("servers:", "  fs:", "    command: a", "    confine: {allow_net: [8080]}"), "aegis.yaml:4: servers.fs.confine.allow_net[0]: expected a string, got an integer"},
		{"ConfineBoolString", y("servers:", "  fs:", "    command: a", "    confine: {best_effort: \"yes\"}"), "aegis.yaml:4: servers.fs.confine.best_effort: expected true or false, got a string"},

		// Profiles.
		{"ProfilesEmpty", y("servers: {fs: {command: a}}", "profiles: {}"), "aegis.yaml:2: profiles: must name at least one profile"},
		{"ProfilesSequence", y("servers: {fs: {command: a}}", "profiles: [p]"), "aegis.yaml:2: profiles: expected a mapping of profiles, got a sequence"},
		{"ProfileNameUppercase", gw([]string{"Dev: {}"}, defaultP), "aegis.yaml:4: profiles.Dev: invalid profile name: may hold only a-z, 0-9, _ and -"},
		{"ProfileNameSpace", gw([]string{`"my profile": {}`}, defaultP), `aegis.yaml:4: profiles["my profile"]: invalid profile name: may hold only a-z, 0-9, _ and -`},
		{"ProfileNull", gw([]string{"p:"}, defaultP), "aegis.yaml:4: profiles.p: expected a mapping, got null"},
		{"ProfileNameLeadingDash", gw([]string{"-p: {}"}, defaultP), "aegis.yaml:4: profiles.-p: invalid profile name: must start with a letter or digit"},
		{"ProfileNameEmpty", gw([]string{`"": {}`}, defaultP), `aegis.yaml:4: profiles[""]: invalid profile name: must not be empty`},
		{"ProfileNameTooLong", gw([]string{strings.Repeat("p", 65) + ": {}"}, defaultP), "aegis.yaml:4: profiles." + strings.Repeat("p", 65) + ": invalid profile name: longer than 64 bytes"},
		{"ProfileTierKey", gw([]string{"p:", "    tier: 2"}, defaultP), "aegis.yaml:5: profiles.p.tier: unknown key; want one of extends, allow, prompts, resources, allowed_transitions, for_groups, for_scopes"},
		{"ProfileDuplicate", gw([]string{"p: {}", "p: {}"}, defaultP), "aegis.yaml:5: profiles.p: duplicate key (first at line 4)"},
		{"ExtendsUnknown", gw([]string{"p: {extends: base}"}, defaultP), `aegis.yaml:4: profiles.p.extends: unknown profile "base"`},
		{"ExtendsList", gw([]string{"p: {extends: [a, b]}"}, defaultP), "aegis.yaml:4: profiles.p.extends: expected a string, got a sequence"},
		{"ExtendsSelf", gw([]string{"p: {extends: p}"}, defaultP), "aegis.yaml:4: profiles.p.extends: cyclic extends: p -> p"},
		{"ExtendsCycle", gw([]string{"p: {extends: q}", "q: {extends: p}"}, defaultP), "aegis.yaml:4: profiles.p.extends: cyclic extends: p -> q -> p"},
		{"ExtendsLongCycle", gw([]string{"p: {}", "a: {extends: c}", "b: {extends: a}", "c: {extends: b}"}, defaultP), "aegis.yaml:5: profiles.a.extends: cyclic extends: a -> c -> b -> a"},
		{"ExtendsIntoCycle", gw([]string{"p: {extends: a}", "a: {extends: b}", "b: {extends: a}"}, defaultP), "aegis.yaml:5: profiles.a.extends: cyclic extends: a -> b -> a"},
		{"TransitionUnknown", gw([]string{"p:", "    allowed_transitions: [q, ghost]", "q: {}"}, defaultP), `aegis.yaml:5: profiles.p.allowed_transitions[1]: unknown profile "ghost"`},
		{"TransitionSelf", gw([]string{"p:", "    allowed_transitions: [p]"}, defaultP), "aegis.yaml:5: profiles.p.allowed_transitions[0]: a profile does not list itself as a transition"},
		{"TransitionDuplicate", gw([]string{"p:", "    allowed_transitions:", "      - q", "      - q", "q: {}"}, defaultP), `aegis.yaml:7: profiles.p.allowed_transitions[1]: duplicate entry "q" (first at line 6)`},
		{"TransitionString", gw([]string{"p: {allowed_transitions: q}", "q: {}"}, defaultP), "aegis.yaml:4: profiles.p.allowed_transitions: expected a sequence of strings, got a string"},

		// Allow entries.
		{"AllowNoDot", gw([]string{"p: {allow: [read_file]}"}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "read_file": want "<server>.<tool>", such as fs.read_file or fs.*`},
		{"AllowWireName", gw([]string{"p: {allow: [fs__read_file]}"}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs__read_file": want "<server>.<tool>", such as fs.read_file or fs.*`},
		{"AllowServerGlob", gw([]string{`p: {allow: ["*.read_file"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "*.read_file": the server part cannot be a glob: name one declared server`},
		{"AllowEverything", gw([]string{`p: {allow: ["*.*"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "*.*": the server part cannot be a glob: name one declared server`},
		{"AllowUnknownServer", gw([]string{"p:", "    allow:", "      - fs.read_file", "      - github.search"}, defaultP), `aegis.yaml:7: profiles.p.allow[1]: unknown server "github" in allow entry "github.search"`},
		{"AllowDotInTool", gw([]string{"p: {allow: [fs.admin.delete]}"}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs.admin.delete": a tool name has no '.': one entry is <server>.<tool>`},
		{"AllowDoubleStar", gw([]string{`p: {allow: ["fs.**"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs.**": "**" is not a tool glob: '*' already matches any run of one tool name`},
		{"AllowQuestionMark", gw([]string{`p: {allow: ["fs.read_?"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs.read_?": a character outside [A-Za-z0-9_-] and '*' in the tool part`},
		{"AllowCharClass", gw([]string{`p: {allow: ["fs.[rw]*"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs.[rw]*": a character outside [A-Za-z0-9_-] and '*' in the tool part`},
		{"AllowEmptyTool", gw([]string{`p: {allow: ["fs."]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs.": empty tool part; write "fs.*" for all of its tools`},
		{"AllowWhereEntry", gw([]string{"p:", "    allow:", "      - {tool: fs.write_file, where: {path: /repo}}"}, defaultP), "aegis.yaml:6: profiles.p.allow[0]: expected a string, got a mapping"},
		{"AllowEmptyServer", gw([]string{`p: {allow: [".read"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry ".read": empty server part`},
		{"AllowTooLong", gw([]string{`p: {allow: ["fs.` + strings.Repeat("t", 129) + `"]}`}, defaultP), `aegis.yaml:4: profiles.p.allow[0]: bad allow entry "fs.` + strings.Repeat("t", 129) + `": tool part longer than 128 bytes`},
		{"AllowDuplicate", gw([]string{"p: {allow: [fs.a, fs.a]}"}, defaultP), `aegis.yaml:4: profiles.p.allow[1]: duplicate entry "fs.a" (first at line 4)`},

		// Resource patterns.
		{"ResourceTemplate", gw([]string{`p: {resources: ["file:///repo/{path}"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "file:///repo/{path}": a character not allowed in a URI: '{' (a URI template is not a pattern: end the path in /* or /**)`},
		{"ResourceTraversal", gw([]string{`p: {resources: ["file:///repo/../etc/**"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "file:///repo/../etc/**": a '.' or '..' segment in the path`},
		{"ResourceHostGlob", gw([]string{`p: {resources: ["github://*/pulls/**"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "github://*/pulls/**": a '*' in the host`},
		{"ResourceStarInSegment", gw([]string{`p: {resources: ["file:///var/log/*.log"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "file:///var/log/*.log": a '*' is only allowed as a final /* or /** segment`},
		{"ResourceStarMiddle", gw([]string{`p: {resources: ["file:///**/secret"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "file:///**/secret": a '*' is only allowed as a final /* or /** segment`},
		{"ResourceEncodedStar", gw([]string{`p: {resources: ["file:///repo/%2A%2A"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "file:///repo/%2A%2A": a '*' is only allowed as a final /* or /** segment`},
		{"ResourceGlobWithQuery", gw([]string{`p: {resources: ["https://api.example/v1/**?x=1"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "https://api.example/v1/**?x=1": a '*' is only allowed as a final /* or /** segment`},
		{"ResourceUserinfo", gw([]string{`p: {resources: ["https://api.example@evil/**"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "https://api.example@evil/**": userinfo in the authority (a@b names host b)`},
		{"ResourceNoScheme", gw([]string{`p: {resources: ["/repo/**"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "/repo/**": no scheme (a URI pattern such as "file:///srv/**", or "<server>.*" for every resource of one server)`},
		{"ResourceServerUndeclared", gw([]string{`p: {resources: ["git.*"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: unknown server "git" in resources entry "git.*"`},
		{"ResourceServerNotAll", gw([]string{`p: {resources: ["fs.readme"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "fs.readme": no scheme (a URI pattern such as "file:///srv/**", or "<server>.*" for every resource of one server)`},
		{"ResourceServerGlob", gw([]string{`p: {resources: ["*.*"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "*.*": no scheme (a URI pattern such as "file:///srv/**", or "<server>.*" for every resource of one server)`},
		{"ResourceTrailingDotHost", gw([]string{`p: {resources: ["https://api.example./**"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "https://api.example./**": an empty host label or a trailing dot`},
		{"ResourceRootlessGlob", gw([]string{`p: {resources: ["urn:**"]}`}, defaultP), `aegis.yaml:4: profiles.p.resources[0]: bad resource pattern "urn:**": a '*' is only allowed as a final /* or /** segment`},

		// Activation and disclosure.
		{"ActivationEmpty", gw([]string{"p: {}"}, "activation: {}"), `aegis.yaml:5: activation: missing required key "default_profile"`},
		{"DefaultProfileUnknown", gw([]string{"p: {}"}, "activation:", "  default_profile: ghost"), `aegis.yaml:6: activation.default_profile: unknown profile "ghost"`},
		{"DefaultProfileNull", gw([]string{"p: {}"}, "activation:", "  default_profile:"), "aegis.yaml:6: activation.default_profile: expected a string, got null"},
		{"ExplicitFalse", gw([]string{"p: {}"}, "activation:", "  default_profile: p", "  explicit: false"), "aegis.yaml:7: activation.explicit: profiles are only ever switched explicitly; remove the key or set it to true"},
		{"Signals", gw([]string{"p: {}"}, "activation:", "  default_profile: p", "  signals: [git_branch]"), "aegis.yaml:7: activation.signals: reserved and not supported: profiles are only ever switched explicitly"},
		{"ActivationUnknownKey", gw([]string{"p: {}"}, "activation:", "  default: p"), "aegis.yaml:6: activation.default: unknown key; want one of default_profile, explicit, signals"},
		{"DisclosureUnknown", gw([]string{"p: {}"}, defaultP, "error_disclosure: quiet"), `aegis.yaml:6: error_disclosure: unknown error_disclosure "quiet"; want verbose or minimal`},
		{"DisclosureBool", gw([]string{"p: {}"}, defaultP, "error_disclosure: false"), "aegis.yaml:6: error_disclosure: expected a string, got a boolean"},

		// Rules: the policy-file grammar, then names of this gateway.
		{"RuleUnknownAction", gw([]string{"p: {}"}, defaultP, "rules:", "  - {id: a, action: block}"), `aegis.yaml:7: rules[0].action: unknown action "block"; want allow, deny, rate_limit or pending_approval`},
		{"RuleRateOnDeny", gw([]string{"p: {}"}, defaultP, "rules:", "  - id: a", "    action: deny", "    rate: {max: 1, per_seconds: 1}"), "aegis.yaml:9: rules[0].rate: only valid on a rate_limit action"},
		{"RuleToolCapabilityForm", gw([]string{"p: {}"}, defaultP, "rules:", "  - {id: a, action: deny, tool: fs.write_file}"), `aegis.yaml:7: rules[0].tool: "fs.write_file" is not a wire name <server>__<tool> (write "fs__write_file")`},
		{"RuleToolBare", gw([]string{"p: {}"}, defaultP, "rules:", "  - {id: a, action: deny, tool: write_file}"), `aegis.yaml:7: rules[0].tool: "write_file" is not a wire name <server>__<tool>`},
		{"RuleToolUnknownServer", gw([]string{"p: {}"}, defaultP, "rules:", "  - {id: a, action: deny}", "  - {id: b, action: deny, tool: gh__deploy}"), `aegis.yaml:8: rules[1].tool: unknown server "gh" in tool "gh__deploy"`},
		{"RuleCapabilityWireForm", gw([]string{"p: {}"}, defaultP, "rules:", "  - {id: a, action: deny, capability: fs__write_file}"), `aegis.yaml:7: rules[0].capability: "fs__write_file" is not a capability <server>.<tool>`},
		{"RuleCapabilityUnknownServer", gw([]string{"p: {}"}, defaultP, "rules:", "  - {id: a, action: deny, capability: gh.deploy}"), `aegis.yaml:7: rules[0].capability: unknown server "gh" in capability "gh.deploy"`},
		{"RuleRoleUnknown", gw([]string{"p: {}"}, defaultP, "rules:", "  - id: a", "    action: deny", "    role: admin"), `aegis.yaml:9: rules[0].role: unknown profile "admin" (a rule's role is the active profile)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ParseGateway("aegis.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("ParseGateway accepted:\n%s", tc.src)
			}
			if g != nil {
				t.Errorf("ParseGateway returned a Gateway with the error %v", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			if pe.File != "aegis.yaml" {
				t.Errorf("ParseError.File = %q", pe.File)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("ParseGateway error\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestParseGatewayAccepts(t *testing.T) {
	g := mustGateway(t, y(
		"version: 1",
		"servers:",
		"  fs:",
		"    transport: stdio",
		"    command: npx",
		"    args: [-y, \"@modelcontextprotocol/server-filesystem\", /srv/repo]",
		"    env:",
		"      NODE_ENV: production",
		"      GH_TOKEN: {file: /etc/aegis/gh.token}",
		"      _TOKEN: \"s3cr3t=x\"",
		"    env_passthrough: [HTTPS_PROXY, NO_PROXY]",
		"    confine:",
		"      allow_read: [/usr/lib, /]",
		"      allow_write: [/srv/repo]",
		"      allow_net: [\"127.0.0.1:8080\", \"[::1]:443\", \"localhost:1\", \"[FE80::1]:65535\"]",
		"      allow_exec_support: true",
		"      allow_udp: false",
		"      allow_mptcp: false",
		"      best_effort: true",
		"  ex: {command: /opt/bin/example, args: [], prefix: false}",
		"profiles:",
		"  base: {allow: [fs.read_file], resources: [\"file:///srv/repo/**\"]}",
		"  dev:",
		"    extends: base",
		"    allow: [fs.read_file, \"fs.write_*\", ex.echo]",
		"    resources: [\"file:///srv/repo/**\", \"example://readme\"]",
		"    allowed_transitions: [base]",
		"  empty: {}",
		"activation:",
		"  default_profile: base",
		"  explicit: true",
		"error_disclosure: minimal",
		"rules: []",
	))
	if got := g.DefaultProfile(); got != "base" {
		t.Errorf("DefaultProfile() = %q, want base", got)
	}
	if got := g.Disclosure(); got != DisclosureMinimal {
		t.Errorf("Disclosure() = %v, want minimal", got)
	}
	if got, want := g.Profiles(), []string{"base", "dev", "empty"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Profiles() = %q, want %q", got, want)
	}
	want := []Server{
		{
			Name:           "fs",
			Command:        "npx",
			Args:           []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/repo"},
			Env:            []string{"NODE_ENV=production", "_TOKEN=s3cr3t=x"},
			EnvFiles:       []EnvFile{{Name: "GH_TOKEN", Path: "/etc/aegis/gh.token"}},
			EnvPassthrough: []string{"HTTPS_PROXY", "NO_PROXY"},
			Transport:      TransportStdio,
			Confine: &Confine{
				AllowRead:  []string{"/usr/lib", "/"},
				AllowWrite: []string{"/srv/repo"},
				AllowNet: []HostPort{
					{Host: "127.0.0.1", Port: 8080}, {Host: "::1", Port: 443},
					{Host: "localhost", Port: 1}, {Host: "FE80::1", Port: 65535},
				},
				AllowExecSupport: true,
				BestEffort:       true,
			},
		},
		{Name: "ex", Command: "/opt/bin/example", Args: []string{}, Transport: TransportStdio, Unprefixed: true},
	}
	if got := g.Servers(); !reflect.DeepEqual(got, want) {
		t.Errorf("Servers() =\n%#v\nwant\n%#v", got, want)
	}
	// Servers returns copies.
	s := g.Servers()
	s[0].Args[0] = "changed"
	s[0].Confine.AllowNet[0].Port = 1
	if again, _ := g.Server("fs"); again.Args[0] != "-y" || again.Confine.AllowNet[0].Port != 8080 {
		t.Error("changing the result of Servers changed the Gateway")
	}
	if _, ok := g.Server("ghost"); ok {
		t.Error(`Server("ghost") found a server`)
	}
	if got, want := netGrants(g.servers[0].Confine), "127.0.0.1:8080 [::1]:443 localhost:1 [FE80::1]:65535"; got != want {
		t.Errorf("AllowNet strings = %q, want %q", got, want)
	}
	// extends: the base's entries first, repeats dropped; transitions own only.
	if got, want := g.Allow("dev"), []string{"fs.read_file", "fs.write_*", "ex.echo"}; !reflect.DeepEqual(got, want) {
		t.Errorf(`Allow("dev") = %q, want %q`, got, want)
	}
	if got, want := g.Resources("dev"), []string{"file:///srv/repo/**", "example://readme"}; !reflect.DeepEqual(got, want) {
		t.Errorf(`Resources("dev") = %q, want %q`, got, want)
	}
	if got := g.Transitions("base"); len(got) != 0 {
		t.Errorf(`Transitions("base") = %q, want none`, got)
	}
	if g.Allow("ghost") != nil || g.Resources("ghost") != nil || g.Transitions("ghost") != nil {
		t.Error("an unknown profile has entries")
	}
	if n := len(g.Rules().Projection().Rules); n != 0 {
		t.Errorf("Rules() has %d rules, want 0", n)
	}
}

// netGrants renders the net grants of c with HostPort.String.
func netGrants(c *Confine) string {
	var parts []string
	for _, h := range c.AllowNet {
		parts = append(parts, h.String())
	}
	return strings.Join(parts, " ")
}

// TestParseGatewayDefaults: error_disclosure defaults to verbose, as
// upstream; a file without rules has an empty rule Set whose default is
// allow, so that the profiles alone decide.
func TestParseGatewayDefaults(t *testing.T) {
	g := mustGateway(t, gw([]string{"p: {allow: [fs.read]}"}, defaultP))
	if g.Disclosure() != DisclosureVerbose {
		t.Errorf("Disclosure() = %v, want verbose", g.Disclosure())
	}
	d := NewEngine(g.Rules()).Evaluate(g.RuleRequest("p", "fs", "read", ""), t0)
	if d.Verdict != Allow {
		t.Errorf("no rules: %v, want allow", d.Verdict)
	}
	if g.Rules().Hash() == "" {
		t.Error("Rules().Hash() is empty")
	}
	if got, want := g.Rules().Hash(), mustParse(t, "rules: []").Hash(); got != want {
		t.Errorf("empty rules hash %s, want the hash of an empty policy file %s", got, want)
	}
}

// TestParseGatewayRules: the rules apply on top of a profile, by wire name,
// capability and role.
func TestParseGatewayRules(t *testing.T) {
	g := mustGateway(t, gw([]string{
		"p: {allow: [\"fs.*\"]}",
		"q: {allow: [\"fs.*\"]}",
	}, defaultP,
		"rules:",
		"  - {id: no-rm, action: deny, tool: fs__rm, reason: no deleting}",
		"  - {id: gate, action: pending_approval, capability: fs.deploy, role: q}",
		"  - {id: any, action: allow, tool: \"*\", role: \"*\"}",
	))
	e := NewEngine(g.Rules())
	for _, tc := range []struct {
		profile, tool string
		want          Verdict
	}{
		{"p", "rm", Deny},
		{"p", "deploy", Allow},
		{"q", "deploy", PendingApproval},
		{"q", "read", Allow},
	} {
		if ok, _ := g.ToolAllowed(tc.profile, "fs", tc.tool); !ok {
			t.Fatalf("ToolAllowed(%q, fs, %q) = false", tc.profile, tc.tool)
		}
		d := e.Evaluate(g.RuleRequest(tc.profile, "fs", tc.tool, "s1"), t0)
		if d.Verdict != tc.want {
			t.Errorf("rules on %s in %s: %v (%s), want %v", tc.tool, tc.profile, d.Verdict, d.Reason, tc.want)
		}
	}
	if got := g.RuleRequest("q", "fs", "deploy", "s1"); !reflect.DeepEqual(got, Request{Tool: "fs__deploy", Capability: "fs.deploy", Role: "q", Session: "s1", Server: "fs"}) {
		t.Errorf("RuleRequest = %+v", got)
	}
}

// TestParseGatewaySeedCompat parses the aegis.yaml of upstream-spec §4.1
// (with the servers its allow entries name declared, as this parser
// requires) and the upstream sample's semantics: deploy inherits
// filesystem.read_file through two extends.
func TestParseGatewaySeedCompat(t *testing.T) {
	g := mustGateway(t, y(
		"servers:                         # map name -> Server",
		`  filesystem: { transport: stdio, command: mcp-fs, args: ["/repo"] }`,
		"  github: { transport: stdio, command: mcp-github, args: [] }",
		"  sonarqube: { transport: stdio, command: mcp-sonarqube }",
		"profiles:                        # map name -> Profile",
		"  default:",
		"    allow: [filesystem.read_file]          # \"server.tool\" or glob in tool part",
		`    resources: ["file:///repo/**"]         # URI patterns`,
		"    allowed_transitions: [code-review]",
		"  code-review:",
		"    extends: default",
		`    allow: [github.search, "sonarqube.*"]`,
		`    resources: ["github://repo/pulls/**"]`,
		"    allowed_transitions: [default, deploy]",
		"  deploy:",
		"    extends: code-review",
		"    allow: [github.deploy]",
		"    allowed_transitions: [default]",
		"activation:",
		"  default_profile: default",
		"error_disclosure: verbose        # verbose | minimal (default verbose)",
	))
	for _, tc := range []struct {
		profile, server, tool string
		want                  bool
	}{
		{"deploy", "filesystem", "read_file", true},
		{"deploy", "github", "deploy", true},
		{"code-review", "github", "deploy", false},
		{"default", "sonarqube", "scan", false},
		{"code-review", "sonarqube", "scan", true},
	} {
		if got, _ := g.ToolAllowed(tc.profile, tc.server, tc.tool); got != tc.want {
			t.Errorf("ToolAllowed(%q, %q, %q) = %v, want %v", tc.profile, tc.server, tc.tool, got, tc.want)
		}
	}
	if g.Transition("default", "deploy") {
		t.Error("default -> deploy is not an edge")
	}
}

// TestParseErrorLinesPointAtTheEntry: semantic errors found after the
// whole file is read still name the line of the offending entry, whatever
// the order of the top-level keys.
func TestParseErrorLinesPointAtTheEntry(t *testing.T) {
	_, err := ParseGateway("aegis.yaml", []byte(y(
		"profiles:",
		"  p:",
		"    allow:",
		"      - fs.read",
		"      - gh.read",
		"activation: {default_profile: p}",
		"servers: {fs: {command: a}}",
	)))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 5 || pe.Key != "profiles.p.allow[1]" {
		t.Fatalf("err = %v, want line 5 at profiles.p.allow[1]", err)
	}
}

// An alias is what hosts are shown of a tool whose own name they would
// refuse: it must itself be a name they accept, and one per tool.
func TestParseGatewayAliasesAndMetaToolNames(t *testing.T) {
	srv := func(alias ...string) string {
		return y(append(append([]string{"servers:", "  fs:", "    command: mcp-fs", "    alias:"}, alias...),
			"profiles: {p: {allow: [fs.read]}}", defaultP)...)
	}
	g := mustGateway(t, srv(`      "read.file": read`, "      a_tool_name_well_beyond_what_hosts_take_once_it_is_prefixed_by_its_server: long"))
	if got := g.Servers()[0].Alias; !reflect.DeepEqual(got, map[string]string{"read.file": "read", "a_tool_name_well_beyond_what_hosts_take_once_it_is_prefixed_by_its_server": "long"}) {
		t.Errorf("aliases %v", got)
	}
	if g.DottedMetaTools() {
		t.Error("dotted meta-tools without meta_tool_names")
	}
	if s, a := g.MetaToolNames(); s != "aegis__set_profile" || a != "aegis__approval_status" || !HostSafeName(s) || !HostSafeName(a) {
		t.Errorf("meta-tools %q %q", s, a)
	}
	dotted := mustGateway(t, gw([]string{"p: {}"}, defaultP, "meta_tool_names: dotted"))
	if s, a := dotted.MetaToolNames(); s != "aegis.set_profile" || a != "aegis.approval_status" {
		t.Errorf("dotted meta-tools %q %q", s, a)
	}
	mustGateway(t, gw([]string{"p: {}"}, defaultP, "meta_tool_names: host_safe"))
	for _, tc := range []struct{ name, src, want string }{
		{"AnAliasHostsRefuseToo", srv(`      "read.file": "read.it"`), `aegis.yaml:5: servers.fs.alias["read.file"]: alias "read.it": tool name has a character outside [A-Za-z0-9_-]; an alias is what hosts are shown, 1 to 64 bytes of [A-Za-z0-9_-]`},
		{"AnAliasTooLongForHosts", srv("      x: " + strings.Repeat("a", 65)), "aegis.yaml:5: servers.fs.alias.x: alias \"" + strings.Repeat("a", 65) + "\": longer than 64 bytes; an alias is what hosts are shown, 1 to 64 bytes of [A-Za-z0-9_-]"},
		{"AnEmptyAlias", srv(`      x: ""`), `aegis.yaml:5: servers.fs.alias.x: alias "": empty tool name; an alias is what hosts are shown, 1 to 64 bytes of [A-Za-z0-9_-]`},
		{"TwoToolsOneAlias", srv("      x: same", "      y: same"), `aegis.yaml:6: servers.fs.alias.y: alias "same" is already tool "x"'s; each tool needs a name of its own`},
		{"AnAliasThatIsNoString", srv("      x: [a]"), "aegis.yaml:5: servers.fs.alias.x: expected a string, got a sequence"},
		{"AliasNotAMapping", y("servers:", "  fs:", "    command: mcp-fs", "    alias: [x]", "profiles: {p: {}}", defaultP), "aegis.yaml:4: servers.fs.alias: expected a mapping of tool aliases, got a sequence"},
		{"UnknownMetaToolNames", gw([]string{"p: {}"}, defaultP, "meta_tool_names: underscore"), `aegis.yaml:6: meta_tool_names: unknown meta_tool_names "underscore"; want host_safe (aegis__set_profile, the default) or dotted (aegis.set_profile)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGateway("aegis.yaml", []byte(tc.src))
			if err == nil || err.Error() != tc.want {
				t.Errorf("ParseGateway error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

// HostSafeName is the rule hosts apply to tool names.
func TestHostSafeName(t *testing.T) {
	for name, want := range map[string]bool{
		"fs__read_text_file":    true,
		"aegis__set_profile":    true,
		strings.Repeat("a", 64): true,
		strings.Repeat("a", 65): false,
		"":                      false,
		"aegis.set_profile":     false,
		"fs__read file":         false,
		"fs__lire_été":          false,
	} {
		if got := HostSafeName(name); got != want {
			t.Errorf("HostSafeName(%q) = %v, want %v", name, got, want)
		}
	}
}

// A resources entry "<server>.*" grants every resource of that server,
// inherited through extends, and no other server's: a profile that does
// not have it (or one it extends) grants nothing by it.
func TestServerResourcesAllowedOnlyTheNamedServer(t *testing.T) {
	g, err := ParseGateway("aegis.yaml", []byte(y(
		"servers:",
		"  fs: {command: mcp-fs}",
		"  docs: {command: mcp-docs}",
		"profiles:",
		"  base: {resources: [\"fs.*\"]}",
		"  more: {extends: base, resources: [\"file:///srv/**\"]}",
		"  none: {allow: [fs.read]}",
		"activation: {default_profile: none}",
	)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		profile, server string
		want            bool
	}{
		{"base", "fs", true},
		{"more", "fs", true},
		{"base", "docs", false},
		{"none", "fs", false},
		{"nosuch", "fs", false},
	} {
		if got, entry := g.ServerResourcesAllowed(tc.profile, tc.server); got != tc.want || got && entry != "fs.*" {
			t.Errorf("ServerResourcesAllowed(%s, %s) = %v %q, want %v", tc.profile, tc.server, got, entry, tc.want)
		}
	}
	if ok, _ := g.ResourceAllowed("base", "file:///srv/x"); ok {
		t.Error("a server entry grants a URI by pattern")
	}
}
