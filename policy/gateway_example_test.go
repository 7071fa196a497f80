package policy_test

import (
	"fmt"
	"time"

	"github.com/aegis-dev/aegis/policy"
)

func ExampleParseGateway() {
	_, err := policy.ParseGateway("aegis.yaml", []byte(`
servers:
  fs: {command: mcp-server-filesystem, args: [/srv/repo]}
profiles:
  observer:
    allow: [fs.read_file, github.search]
activation: {default_profile: observer}
`))
	fmt.Println(err)
	// Output:
	// aegis.yaml:6: profiles.observer.allow[1]: unknown server "github" in allow entry "github.search"
}

func ExampleGateway_ToolAllowed() {
	g, err := policy.ParseGateway("aegis.yaml", []byte(`
servers:
  fs: {command: mcp-server-filesystem, args: [/srv/repo]}
profiles:
  observer:
    allow: ["fs.read_*"]
    resources: ["file:///srv/repo/**"]
    allowed_transitions: [developer]
  developer:
    extends: observer
    allow: [fs.write_file]
activation: {default_profile: observer}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tool := range []string{"read_text_file", "read__secret", "write_file"} {
		ok, pattern := g.ToolAllowed("observer", "fs", tool)
		fmt.Printf("%-20s %-5v %q\n", policy.Namespace("fs", tool), ok, pattern)
	}
	for _, uri := range []string{"file:///srv/repo/README.md", "file:///srv/repo/%2e%2e/etc/passwd"} {
		ok, _ := g.ResourceAllowed("observer", uri)
		fmt.Println(uri, ok)
	}
	fmt.Println(g.CapDenied("observer", "fs", "write_file").JSON())
	// Output:
	// fs__read_text_file   true  "fs.read_*"
	// fs__read__secret     false ""
	// fs__write_file       false ""
	// file:///srv/repo/README.md true
	// file:///srv/repo/%2e%2e/etc/passwd false
	// {"active_profile":"observer","capability":"fs.write_file","code":"AEGIS_CAP_DENIED","hint":"capability requires a profile that allows it","required_profile":"developer"}
}

func ExampleProfileState() {
	g, _ := policy.ParseGateway("aegis.yaml", []byte(`
servers: {fs: {command: mcp-server-filesystem}}
profiles:
  observer: {allowed_transitions: [developer]}
  developer: {allowed_transitions: [observer]}
  deploy: {allow: ["fs.*"]}
activation: {default_profile: observer}
`))
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC) // time is a parameter
	s := policy.NewProfileState(g.DefaultProfile())

	fmt.Println(g.DecideSwitch(s.Active(), "deploy", policy.SourceAgent))
	_ = s.RequestSwitch("apr_1", s.Active(), "deploy", now, now.Add(10*time.Minute))
	fmt.Println(policy.PendingApprovalError("apr_1", s.Active(), "deploy").JSON())

	// The agent moves on before the human answers: the human may still
	// approve, but the switch applies only from the profile it was asked
	// from, and a refused apply does not spend the approval.
	_ = s.Switch("observer", "developer", policy.SourceAgent, now.Add(time.Minute))
	fmt.Println(s.ApproveSwitch("apr_1", now.Add(2*time.Minute)))
	fmt.Println(s.ApplySwitch("apr_1", now.Add(3*time.Minute)))
	_ = s.Switch("developer", "observer", policy.SourceAgent, now.Add(4*time.Minute))
	fmt.Println(s.ApplySwitch("apr_1", now.Add(5*time.Minute)), s.Active())
	// Output:
	// needs_approval
	// {"active_profile":"observer","approval_id":"apr_1","code":"AEGIS_PENDING_APPROVAL","hint":"human approval requested; re-issue set_profile or poll aegis.approval_status","requested_profile":"deploy"}
	// <nil>
	// apply "apr_1": approval from the wrong profile: requested from "observer", active is "developer"
	// <nil> deploy
}
