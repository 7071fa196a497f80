package proxy_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hostSafe is the rule of Claude Desktop and several other hosts for the
// names of a server's tools; a server that lists another is refused whole.
var hostSafe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolNames lists the names of the tools cs is shown.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, tl := range res.Tools {
		n = append(n, tl.Name)
	}
	return n
}

// The gateway lists only names every host accepts, in front of the npm
// reference servers and of a server whose tools have names no host would
// take: its meta-tools are aegis__set_profile and aegis__approval_status;
// a tool whose wire name would be too long or hold a dot is left out,
// said on stderr with the alias: to write, and recorded; an alias shows it
// under a name of its own and still calls the server's tool by its own
// name; a tool that turns up later with such a name is left out alike.
func TestGatewayListsOnlyNamesHostsAccept(t *testing.T) {
	parallel(t) // long, and alone with its own processes: beside the other long ones
	c := newCLI(t)
	every, fs := mcptest.EverythingServer(t), mcptest.FilesystemServer(t, c.dir)
	long := "fetch_the_page_at_the_url_and_return_its_body_as_markdown_text"   // 62 bytes: 68 prefixed
	later := "summarize_the_page_at_the_url_and_return_its_gist_as_plain_text" // 64 bytes: 70 prefixed
	h := c.runGateway(`version: 1
servers:
  everything:
    command: ` + every[0] + `
    args: ` + quoteArgs(every[1:]) + `
  fs:
    command: ` + fs[0] + `
    args: ` + quoteArgs(fs[1:]) + `
  pins:
    command: ` + bin(t, "pinserver") + `
    args: [-extra, "` + long + `,get.page,also.dotted", -late, "` + later + `", -changes, late]
    alias:
      get.page: get_page
profiles:
  all:
    allow: ["everything.*", "fs.*", "pins.*"]
activation:
  default_profile: all
`)
	names := func() []string { return toolNames(t, h.cs) }
	listed := names()
	if len(listed) < 20 {
		t.Fatalf("only %d tools listed: %v", len(listed), listed)
	}
	for _, n := range listed {
		if !hostSafe.MatchString(n) {
			t.Errorf("lists %q, which hosts refuse", n)
		}
	}
	for _, want := range []string{"aegis__set_profile", "aegis__approval_status", "everything__echo", "fs__read_text_file", "pins__echo", "pins__get_page"} {
		if !slices.Contains(listed, want) {
			t.Errorf("does not list %s: %v", want, listed)
		}
	}
	for _, refused := range []string{"pins__" + long, "pins__also.dotted", "pins__get.page", "aegis.set_profile"} {
		if slices.Contains(listed, refused) {
			t.Errorf("lists %s", refused)
		}
		if text, isErr, err := h.call(refused, nil); err == nil && !isErr {
			t.Errorf("call %s: %q, not refused", refused, text)
		}
	}
	// The alias calls the server's own tool.
	if text, isErr, err := h.call("pins__get_page", nil); err != nil || isErr || text != "ok get.page" {
		t.Errorf("pins__get_page: %q %v %v", text, isErr, err)
	}
	for _, want := range []string{
		"aegis: warning: server pins: tool " + long + " refused: its name toward the host, \"pins__" + long + "\", is not one every host accepts",
		"servers: pins: alias: {" + long + ": NEW_NAME}",
		`servers: pins: alias: {"also.dotted": NEW_NAME}`,
	} {
		if !strings.Contains(h.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, h.stderr)
		}
	}
	// A tool listed later with such a name is left out alike.
	if _, _, err := h.call("pins__echo", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the late tool's refusal", func() bool { return strings.Contains(h.stderr.String(), "tool "+later+" refused") })
	for _, n := range names() {
		if !hostSafe.MatchString(n) {
			t.Errorf("lists %q after the relisting", n)
		}
	}
	h.cs.Close()
	evs, _ := c.events()
	refusedNotes := map[string]bool{}
	for _, p := range payloads(evs, "note") {
		if p["refused"] == "tool_name" {
			refusedNotes[p["tool"].(string)] = true
		}
	}
	for _, tool := range []string{long, "also.dotted", later} {
		if !refusedNotes[tool] {
			t.Errorf("no note recorded for the refused tool %s: %v", tool, refusedNotes)
		}
	}
	if refusedNotes["get.page"] {
		t.Error("the aliased tool was recorded as refused")
	}
}

// meta_tool_names: dotted lists the meta-tools under the names of earlier
// releases, for an agent written against them; the other spelling is then
// no tool at all, and the record's capability is the same either way.
func TestGatewayDottedMetaToolNamesOnRequest(t *testing.T) {
	c := newCLI(t)
	h := c.runGateway(`version: 1
servers:
  pins:
    command: ` + bin(t, "pinserver") + `
profiles:
  a:
    allow: ["pins.*"]
    allowed_transitions: [b]
  b:
    allow: ["pins.echo"]
activation:
  default_profile: a
meta_tool_names: dotted
`)
	listed := toolNames(t, h.cs)
	for _, want := range []string{"aegis.set_profile", "aegis.approval_status", "pins__echo"} {
		if !slices.Contains(listed, want) {
			t.Errorf("does not list %s: %v", want, listed)
		}
	}
	if text, isErr, err := h.call("aegis__set_profile", map[string]any{"name": "b"}); err != nil || !isErr || !strings.Contains(text, "unknown tool") {
		t.Errorf("aegis__set_profile under dotted names: %q %v %v", text, isErr, err)
	}
	if text, _, err := h.call("aegis.set_profile", map[string]any{"name": "b"}); err != nil || text != "code=OK active=b approval=" {
		t.Errorf("aegis.set_profile: %q %v", text, err)
	}
	if !strings.Contains(h.cs.InitializeResult().Instructions, "call aegis.set_profile, then aegis.approval_status") {
		t.Errorf("instructions: %q", h.cs.InitializeResult().Instructions)
	}
	h.cs.Close()
	caps := map[string]string{}
	for _, o := range ofType((&harness{t: t, audit: c.audit}).lines(), "outcome") {
		caps[str(o, "tool_id")] = obj(o, "decision_axes")["capability"].(string)
	}
	if caps["aegis.set_profile"] != "aegis.set_profile" || caps["aegis__set_profile"] != "aegis__set_profile" {
		t.Errorf("capabilities by tool id: %v", caps)
	}
}
