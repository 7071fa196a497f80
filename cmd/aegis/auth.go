package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy/gateway"
)

const authUsage = `Usage:
  aegis auth login SERVER --config FILE [--state-dir DIR] [--timeout 10m]
  aegis auth logout SERVER [--state-dir DIR]

login logs aegis in to SERVER, a url: server of the gateway file that has
oauth: (docs/remote-servers-oauth.md), once: aegis asks the server, which
answers 401 and names its authorization server (RFC 9728, then RFC 8414
or OpenID discovery); registers itself there (a client ID metadata
document, the file's client_id, or dynamic registration, RFC 7591,
whichever the file and the server allow); prints the authorization URL
(authorization code with PKCE, the server's url as resource, RFC 8707);
and waits for the browser to come back to a loopback address on this
machine. On a machine without a browser, open the URL elsewhere and paste
here the address the browser ends on (it fails to load: that is expected).
The authorization server's iss on the way back is checked (RFC 9207).

The token is stored encrypted (age, to the identity in the state
directory's oauth/identity, both mode 0600) in oauth/SERVER.age of the
state directory that aegis gateway uses (--state-dir, default
$XDG_STATE_HOME/aegis). aegis gateway sends it to SERVER only, refreshes
it as it expires (with the same resource), and, when the authorization
server refuses to refresh it, refuses that server's calls, saying to run
aegis auth login SERVER again; the other servers are not affected. When
the server asks for more scopes mid-run (403 insufficient_scope), a host
that shows URL elicitations is given the authorization request for them
(the gateway stores the new token); any other host is told the scopes to
add to oauth: scopes: before logging in again. No token, secret or code
is ever recorded, logged or printed.

logout deletes SERVER's stored token.

Example:
  $ aegis auth login wiki --config /etc/aegis/aegis.yaml
`

func (m *Main) runAuth(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("aegis auth login SERVER --config FILE", "auth: missing subcommand")
	}
	switch args[0] {
	case "-h", "--help":
		fmt.Fprint(m.Stdout, authUsage)
		return nil
	case "login":
		return m.authLogin(ctx, args[1:])
	case "logout":
		return m.authLogout(args[1:])
	}
	return usagef("aegis auth login SERVER --config FILE, or aegis auth logout SERVER", "auth: unknown subcommand %q", args[0])
}

// serverArg takes SERVER, before or after the flags.
func (m *Main) serverArg(fs *flag.FlagSet, cmd string, args []string) (string, error) {
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(m.Stdout, authUsage)
			return "", errHelpShown
		}
		return "", usagef("run 'aegis help auth'", "%s: %v", cmd, err)
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return "", usagef("run 'aegis help auth'", "%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	if name == "" {
		return "", usagef("aegis "+cmd+" SERVER", "%s: needs the server's name, as the gateway file gives it", cmd)
	}
	return name, nil
}

var errHelpShown = errors.New("help shown")

func (m *Main) authLogout(args []string) error {
	fs := m.newFlagSet("auth logout")
	stateDir := fs.String("state-dir", "", "state directory")
	name, err := m.serverArg(fs, "auth logout", args)
	if errors.Is(err, errHelpShown) {
		return nil
	} else if err != nil {
		return err
	}
	dir, err := m.stateDir(*stateDir)
	if err != nil {
		return err
	}
	p := gateway.NewTokenStore(dir).Path(name)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return withHint(fmt.Errorf("auth logout: no token is stored for server %s (%s)", name, p), "--state-dir names the gateway's state directory")
		}
		return fmt.Errorf("auth logout: %w", err)
	}
	fmt.Fprintf(m.Stdout, "logged out of server %s: %s deleted\n", name, p)
	return nil
}

// loginResult is what comes back from the browser (or is pasted).
type loginResult struct {
	res *auth.AuthorizationResult
	err error
}

