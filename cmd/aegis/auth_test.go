package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoginEndpointsInClearAreRefused: the login sends nothing (metadata
// requests, registration, the code and its verifier, the token) in clear
// over a network; loopback http is the one exception.
func TestLoginEndpointsInClearAreRefused(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://auth.example.com/token":   true,
		"http://127.0.0.1:8080/token":      true,
		"http://localhost/token":           true,
		"http://[::1]:9000/token":          true,
		"http://auth.example.com/token":    false,
		"http://10.0.0.1/token":            false,
		"http://localhost.example.com/tok": false,
		"ftp://auth.example.com/token":     false,
	} {
		if got := endpointProblem(raw) == ""; got != ok {
			t.Errorf("endpointProblem(%s) accepted = %v, want %v", raw, got, ok)
		}
	}
	tr := &loginTripper{}
	req, _ := http.NewRequest(http.MethodPost, "http://auth.example.com/token", strings.NewReader("grant_type=authorization_code&code=c0de"))
	if _, err := tr.RoundTrip(req); err == nil || strings.Contains(err.Error(), "c0de") {
		t.Errorf("a code exchange in clear: %v; want it refused, without the code", err)
	}
}

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
