package console

import (
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// cookieName is the session cookie's name.
const cookieName = "aegis_console"

// auth holds the login token and the sessions it was exchanged for.
type auth struct {
	random io.Reader
	hosts  []string
	token  string

	mu       sync.Mutex
	used     bool
	sessions map[string]struct{}
}

func newAuth(random io.Reader, hosts []string) (*auth, error) {
	a := &auth{random: random, hosts: hosts, sessions: map[string]struct{}{}}
	t, err := a.draw()
	if err != nil {
		return nil, err
	}
	a.token = t
	return a, nil
}

// draw returns 32 random bytes in hex.
func (a *auth) draw() (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(a.random, b[:]); err != nil {
		return "", fmt.Errorf("console: draw a random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// refusal is a request the console refuses, with the status and the body
// it answers.
type refusal struct {
	code int
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(w http.ResponseWriter, r *refusal) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(r.code)
	fmt.Fprintf(w, "aegis console: %s\n", r.msg)
}

// check refuses a request with a wrong Host, one without a live session
// (but the login), and a POST from another origin or without a JSON body.
func (a *auth) check(r *http.Request) error {
	if !a.hostOK(r.Host) {
		return &refusal{http.StatusForbidden, fmt.Sprintf("refused: Host %q is not the address this console listens on (%s); open the login link as printed", r.Host, a.hosts[0])}
	}
	if r.URL.Path == "/login" {
		return nil
	}
	// An approval link and the page it opens take a cookie of their own
	// (links.go); what changes state still needs this console's Origin.
	link := strings.HasPrefix(r.URL.Path, "/approval/")
	if !link {
		c, err := r.Cookie(cookieName)
		if err != nil || !a.live(c.Value) {
			return &refusal{http.StatusUnauthorized, "not logged in: open the login link that aegis console printed when it started (it works once; restart aegis console for a new one)"}
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		origin := r.Header.Get("Origin")
		if origin == "" {
			return &refusal{http.StatusForbidden, "refused: a request that changes state must carry an Origin header"}
		}
		if !a.originOK(origin) {
			return &refusal{http.StatusForbidden, fmt.Sprintf("refused: Origin %q is not this console", origin)}
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			return &refusal{http.StatusForbidden, "refused: a request that changes state must send JSON"}
		}
	}
	return nil
}

func (a *auth) hostOK(host string) bool { return HostAllowed(a.hosts, host) }

// HostAllowed reports whether a request's Host is one of hosts (see
// [ListenHosts]): the check that keeps a page on loopback from answering
// a page of another site that a DNS rebinding points at it. The metrics
// page of aegis wrap and gateway (--metrics-listen) makes it too.
func HostAllowed(hosts []string, host string) bool {
	for _, h := range hosts {
		if strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}

func (a *auth) originOK(origin string) bool {
	for _, h := range a.hosts {
		if strings.EqualFold(origin, "http://"+h) {
			return true
		}
	}
	return false
}

// live reports whether id is a session the login made.
func (a *auth) live(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	found := 0
	for s := range a.sessions {
		found |= subtle.ConstantTimeCompare([]byte(s), []byte(id))
	}
	return found == 1
}

// login exchanges the one-time token for a session cookie. The page it
// answers moves on to the console by itself (a same-site navigation, so
// the SameSite=Strict cookie goes with it).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	a := s.auth
	tok := r.URL.Query().Get("token")
	a.mu.Lock()
	ok := subtle.ConstantTimeCompare([]byte(tok), []byte(a.token)) == 1
	used := a.used
	if ok && !used {
		a.used = true
	}
	a.mu.Unlock()
	switch {
	case !ok:
		s.cfg.Logger.Warn("console: login with a wrong token refused", "remote", r.RemoteAddr)
		refuse(w, &refusal{http.StatusForbidden, "refused: this is not the login link of this console"})
		return
	case used:
		s.cfg.Logger.Warn("console: login link used again, refused", "remote", r.RemoteAddr)
		refuse(w, &refusal{http.StatusForbidden, "refused: this login link has been used already; it works once. Restart aegis console for a new one"})
		return
	}
	id, err := a.draw()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a.mu.Lock()
	a.sessions[id] = struct{}{}
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/"><title>aegis console</title><p>Logged in. <a href="/">Open the console</a>.</p>`)
}

// ListenHosts returns the Host values a console listening on addr (the
// bound address, host:port) accepts: addr itself, and for a loopback
// address localhost:port too.
func ListenHosts(addr net.Addr) []string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return []string{addr.String()}
	}
	hosts := []string{ta.String()}
	if ta.IP.IsLoopback() {
		hosts = append(hosts, net.JoinHostPort("localhost", fmt.Sprint(ta.Port)))
	}
	return hosts
}

// CheckListen checks a --listen address: a loopback address (or
// localhost) is fine; any other needs allowRemote, and then it must name
// one address (not all interfaces), since Host is checked against it.
// It returns whether the address is off loopback.
func CheckListen(addr string, allowRemote bool) (remote bool, err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--listen %q: want HOST:PORT, such as 127.0.0.1:8700: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return false, nil
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return false, nil
	}
	if !allowRemote {
		return true, fmt.Errorf("--listen %q is not a loopback address: the console would be reachable from other machines, over plain HTTP", addr)
	}
	if host == "" || (ip != nil && ip.IsUnspecified()) {
		return true, fmt.Errorf("--listen %q listens on every interface: name one address, since every request's Host is checked against it", addr)
	}
	return true, nil
}
