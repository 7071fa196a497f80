package mcptest

import "net/http"

// BearerClient is an HTTP client that sends token as a bearer token with
// every request, as a host configured for aegis gateway --listen does.
func BearerClient(token string) *http.Client {
	return &http.Client{Transport: bearer(token)}
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
