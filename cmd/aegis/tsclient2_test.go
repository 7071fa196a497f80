package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// A host built on the TypeScript SDK's 2.x client
// (@modelcontextprotocol/client 2.4.0, the first TypeScript client that
// speaks MCP 2026-07-28) reaches server-everything through aegis gateway
// over stdio at 2026-07-28 (versionNegotiation pinned: server/discover,
// no initialize) exactly as the same client does at the session protocol
// (its default): the same tools listed, the same answer to a call, and
// the call recorded with the version it was made at.
func TestGatewayServesATypeScriptHostAtBothProtocols(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway with server-everything and a TypeScript host")
	}
	t.Parallel() // it mostly waits on node and the processes it starts
	node, dir := mcptest.TypeScriptClient(t)
	every := mcptest.EverythingServer(t)
	args, _ := json.Marshal(every[1:])
	script, err := filepath.Abs(filepath.Join("testdata", "tsclient2.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		Version string
		Tools   []string
		IsError bool
		Text    string
	}
	run := func(version string) (seen, string) {
		l := newLive(t, "")
		config := filepath.Join(l.dir, "aegis.yaml")
		yaml := fmt.Sprintf("version: 1\nservers:\n  everything:\n    command: %q\n    args: %s\nprofiles:\n  all:\n    allow: [\"everything.*\"]\nactivation:\n  default_profile: all\n", every[0], args)
		if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		argv, _ := json.Marshal([]string{filepath.Join(l.bin, "aegis"), "gateway", "--config", config, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state})
		cmd := exec.Command(node, script)
		cmd.Env = append(l.env, "MCP_CLIENT_DIR="+dir, "ARGV="+string(argv), "VERSION="+version,
			"TOOL=everything__echo", `ARGS={"message":"through aegis"}`)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the TypeScript host (%q): %v\n%s", version, err, stderr.String())
		}
		var s seen
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("the TypeScript host (%q) printed %q: %v", version, out, err)
		}
		return s, string(readFile(t, l.audit))
	}
	session, sessionRecord := run("")
	stateless, statelessRecord := run("2026-07-28")
	t.Logf("session protocol: %+v; 2026-07-28: %+v", session, stateless)
	if session.Version != "2025-11-25" || stateless.Version != "2026-07-28" {
		t.Fatalf("served at %q and %q; want 2025-11-25 (the client's default) and 2026-07-28 (pinned)", session.Version, stateless.Version)
	}
	if !slices.Equal(session.Tools, stateless.Tools) || !slices.Contains(stateless.Tools, "everything__echo") {
		t.Errorf("the tools differ:\n2025-11-25: %v\n2026-07-28: %v", session.Tools, stateless.Tools)
	}
	if session.IsError || stateless.IsError || session.Text != stateless.Text || !strings.Contains(stateless.Text, "through aegis") {
		t.Errorf("the call's answers differ: %+v, %+v", session, stateless)
	}
	if !strings.Contains(statelessRecord, `"protocol_version":"2026-07-28"`) {
		t.Errorf("the 2026-07-28 host's call is not recorded with its version:\n%s", statelessRecord)
	}
	if strings.Contains(sessionRecord, `"protocol_version":"2026-07-28"`) {
		t.Errorf("the session host's call is recorded as 2026-07-28:\n%s", sessionRecord)
	}
}
