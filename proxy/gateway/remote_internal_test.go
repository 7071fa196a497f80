package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/policy"
)

// A header value is read at start from a file held as an env file is, or
// from aegis's environment; anything that could leak it or smuggle a
// second header refuses the start, naming the server, the header and the
// path or variable, never the value.
func TestRemoteServerOfRefusesUnsafeSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "Bearer tok-7c1d9e"
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	env := map[string]string{"GOOD": secret, "SPLIT": secret + "\r\nX-Evil: 1"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name   string
		header policy.Header
		ca     string
		want   string // in the error; "" for none
	}{
		{"FileTrimmed", policy.Header{Name: "Authorization", File: write("good", secret+"\n", 0o600)}, "", ""},
		{"EnvRead", policy.Header{Name: "Authorization", Env: "GOOD"}, "", ""},
		{"GroupReadableTokenFile", policy.Header{Name: "Authorization", File: write("group", secret, 0o640)}, "",
			"server r: header Authorization: unusable header file: " + dir + "/group is accessible by group or others (mode 0640)"},
		{"MissingTokenFile", policy.Header{Name: "Authorization", File: filepath.Join(dir, "absent")}, "", "absent does not exist"},
		{"FIFOThatWouldBlockTheStart", policy.Header{Name: "Authorization", File: fifo}, "", "is not a regular file"},
		{"TokenFileSmugglesAHeader", policy.Header{Name: "Authorization", File: write("split", secret+"\r\nX-Evil: 1\n", 0o600)}, "",
			"server r: header Authorization: unusable header file: " + dir + "/split: the header value holds a control character"},
		{"NULInTokenFile", policy.Header{Name: "Authorization", File: write("nul", secret+"\x00", 0o600)}, "", "holds a NUL byte, which no header value can"},
		{"EmptyTokenFile", policy.Header{Name: "Authorization", File: write("empty", "\n", 0o600)}, "", "an empty header value"},
		{"UnsetVariable", policy.Header{Name: "Authorization", Env: "NOT_SET"}, "", "server r: header Authorization: NOT_SET is not set in aegis's environment, or is empty"},
		{"VariableSmugglesAHeader", policy.Header{Name: "Authorization", Env: "SPLIT"}, "", "server r: header Authorization: the value of SPLIT: the header value holds a control character"},
		{"CAFileWithoutCertificates", policy.Header{Name: "X-A", Value: "b"}, write("ca.pem", "not a certificate\n", 0o644), "server r: ca_file: unusable ca_file: " + dir + "/ca.pem holds no PEM certificate"},
		{"CAFileMissing", policy.Header{Name: "X-A", Value: "b"}, filepath.Join(dir, "none.pem"), "none.pem does not exist"},
		{"CAFileFIFO", policy.Header{Name: "X-A", Value: "b"}, fifo, "is not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := policy.Server{Name: "r", URL: "https://mcp.example.com/mcp", Transport: policy.TransportStreamable, Headers: []policy.Header{tc.header}, CAFile: tc.ca}
			rs, err := RemoteServerOf(s, getenv)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := rs.Header.Get(tc.header.Name); got != secret {
					t.Errorf("header %q", got)
				}
				return
			}
			if err == nil {
				t.Fatal("RemoteServerOf accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "tok-7c1d9e") || rs != nil {
				t.Errorf("the value leaked: %q", err)
			}
		})
	}
}

