package events

// Approvals over the hub. A host's aegis that links to a hub and serves
// approvals also takes the requests of the fleet's approvers, which come
// over its leaf link:
//
//   - aegis-fleet.<host>.<session>: approve, deny or list one session's
//     approvals ([FleetSubject]);
//   - aegis-fleet.<host>.all: list the host's ([FleetHostSubject]);
//   - aegis-fleet-all: who is there ([FleetListSubject]).
//
// A request to one host names the reply subject
// aegis-fleet-reply.<host>.<token>, the one the hub lets that host answer
// on ([LeafUser]); the host answers there and nowhere else. So the host an
// answer comes from is the hub's word, not the host's, and a host cannot
// answer for another. A request is handled exactly as one of the local
// channel ([ApprovalConfig]), by the same handler, except that its By says
// it came over the hub: the decision is the same signed line.
//
// The fleet-wide request is answered on aegis-fleet-reply.<token>, where
// any host may answer in any name (the hub only forwards interest in a
// subject a host may answer on, and a wildcard there would let every host
// answer for every other), so its answer says nothing but the host's name
// and session: the asker then asks each host on that host's own subjects.
// A host that lies about its name sends the asker to a subject only the
// real host can answer.
//
// Who may ask is the hub's configuration: [FleetApproverUser] may publish
// there, a host's link may not.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aegis-dev/aegis/schemas"
)

// FleetListSubject takes list requests to every host of the fleet.
const FleetListSubject = "aegis-fleet-all"

const (
	fleetReplyPrefix = "aegis-fleet-reply."
	// fleetTokenBytes is the length of a reply token, in hex characters.
	fleetTokenBytes = 32
)

// FleetSubject is the subject on which host's aegis takes approval
// requests for session over the hub.
func FleetSubject(host, session string) string { return "aegis-fleet." + host + "." + session }

// FleetHostSubject is the subject on which host's aegis takes list
// requests over the hub.
func FleetHostSubject(host string) string { return "aegis-fleet." + host + ".all" }

// replyTo returns where the answer to m goes, and false for a request
// whose reply subject is not one of its own subject's (such a request is
// dropped unanswered: the responder never publishes where a request
// points it).
func (l *ApprovalListener) replyTo(m *nats.Msg) (string, bool) {
	switch m.Subject {
	case ApprovalSubject(l.session):
		prefix := ApprovalReplyPrefix(l.session) + "."
		if !strings.HasPrefix(m.Reply, prefix) || len(m.Reply) == len(prefix) || strings.ContainsAny(m.Reply, "*> \t\r\n") {
			return "", false
		}
		return m.Reply, true
	case FleetListSubject:
		token, ok := strings.CutPrefix(m.Reply, fleetReplyPrefix)
		return m.Reply, ok && validFleetToken(token)
	case FleetSubject(l.host, l.session), FleetHostSubject(l.host):
		token, ok := strings.CutPrefix(m.Reply, fleetReplyPrefix+l.host+".")
		return m.Reply, ok && validFleetToken(token)
	}
	return "", false
}

func validFleetToken(t string) bool {
	if len(t) != fleetTokenBytes {
		return false
	}
	for _, c := range t {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func newFleetToken() (string, error) {
	var b [fleetTokenBytes / 2]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// overTheHub marks who asked as having asked over the hub.
func overTheHub(by string) string {
	if by == "" {
		return "an approver over the hub"
	}
	return by + ", over the hub"
}

// FleetListWait is how long [FleetApprover.List] waits for the answers of
// the whole fleet: there is no telling how many hosts will answer.
const FleetListWait = 2 * time.Second

// FleetApprover is a connection to a hub as a fleet approver.
type FleetApprover struct {
	nc *nats.Conn

	mu       sync.Mutex
	asyncErr error // the last error the hub reported outside a reply
}

// DialFleet connects to the hub's client URLs as an approver.
func DialFleet(ctx context.Context, hub HubAdmin) (*FleetApprover, error) {
	f := &FleetApprover{}
	nc, err := hub.dial(ctx, "aegis approve", nats.NoCallbacksAfterClientClose(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			f.mu.Lock()
			f.asyncErr = err
			f.mu.Unlock()
		}))
	if err != nil {
		return nil, err
	}
	f.nc = nc
	return f, nil
}

// refused returns the hub's refusal of a subscription or a publish, nil
// if there was none.
func (f *FleetApprover) refused() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asyncErr != nil && errors.Is(f.asyncErr, nats.ErrPermissionViolation) {
		return fmt.Errorf("the hub refused it (are these an approver's credentials?): %w", f.asyncErr)
	}
	return nil
}

// Close closes the connection.
func (f *FleetApprover) Close() { f.nc.Close() }

// FleetAnswer is one session's answer over the hub. Host is the host the
// hub delivered it from.
type FleetAnswer struct {
	Host string
	ApprovalReply
}

// List asks every linked aegis process of host ("" for every host) for
// its pending approvals, and returns the answers in host order. For the
// whole fleet it first waits up to [FleetListWait] to learn who is there,
// then asks each host on its own subject; one host it asks at once (a host
// name is one JetStream domain: one aegis process).
func (f *FleetApprover) List(ctx context.Context, host string, by string) ([]FleetAnswer, error) {
	hosts := []string{host}
	if host == "" {
		var err error
		if hosts, err = f.hosts(ctx, by); err != nil {
			return nil, err
		}
	} else if !ValidHost(host) {
		return nil, fmt.Errorf("host name %q: use letters, digits, - and _ (at most 63)", host)
	}
	var out []FleetAnswer
	for _, h := range hosts {
		reps, err := f.gather(ctx, h, FleetHostSubject(h), ApprovalRequest{Op: OpList, By: by}, fleetGather)
		if errors.Is(err, nats.ErrNoResponders) {
			continue // gone since it said it was there
		}
		if err != nil {
			return out, fmt.Errorf("host %s: %w", h, err)
		}
		for _, rep := range reps {
			out = append(out, FleetAnswer{Host: h, ApprovalReply: rep})
		}
	}
	return out, nil
}

// hosts returns the names of the hosts whose aegis answers the fleet-wide
// request within FleetListWait, sorted.
func (f *FleetApprover) hosts(ctx context.Context, by string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, FleetListWait)
	defer cancel()
	data, err := json.Marshal(ApprovalRequest{Op: OpList, By: by})
	if err != nil {
		return nil, err
	}
	token, err := newFleetToken()
	if err != nil {
		return nil, err
	}
	reply := fleetReplyPrefix + token
	msgs := make(chan *nats.Msg, 256)
	sub, err := f.nc.ChanSubscribe(reply, msgs)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the answers: %w", err)
	}
	defer sub.Unsubscribe()
	if err := f.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("reach the hub: %w", err)
	}
	if err := f.nc.PublishRequest(FleetListSubject, reply, data); err != nil {
		return nil, fmt.Errorf("send the request: %w", err)
	}
	seen := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			if err := f.refused(); err != nil {
				return nil, err
			}
			out := make([]string, 0, len(seen))
			for h := range seen {
				out = append(out, h)
			}
			sort.Strings(out)
			return out, nil
		case m := <-msgs:
			if m.Header.Get("Status") == "503" {
				return nil, nil // no aegis is linked
			}
			var rep ApprovalReply
			if json.Unmarshal(m.Data, &rep) == nil && ValidHost(rep.Host) {
				seen[rep.Host] = true
			}
		}
	}
}