func (m *Main) authLogin(ctx context.Context, args []string) error {
	fs := m.newFlagSet("auth login")
	config := fs.String("config", "", "gateway file")
	stateDir := fs.String("state-dir", "", "state directory")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the browser")
	name, err := m.serverArg(fs, "auth login", args)
	if errors.Is(err, errHelpShown) {
		return nil
	} else if err != nil {
		return err
	}
	if *config == "" {
		return usagef("aegis auth login SERVER --config aegis.yaml", "auth login needs --config, the gateway file that names the server")
	}
	data, err := os.ReadFile(*config)
	if err != nil {
		return withHint(fmt.Errorf("auth login: %w", err), "--config takes the gateway file")
	}
	gw, err := policy.ParseGateway(*config, data)
	if err != nil {
		return withHint(fmt.Errorf("invalid gateway file: %w", err), "fix the file")
	}
	s, ok := gw.Server(name)
	if !ok {
		return withHint(fmt.Errorf("auth login: the gateway file has no server %q", name), "give the name a url: server has in "+*config)
	}
	if s.URL == "" || s.OAuth == nil {
		return withHint(fmt.Errorf("auth login: server %s has no oauth:", name), "give the server url: and oauth: {} in the gateway file (docs/remote-servers-oauth.md)")
	}
	if s.OAuth.Exchange != nil {
		return withHint(fmt.Errorf("auth login: server %s is reached on behalf of each caller (oauth: token_exchange): no one logs in to it", name),
			"the gateway exchanges each --listen caller's token for one for the server (docs/remote-servers-oauth.md)")
	}
	dir, err := m.stateDir(*stateDir)
	if err != nil {
		return err
	}
	rs, err := gateway.RemoteServerOf(s, m.Getenv)
	if err != nil {
		return withHint(fmt.Errorf("auth login: %w", err), "fix the file, or the header file's mode")
	}
	secret, err := gateway.ClientSecret(s)
	if err != nil {
		return err
	}
	if e := s.OAuth.ClientSecret.Env; e != "" {
		if secret = m.Getenv(e); secret == "" {
			return fmt.Errorf("auth login: server %s: oauth client_secret: %s is not set in aegis's environment, or is empty", name, e)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	// The loopback address the browser comes back to.
	ln, redirect, ru, err := gateway.ListenForRedirect(s.OAuth.RedirectURI)
	if err != nil {
		return withHint(fmt.Errorf("auth login: %w", err), "free that port, or give another redirect_uri (the authorization server must accept it)")
	}
	defer ln.Close()
	results := make(chan loginResult, 2)
	deliver := func(q url.Values) (string, bool) {
		var r loginResult
		switch {
		case q.Get("error") != "":
			r.err = fmt.Errorf("the authorization server refused the login: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") != "" && q.Get("state") != "":
			r.res = &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}
		default:
			return "", false
		}
		select {
		case results <- r:
		default:
		}
		if r.err != nil {
			return r.err.Error(), true
		}
		return "", true
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != ru.Path && !(ru.Path == "" && req.URL.Path == "/") {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		why, ok := deliver(req.URL.Query())
		switch {
		case !ok:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "<p>aegis: this address is where the authorization server sends the browser back; it came without a code.</p>")
		case why != "":
			io.WriteString(w, "<p>aegis: the login failed: "+html.EscapeString(why)+". See the terminal.</p>")
		default:
			io.WriteString(w, "<p>aegis: logged in to "+html.EscapeString(name)+". You can close this tab.</p>")
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	// A pasted address, for a machine whose browser is elsewhere.
	go func() {
		if m.Stdin == nil {
			return
		}
		sc := bufio.NewScanner(m.Stdin)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			u, err := url.Parse(line)
			if err != nil {
				fmt.Fprintln(m.Stderr, "aegis: that is not an address; paste the whole address the browser ended on")
				continue
			}
			if _, ok := deliver(u.Query()); !ok {
				fmt.Fprintln(m.Stderr, "aegis: that address has no code or error; paste the whole address the browser ended on")
			}
		}
	}()

	fetch := func(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		fmt.Fprintf(m.Stderr, "aegis: to log in to server %s, open this address in a browser:\n\n  %s\n\n"+
			"aegis: waiting for the browser to come back to %s; on a machine without a browser, open the address elsewhere and paste here the address the browser ends on\n",
			name, a.URL, redirect)
		select {
		case r := <-results:
			return r.res, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer from the browser: %w", context.Cause(ctx))
		}
	}

	login, err := gateway.LoginOf(s, rs, secret, redirect, fetch, nil)
	if err != nil {
		return fmt.Errorf("auth login: %w", err)
	}
	mcpClient := &http.Client{Transport: &headerTripper{base: rs.HTTPTransport(), header: rs.Header}}
	client := mcp.NewClient(&mcp.Implementation{Name: "aegis", Version: Version}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: mcpClient, OAuthHandler: login.Handler, MaxRetries: 1}, nil)
	if err != nil {
		return withHint(fmt.Errorf("auth login: server %s: %s", name, login.Scrub(err.Error())),
			"check the server's url and oauth: in the gateway file; a client the authorization server does not know needs client_id (registered there with redirect_uri "+redirect+")")
	}
	cs.Close()
	st, err := login.Token()
	if errors.Is(err, gateway.ErrNotAsked) {
		return withHint(fmt.Errorf("auth login: server %s answered without asking for a login", name), "the server does not require OAuth: remove oauth: from its entry, or give it headers:")
	} else if err != nil {
		return fmt.Errorf("auth login: server %s: %w", name, err)
	}
	store := gateway.NewTokenStore(dir)
	if err := store.Save(st); err != nil {
		return withHint(fmt.Errorf("auth login: %w", err), "--state-dir names the gateway's state directory; it must be writable")
	}
	exp := "no expiry given"
	if !st.Expiry.IsZero() {
		exp = "expires " + st.Expiry.UTC().Format(time.RFC3339)
	}
	refresh := "with a refresh token"
	if st.RefreshToken == "" {
		refresh = "without a refresh token (log in again when it expires)"
	}
	fmt.Fprintf(m.Stdout, "logged in to server %s: its token (%s, %s) is stored encrypted in %s\n", name, exp, refresh, store.Path(name))
	return nil
}

// headerTripper adds the server's own headers (headers:) to requests to
// it during the login.
type headerTripper struct {
	base   http.RoundTripper
	header http.Header
}

func (t *headerTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	for k, vs := range t.header {
		r.Header[k] = vs
	}
	return t.base.RoundTrip(r)
}
