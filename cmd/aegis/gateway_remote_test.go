package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A remote server's header secret or CA bundle that cannot be used safely
// refuses the start before anything runs (no state directory is made):
// the error names the server, the header and the path or variable, says
// it once with one hint, and never holds the value.
func TestGatewayRemoteSecretsRefuseTheStart(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "tok-3e8b51"
	key := write("signing.key", strings.Repeat("cd", 32)+"\n", 0o600)
	loose := write("loose.token", "Bearer "+secret+"\n", 0o644)
	split := write("split.token", "Bearer "+secret+"\nX-Evil: 1\n", 0o600)
	notCA := write("ca.pem", "not a certificate\n", 0o644)
	for _, tc := range []struct {
		name    string
		headers string
		extra   string
		env     map[string]string
		cause   string
	}{
		{"TokenFileOthersCanRead", "Authorization: {file: " + loose + "}", "", nil,
			"server r: header Authorization: unusable header file: " + loose + " is accessible by group or others (mode 0644); run: chmod 600 " + loose},
		{"TokenFileSmugglesAHeader", "Authorization: {file: " + split + "}", "", nil,
			"server r: header Authorization: unusable header file: " + split + ": the header value holds a control character"},
		{"TokenVariableUnset", "X-Api-Key: {env: DOCS_KEY}", "", nil,
			"server r: header X-Api-Key: DOCS_KEY is not set in aegis's environment, or is empty"},
		{"CABundleWithoutCertificates", "X-Tenant: acme", "    ca_file: " + notCA + "\n", map[string]string{"DOCS_KEY": secret},
			"server r: ca_file: unusable ca_file: " + notCA + " holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			config := write("aegis.yaml", "servers:\n  r:\n    url: https://mcp.example.com/mcp\n    headers: {"+tc.headers+"}\n"+tc.extra+
				"profiles: {p: {allow: [r.x]}}\nactivation: {default_profile: p}\n", 0o600)
			env := map[string]string{"HOME": dir}
			for k, v := range tc.env {
				env[k] = v
			}
			code, _, stderr := run(t, env, "gateway", "--config", config, "--audit", filepath.Join(dir, "a.aarl"), "--signing-key", key, "--state-dir", state)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if n := strings.Count(stderr, tc.cause); n != 1 {
				t.Errorf("stderr says %q %d times:\n%s", tc.cause, n, stderr)
			}
			if n := strings.Count(stderr, "aegis: hint: "); n != 1 {
				t.Errorf("%d hints:\n%s", n, stderr)
			}
			if strings.Contains(stderr, secret) {
				t.Errorf("stderr holds the secret:\n%s", stderr)
			}
			if _, err := os.Stat(state); err == nil {
				t.Error("a refused start made a state directory")
			}
		})
	}
}