// The server's headers go to its origin only: a redirect is not followed
// (the headers would follow it), and a request to another origin (a legacy
// SSE server naming a message endpoint elsewhere) is refused before it is
// sent.
func TestRemoteHeadersStayOnTheServersOrigin(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	defer other.Close()
	var got atomic.Value
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		got.Store(r.Header.Get("Authorization"))
	}))
	defer home.Close()
	h, err := newRemoteHTTP(&RemoteServer{URL: home.URL + "/mcp", Header: http.Header{"Authorization": {"Bearer tok"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := h.client(nil)
	resp, err := c.Get(home.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Load() != "Bearer tok" {
		t.Errorf("the server got Authorization %v", got.Load())
	}
	if _, err := c.Post(home.URL+"/redirect", "application/json", strings.NewReader("{}")); !errors.Is(err, errRedirect) {
		t.Errorf("redirect: %v, want errRedirect", err)
	}
	if _, err := c.Post(other.URL+"/message?sessionid=1", "application/json", strings.NewReader("{}")); err == nil || !strings.Contains(err.Error(), "another origin") {
		t.Errorf("request to another origin: %v", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("another origin got %d requests", n)
	}
}

// What aegis records or says of a remote server's errors holds neither a
// header value nor the url's query.
func TestRemoteScrubKeepsSecretsOutOfErrors(t *testing.T) {
	rs := &RemoteServer{URL: "https://mcp.example.com/mcp?api_key=k-91f3", Header: http.Header{"Authorization": {"Bearer tok-55e2"}}}
	r := &remoteDown{name: "r", srv: rs, shown: shownURL(rs.URL)}
	if r.shown != "https://mcp.example.com/mcp" {
		t.Errorf("shown url %q", r.shown)
	}
	msg := `calling "initialize": Post "https://mcp.example.com/mcp?api_key=k-91f3": the server echoed Bearer tok-55e2`
	got := r.scrubErr(errors.New(msg)).Error()
	for _, secret := range []string{"k-91f3", "tok-55e2"} {
		if strings.Contains(got, secret) {
			t.Errorf("scrubbed %q still holds %s", got, secret)
		}
	}
	if !strings.Contains(got, `Post "https://mcp.example.com/mcp"`) {
		t.Errorf("scrubbed %q lost the url", got)
	}
}

// A cancellation counts as delivered only once the server accepted it.
func TestRemoteCancelTally(t *testing.T) {
	var status atomic.Int64
	status.Store(http.StatusInternalServerError)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	h, err := newRemoteHTTP(&RemoteServer{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := h.client(nil)
	post := func() {
		resp, err := c.Post(srv.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ticket := h.cancels.issue()
	post()
	if h.cancels.await(ticket, 0) {
		t.Error("a cancellation the server refused counts as delivered")
	}
	status.Store(http.StatusAccepted)
	post()
	if !h.cancels.await(ticket, cancelSendWait) {
		t.Error("a cancellation the server accepted does not count")
	}
}

// The SDK's client falls back from server/discover to initialize after any
// failure of the discover. One that the server did not answer says
// nothing of what it speaks: after refused credentials the initialize
// would send them again, and after a server that is not ready it would
// pin a 2026-07-28 server to the session protocol. Such an answer stands
// for the initialize, which is not sent; a server that answers the
// discover as a 2025-11-25 server does (400, or a JSON-RPC error) is
// asked the initialize as the specification says.
func TestRemoteUnansweredDiscoverIsNotFollowedByInitialize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int    // the discover's; 0: the connection is dropped
		initSent bool   // whether the initialize reaches the server
		says     string // in the attempt's error
	}{
		{"RefusedCredentialsAreNotSentAgain", http.StatusUnauthorized, false, "Unauthorized"},
		{"ForbiddenIsNotAskedAgain", http.StatusForbidden, false, "Forbidden"},
		{"NotReadyIsNotPinnedToTheSessionProtocol", http.StatusServiceUnavailable, false, "Service Unavailable"},
		{"OverloadedIsNotPinnedToTheSessionProtocol", http.StatusTooManyRequests, false, "Too Many Requests"},
		{"NoAnswerIsNotPinnedToTheSessionProtocol", 0, false, "EOF"},
		{"SessionServerIsInitialized", http.StatusBadRequest, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var discovers, inits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				switch {
				case strings.Contains(string(b), `"server/discover"`):
					discovers.Add(1)
					if tc.status == 0 {
						hj, _ := w.(http.Hijacker)
						conn, _, _ := hj.Hijack()
						conn.Close()
						return
					}
					http.Error(w, "no", tc.status)
				case strings.Contains(string(b), `"initialize"`):
					inits.Add(1)
					http.Error(w, "session servers answer here", http.StatusTeapot) // ends the attempt
				default:
					w.WriteHeader(http.StatusAccepted)
				}
			}))
			defer srv.Close()
			h, err := newRemoteHTTP(&RemoteServer{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			probe := &statusProbe{}
			c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: h.client(probe), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: newProtocol})
			if err == nil {
				t.Fatal("connected")
			}
			if discovers.Load() != 1 || (inits.Load() == 1) != tc.initSent {
				t.Errorf("%d discovers, %d initializes; want 1 and initialize sent %v", discovers.Load(), inits.Load(), tc.initSent)
			}
			if tc.says != "" && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("the attempt failed with %q, want it to say %q", err, tc.says)
			}
			// 400 to the discover is no legacy SSE server: only the
			// initialize's status says that.
			if st := probe.legacy(); st != 0 {
				t.Errorf("the attempt reads as a legacy SSE server's (%d)", st)
			}
		})
	}
}
