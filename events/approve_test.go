package events

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/schemas"
)

// approvalServer is an embedded server set up as Open sets it up with
// Config.Approvals: JetStream, the AEGIS stream on aegis.>, the approval
// listener, and the store's in-process connection as the internal user.
type approvalServer struct {
	ns      *server.Server
	ac      *ApprovalConfig
	nc      *nats.Conn // the store's connection
	stream  jetstream.Stream
	session string
}

func newApprovalServer(t *testing.T) *approvalServer {
	t.Helper()
	opts := &server.Options{
		ServerName: "aegis-test", JetStream: true, StoreDir: filepath.Join(t.TempDir(), "jetstream"),
		DontListen: true, NoSigs: true, NoLog: true,
	}
	ac, err := ApprovalOptions("")
	if err != nil {
		t.Fatal(err)
	}
	ac.Apply(opts)
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	if err := ac.Started(ns); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), ac.InternalUserInfo())
	if err != nil {
		t.Fatalf("internal in-process connection: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{
		Name: StreamName, Subjects: []string{"aegis.>"}, Storage: jetstream.FileStorage, DenyDelete: true, DenyPurge: true,
	})
	if err != nil {
		t.Fatalf("internal user cannot use JetStream: %v", err)
	}
	session, _ := schemas.NewID(time.Now(), rand.Reader)
	return &approvalServer{ns: ns, ac: ac, nc: nc, stream: stream, session: session}
}

// streamMsgs is how many messages the AEGIS stream holds; -1 if it is gone.
func (a *approvalServer) streamMsgs(t *testing.T) int64 {
	t.Helper()
	info, err := a.stream.Info(context.Background())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return -1
		}
		t.Fatalf("stream info: %v", err)
	}
	return int64(info.State.Msgs)
}

// fakeProxy keeps pending approvals the way a proxy's projection would.
type fakeProxy struct {
	mu      sync.Mutex
	pending map[string]PendingApproval
	used    map[string]bool
	got     []ApprovalRequest
}

func newFakeProxy(ids ...string) *fakeProxy {
	f := &fakeProxy{pending: map[string]PendingApproval{}, used: map[string]bool{}}
	for _, id := range ids {
		f.pending[id] = PendingApproval{ApprovalID: id, ToolID: "fs.write", RequestedAt: time.Now().UTC().Truncate(time.Second)}
	}
	return f
}

func (f *fakeProxy) handle(req ApprovalRequest) ApprovalReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	switch req.Op {
	case OpList:
		rep := ApprovalReply{OK: true}
		for _, p := range f.pending {
			rep.Pending = append(rep.Pending, p)
		}
		return rep
	default:
		if f.used[req.ApprovalID] {
			return ApprovalReply{Error: fmt.Sprintf("approval %s was already used", req.ApprovalID)}
		}
		if _, ok := f.pending[req.ApprovalID]; !ok {
			return ApprovalReply{Error: fmt.Sprintf("unknown approval %s", req.ApprovalID)}
		}
		delete(f.pending, req.ApprovalID)
		f.used[req.ApprovalID] = true
		return ApprovalReply{OK: true, Message: fmt.Sprintf("%sd %s", req.Op, req.ApprovalID)}
	}
}

func (f *fakeProxy) requests() []ApprovalRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ApprovalRequest(nil), f.got...)
}

