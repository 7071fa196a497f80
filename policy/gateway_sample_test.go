package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// sampleFile is the sample gateway file that proxy tests and the docs use.
const sampleFile = "../proxy/testdata/aegis.yaml"

func readGateway(t *testing.T, path string) *Gateway {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ParseGateway(filepath.Base(path), b)
	if err != nil {
		t.Fatalf("ParseGateway(%s): %v", path, err)
	}
	return g
}

// TestSampleGateway keeps proxy/testdata/aegis.yaml valid and checks that
// it means what its comments say.
func TestSampleGateway(t *testing.T) {
	g := readGateway(t, sampleFile)
	if g.DefaultProfile() != "observer" || g.Disclosure() != DisclosureVerbose {
		t.Errorf("default %q, disclosure %v", g.DefaultProfile(), g.Disclosure())
	}
	var names []string
	for _, s := range g.Servers() {
		names = append(names, s.Name+"="+s.Command)
	}
	if want := []string{"example=aegis-example-server", "everything=npx", "fs=npx"}; !reflect.DeepEqual(names, want) {
		t.Errorf("servers %q, want %q", names, want)
	}
	ex, _ := g.Server("example")
	if ex.Confine == nil || !ex.Confine.AllowExecSupport || len(ex.Confine.AllowNet) != 0 || len(ex.Confine.AllowWrite) != 0 {
		t.Errorf("example confinement = %+v", ex.Confine)
	}

	// The tools the three servers really list are exposable.
	tools := map[string][]string{
		"example": {"echo", "add", "fail", "slow"},
		"everything": {"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
			"get-roots-list", "get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
			"toggle-simulated-logging", "toggle-subscriber-updates", "trigger-elicitation-request",
			"trigger-elicitation-request-async", "trigger-long-running-operation", "trigger-sampling-request",
			"trigger-sampling-request-async", "trigger-url-elicitation", "simulate-research-query"},
		"fs": {"create_directory", "directory_tree", "edit_file", "get_file_info", "list_allowed_directories",
			"list_directory", "list_directory_with_sizes", "move_file", "read_file", "read_media_file",
			"read_multiple_files", "read_text_file", "search_files", "write_file"},
	}
	if err := CheckCollisions(tools); err != nil {
		t.Errorf("CheckCollisions(sample servers) = %v", err)
	}

	visible := func(profile string) map[string]bool {
		out := make(map[string]bool)
		for server, list := range tools {
			for _, tool := range list {
				if ok, _ := g.ToolAllowed(profile, server, tool); ok {
					out[Namespace(server, tool)] = true
				}
			}
		}
		return out
	}
	obs, dev, dep := visible("observer"), visible("developer"), visible("deploy")
	for _, tc := range []struct {
		wire          string
		obs, dev, dep bool
	}{
		{"fs__read_text_file", true, true, true},
		{"fs__list_directory_with_sizes", true, true, true},
		{"fs__write_file", false, true, true},
		{"fs__move_file", false, false, true},
		{"fs__read_media_file", false, false, false}, // no profile names it: default deny
		{"example__echo", true, true, true},
		{"example__slow", false, true, true},
		{"everything__get-env", false, false, true},
		{"everything__get-sum", false, true, true},
		{"everything__trigger-sampling-request", false, false, true},
	} {
		if obs[tc.wire] != tc.obs || dev[tc.wire] != tc.dev || dep[tc.wire] != tc.dep {
			t.Errorf("%s visible in observer/developer/deploy = %v/%v/%v, want %v/%v/%v",
				tc.wire, obs[tc.wire], dev[tc.wire], dep[tc.wire], tc.obs, tc.dev, tc.dep)
		}
	}

	// Reaching deploy always takes a human; leaving it does not.
	for _, p := range g.Profiles() {
		if g.Transition(p, "deploy") {
			t.Errorf("%s -> deploy is an edge", p)
		}
	}
	if !g.Transition("observer", "developer") || !g.Transition("deploy", "observer") {
		t.Error("the declared edges are missing")
	}
	if got := g.DecideSwitch("developer", "deploy", SourceAgent); got != SwitchNeedsApproval {
		t.Errorf("developer -> deploy: %v", got)
	}

	for _, tc := range []struct {
		profile, uri string
		want         bool
	}{
		{"observer", "example://readme", true},
		{"observer", "file:///srv/repo/README.md", true},
		{"observer", "file:///srv/repo/../../etc/passwd", false},
		{"observer", "file:///srv/repo/%2e%2e/etc/passwd", false},
		{"observer", "file:///srv/repository/x", false},
		{"observer", "demo://resource/static/document/architecture.md", true},
		{"observer", "demo://resource/dynamic/text/1", false},
		{"developer", "demo://resource/dynamic/text/1", true},
		{"developer", "demo://resource/dynamic/blob/1", false},
		{"deploy", "demo://resource/dynamic/blob/1", true},
		{"deploy", "demo://attacker/resource/x", false},
	} {
		if got, _ := g.ResourceAllowed(tc.profile, tc.uri); got != tc.want {
			t.Errorf("ResourceAllowed(%q, %q) = %v, want %v", tc.profile, tc.uri, got, tc.want)
		}
	}

	// The rules narrow what deploy's everything.* allows.
	e := NewEngine(g.Rules())
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	if d := e.Evaluate(g.RuleRequest("deploy", "everything", "get-env", "s"), now); d.Verdict != PendingApproval {
		t.Errorf("get-env in deploy: %v", d.Verdict)
	}
	if d := e.Evaluate(g.RuleRequest("deploy", "everything", "trigger-sampling-request", "s"), now); d.Verdict != Deny {
		t.Errorf("sampling in deploy: %v", d.Verdict)
	}
	for i := range 31 {
		d := e.Evaluate(g.RuleRequest("developer", "fs", "write_file", "s"), now)
		if want := i < 30; (d.Verdict == Allow) != want {
			t.Fatalf("write %d: %v", i+1, d.Verdict)
		}
	}

	// A verbose denial in observer points at the profile one edge away.
	if got := g.CapDenied("observer", "fs", "write_file").RequiredProfile; got != "developer" {
		t.Errorf("required_profile for fs.write_file = %q, want developer", got)
	}
}

