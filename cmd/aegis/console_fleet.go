package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// The console of a fleet (aegis console --hub): the hosts whose streams
// the hub mirrors, how far each mirror is behind, and the approvals that
// wait on any host, decided over the hub. It reads through the helpers of
// aegis approvals --hub, approve --hub, deny --hub, sessions --hub and
// replay --hub, with two identities:
//
//   - the hub's reader (--hub-creds, or a user in the URLs), which lists
//     the mirrors and reads a host's sessions: a fleet approver's key
//     reaches no stream (events.FleetApproverUser);
//   - the fleet approver (--hub-nkey, else --hub-creds), which lists and
//     decides the approvals. With --hub-nkey its connection carries that
//     key alone: the NATS client would send a user in the URLs, or a
//     credentials file, in its place.
//
// Asking the whole fleet takes a couple of seconds (hosts answer a
// question to all, events.FleetListWait), so the hub is asked in the
// background, one round at a time while a page is open, and the page
// shows the last answers with when they were taken.

// fleetRoundGap is the least time between two rounds of questions to the
// hub.
const fleetRoundGap = time.Second

// fleetAskLimit bounds each question of a round.
const fleetAskLimit = 20 * time.Second

// hubConsole is the console's source with --hub.
type hubConsole struct {
	m   *Main
	ctx context.Context // the console's; its end stops a round
	hub *hubFlags       // as given: --hub, --hub-creds, --hub-nkey, --hub-ca, --host
	key *approverKeyFile

	mu      sync.Mutex
	running bool
	again   bool      // a decision was sent during the round: ask again at once
	ended   time.Time // when the last round ended
	reader  *events.HubReader
	snap    fleetSnap
}

// fleetSnap is what one round learnt.
type fleetSnap struct {
	done       bool
	at         time.Time
	mirrors    []events.MirrorStatus
	mirrorsErr error
	pending    []approvalRow
	answered   int
	pendingErr error
	warnings   []string // of the approvals' listing
	sessions   []console.SessionRow
	sessErr    error
}

func newHubConsole(ctx context.Context, m *Main, hub *hubFlags, key *approverKeyFile) *hubConsole {
	c := &hubConsole{m: m, ctx: ctx, hub: hub, key: key}
	go func() {
		<-ctx.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.reader != nil {
			c.reader.Close()
			c.reader = nil
		}
	}()
	return c
}

// hubName is the hub's URLs without the credentials any of them carry.
func (c *hubConsole) hubName() string {
	return strings.Join(splitURLs(withoutUserinfo(*c.hub.urls)), ",")
}

