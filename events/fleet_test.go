package events

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/schemas"
)

// fleetHost is one host's aegis in a fleet test: a store linked to the
// hub, serving one session's approvals with a fake decision maker that
// holds one pending approval and remembers what it was asked.
type fleetHost struct {
	name, session, pending string
	st                     *Store

	mu  sync.Mutex
	ops []ApprovalRequest
}

func (h *fleetHost) handle(req ApprovalRequest) ApprovalReply {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, req)
	switch req.Op {
	case OpList:
		return ApprovalReply{OK: true, Pending: []PendingApproval{{ApprovalID: h.pending, ToolID: "dream"}}}
	case OpApprove:
		if req.ApprovalID != h.pending {
			return ApprovalReply{Error: "unknown approval id"}
		}
		return ApprovalReply{OK: true, Message: "approved " + req.ApprovalID}
	}
	return ApprovalReply{Error: "no"}
}

func (h *fleetHost) decisions() []ApprovalRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []ApprovalRequest
	for _, r := range h.ops {
		if r.Op != OpList {
			out = append(out, r)
		}
	}
	return out
}

// A fleet approver, through the hub, lists every host's pending approvals
// and decides one on exactly the host and session that hold it; a host's
// own link can neither ask another host for a decision nor answer in
// another host's name, and the approver's key reaches no stream.
func TestFleetApprovalsReachTheRightHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	ctx := context.Background()
	approverSeed, approverPub, err := NewLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []*fleetHost{{name: "laptop-1", pending: "apr-1"}, {name: "laptop-2", pending: "apr-2"}}
	var users []string
	seeds := map[string][]byte{}
	for _, h := range hosts {
		seed, pub, err := NewLeafKey()
		if err != nil {
			t.Fatal(err)
		}
		seeds[h.name] = seed
		users = append(users, LeafUser(h.name, pub))
	}
	users = append(users, FleetApproverUser(approverPub))
	hub := hubtest.NewSecured(t, 1, users...)
	for _, h := range hosts {
		if h.session, err = schemas.NewID(time.Now(), rand.Reader); err != nil {
			t.Fatal(err)
		}
		h.st, err = Open(ctx, Config{Dir: filepath.Join(t.TempDir(), h.name), Approvals: true,
			Hub: &HubConfig{URLs: hub.LeafURLs(), Host: h.name, NkeySeed: string(seeds[h.name])}})
		if err != nil {
			t.Fatal(err)
		}
		defer h.st.Close(ctx)
		l, err := h.st.ListenApprovals(h.session, h.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	clientURLs := []string{strings.Replace(hub.ClientURLs()[0], "admin:admin@", "", 1)}
	// The hub's process may not listen yet.
	var f *FleetApprover
	for deadline := time.Now().Add(30 * time.Second); ; {
		if f, err = DialFleet(ctx, HubAdmin{URLs: clientURLs, NkeySeed: string(approverSeed)}); err == nil {
			break
		}
		if !errors.Is(err, nats.ErrNoServers) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer f.Close()
	// A host's link key is no approver: it cannot even connect as one.
	if g, err := DialFleet(ctx, HubAdmin{URLs: clientURLs, NkeySeed: string(seeds["laptop-1"])}); err == nil {
		g.Close()
		t.Fatal("a host's link key connects as an approver")
	}

	// Every host answers a fleet-wide list, each under its own name, once
	// its link is up.
	deadline := time.Now().Add(60 * time.Second)
	for {
		answers, err := f.List(ctx, "", "tester")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, a := range answers {
			if !a.OK || len(a.Pending) != 1 {
				t.Fatalf("answer %+v", a)
			}
			got[a.Host] = a.Session + " " + a.Pending[0].ApprovalID
		}
		if len(got) == 2 {
			for _, h := range hosts {
				if got[h.name] != h.session+" "+h.pending {
					t.Fatalf("%s answered %q, want session %s with %s", h.name, got[h.name], h.session, h.pending)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			for _, h := range hosts {
				t.Logf("%s: leafs %d subs %d", h.name, h.st.ns.NumLeafNodes(), h.st.ns.NumSubscriptions())
			}
			t.Log(hub.Nodes[0].Log())
			t.Fatalf("answers of %d hosts: %v", len(got), got)
		}
	}
	if answers, err := f.List(ctx, "laptop-2", "tester"); err != nil || len(answers) != 1 || answers[0].Host != "laptop-2" {
		t.Fatalf("list laptop-2: %+v, %v", answers, err)
	}
	// A process that serves a second session (a gateway serving HTTP
	// clients) answers a host's list for each.
	second := &fleetHost{name: "laptop-2", pending: "apr-2b", st: hosts[1].st}
	if second.session, err = schemas.NewID(time.Now(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	l2, err := second.st.ListenApprovals(second.session, second.handle)
	if err != nil {
		t.Fatal(err)
	}
	answers, err := f.List(ctx, "laptop-2", "tester")
	if err != nil || len(answers) != 2 {
		t.Fatalf("list laptop-2 with two sessions: %+v, %v", answers, err)
	}
	if got := answers[0].Session + answers[1].Session; got != hosts[1].session+second.session && got != second.session+hosts[1].session {
		t.Fatalf("list laptop-2 answered for %s and %s", answers[0].Session, answers[1].Session)
	}
	l2.Close()

	// An approval goes to its host and session only, and says it came
	// over the hub.
	rep, err := f.Do(ctx, "laptop-1", hosts[0].session, ApprovalRequest{Op: OpApprove, ApprovalID: "apr-1", By: "tester"})
	if err != nil || !rep.OK || rep.Session != hosts[0].session {
		t.Fatalf("approve on laptop-1: %+v, %v", rep, err)
	}
	if d := hosts[0].decisions(); len(d) != 1 || d[0].ApprovalID != "apr-1" || d[0].By != "tester, over the hub" {
		t.Fatalf("laptop-1 was asked %+v", d)
	}
	if d := hosts[1].decisions(); len(d) != 0 {
		t.Fatalf("laptop-2 was asked %+v", d)
	}

	for _, tc := range []struct {
		name string
		try  func(context.Context) error
		want func(error) bool
	}{
		{"decision sent to a whole host", func(c context.Context) error {
			rep, err := f.request(c, "laptop-2", FleetHostSubject("laptop-2"), ApprovalRequest{Op: OpApprove, ApprovalID: "apr-2"})
			if err == nil && (rep.OK || !strings.Contains(rep.Error, "only list requests")) {
				return errors.New("answered " + rep.Error)
			}
			return err
		}, func(err error) bool { return err == nil }},
		{"session the host does not serve", func(c context.Context) error {
			_, err := f.Do(c, "laptop-1", hosts[1].session, ApprovalRequest{Op: OpApprove, ApprovalID: "apr-2"})
			return err
		}, func(err error) bool { return errors.Is(err, ErrNotServing) || errors.Is(err, ErrNoAnswer) }},
		{"host that is not linked", func(c context.Context) error {
			_, err := f.Do(c, "laptop-9", hosts[1].session, ApprovalRequest{Op: OpApprove, ApprovalID: "apr-2"})
			return err
		}, func(err error) bool { return errors.Is(err, ErrNotServing) || errors.Is(err, ErrNoAnswer) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if err := tc.try(c); !tc.want(err) {
				t.Fatalf("got %v", err)
			}
		})
	}
	if d := hosts[1].decisions(); len(d) != 0 {
		t.Fatalf("laptop-2 was asked %+v", d)
	}

	// laptop-1's own link, from its own server, asks laptop-2 for a
	// decision: the hub does not carry it.
	token, _ := newFleetToken()
	if err := hosts[0].st.nc.PublishRequest(FleetSubject("laptop-2", hosts[1].session), fleetReplyPrefix+"laptop-2."+token,
		[]byte(`{"op":"approve","approval_id":"apr-2"}`)); err != nil {
		t.Fatal(err)
	}
	hosts[0].st.nc.Flush()
	// laptop-1 answers in laptop-2's name, and in its own as a control:
	// only its own reaches the approver.
	msgs := make(chan *nats.Msg, 4)
	for _, as := range []string{"laptop-2", "laptop-1"} {
		sub, err := f.nc.ChanSubscribe(fleetReplyPrefix+as+"."+token, msgs)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	f.nc.Flush()
	time.Sleep(time.Second) // the subscriptions reach the leaves
	for _, as := range []string{"laptop-2", "laptop-1"} {
		hosts[0].st.nc.Publish(fleetReplyPrefix+as+"."+token, []byte(`{"ok":true,"session":"`+hosts[1].session+`"}`))
	}
	hosts[0].st.nc.Flush()
	select {
	case m := <-msgs:
		if m.Subject != fleetReplyPrefix+"laptop-1."+token {
			t.Fatalf("the approver got %s from laptop-1's link", m.Subject)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("laptop-1's answer in its own name did not arrive: the test cannot tell a refusal")
	}
	select {
	case m := <-msgs:
		t.Fatalf("the approver got %s from laptop-1's link", m.Subject)
	case <-time.After(time.Second):
	}
	if d := hosts[1].decisions(); len(d) != 0 {
		t.Fatalf("laptop-1's link asked laptop-2: %+v", d)
	}

	// The approver's key reaches no JetStream API.
	js, err := jetstream.New(f.nc)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.Stream(c, MirrorName("laptop-1")); err == nil {
		t.Error("the approver's key reads a mirror")
	}
}
