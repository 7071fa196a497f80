package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// Approval links: what an aegis gateway hands a host that shows URL
// elicitations (MCP URLElicitationRequired), so that the human opens the
// one approval the call waits for in this console. Invariants:
//
//   - A link is made by whoever holds the console's link key (the console
//     writes it, 0600, in the runtime directory for the processes of its
//     state directory): LinkKeyBytes random bytes drawn at start, so a
//     restart ends every earlier link. The console's login token is never
//     in a link.
//   - A link names one session and one approval id, a random nonce and
//     the approval's expiry, under an HMAC-SHA256 of the key over all
//     four ([ApprovalLink]): it opens that approval only, and nothing
//     opens after the expiry. It works once: the first GET whose MAC,
//     expiry and approval (still pending in that session, as the
//     session's process lists it) check out exchanges it for a cookie
//     (HttpOnly, SameSite=Strict) scoped to that one approval's page;
//     every later use of the link is refused, as is a link whose approval
//     is no longer pending. MACs and cookies are compared in constant time.
//   - The approval's page (/approval/g/HANDLE/) and its decision take that
//     cookie, not the console's session cookie, and the decision is the
//     one approval's, whatever the body says (it names no approval). It is
//     sent as the console's Approve and Deny are (the Source's Decide,
//     signed with the console's approver key when it has one), marked as
//     coming through the link; one decision per link.
//   - Host is checked as for every request; a POST needs the console's
//     Origin and a JSON body.

// LinkKeyBytes is the length of a console's link key.
const LinkKeyBytes = 32

// approvalCookie is the name of an approval page's cookie.
const approvalCookie = "aegis_approval"

// linkMAC is the MAC of a link to approval id of session with nonce,
// valid until exp (Unix seconds).
func linkMAC(key []byte, session, id, nonce string, exp int64) []byte {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "aegis approval link v1\n%s\n%s\n%s\n%d", session, id, nonce, exp)
	return m.Sum(nil)
}

// ApprovalLink is the link to approval id of session, valid until
// expires, on the console at base (http://host:port) whose link key is
// key; random gives the nonce.
func ApprovalLink(base string, key []byte, session, id string, expires time.Time, random io.Reader) (string, error) {
	if len(key) != LinkKeyBytes {
		return "", errors.New("approval link: the console's link key is not 32 bytes")
	}
	if !schemas.ValidID(session) || !linkSafe(id) {
		return "", fmt.Errorf("approval link: session %q or approval id %q cannot be linked", session, id)
	}
	var n [16]byte
	if _, err := io.ReadFull(random, n[:]); err != nil {
		return "", fmt.Errorf("approval link: draw a nonce: %w", err)
	}
	nonce, exp := hex.EncodeToString(n[:]), expires.Unix()
	return fmt.Sprintf("%s/approval/%s/%s?t=%s.%d.%s", strings.TrimSuffix(base, "/"), session, id, nonce, exp,
		hex.EncodeToString(linkMAC(key, session, id, nonce, exp))), nil
}