// withoutUserinfo removes a user and password from each of the URLs.
func withoutUserinfo(urls string) string {
	var out []string
	for _, s := range splitURLs(urls) {
		if u, err := url.Parse(s); err == nil && u.User != nil {
			u.User = nil
			s = u.String()
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// approver returns the flags of the fleet approver: the hub's URLs, and
// --hub-nkey alone when it is given (else --hub-creds), for host ("" for
// the whole fleet).
func (c *hubConsole) approver(host string) *hubFlags {
	urls, creds, nkey, ca := *c.hub.urls, *c.hub.creds, *c.hub.nkey, *c.hub.ca
	if nkey != "" {
		urls, creds = withoutUserinfo(urls), ""
	}
	return &hubFlags{urls: &urls, creds: &creds, nkey: &nkey, ca: &ca, host: &host}
}

// readerAdmin is the connection of the hub's reader.
func (c *hubConsole) readerAdmin() events.HubAdmin {
	return events.HubAdmin{URLs: splitURLs(*c.hub.urls), Credentials: *c.hub.creds, CAFile: *c.hub.ca}
}

// quiet is the command line with its output kept for the console.
func (c *hubConsole) quiet(stdout *bytes.Buffer, stderr *bytes.Buffer) *Main {
	return &Main{Stdout: stdout, Stderr: stderr, Getenv: c.m.Getenv}
}

// look returns the last round's answers and starts the next round when
// none runs and the last ended fleetRoundGap ago.
func (c *hubConsole) look() fleetSnap {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running && time.Since(c.ended) >= fleetRoundGap {
		c.running = true
		go c.round()
	}
	return c.snap
}

// kick asks the hub again as soon as the round under way, if any, ends.
func (c *hubConsole) kick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		c.again = true
		return
	}
	c.ended = time.Time{}
}

func (c *hubConsole) round() {
	snap := fleetSnap{done: true, at: time.Now()}
	ctx, cancel := context.WithTimeout(c.ctx, fleetAskLimit)
	snap.mirrors, snap.mirrorsErr = c.mirrors(ctx)
	cancel()

	var out, errb bytes.Buffer
	ctx, cancel = context.WithTimeout(c.ctx, fleetAskLimit)
	snap.pending, snap.answered, snap.pendingErr = c.quiet(&out, &errb).fleetApprovals(ctx, c.approver(""))
	cancel()
	snap.warnings = warnings(errb.String())

	if *c.hub.host != "" {
		snap.sessions, snap.sessErr = c.hostSessions()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() == nil {
		c.snap = snap
	}
	c.running, c.ended = false, time.Now()
	if c.again {
		c.again, c.ended = false, time.Time{}
	}
}

// mirrors asks the hub for its mirrors, over the reader's connection,
// made again after a failure.
func (c *hubConsole) mirrors(ctx context.Context) ([]events.MirrorStatus, error) {
	c.mu.Lock()
	r := c.reader
	c.mu.Unlock()
	if r == nil {
		var err error
		if r, err = events.DialHubReader(ctx, c.readerAdmin()); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.ctx.Err() != nil { // the console ends
			c.mu.Unlock()
			r.Close()
			return nil, c.ctx.Err()
		}
		c.reader = r
		c.mu.Unlock()
	}
	list, err := r.Mirrors(ctx)
	if err != nil {
		r.Close()
		c.mu.Lock()
		c.reader = nil
		c.mu.Unlock()
	}
	return list, err
}

// hostSessions lists the sessions of the --host's mirror, as aegis
// sessions --hub --host does (folding only what reached the mirror since
// its cached index).
func (c *hubConsole) hostSessions() ([]console.SessionRow, error) {
	ctx, cancel := context.WithTimeout(c.ctx, fleetAskLimit)
	defer cancel()
	var out, errb bytes.Buffer
	urls, empty := *c.hub.urls, ""
	reader := &hubFlags{urls: &urls, creds: c.hub.creds, nkey: &empty, ca: c.hub.ca, host: c.hub.host}
	if err := c.quiet(&out, &errb).sessionsMirror(ctx, reader, true); err != nil {
		return nil, err
	}
	var list []projector.SessionSummary
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		return nil, fmt.Errorf("the sessions of the hub's mirror of %s: %w", *c.hub.host, err)
	}
	return sessionRows(list), nil
}

// warnings returns the warnings aegis printed on stderr, without their
// prefix.
func warnings(stderr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		if w, ok := strings.CutPrefix(sc.Text(), "aegis: warning: "); ok {
			out = append(out, w)
		}
	}
	return out
}

// Fleet lists the hosts: those whose streams the hub mirrors, and any
// other whose aegis holds an approval over the hub.
func (c *hubConsole) Fleet(context.Context) (*console.Fleet, []string, error) {
	snap := c.look()
	f := &console.Fleet{Hub: c.hubName()}
	if !snap.done {
		return f, []string{"asking the hub " + f.Hub + "…"}, nil
	}
	f.CheckedAt = snap.at.UTC().Format(time.RFC3339)
	pending := map[string]int{}
	for _, p := range snap.pending {
		pending[p.Host]++
	}
	seen := map[string]bool{}
	for _, ms := range snap.mirrors {
		h := console.FleetHost{Host: ms.Host, Mirrored: true, Messages: ms.Msgs, LastSeq: ms.LastSeq, Lag: ms.Lag, ActiveMS: -1, Error: ms.Error, Pending: pending[ms.Host]}
		if !ms.LastTime.IsZero() {
			h.LastTime = ms.LastTime.UTC().Format(time.RFC3339)
		}
		if ms.Active >= 0 {
			h.ActiveMS = ms.Active.Milliseconds()
		}
		f.Hosts = append(f.Hosts, h)
		seen[ms.Host] = true
	}
	for _, p := range snap.pending {
		if !seen[p.Host] {
			f.Hosts = append(f.Hosts, console.FleetHost{Host: p.Host, ActiveMS: -1, Pending: pending[p.Host]})
			seen[p.Host] = true
		}
	}
	var notes []string
	if snap.mirrorsErr != nil {
		err := snap.mirrorsErr
		hint := "the mirrors are read with --hub-creds, or a user in the --hub URLs, that may use the hub's JetStream"
		if *c.hub.nkey != "" && *c.hub.creds == "" {
			hint += "; --hub-nkey, a fleet approver's key, reaches no stream"
		}
		return f, notes, fmt.Errorf("the hosts' mirrors: %w (%s)", err, hint)
	}
	if len(snap.mirrors) == 0 {
		notes = append(notes, "the hub holds no mirror of a host: enroll one with aegis hub enroll HOST --hub URL")
	}
	return f, notes, nil
}

