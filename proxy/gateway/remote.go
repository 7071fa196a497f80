package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"

	"github.com/aegis-dev/aegis/policy"
)

// RemoteServer is a remote downstream server of the gateway (a url:
// server of the file): no process runs; the gateway is an MCP client of
// URL over HTTP, with the go-sdk's streamable or SSE client transport.
// Invariants:
//
//   - TLS is always verified: against RootCAs when it is set, and then
//     only against them (the system's roots do not count), else against
//     the system's roots. Nothing here can turn verification off.
//   - Header goes with every request to URL's origin (scheme, host and
//     port) and never anywhere else: a request to another origin (a
//     legacy SSE server that names a message endpoint elsewhere) is
//     refused, and redirects are not followed.
//   - Header's values are secrets. They are never recorded, logged or
//     said on stderr; an error of the connection is scrubbed of them and
//     of URL's query before it is recorded or shown.
//   - A remote server is namespaced, profiled, pinned, recorded and
//     refused exactly as a local one is: only how its session is carried
//     differs (remote_conn.go).
type RemoteServer struct {
	// URL is the server's MCP endpoint, as the file gives it: https://,
	// or http:// to a loopback host.
	URL string
	// Transport is policy.TransportStreamable (streamable HTTP, falling
	// back to the legacy SSE transport when the server answers the
	// initialize POST with 400, 404 or 405) or policy.TransportSSE.
	Transport policy.Transport
	// Header is sent with every request to the server. Never recorded.
	Header http.Header
	// RootCAs, when not nil, are the only CAs the server's certificate may
	// chain to; nil: the system's roots.
	RootCAs *x509.CertPool
	// OAuth, when not nil, gives the Authorization header: the token aegis
	// auth login stored, refreshed as it expires (oauth.go).
	OAuth *OAuthClient
	// Exchange, when not nil, gives the Authorization header in each
	// session: the session's caller's token exchanged for one for the
	// server (exchange.go). OAuth is then nil.
	Exchange *TokenExchange
}

// HTTPTransport is an HTTP transport to the server: TLS verified against
// RootCAs, or the system's roots, at TLS 1.2 or later.
func (rs *RemoteServer) HTTPTransport() *http.Transport {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: rs.RootCAs, MinVersion: tls.VersionTLS12}
	return base
}

// ErrHeaderFile is wrapped by every error of [RemoteServerOf] about a
// header file (headers: {NAME: {file: PATH}}).
var ErrHeaderFile = errors.New("unusable header file")

// ErrCAFile is wrapped by every error of [RemoteServerOf] about ca_file.
var ErrCAFile = errors.New("unusable ca_file")

// maxCAFile bounds a CA bundle: the system's whole bundle is some 200 KiB.
const maxCAFile = 4 << 20

// RemoteServerOf returns the RemoteServer of s, a url server of the file,
// with every header value resolved now: a literal as the file gives it, a
// header file read as env files are ([ServerEnv]: a regular file that
// neither group nor others may access, at most 64 KiB, no NUL, trailing
// newlines trimmed), a variable from getenv (aegis's environment; unset
// or empty refuses the start). A value that HTTP cannot carry (a control
// character, a newline inside it) is refused. ca_file is read and must
// hold at least one PEM certificate. Every error names the server, the
// header and the path or variable, never a value.
func RemoteServerOf(s policy.Server, getenv func(string) string) (*RemoteServer, error) {
	if s.URL == "" {
		return nil, fmt.Errorf("server %s: not a url server", s.Name)
	}
	rs := &RemoteServer{URL: s.URL, Transport: s.Transport, Header: http.Header{}}
	if rs.Transport == "" {
		rs.Transport = policy.TransportStreamable
	}
	for _, h := range s.Headers {
		v := h.Value
		switch {
		case h.File != "":
			var err error
			if v, err = ReadSecretFile(h.File, ErrHeaderFile, "which no header value can"); err != nil {
				return nil, fmt.Errorf("server %s: header %s: %w", s.Name, h.Name, err)
			}
			if prob := policy.HeaderValueProblem(v); prob != "" {
				return nil, fmt.Errorf("server %s: header %s: %w: %s: %s", s.Name, h.Name, ErrHeaderFile, h.File, prob)
			}
		case h.Env != "":
			v = getenv(h.Env)
			if v == "" {
				return nil, fmt.Errorf("server %s: header %s: %s is not set in aegis's environment, or is empty", s.Name, h.Name, h.Env)
			}
			if prob := policy.HeaderValueProblem(v); prob != "" {
				return nil, fmt.Errorf("server %s: header %s: the value of %s: %s", s.Name, h.Name, h.Env, prob)
			}
		}
		rs.Header.Set(h.Name, v)
	}
	if s.CAFile != "" {
		pool, err := readCAFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("server %s: ca_file: %w", s.Name, err)
		}
		rs.RootCAs = pool
	}
	return rs, nil
}

// readCAFile reads a PEM bundle of CA certificates. A CA bundle is not a
// secret; it must be a regular file (a FIFO is refused, not waited on).
func readCAFile(path string) (*x509.CertPool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist", ErrCAFile, path)
		}
		return nil, fmt.Errorf("%w: %w", ErrCAFile, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCAFile, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrCAFile, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCAFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrCAFile, path, err)
	}
	if len(b) > maxCAFile {
		return nil, fmt.Errorf("%w: %s is larger than %d MiB", ErrCAFile, path, maxCAFile>>20)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrCAFile, path)
	}
	return pool, nil
}