// Do sends one request to session's aegis on host over the hub and
// returns its answer. Without a deadline in ctx it waits at most
// [DefaultApprovalTimeout]. No aegis process of that session linked to
// the hub is an [*ApproverError] of kind [ErrNotServing].
func (f *FleetApprover) Do(ctx context.Context, host, session string, req ApprovalRequest) (ApprovalReply, error) {
	if !ValidHost(host) {
		return ApprovalReply{}, fmt.Errorf("host name %q: use letters, digits, - and _ (at most 63)", host)
	}
	if !schemas.ValidID(session) {
		return ApprovalReply{}, fmt.Errorf("bad session id %q", session)
	}
	rep, err := f.request(ctx, host, FleetSubject(host, session), req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return ApprovalReply{}, &ApproverError{Session: session, Kind: ErrNotServing, Err: fmt.Errorf("no aegis process of host %s serves it over the hub", host)}
	case errors.Is(err, context.DeadlineExceeded):
		return ApprovalReply{}, &ApproverError{Session: session, Kind: ErrNoAnswer, Err: err}
	}
	return rep, err
}

// request sends req to subject, one of host's, and waits for the answer
// on host's reply subject (the hub's "no responders" status, which comes
// there too, is [nats.ErrNoResponders]). Without a deadline in ctx it
// waits at most [DefaultApprovalTimeout].
func (f *FleetApprover) request(ctx context.Context, host, subject string, req ApprovalRequest) (ApprovalReply, error) {
	reps, err := f.gather(ctx, host, subject, req, 0)
	if err != nil {
		return ApprovalReply{}, err
	}
	return reps[0], nil
}

// fleetGather is how long a host-wide list waits for more answers after
// the first: an aegis process answers once for each session it serves
// (a gateway serving HTTP clients serves several).
const fleetGather = 300 * time.Millisecond

// gather is request that, with a window, takes every answer that comes
// within window of the first, one per session; it returns at least one.
func (f *FleetApprover) gather(ctx context.Context, host, subject string, req ApprovalRequest, window time.Duration) ([]ApprovalReply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultApprovalTimeout)
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxApprovalRequestBytes {
		return nil, fmt.Errorf("approval request of %d bytes is larger than the %d KiB limit", len(data), MaxApprovalRequestBytes>>10)
	}
	token, err := newFleetToken()
	if err != nil {
		return nil, err
	}
	reply := fleetReplyPrefix + host + "." + token
	sub, err := f.nc.SubscribeSync(reply)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the answer: %w", err)
	}
	defer sub.Unsubscribe()
	if err := f.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("reach the hub: %w", err)
	}
	if err := f.nc.PublishRequest(subject, reply, data); err != nil {
		return nil, fmt.Errorf("send the request: %w", err)
	}
	var out []ApprovalReply
	seen := map[string]bool{}
	wait := ctx
	for {
		m, err := sub.NextMsgWithContext(wait)
		if err != nil {
			if len(out) > 0 {
				return out, nil // the window closed
			}
			if rerr := f.refused(); rerr != nil {
				return nil, rerr
			}
			return nil, err
		}
		if m.Header.Get("Status") == "503" {
			if len(out) > 0 {
				continue
			}
			return nil, nats.ErrNoResponders
		}
		var rep ApprovalReply
		if err := json.Unmarshal(m.Data, &rep); err != nil || !schemas.ValidID(rep.Session) || seen[rep.Session] {
			continue // not an answer of an aegis process, or one already had
		}
		if !rep.OK && rep.Error == "" {
			rep.Error = "refused"
		}
		seen[rep.Session] = true
		out = append(out, rep)
		if window <= 0 {
			return out, nil
		}
		if len(out) == 1 {
			var cancel context.CancelFunc
			wait, cancel = context.WithTimeout(ctx, window)
			defer cancel()
		}
	}
}
