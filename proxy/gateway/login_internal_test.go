package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
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

// TestStepUpCallbackRefusesWhatIsNotItsAnswer: the loopback address a
// step-up flow's browser comes back to hands the flow one answer, the
// first that carries the flow's state before it expires; every other
// request is refused and changes nothing.
func TestStepUpCallbackRefusesWhatIsNotItsAnswer(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	const state = "s7ate-of-the-request"
	good := "/callback?code=c0de&state=" + state
	for _, tc := range []struct {
		name     string
		late     bool     // the clock is past the flow's expiry
		requests []string // in order
		want     []int    // their statuses
		answers  int      // answers the flow gets
	}{
		{"AForgedStateIsIgnoredAndTheRealAnswerStillCounts", false, []string{"/callback?code=evil&state=forged", "/callback?code=evil", good}, []int{400, 400, 200}, 1},
		{"ASecondCallbackIsRefused", false, []string{good, good, "/callback?error=access_denied&state=" + state}, []int{200, 409, 409}, 1},
		{"ACallbackAfterExpiryIsRefused", true, []string{good}, []int{410}, 0},
		{"ACallbackElsewhereOnTheListenerIsNotFound", false, []string{"/other?code=c0de&state=" + state}, []int{404}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := start
			if tc.late {
				now = start.Add(stepUpTTL)
			}
			done := make(chan struct{})
			cb := newCallback("/callback", start.Add(stepUpTTL), func() time.Time { return now }, done, func() error { return nil })
			cb.expect(state)
			srv := httptest.NewServer(cb)
			defer srv.Close()
			var got []loginAnswer
			var mu sync.Mutex
			go func() { // the flow: its first answer ends it
				a := <-cb.results
				mu.Lock()
				got = append(got, a)
				mu.Unlock()
				close(done)
			}()
			for i, path := range tc.requests {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want[i] {
					t.Errorf("request %d (%s): status %d, want %d", i, path, resp.StatusCode, tc.want[i])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != tc.answers {
				t.Fatalf("the flow got %d answers, want %d", len(got), tc.answers)
			}
			if tc.answers == 1 && (got[0].res == nil || got[0].res.Code != "c0de" || got[0].res.State != state) {
				t.Errorf("the flow got %+v, want the answer with the request's state", got[0].res)
			}
		})
	}
}