// listen starts the proxy side through ApprovalConfig.Listen, the
// least-privilege responder connection.
func (a *approvalServer) listen(t *testing.T, f *fakeProxy) *ApprovalListener {
	t.Helper()
	l, err := a.ac.Listen(a.ns, a.session, "/state", f.handle)
	if err != nil {
		t.Fatalf("Listen = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dialApprover(t *testing.T, c Creds) *Approver {
	t.Helper()
	ap, err := DialApprover(context.Background(), c)
	if err != nil {
		t.Fatalf("DialApprover = %v", err)
	}
	t.Cleanup(ap.Close)
	return ap
}

// waitAsyncErr waits for the server's asynchronous error on ap (a
// permissions violation arrives as -ERR, not as a reply).
func waitAsyncErr(t *testing.T, ap *Approver, want string) {
	t.Helper()
	ap.nc.Flush()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ap.mu.Lock()
		err := ap.asyncErr
		ap.mu.Unlock()
		if err != nil && strings.Contains(err.Error(), want) {
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("async error %v is not a permissions violation", err)
			}
			ap.mu.Lock()
			ap.asyncErr = nil
			ap.mu.Unlock()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	t.Fatalf("no permissions violation containing %q (last async error: %v)", want, ap.asyncErr)
}

func TestApprovalChannelRequestReply(t *testing.T) {
	a := newApprovalServer(t)
	f := newFakeProxy("apr-gate-1", "apr-gate-2")
	l := a.listen(t, f)
	creds := l.Creds()
	if creds.Session != a.session || creds.User != ApproverUser || creds.PID != os.Getpid() || creds.StateDir != "/state" ||
		!strings.HasPrefix(creds.URL, "nats://127.0.0.1:") || len(creds.Password) != 64 {
		t.Fatalf("creds = %+v", creds)
	}
	ap := dialApprover(t, creds)
	ctx := context.Background()

	rep, err := ap.Do(ctx, ApprovalRequest{Op: OpList, By: "alice@host, pid 1"})
	if err != nil || !rep.OK || len(rep.Pending) != 2 {
		t.Fatalf("list = %+v, %v", rep, err)
	}
	rep, err = ap.Do(ctx, ApprovalRequest{Op: OpApprove, ApprovalID: "apr-gate-1", By: "alice@host, pid 1"})
	if err != nil || !rep.OK || rep.Message != "approved apr-gate-1" {
		t.Fatalf("approve = %+v, %v", rep, err)
	}
	rep, err = ap.Do(ctx, ApprovalRequest{Op: OpApprove, ApprovalID: "apr-gate-1"})
	if err != nil || rep.OK || !strings.Contains(rep.Error, "already used") {
		t.Fatalf("second approve = %+v, %v", rep, err)
	}
	rep, err = ap.Do(ctx, ApprovalRequest{Op: OpDeny, ApprovalID: "apr-gate-2", Reason: "not today"})
	if err != nil || !rep.OK {
		t.Fatalf("deny = %+v, %v", rep, err)
	}
	got := f.requests()
	if len(got) != 4 || got[1].By != "alice@host, pid 1" || got[3].Reason != "not today" || got[3].Op != OpDeny {
		t.Errorf("handler saw %+v", got)
	}
	if n := a.streamMsgs(t); n != 0 {
		t.Errorf("the channel wrote %d messages to the stream", n)
	}
}

func TestApproverMayPublishOnlyItsRequests(t *testing.T) {
	a := newApprovalServer(t)
	l := a.listen(t, newFakeProxy())
	ap := dialApprover(t, l.Creds())
	other, _ := schemas.NewID(time.Now(), rand.Reader)
	// The store's connection listens everywhere the approver must not reach.
	seen := make(chan *nats.Msg, 16)
	for _, subj := range []string{"aegis.>", "$JS.API.>", "aegis-approve." + other, "aegis-approve-reply.>", "$SYS.>", "_INBOX.>"} {
		sub, err := a.nc.ChanSubscribe(subj, seen)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	a.nc.Flush()
	for _, subj := range []string{
		"aegis." + a.session + ".note",
		"aegis.x.note",
		"aegis." + a.session + ".approval.resolved",
		"$JS.API.STREAM.INFO.AEGIS",
		"$JS.API.STREAM.DELETE.AEGIS",
		"$JS.API.STREAM.PURGE.AEGIS",
		"aegis-approve." + other,
		"aegis-approve-reply." + a.session + ".forged",
		"$SYS.REQ.SERVER.PING",
		"_INBOX.x",
	} {
		t.Run(subj, func(t *testing.T) {
			if err := ap.nc.Publish(subj, []byte(`{"op":"approve","approval_id":"x"}`)); err != nil {
				t.Fatalf("Publish = %v", err)
			}
			waitAsyncErr(t, ap, fmt.Sprintf("Permissions Violation for Publish to %q", subj))
		})
	}
	// A request to the JetStream API gets no answer either.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := ap.nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO.AEGIS", nil); err == nil {
		t.Error("the approver got a JetStream API answer")
	}
	waitAsyncErr(t, ap, "Permissions Violation for Publish to \"$JS.API.STREAM.INFO.AEGIS\"")
	a.nc.Flush()
	select {
	case m := <-seen:
		t.Errorf("a message from the approver reached %s", m.Subject)
	case <-time.After(100 * time.Millisecond):
	}
	if n := a.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

func TestApproverMaySubscribeOnlyToItsReplies(t *testing.T) {
	a := newApprovalServer(t)
	l := a.listen(t, newFakeProxy())
	ap := dialApprover(t, l.Creds())
	got := make(chan *nats.Msg, 64)
	for _, subj := range []string{"aegis.>", "_INBOX.>", "$JS.>", "$SYS.>", ">", "aegis-approve." + a.session, "aegis-approve-reply.>"} {
		t.Run(subj, func(t *testing.T) {
			if _, err := ap.nc.ChanSubscribe(subj, got); err != nil {
				t.Fatalf("ChanSubscribe = %v", err)
			}
			waitAsyncErr(t, ap, fmt.Sprintf("Permissions Violation for Subscription to %q", subj))
		})
	}
	// The store writes to the stream: the pub ack travels on the store's
	// _INBOX, the event on aegis.>; the approver sees neither.
	js, _ := jetstream.New(a.nc)
	if _, err := js.Publish(context.Background(), "aegis."+a.session+".note", []byte(`{"secret":1}`)); err != nil {
		t.Fatal(err)
	}
	a.nc.Publish("aegis-approve."+a.session, []byte(`{"op":"list"}`))
	a.nc.Flush()
	select {
	case m := <-got:
		t.Errorf("the approver received %s: %s", m.Subject, m.Data)
	case <-time.After(200 * time.Millisecond):
	}
	// Its own replies still arrive.
	if rep, err := ap.Do(context.Background(), ApprovalRequest{Op: OpList}); err != nil || !rep.OK {
		t.Errorf("list after the violations = %+v, %v", rep, err)
	}
}

func TestApprovalChannelRefusesOtherCredentials(t *testing.T) {
	a := newApprovalServer(t)
	url := a.ac.URL()

	// Before the channel is bound to a session, even the right password is refused.
	early, _ := a.ac.Creds(a.session, "", time.Now())
	if early.Password != "" {
		t.Fatalf("Creds before Bind = %+v", early)
	}
	if _, err := nats.Connect(url, nats.UserInfo(ApproverUser, a.ac.approverPassword), nats.NoReconnect()); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("approver before Bind: %v, want an authorization violation", err)
	}

	l := a.listen(t, newFakeProxy())
	good := l.Creds()
	cases := []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"wrong password", []nats.Option{nats.UserInfo(ApproverUser, strings.Repeat("0", 64))}},
		{"empty password", []nats.Option{nats.UserInfo(ApproverUser, "")}},
		{"unknown user", []nats.Option{nats.UserInfo("admin", good.Password)}},
		{"token", []nats.Option{nats.Token(good.Password)}},
		{"internal identity over TCP", []nats.Option{a.ac.InternalUserInfo()}},
		{"responder identity over TCP", []nats.Option{nats.UserInfo(responderUser, a.ac.responderPassword)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(url, append(tc.opts, nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("err = %v, want an authorization violation", err)
			}
		})
	}
	bad := good
	bad.Password = strings.Repeat("f", 64)
	_, err := DialApprover(context.Background(), bad)
	if !errors.Is(err, ErrCredsRejected) || err.Error() != "credentials for session "+a.session+" were rejected" {
		t.Errorf("DialApprover with a wrong password = %v", err)
	}
}

// fakeClient is a connection as the server's authentication sees it.
type fakeClient struct {
	opts server.ClientOpts
	addr net.Addr
	kind int
	user *server.User
}

func (f *fakeClient) GetOpts() *server.ClientOpts                 { return &f.opts }
func (f *fakeClient) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (f *fakeClient) RegisterUser(u *server.User)                 { f.user = u }
func (f *fakeClient) RemoteAddress() net.Addr                     { return f.addr }
func (f *fakeClient) GetNonce() []byte                            { return nil }
func (f *fakeClient) Kind() int                                   { return f.kind }
func (f *fakeClient) GetID() uint64                               { return 1 }

// Every identity is bound to its transport, checked directly (a refused
// in-process connection takes nats.go ten seconds to notice).
func TestApprovalAuthCheck(t *testing.T) {
	ac, _ := ApprovalOptions("")
	auth := approvalAuth{ac}
	pipe, _ := net.Pipe()
	defer pipe.Close()
	inproc := pipe.RemoteAddr()
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
	remote := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5555}
	check := func(user, pass string, addr net.Addr) *server.User {
		c := &fakeClient{opts: server.ClientOpts{Username: user, Password: pass}, addr: addr, kind: server.CLIENT}
		if !auth.Check(c) {
			return nil
		}
		if c.user == nil {
			t.Fatalf("%s accepted without registering a user", user)
		}
		return c.user
	}
	if check(ApproverUser, ac.approverPassword, loop) != nil {
		t.Error("approver accepted before Bind")
	}
	if check(responderUser, ac.responderPassword, inproc) != nil {
		t.Error("responder accepted before Bind")
	}
	session, _ := schemas.NewID(time.Now(), rand.Reader)
	ac.Bind(session)
	if u := check(internalUser, ac.internalPassword, inproc); u == nil || u.Permissions != nil {
		t.Errorf("internal in-process = %+v, want full permissions", u)
	}
	if u := check(ApproverUser, ac.approverPassword, loop); u == nil || u.Permissions == nil ||
		fmt.Sprint(u.Permissions.Publish.Allow) != "[aegis-approve."+session+"]" ||
		fmt.Sprint(u.Permissions.Subscribe.Allow) != "[aegis-approve-reply."+session+".>]" {
		t.Errorf("approver over loopback = %+v", u)
	}
	if u := check(responderUser, ac.responderPassword, inproc); u == nil || u.Permissions == nil ||
		fmt.Sprint(u.Permissions.Subscribe.Allow) != "[aegis-approve."+session+"]" ||
		fmt.Sprint(u.Permissions.Publish.Allow) != "[aegis-approve-reply."+session+".>]" {
		t.Errorf("responder in-process = %+v", u)
	}
	refused := []struct {
		name, user, pass string
		addr             net.Addr
	}{
		{"internal over TCP", internalUser, ac.internalPassword, loop},
		{"internal without address", internalUser, ac.internalPassword, nil},
		{"responder over TCP", responderUser, ac.responderPassword, loop},
		{"approver in-process", ApproverUser, ac.approverPassword, inproc},
		{"approver from a non-loopback address", ApproverUser, ac.approverPassword, remote},
		{"no credentials in-process", "", "", inproc},
		{"no credentials over TCP", "", "", loop},
		{"approver with the internal password", ApproverUser, ac.internalPassword, loop},
		{"internal with the approver password", internalUser, ac.approverPassword, inproc},
		{"internal with an empty password", internalUser, "", inproc},
	}
	for _, tc := range refused {
		if u := check(tc.user, tc.pass, tc.addr); u != nil {
			t.Errorf("%s: accepted as %+v", tc.name, u)
		}
	}
	c := &fakeClient{opts: server.ClientOpts{Username: internalUser, Password: ac.internalPassword}, addr: inproc, kind: server.LEAF}
	if auth.Check(c) {
		t.Error("a leaf node connection was accepted")
	}
	c = &fakeClient{opts: server.ClientOpts{Username: ApproverUser, Password: ac.approverPassword, Token: "t"}, addr: loop, kind: server.CLIENT}
	if auth.Check(c) {
		t.Error("a connection with a token as well was accepted")
	}
}