// TestGatewayTestdata parses every policy/testdata/gateway/*.yaml.
func TestGatewayTestdata(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "gateway", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/gateway/*.yaml: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { readGateway(t, f) })
	}

	seed := readGateway(t, filepath.Join("testdata", "gateway", "seed-compat.yaml"))
	if ok, _ := seed.ToolAllowed("deploy", "filesystem", "read_file"); !ok {
		t.Error("seed: deploy does not inherit filesystem.read_file")
	}
	// The upstream sample's weakness, kept visible: deploy is two edges
	// from default.
	if !seed.Transition("default", "code-review") || !seed.Transition("code-review", "deploy") {
		t.Error("seed: the upstream edges changed")
	}

	hard := readGateway(t, filepath.Join("testdata", "gateway", "hardened.yaml"))
	if hard.Disclosure() != DisclosureMinimal {
		t.Error("hardened: disclosure not minimal")
	}
	if e := hard.CapDenied("read", "fs", "write_file"); e.RequiredProfile != "" {
		t.Errorf("hardened: minimal disclosure names %q", e.RequiredProfile)
	}
	if len(hard.Transitions("read")) != 0 {
		t.Error("hardened: read has an edge")
	}
	api, _ := hard.Server("api")
	if got := netGrants(api.Confine); got != "10.0.0.7:8443 [fd00::7]:8443" {
		t.Errorf("hardened: api net grants %q", got)
	}

	locked := readGateway(t, filepath.Join("testdata", "gateway", "minimal.yaml"))
	if ok, _ := locked.ToolAllowed("locked", "example", "echo"); ok {
		t.Error("minimal: an empty profile allows a tool")
	}
}
