package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

//go:embed assets
var assets embed.FS

// TimeLayout is the one form of every time the page shows, whatever the
// browser's zone: in UTC, with the zone written. The state carries its
// times in RFC 3339 UTC and the page writes them in this form (utc in
// app.js); a note that names a time writes it with [FormatTime].
const TimeLayout = "2006-01-02 15:04:05 UTC"

// FormatTime writes t as the page shows every time ([TimeLayout]).
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// SessionRow is one row of the sessions list: the columns of aegis
// sessions, already formatted as that command prints them (Started and
// Ended in RFC 3339 UTC, which the page writes in [TimeLayout]).
type SessionRow struct {
	ID        string `json:"id"`
	Started   string `json:"started"`
	Ended     string `json:"ended"`
	State     string `json:"state"`
	Exit      string `json:"exit"`
	Calls     int    `json:"calls"`
	Refused   int    `json:"refused"`
	Approvals string `json:"approvals"`
	Command   string `json:"command"`
	// Principal is who the session serves (a validated OAuth token of
	// gateway --listen): its subject, and its email or name when kept.
	Principal string `json:"principal,omitempty"`
}

// Pending is one approval that a running aegis process holds, as aegis
// approvals lists it.
type Pending struct {
	// Host is the fleet host that holds it, "" for a process of this
	// machine.
	Host    string `json:"host,omitempty"`
	Session string `json:"session"`
	PID     int    `json:"pid"`
	events.PendingApproval
}

// Decision is what an Approve or Deny button asks for.
type Decision struct {
	Op string `json:"op"` // events.OpApprove or events.OpDeny
	// Host is the fleet host the page showed the approval on, "" for a
	// process of this machine.
	Host       string `json:"host,omitempty"`
	Session    string `json:"session"`
	ApprovalID string `json:"approval_id"`
	Reason     string `json:"reason,omitempty"`
	// Passphrase opens the console's approver key to sign an approve
	// ([Config.Signer]); it is used for that one request and never
	// stored or logged.
	Passphrase string `json:"passphrase,omitempty"`
	// Link is set for a decision made on the page of an approval link
	// (links.go), never by a page's body.
	Link bool `json:"-"`
}

// Source is where the console reads and what it decides through. Notes
// are what a user should know about a read (whose index it came from, a
// process that could not be asked); an error means nothing could be read.
type Source interface {
	Sessions(ctx context.Context) (rows []SessionRow, notes []string, err error)
	Pending(ctx context.Context) (rows []Pending, notes []string, err error)
	// Decide sends the decision to the process that serves its session
	// and returns that process's answer.
	Decide(ctx context.Context, d Decision) (message string, err error)
	// Transcript calls line with each line of the session's transcript,
	// in order, until the session has ended or ctx is done.
	Transcript(ctx context.Context, session string, line func(string) error) error
}

// Config configures a console server.
type Config struct {
	Source Source
	Logger *slog.Logger
	// Hosts are the values of the Host header a request may carry: the
	// address the console listens on, as host:port (and localhost:port
	// for a loopback address). The first is the one the login link uses.
	Hosts []string
	// Random is the source of the login token and session ids.
	Random io.Reader
	// Interval is how often the state is read (default one second).
	Interval time.Duration
	// Changed, if not nil, says that the Source has something new (a
	// message stored in the stream it follows): the state is read at once,
	// not at the next Interval.
	Changed <-chan struct{}
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Signer names the approver key the console signs approvals with
	// ("" for none): the page then asks its passphrase with each
	// Approve, and the Source signs.
	Signer string
	// LinkKey is the key of the approval links this console takes
	// ([ApprovalLink], [LinkKeyBytes]); nil takes none.
	LinkKey []byte
}

// Server is the console's HTTP handler and its poller.
type Server struct {
	cfg   Config
	auth  *auth
	mux   *http.ServeMux
	kick  chan struct{}
	mu    sync.Mutex
	state []byte // the last state, JSON
	subs  map[chan []byte]struct{}

	usedLinks map[string]time.Time // nonce -> expiry of each approval link used
	grants    map[string]*grant    // handle -> what an approval link opened
}