func TestApprovalChannelBindsSessions(t *testing.T) {
	if _, err := ApprovalOptions("a.>"); err == nil {
		t.Error("ApprovalOptions accepted a subject pattern as session")
	}
	ac, err := ApprovalOptions("")
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := schemas.NewID(time.Now(), rand.Reader)
	s2, _ := schemas.NewID(time.Now(), rand.Reader)
	if err := ac.Bind(s1); err != nil {
		t.Fatal(err)
	}
	if err := ac.Bind(s1); err != nil {
		t.Errorf("Bind of the same session again = %v", err)
	}
	if err := ac.Bind(s2); err != nil {
		t.Errorf("Bind of a second session = %v", err)
	}
	if got := ac.Sessions(); len(got) != 2 {
		t.Errorf("Sessions = %v, want both", got)
	}
	ac.Unbind(s2)
	if got := ac.Sessions(); len(got) != 1 || got[0] != s1 {
		t.Errorf("Sessions after Unbind = %v, want [%s]", got, s1)
	}
	if _, err := ac.Creds(s1, "/s", time.Now()); err == nil {
		t.Error("Creds before Started succeeded")
	}
	opts := &server.Options{}
	ac.Apply(opts)
	if opts.Host != "127.0.0.1" || opts.Port != server.RANDOM_PORT || opts.DontListen || opts.NoAuthUser != "" || opts.Users != nil || opts.CustomClientAuthentication == nil {
		t.Errorf("Apply set %+v", opts)
	}
}

