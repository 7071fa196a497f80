package gateway

import (
	"net/http"
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
		if got := EndpointProblem(raw) == ""; got != ok {
			t.Errorf("EndpointProblem(%s) accepted = %v, want %v", raw, got, ok)
		}
	}
	tr := &loginTripper{}
	req, _ := http.NewRequest(http.MethodPost, "http://auth.example.com/token", strings.NewReader("grant_type=authorization_code&code=c0de"))
	if _, err := tr.RoundTrip(req); err == nil || strings.Contains(err.Error(), "c0de") {
		t.Errorf("a code exchange in clear: %v; want it refused, without the code", err)
	}
}