// New makes a server and draws its login token.
func New(cfg Config) (*Server, error) {
	if cfg.Source == nil || len(cfg.Hosts) == 0 || cfg.Random == nil {
		return nil, errors.New("console: a source, the listen hosts and a random source are needed")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a, err := newAuth(cfg.Random, cfg.Hosts)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, auth: a, kick: make(chan struct{}, 1), subs: map[chan []byte]struct{}{},
		usedLinks: map[string]time.Time{}, grants: map[string]*grant{}}
	s.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	s.mux.HandleFunc("GET /login", s.login)
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { serveAsset(w, r, static, "index.html") })
	s.mux.HandleFunc("GET /assets/{name}", func(w http.ResponseWriter, r *http.Request) { serveAsset(w, r, static, r.PathValue("name")) })
	s.mux.HandleFunc("GET /api/state", s.getState)
	s.mux.HandleFunc("GET /api/events", s.stateEvents)
	s.mux.HandleFunc("GET /api/transcript", s.transcript)
	s.mux.HandleFunc("POST /api/decide", s.decide)
	s.mux.HandleFunc("GET /approval/{session}/{id}", s.openLink)
	s.mux.HandleFunc("GET /approval/g/{handle}/{rest...}", s.approvalPage)
	s.mux.HandleFunc("POST /approval/g/{handle}/decide", s.decideLink)
	s.mux.HandleFunc("GET /approval/assets/{name}", func(w http.ResponseWriter, r *http.Request) {
		if n := r.PathValue("name"); n == "approval.js" || n == "app.css" {
			serveAsset(w, r, static, n)
			return
		}
		http.NotFound(w, r)
	})
	return s, nil
}

// LoginURL is the one-time login link.
func (s *Server) LoginURL() string {
	return "http://" + s.cfg.Hosts[0] + "/login?token=" + s.auth.token
}

// ServeHTTP checks Host on every request, the session cookie on every
// request but the login, and Origin on every POST, then serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if err := s.auth.check(r); err != nil {
		var re *refusal
		if errors.As(err, &re) {
			s.cfg.Logger.Warn("console: request refused", "method", r.Method, "path", r.URL.Path, "reason", re.msg)
			refuse(w, re)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func serveAsset(w http.ResponseWriter, r *http.Request, static fs.FS, name string) {
	b, err := fs.ReadFile(static, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ct := "application/octet-stream"
	switch {
	case strings.HasSuffix(name, ".html"):
		ct = "text/html; charset=utf-8"
	case strings.HasSuffix(name, ".js"):
		ct = "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".css"):
		ct = "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		ct = "image/svg+xml"
	}
	w.Header().Set("Content-Type", ct)
	w.Write(b)
}

// Run polls the source until ctx is done, pushing each new state to the
// open pages. While no page is open it asks nothing: a page that opens
// wakes it.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.mu.Lock()
		watched := len(s.subs) > 0
		s.mu.Unlock()
		if watched {
			s.poll(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		case <-s.cfg.Changed:
		}
	}
}

// state is what a page shows, but for transcripts.
type state struct {
	Sessions []SessionRow `json:"sessions"`
	Pending  []Pending    `json:"pending"`
	Notes    []string     `json:"notes"`
	Errors   []string     `json:"errors"`
	Signer   string       `json:"signer,omitempty"`
	// Records and Fleet are null when the source shows none (see
	// pollMore).
	Records []RecordRow `json:"records"`
	Fleet   *Fleet      `json:"fleet,omitempty"`
}

func (s *Server) poll(ctx context.Context) {
	st := state{Sessions: []SessionRow{}, Pending: []Pending{}, Notes: []string{}, Errors: []string{}, Signer: projector.Printable(s.cfg.Signer)}
	rows, notes, err := s.cfg.Source.Sessions(ctx)
	if err != nil {
		st.Errors = append(st.Errors, "sessions: "+err.Error())
	}
	if rows != nil {
		st.Sessions = rows
	}
	st.Notes = append(st.Notes, notes...)
	pend, notes, err := s.cfg.Source.Pending(ctx)
	if err != nil {
		st.Errors = append(st.Errors, "approvals: "+err.Error())
	}
	if pend != nil {
		st.Pending = pend
	}
	st.Notes = append(st.Notes, notes...)
	s.pollMore(ctx, &st)
	printable(&st)
	b, err := json.Marshal(st)
	if err != nil {
		s.cfg.Logger.Error("console: encode the state", "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Equal(b, s.state) {
		return
	}
	s.state = b
	for c := range s.subs {
		select {
		case <-c: // drop the older state the page has not taken yet
		default:
		}
		c <- b
	}
}

// printable escapes every host-chosen string the way the command line
// shows it, so that no control or bidi character reaches the page.
func printable(st *state) {
	for i := range st.Sessions {
		r := &st.Sessions[i]
		r.ID, r.Command = projector.Printable(r.ID), projector.Printable(r.Command)
	}
	for i := range st.Pending {
		p := &st.Pending[i]
		p.Session = projector.Printable(p.Session)
		p.ApprovalID = projector.Printable(p.ApprovalID)
		p.ToolID = projector.Printable(p.ToolID)
		p.ArgsDigest = projector.Printable(p.ArgsDigest)
		p.RequestDigest = projector.Printable(p.RequestDigest)
		p.Arguments = projector.Printable(p.Arguments)
		p.MatchedRule, p.Profile = projector.Printable(p.MatchedRule), projector.Printable(p.Profile)
	}
	printableMore(st)
	for i := range st.Notes {
		st.Notes[i] = projector.Printable(st.Notes[i])
	}
	for i := range st.Errors {
		st.Errors[i] = projector.Printable(st.Errors[i])
	}
}

func (s *Server) current() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// getState reads the state afresh and answers it.
func (s *Server) getState(w http.ResponseWriter, r *http.Request) {
	s.poll(r.Context())
	b := s.current()
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// stateEvents streams the state: the current one at once, then each new
// one, as "state" events; a comment every 15 seconds keeps it open.
func (s *Server) stateEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	c := make(chan []byte, 1)
	s.mu.Lock()
	s.subs[c] = struct{}{}
	if s.state != nil {
		c <- s.state
	}
	s.mu.Unlock()
	s.wake()
	defer func() {
		s.mu.Lock()
		delete(s.subs, c)
		if len(s.subs) == 0 {
			s.state = nil // stale by the time a page opens again
		}
		s.mu.Unlock()
	}()
	sseHeaders(w)
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-c:
			// The server's clock goes with each state as it is sent, so
			// that the page counts expiry down on this clock.
			fmt.Fprintf(w, "event: state\ndata: {\"now\":%q,\"state\":%s}\n\n", s.cfg.Now().UTC().Format(time.RFC3339Nano), b)
		case <-keep.C:
			io.WriteString(w, ": keep-alive\n\n")
		}
		fl.Flush()
	}
}

func sseHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
}

// transcript streams one session's transcript as "line" events (each a
// JSON string), then an "end" event when the session has ended, or an
// "failed" event with the reason.
func (s *Server) transcript(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("session")
	if !schemas.ValidID(id) {
		http.Error(w, "aegis console: bad session id", http.StatusBadRequest)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	sseHeaders(w)
	fl.Flush()
	var mu sync.Mutex
	send := func(event, text string) error {
		b, _ := json.Marshal(projector.Printable(text))
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	}
	err := s.cfg.Source.Transcript(r.Context(), id, func(line string) error { return send("line", line) })
	switch {
	case r.Context().Err() != nil:
	case err != nil:
		send("failed", err.Error())
	default:
		send("end", "the session has ended")
	}
}

// maxDecisionBody bounds a decision request.
const maxDecisionBody = 16 << 10

// readDecision decodes a decision request's body into body (a member it
// does not know is refused) and checks what every decision needs: approve
// or deny (*op), and for an approve that this console signs, a passphrase.
// When it refuses, it has answered the request and returns false.
func (s *Server) readDecision(w http.ResponseWriter, r *http.Request, body any, op, passphrase *string) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxDecisionBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(body); err != nil {
		jsonError(w, http.StatusBadRequest, "bad request: "+err.Error())
		return false
	}
	if *op != events.OpApprove && *op != events.OpDeny {
		jsonError(w, http.StatusBadRequest, "op must be approve or deny")
		return false
	}
	if *op == events.OpApprove && s.cfg.Signer != "" && *passphrase == "" {
		jsonError(w, http.StatusBadRequest, "enter the passphrase of the approver key "+s.cfg.Signer+": this console signs every approval with it")
		return false
	}
	return true
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	var d Decision
	if !s.readDecision(w, r, &d, &d.Op, &d.Passphrase) {
		return
	}
	if !schemas.ValidID(d.Session) || d.ApprovalID == "" || len(d.ApprovalID) > events.MaxApprovalIDBytes {
		jsonError(w, http.StatusBadRequest, "a decision names a session id and an approval id as the page shows them")
		return
	}
	msg, err := s.cfg.Source.Decide(r.Context(), d)
	s.wake()
	if err != nil {
		s.cfg.Logger.Warn("console: decision refused", "op", d.Op, "approval", d.ApprovalID, "session", d.Session, "err", err)
		jsonError(w, http.StatusConflict, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"message": projector.Printable(msg)})
}

// wake makes the poller read the state now.
func (s *Server) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": projector.Printable(msg)})
}