// A request with a reply subject outside the approver's inbox is never
// answered: the responder would otherwise publish wherever the approver
// pointed it. Served here over the store's own full-permission connection,
// so that only the listener's check stands in the way.
func TestApprovalRepliesGoOnlyToTheApproverInbox(t *testing.T) {
	a := newApprovalServer(t)
	if err := a.ac.Bind(a.session); err != nil {
		t.Fatal(err)
	}
	f := newFakeProxy("apr-1")
	l, err := ListenApprovals(a.nc, a.session, f.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	creds, _ := a.ac.Creds(a.session, "", time.Now())
	ap := dialApprover(t, creds)
	for _, reply := range []string{
		"aegis." + a.session + ".approval.resolved",
		"$JS.API.STREAM.DELETE.AEGIS",
		"$JS.API.STREAM.PURGE.AEGIS",
		"_INBOX.x",
		"aegis-approve-reply." + a.session,
		"aegis-approve." + a.session,
	} {
		if err := ap.nc.PublishRequest(ApprovalSubject(a.session), reply, []byte(`{"op":"approve","approval_id":"apr-1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// A proper request after them is answered, so the ones before were seen.
	rep, err := ap.Do(context.Background(), ApprovalRequest{Op: OpList})
	if err != nil || !rep.OK || len(rep.Pending) != 1 {
		t.Fatalf("list = %+v, %v; the redirected approvals must not have reached the handler", rep, err)
	}
	if got := f.requests(); len(got) != 1 {
		t.Errorf("handler saw %d requests, want only the list: %+v", len(got), got)
	}
	if n := a.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages after redirected replies (-1: deleted)", n)
	}
}

func TestApprovalMalformedRequestsAreAnswered(t *testing.T) {
	a := newApprovalServer(t)
	f := newFakeProxy("apr-1")
	l := a.listen(t, f)
	ap := dialApprover(t, l.Creds())
	big, _ := json.Marshal(ApprovalRequest{Op: OpDeny, ApprovalID: "apr-1", Reason: strings.Repeat("x", MaxApprovalRequestBytes)})
	cases := []struct {
		name, data, want string
	}{
		{"not JSON", `approve apr-1`, "malformed request"},
		{"empty", ``, "malformed request"},
		{"array", `[]`, "malformed request"},
		{"no op", `{}`, "no op"},
		{"unknown op", `{"op":"grant","approval_id":"apr-1"}`, `unknown op "grant"`},
		{"approve without id", `{"op":"approve"}`, "approve needs an approval_id"},
		{"unknown field", `{"op":"approve","approval_id":"apr-1","scope":"*"}`, `unknown field "scope"`},
		{"two objects", `{"op":"list"}{"op":"approve","approval_id":"apr-1"}`, "data after the JSON object"},
		{"id too long", `{"op":"deny","approval_id":"` + strings.Repeat("a", MaxApprovalIDBytes+1) + `"}`, "longer than 256 bytes"},
		{"too large", string(big), "larger than the 64 KiB limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := ap.nc.Request(ApprovalSubject(a.session), []byte(tc.data), 5*time.Second)
			if err != nil {
				t.Fatalf("no reply: %v", err)
			}
			var rep ApprovalReply
			if err := json.Unmarshal(msg.Data, &rep); err != nil {
				t.Fatalf("reply %q: %v", msg.Data, err)
			}
			if rep.OK || !strings.Contains(rep.Error, tc.want) {
				t.Errorf("reply = %+v, want an error containing %q", rep, tc.want)
			}
		})
	}
	if got := f.requests(); len(got) != 0 {
		t.Errorf("malformed requests reached the handler: %+v", got)
	}
	if _, err := ap.Do(context.Background(), ApprovalRequest{Op: OpDeny, ApprovalID: "apr-1", Reason: strings.Repeat("x", MaxApprovalRequestBytes)}); err == nil || !strings.Contains(err.Error(), "64 KiB") {
		t.Errorf("Do of an oversized request = %v", err)
	}
}

func TestApproverErrorsSayWhatHappened(t *testing.T) {
	a := newApprovalServer(t)
	l := a.listen(t, newFakeProxy())
	creds := l.Creds()
	ap := dialApprover(t, creds)
	l.Close()
	_, err := ap.Do(context.Background(), ApprovalRequest{Op: OpList})
	if !errors.Is(err, ErrNotServing) {
		t.Errorf("Do after the listener closed = %v, want ErrNotServing", err)
	}

	// Nothing listens on the port any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := creds
	dead.URL = "nats://" + ln.Addr().String()
	ln.Close()
	_, err = DialApprover(context.Background(), dead)
	want := "no aegis process is listening for session " + creds.Session + " (it may have exited)"
	if !errors.Is(err, ErrNotListening) || err.Error() != want {
		t.Errorf("DialApprover to a closed port = %v, want %q", err, want)
	}

	for _, u := range []string{"nats://10.0.0.1:4222", "nats://localhost:4222", "tls://127.0.0.1:4222", "nats://127.0.0.1", "::"} {
		c := creds
		c.URL = u
		if _, err := DialApprover(context.Background(), c); err == nil || errors.Is(err, ErrNotListening) {
			t.Errorf("DialApprover(%q) = %v, want a refusal before connecting", u, err)
		}
	}
}

func TestApprovalCredsFiles(t *testing.T) {
	xdg := t.TempDir()
	dir, err := RuntimeDir(func(k string) string { return map[string]string{"XDG_RUNTIME_DIR": xdg}[k] }, "")
	if err != nil || dir != filepath.Join(xdg, "aegis") {
		t.Fatalf("RuntimeDir = %q, %v", dir, err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("runtime dir mode %v", fi.Mode())
	}
	mk := func(pid int) Creds {
		s, _ := schemas.NewID(time.Now(), rand.Reader)
		return Creds{Session: s, URL: "nats://127.0.0.1:1234", User: ApproverUser, Password: strings.Repeat("ab", 32), PID: pid, StateDir: "/s", Started: time.Now().UTC().Truncate(time.Second)}
	}
	live := mk(os.Getpid())
	path, err := WriteApprovalCreds(dir, live)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "approve-"+live.Session+".json") {
		t.Errorf("path = %s", path)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("creds file mode %v, want 0600", fi.Mode())
	}
	// Rewriting replaces it atomically and leaves no temporary file.
	if _, err := WriteApprovalCreds(dir, live); err != nil {
		t.Fatal(err)
	}

	// A process that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	stale := mk(cmd.Process.Pid)
	if _, err := WriteApprovalCreds(dir, stale); err != nil {
		t.Fatal(err)
	}
	// A file others may read.
	loose := mk(os.Getpid())
	loosePath, _ := WriteApprovalCreds(dir, loose)
	os.Chmod(loosePath, 0o644)
	// A symbolic link to a good file, a malformed file, and one whose
	// content names another session.
	linked := mk(os.Getpid())
	os.Symlink(path, filepath.Join(dir, "approve-"+linked.Session+".json"))
	os.WriteFile(filepath.Join(dir, "approve-garbage.json"), []byte("{"), 0o600)
	swapped := mk(os.Getpid())
	renamed := live
	renamed.V = CredsVersion
	b, _ := json.Marshal(renamed)
	os.WriteFile(filepath.Join(dir, "approve-"+swapped.Session+".json"), b, 0o600)
	// One that an OS crash left empty (they are not fsynced), and an empty
	// file whose name is no session's.
	torn := mk(os.Getpid())
	os.WriteFile(filepath.Join(dir, "approve-"+torn.Session+".json"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, "approve-empty.json"), nil, 0o600)
	// Not a credentials file at all.
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644)

	list, err := ReadApprovalCreds(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := live
	want.V, want.Path = CredsVersion, path
	if len(list.Live) != 1 || list.Live[0] != want {
		t.Errorf("Live = %+v, want [%+v]", list.Live, want)
	}
	if len(list.Stale) != 2 {
		t.Errorf("Stale = %+v", list.Stale)
	}
	for _, c := range list.Stale {
		switch c.Session {
		case stale.Session:
			if c.PID != stale.PID {
				t.Errorf("stale file read as %+v", c)
			}
		case torn.Session:
			if c.PID != 0 || c.Path != filepath.Join(dir, "approve-"+torn.Session+".json") {
				t.Errorf("empty file listed as %+v, want its session and path alone", c)
			}
		default:
			t.Errorf("Stale holds %+v", c)
		}
	}
	reasons := map[string]string{}
	for _, r := range list.Refused {
		reasons[filepath.Base(r.Path)] = r.Err.Error()
	}
	for name, want := range map[string]string{
		"approve-" + loose.Session + ".json":   "has mode 0644; a credentials file must be 0600",
		"approve-" + linked.Session + ".json":  "is a symbolic link",
		"approve-garbage.json":                 "malformed",
		"approve-empty.json":                   "is empty",
		"approve-" + swapped.Session + ".json": "does not match its file name",
	} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s refused with %q, want %q", name, reasons[name], want)
		}
	}
	if len(list.Refused) != 5 {
		t.Errorf("Refused = %v", list.Refused)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}

	if os.Geteuid() == 0 {
		other := mk(os.Getpid())
		p, _ := WriteApprovalCreds(dir, other)
		os.Chown(p, 65534, 65534)
		list, _ := ReadApprovalCreds(dir)
		found := false
		for _, r := range list.Refused {
			found = found || (r.Path == p && strings.Contains(r.Err.Error(), "owned by uid 65534"))
		}
		if !found {
			t.Errorf("a file of another user was not refused: %+v", list.Refused)
		}
	}

	if err := RemoveApprovalCreds(path); err != nil {
		t.Fatal(err)
	}
	if err := RemoveApprovalCreds(path); err != nil {
		t.Errorf("second remove = %v", err)
	}
	if _, err := WriteApprovalCreds(dir, Creds{Session: "../x", URL: "u", User: "u", Password: "p", PID: 1}); err == nil {
		t.Error("wrote credentials for a session id with a path in it")
	}

	// A missing directory holds nothing; a shared one is refused.
	if l, err := ReadApprovalCreds(filepath.Join(xdg, "none")); err != nil || len(l.Live)+len(l.Stale)+len(l.Refused) != 0 {
		t.Errorf("ReadApprovalCreds of a missing dir = %+v, %v", l, err)
	}
	os.Chmod(dir, 0o755)
	if _, err := ReadApprovalCreds(dir); err == nil || !strings.Contains(err.Error(), "must be 0700") {
		t.Errorf("ReadApprovalCreds of a 0755 dir = %v", err)
	}
	if _, err := WriteApprovalCreds(dir, mk(os.Getpid())); err == nil {
		t.Error("WriteApprovalCreds into a 0755 dir succeeded")
	}
}

func TestRuntimeDirFallbackAndRefusals(t *testing.T) {
	tmp := t.TempDir()
	state := filepath.Join(tmp, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TMPDIR": tmp}
	getenv := func(k string) string { return env[k] }
	want := filepath.Join(state, RuntimeDirName)
	dir, err := RuntimeDir(getenv, state)
	if err != nil || dir != want {
		t.Fatalf("RuntimeDir = %q, %v; want %q", dir, err, want)
	}
	if fi, _ := os.Lstat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v", fi.Mode())
	}
	if p, err := RuntimeDirPath(getenv, state); err != nil || p != want {
		t.Errorf("RuntimeDirPath = %q, %v; want %q", p, err, want)
	}
	if _, err := RuntimeDir(getenv, state); err != nil {
		t.Errorf("second RuntimeDir = %v", err)
	}
	os.Chmod(dir, 0o755)
	if _, err := RuntimeDir(getenv, state); err == nil || !strings.Contains(err.Error(), "has mode 0755; it must be 0700") {
		t.Errorf("RuntimeDir with a 0755 dir = %v", err)
	}
	os.Remove(dir)
	target := t.TempDir()
	os.Chmod(target, 0o700)
	os.Symlink(target, dir)
	if _, err := RuntimeDir(getenv, state); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("RuntimeDir with a symlink = %v", err)
	}
	os.Remove(dir)
	if os.Geteuid() == 0 {
		os.Mkdir(dir, 0o700)
		os.Chown(dir, 65534, 65534)
		if _, err := RuntimeDir(getenv, state); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("RuntimeDir with a dir of another user = %v", err)
		}
		os.Remove(dir)
	}
	for _, bad := range []string{"", "state"} {
		if _, err := RuntimeDir(getenv, bad); err == nil {
			t.Errorf("RuntimeDir accepted the state directory %q", bad)
		}
	}
	env = map[string]string{"XDG_RUNTIME_DIR": "run/user"}
	if _, err := RuntimeDir(getenv, state); err == nil {
		t.Error("RuntimeDir accepted a relative XDG_RUNTIME_DIR")
	}
	env = map[string]string{"XDG_RUNTIME_DIR": filepath.Join(tmp, "missing")}
	if _, err := RuntimeDir(getenv, state); err == nil {
		t.Error("RuntimeDir created a missing XDG_RUNTIME_DIR")
	}
}

// TestRuntimeDirSquatting: with XDG_RUNTIME_DIR unset, the runtime
// directory used to be aegis-<uid> in the shared temp directory, which any
// other user could create first and so block every approval channel of
// this user. It now lives in the state directory; an aegis-<uid> planted in
// TMPDIR by another user is not looked at.
func TestRuntimeDirSquatting(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant a directory owned by another user")
	}
	tmp := t.TempDir()
	os.Chmod(tmp, 0o1777)
	planted := filepath.Join(tmp, fmt.Sprintf("aegis-%d", os.Geteuid()))
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	os.Mkdir(state, 0o700)
	getenv := func(k string) string { return map[string]string{"TMPDIR": tmp}[k] }
	dir, err := RuntimeDir(getenv, state)
	if err != nil {
		t.Fatalf("RuntimeDir with a squatted %s: %v", planted, err)
	}
	if dir != filepath.Join(state, RuntimeDirName) {
		t.Fatalf("RuntimeDir = %s, want it inside the state directory", dir)
	}
}

// TestRuntimeDirRefusesASharedXDGRuntimeDir: XDG_RUNTIME_DIR that another
// user owns, or that group or others may write, would let them take its
// aegis directory; it is refused, never used.
func TestRuntimeDirRefusesASharedXDGRuntimeDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		owner int // -1: this user
		want  string
	}{
		{"world-writable like /tmp", 0o1777, -1, "group or others can write it"},
		{"group-writable", 0o770, -1, "group or others can write it"},
		{"owned by another user", 0o700, 65534, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.owner >= 0 && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			xdg := t.TempDir()
			os.Chmod(xdg, tc.mode)
			if tc.owner >= 0 {
				os.Chown(xdg, tc.owner, tc.owner)
			}
			getenv := func(k string) string { return map[string]string{"XDG_RUNTIME_DIR": xdg}[k] }
			for name, f := range map[string]func() (string, error){
				"RuntimeDir":     func() (string, error) { return RuntimeDir(getenv, "") },
				"RuntimeDirPath": func() (string, error) { return RuntimeDirPath(getenv, "") },
			} {
				if dir, err := f(); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s = %q, %v; want an error saying %q", name, dir, err, tc.want)
				}
			}
			if _, err := os.Lstat(filepath.Join(xdg, "aegis")); err == nil {
				t.Error("the aegis directory was created in a refused XDG_RUNTIME_DIR")
			}
		})
	}
}

// A connection that may not subscribe to the session's requests cannot
// listen: the refusal is reported, not discovered by an approver later.
func TestListenApprovalsReportsARefusedSubscription(t *testing.T) {
	a := newApprovalServer(t)
	if err := a.ac.Bind(a.session); err != nil {
		t.Fatal(err)
	}
	other, _ := schemas.NewID(time.Now(), rand.Reader)
	creds, _ := a.ac.Creds(a.session, "", time.Now())
	ap := dialApprover(t, creds)
	if _, err := ListenApprovals(ap.nc, other, newFakeProxy().handle); err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("ListenApprovals as the approver = %v, want a permissions violation", err)
	}
	if _, err := ListenApprovals(a.nc, "a.>", newFakeProxy().handle); err == nil {
		t.Error("ListenApprovals accepted a subject pattern as session")
	}
}