// linkSafe reports whether an approval id can stand in a link's path as
// it is: aegis makes ids of A-Z a-z 0-9 . _ - only.
func linkSafe(id string) bool {
	if id == "" || len(id) > events.MaxApprovalIDBytes || id == "." || id == ".." {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// grant is what a redeemed link gives: one approval's page.
type grant struct {
	secret  string // the cookie's value
	session string
	id      string
	expires time.Time
	decided string // the decision's answer, once made
}

// checkLink checks a link's token for session and id: its MAC, its expiry
// and that it was not used; it returns the nonce and the expiry.
func (s *Server) checkLink(session, id, token string, now time.Time) (string, time.Time, *refusal) {
	bad := &refusal{http.StatusForbidden, "refused: this is not a link of this console to that approval (a console that restarted no longer takes the links it made before)"}
	parts := strings.Split(token, ".")
	if len(s.cfg.LinkKey) != LinkKeyBytes || len(parts) != 3 || !schemas.ValidID(session) || !linkSafe(id) {
		return "", time.Time{}, bad
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	mac, herr := hex.DecodeString(parts[2])
	if err != nil || herr != nil || len(parts[0]) != 32 || !hmac.Equal(mac, linkMAC(s.cfg.LinkKey, session, id, parts[0], exp)) {
		return "", time.Time{}, bad
	}
	expires := time.Unix(exp, 0)
	if !now.Before(expires) {
		return "", time.Time{}, &refusal{http.StatusForbidden, fmt.Sprintf("refused: this link expired with its approval at %s", FormatTime(expires))}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, used := s.usedLinks[parts[0]]; used {
		return "", time.Time{}, &refusal{http.StatusForbidden, "refused: this approval link has been used already; it works once. The page it opened shows the approval, and aegis console lists it too"}
	}
	return parts[0], expires, nil
}

// openLink redeems a link: GET /approval/{session}/{id}?t=TOKEN.
func (s *Server) openLink(w http.ResponseWriter, r *http.Request) {
	session, id := r.PathValue("session"), r.PathValue("id")
	now := s.cfg.Now()
	nonce, expires, re := s.checkLink(session, id, r.URL.Query().Get("t"), now)
	if re == nil {
		if p, why := s.pendingOf(r.Context(), session, id); p == nil {
			re = &refusal{http.StatusForbidden, "refused: " + why}
		}
	}
	if re != nil {
		s.cfg.Logger.Warn("console: approval link refused", "session", projector.Printable(session), "approval", projector.Printable(id), "reason", re.msg, "remote", r.RemoteAddr)
		refuse(w, re)
		return
	}
	secret, err := s.auth.draw()
	var handle string
	if err == nil {
		handle, err = s.auth.draw()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	handle = handle[:32]
	s.mu.Lock()
	if _, used := s.usedLinks[nonce]; used { // a use that raced this one
		s.mu.Unlock()
		refuse(w, &refusal{http.StatusForbidden, "refused: this approval link has been used already; it works once"})
		return
	}
	s.usedLinks[nonce] = expires
	for n, exp := range s.usedLinks {
		if now.After(exp) { // an expired link is refused by its expiry anyway
			delete(s.usedLinks, n)
		}
	}
	for h, g := range s.grants {
		if now.After(g.expires) {
			delete(s.grants, h)
		}
	}
	s.grants[handle] = &grant{secret: secret, session: session, id: id, expires: expires}
	s.mu.Unlock()
	path := "/approval/g/" + handle + "/"
	http.SetCookie(w, &http.Cookie{Name: approvalCookie, Value: secret, Path: path, Expires: expires, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=%s"><title>aegis: approval</title><p><a href="%s">Open the approval</a>.</p>`, path, path)
}

// pendingOf is approval id of session as its process lists it pending,
// or nil and why not.
func (s *Server) pendingOf(ctx context.Context, session, id string) (*Pending, string) {
	rows, _, err := s.cfg.Source.Pending(ctx)
	if err != nil {
		return nil, "the approvals could not be asked: " + err.Error()
	}
	for i := range rows {
		if rows[i].Host == "" && rows[i].Session == session && rows[i].ApprovalID == id {
			return &rows[i], ""
		}
	}
	return nil, fmt.Sprintf("approval %s is no longer pending in session %s (decided, expired, or its session ended)", projector.Printable(id), projector.Printable(session))
}

// grantOf is the grant of the request's handle, if its cookie matches.
func (s *Server) grantOf(r *http.Request) (*grant, *refusal) {
	c, err := r.Cookie(approvalCookie)
	s.mu.Lock()
	g := s.grants[r.PathValue("handle")]
	s.mu.Unlock()
	if err != nil || g == nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.secret)) != 1 {
		return nil, &refusal{http.StatusUnauthorized, "not opened: open the approval link the host showed you (it works once, in one browser)"}
	}
	if !s.cfg.Now().Before(g.expires) {
		return nil, &refusal{http.StatusForbidden, "refused: the approval expired at " + FormatTime(g.expires)}
	}
	return g, nil
}

// linkInfo is what an approval's page shows.
type linkInfo struct {
	Now      string   `json:"now"`
	Pending  *Pending `json:"pending,omitempty"`
	Gone     string   `json:"gone,omitempty"`
	Decided  string   `json:"decided,omitempty"`
	Signer   string   `json:"signer,omitempty"`
	Expires  string   `json:"expires"`
	Approval string   `json:"approval_id"`
}

// approvalPage serves GET /approval/g/{handle}/ and .../info.
func (s *Server) approvalPage(w http.ResponseWriter, r *http.Request) {
	g, re := s.grantOf(r)
	if re != nil {
		refuse(w, re)
		return
	}
	if r.PathValue("rest") == "" {
		static, _ := fs.Sub(assets, "assets")
		serveAsset(w, r, static, "approval.html")
		return
	}
	if r.PathValue("rest") != "info" {
		http.NotFound(w, r)
		return
	}
	info := linkInfo{Now: s.cfg.Now().UTC().Format(time.RFC3339Nano), Signer: projector.Printable(s.cfg.Signer),
		Expires: g.expires.UTC().Format(time.RFC3339), Approval: projector.Printable(g.id)}
	s.mu.Lock()
	info.Decided = g.decided
	s.mu.Unlock()
	if info.Decided == "" {
		p, why := s.pendingOf(r.Context(), g.session, g.id)
		if p != nil {
			st := state{Pending: []Pending{*p}}
			printable(&st)
			info.Pending = &st.Pending[0]
		} else {
			info.Gone = projector.Printable(why)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(info)
}

// linkDecision is the body of an approval page's decision: no approval,
// the page's own.
type linkDecision struct {
	Op         string `json:"op"`
	Reason     string `json:"reason,omitempty"`
	Passphrase string `json:"passphrase,omitempty"`
}

// decideLink serves POST /approval/g/{handle}/decide.
func (s *Server) decideLink(w http.ResponseWriter, r *http.Request) {
	g, re := s.grantOf(r)
	if re != nil {
		refuse(w, re)
		return
	}
	var d linkDecision
	if !s.readDecision(w, r, &d, &d.Op, &d.Passphrase) {
		return
	}
	s.mu.Lock()
	if g.decided != "" {
		s.mu.Unlock()
		jsonError(w, http.StatusConflict, "this approval was decided through this link already: "+g.decided)
		return
	}
	g.decided = "deciding" // one decision at a time, and one per link
	s.mu.Unlock()
	msg, err := s.cfg.Source.Decide(r.Context(), Decision{Op: d.Op, Session: g.session, ApprovalID: g.id, Reason: d.Reason, Passphrase: d.Passphrase, Link: true})
	s.wake()
	s.mu.Lock()
	if err != nil {
		g.decided = "" // refused (a wrong passphrase, say): the human may try again
	} else {
		g.decided = projector.Printable(msg)
	}
	s.mu.Unlock()
	if err != nil {
		s.cfg.Logger.Warn("console: decision through an approval link refused", "op", d.Op, "approval", g.id, "session", g.session, "err", err)
		jsonError(w, http.StatusConflict, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"message": projector.Printable(msg)})
}
