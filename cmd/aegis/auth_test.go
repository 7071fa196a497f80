package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthLoginNeedsAnOAuthServer: login refuses a server without
// oauth:, saying what to add, before anything is sent.
func TestAuthLoginNeedsAnOAuthServer(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "aegis.yaml")
	if err := os.WriteFile(cfg, []byte("version: 1\nservers:\n  r: {url: \"http://127.0.0.1:9/mcp\"}\nprofiles: {p: {allow: [r.x]}}\nactivation: {default_profile: p}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	if code := m.Run(context.Background(), []string{"auth", "login", "r", "--config", cfg, "--state-dir", dir}); code != 1 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if s := stderr.String(); !strings.Contains(s, "server r has no oauth:") || !strings.Contains(s, "oauth: {}") {
		t.Errorf("stderr:\n%s", s)
	}
}