// Pending lists the approvals that wait on the hosts of the fleet, as
// aegis approvals --hub lists them.
func (c *hubConsole) Pending(context.Context) ([]console.Pending, []string, error) {
	snap := c.look()
	if !snap.done {
		return nil, []string{"asking the fleet for its pending approvals…"}, nil
	}
	notes := append([]string(nil), snap.warnings...)
	if snap.pendingErr != nil {
		return nil, notes, snap.pendingErr
	}
	notes = append(notes, fmt.Sprintf("approvals asked over the hub at %s: %d aegis %s answered", console.FormatTime(snap.at), snap.answered, plural(snap.answered, "session", "sessions")))
	rows := make([]console.Pending, 0, len(snap.pending))
	for _, p := range snap.pending {
		rows = append(rows, console.Pending{Host: p.Host, Session: p.Session, PID: p.PID, PendingApproval: p.PendingApproval})
	}
	return rows, notes, nil
}

// Sessions lists the sessions of the --host's mirror, if one was named.
func (c *hubConsole) Sessions(context.Context) ([]console.SessionRow, []string, error) {
	if *c.hub.host == "" {
		return nil, []string{"with --hub, the sessions of one host are listed when --host names it"}, nil
	}
	snap := c.look()
	if !snap.done {
		return nil, nil, nil
	}
	if snap.sessErr != nil {
		return nil, nil, snap.sessErr
	}
	return snap.sessions, []string{fmt.Sprintf("sessions of %s from the hub's mirror of it (a session without a close there is unclosed: the hub cannot tell whether it still runs)", *c.hub.host)}, nil
}

// Transcript prints a session of the --host's mirror, as aegis replay
// --hub --host does; it does not follow it.
func (c *hubConsole) Transcript(ctx context.Context, session string, line func(string) error) error {
	if *c.hub.host == "" {
		return errors.New("with --hub, a transcript is read from the mirror of the host that --host names")
	}
	urls, empty := *c.hub.urls, ""
	reader := &hubFlags{urls: &urls, creds: c.hub.creds, nkey: &empty, ca: c.hub.ca, host: c.hub.host}
	lw := &lineWriter{fn: line}
	var errb bytes.Buffer
	q := &Main{Stdout: lw, Stderr: &errb, Getenv: c.m.Getenv}
	return q.replayMirror(ctx, reader, session, replayOpts{})
}

// Decide sends the request aegis approve --hub URL --host HOST --session
// SESSION ID (or deny, with --reason) sends, over the hub; with
// --approver-key it is signed with the passphrase the page sent, as aegis
// approve --approver-key signs it with the one typed on the terminal.
func (c *hubConsole) Decide(ctx context.Context, d console.Decision) (string, error) {
	if !events.ValidHost(d.Host) {
		return "", errors.New("a decision over the hub names the host the page showed the approval on")
	}
	defer c.kick()
	req := events.ApprovalRequest{Op: d.Op, ApprovalID: d.ApprovalID, By: c.m.requester()}
	var key *approverKeyFile
	switch d.Op {
	case events.OpDeny:
		req.Reason = d.Reason
	case events.OpApprove:
		key = c.key
	}
	var out, errb bytes.Buffer
	q := c.quiet(&out, &errb)
	if key != nil {
		q.OpenTerminal = pageTerminal(d.Passphrase, key.path)
	}
	if err := q.fleetDecide(ctx, c.approver(d.Host), d.Session, req, key); err != nil {
		return "", err
	}
	msg := strings.TrimSpace(out.String())
	if w := warnings(errb.String()); len(w) > 0 {
		msg += " (" + strings.Join(w, "; ") + ")"
	}
	return msg, nil
}

// pageTerminal is the terminal of a decision from the page: it types the
// passphrase the page sent, once; asked again (that one was wrong), it
// says so, and nothing is sent.
func pageTerminal(pass, keyPath string) func() (Terminal, error) {
	used := false
	return func() (Terminal, error) {
		if used {
			return nil, fmt.Errorf("that is not the passphrase of %s: nothing was sent, the approval is still pending", filepath.Base(keyPath))
		}
		used = true
		return &typedTerminal{pass: []byte(pass)}, nil
	}
}

// typedTerminal answers one passphrase.
type typedTerminal struct{ pass []byte }

func (t *typedTerminal) ReadPassphrase(string) ([]byte, error) { return t.pass, nil }
func (t *typedTerminal) Close() error                          { return nil }
