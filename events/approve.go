package events

// The approval channel: how `aegis approve`, `aegis deny` and `aegis
// approvals`, run as separate processes, reach the running proxy that owns a
// session.
//
// # Listener and identities
//
// With the channel on, the embedded server also listens on 127.0.0.1 at a
// random port, and every connection must authenticate. Three identities
// exist, each with a fresh random 256-bit password (64 hex characters):
//
//   - aegis: the store's own connection. In-process only (a TCP connection
//     that presents it is refused); full permissions. Its password never
//     leaves the process.
//   - aegis-approvals: the proxy's responder connection ([ApprovalConfig.Listen]).
//     In-process only; may subscribe to aegis-approve.<session> and publish
//     to aegis-approve-reply.<session>.> and nothing else.
//   - approver: the identity in the 0600 credentials file. Loopback TCP
//     only; may publish to aegis-approve.<session> and subscribe to
//     aegis-approve-reply.<session>.> and nothing else: not to aegis.> (the
//     stream), $JS.> (the JetStream API), $SYS.>, nor _INBOX.>.
//   - reader: the other identity in the credentials file, for aegis
//     console. Loopback TCP only; may publish direct gets of the stream
//     ($JS.API.DIRECT.GET.AEGIS) and subscribe to aegis-stored.> (the
//     empty word the store sends once each message is stored) and to its
//     own inboxes (aegis-read-reply.>), and nothing else: it reads the
//     stream and can change nothing, neither the stream, nor a consumer,
//     nor an approval.
//
// The approver's replies come back on its own inbox prefix, not on _INBOX:
// the store's connection receives its JetStream acknowledgements and the
// messages of every replay on _INBOX subjects, so an identity allowed to
// subscribe to _INBOX.> could read the whole stream.
//
// Permissions name the session, which is only known after [Open]: the
// server authenticates through [ApprovalConfig] itself (a
// server.Authentication), and the approver and responder identities are
// refused until [ApprovalConfig.Bind] names the session.
//
// # Protocol
//
// One JSON [ApprovalRequest] per NATS request on aegis-approve.<session>,
// one JSON [ApprovalReply] back. Every request that carries a reply subject
// under the approver's inbox prefix is answered, malformed or oversized ones
// (more than [MaxApprovalRequestBytes]) with ok:false and a reason. A reply
// subject anywhere else is never published to: the responder would otherwise
// write wherever a request pointed it, the stream's subjects included.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/aegis-dev/aegis/schemas"
)

// The identities of the approval channel.
const (
	// ApproverUser is the user name written to the credentials file.
	ApproverUser = "approver"
	// ReaderUser is the read-only user name written to the credentials
	// file beside the approver.
	ReaderUser    = "reader"
	internalUser  = "aegis"
	responderUser = "aegis-approvals"
)

// Approval operations.
const (
	OpApprove = "approve"
	OpDeny    = "deny"
	OpList    = "list"
)

// Limits of the approval protocol.
const (
	// MaxApprovalRequestBytes is the largest request the proxy reads.
	MaxApprovalRequestBytes = 64 << 10
	// MaxApprovalIDBytes bounds an approval id in a request.
	MaxApprovalIDBytes = 256
)

// ApprovalSubject is the subject on which session's proxy takes approval
// requests.
func ApprovalSubject(session string) string { return "aegis-approve." + session }

// ApprovalReplyPrefix is the inbox prefix of approver connections to
// session's proxy; replies go to subjects under it.
func ApprovalReplyPrefix(session string) string { return "aegis-approve-reply." + session }

// ApprovalRequest is what `aegis approve`, `aegis deny` and `aegis
// approvals` send. By names who asked ("user@host, pid N"); it is what the
// requester says, not something the channel checked.
//
// Approver is an approver's signature of the approval (aegis approve
// --approver-key), which a proxy run with an approvers file requires of
// every approve; without one it is ignored. A request without it is
// exactly what older clients send.
type ApprovalRequest struct {
	Op         string                     `json:"op"`
	ApprovalID string                     `json:"approval_id,omitempty"`
	Reason     string                     `json:"reason,omitempty"`
	By         string                     `json:"by,omitempty"`
	Approver   *schemas.ApproverSignature `json:"approver,omitempty"`
}

// ApprovalReply is the proxy's answer. OK false comes with Error; a list
// comes with Pending; Message is a line for the person who asked. An
// approve or deny that was recorded comes with Decided, the approval it
// resolved, as a list showed it (older processes leave it out).
type ApprovalReply struct {
	OK      bool              `json:"ok"`
	Error   string            `json:"error,omitempty"`
	Pending []PendingApproval `json:"pending,omitempty"`
	Message string            `json:"message,omitempty"`
	Decided *PendingApproval  `json:"decided,omitempty"`
	// Session and PID name the session that answered and its process,
	// Host its fleet host name ("" without a hub).
	Session string `json:"session,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Host    string `json:"host,omitempty"`
}

// PendingApproval is one tools/call that waits for a human.
type PendingApproval struct {
	ApprovalID    string    `json:"approval_id"`
	ToolID        string    `json:"tool_id"`
	RequestDigest string    `json:"request_digest,omitempty"`
	ArgsDigest    string    `json:"args_digest,omitempty"`
	RequestedAt   time.Time `json:"requested_at"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	// Arguments is the canonical JSON of the call's arguments, the text
	// ArgsDigest digests, cut by the proxy to a bounded preview at a
	// character boundary; ArgumentsBytes is the whole length. They are
	// host-chosen: escape them before printing.
	Arguments      string `json:"arguments,omitempty"`
	ArgumentsBytes int    `json:"arguments_bytes,omitempty"`
	// MatchedRule is the policy rule that asked for the approval, Profile
	// the gateway's active profile then (both host-chosen or
	// operator-chosen text: escape them before printing).
	MatchedRule string `json:"matched_rule,omitempty"`
	Profile     string `json:"profile,omitempty"`
	// PinDigest, for an approval that re-pins a tool whose definition
	// changed, is the digest of the definition an approve pins.
	PinDigest string `json:"pin_digest,omitempty"`
	// Principal names who made the call, when a validated OAuth token of
	// gateway --listen named them (its subject, and its email or name
	// when kept; token-chosen text: escape it before printing).
	Principal string `json:"principal,omitempty"`
}

// ApprovalConfig is the server side of the approval channel for one store:
// the listener options, the identities and their passwords, and the session
// they serve once bound. Make one with [ApprovalOptions]; it is safe for
// concurrent use.
type ApprovalConfig struct {
	internalPassword  string
	responderPassword string
	approverPassword  string
	readerPassword    string

	mu       sync.Mutex
	sessions map[string]bool // the bound sessions
	url      string
	host     string // the fleet host name when the store links to a hub
}

// ApprovalOptions makes the identities of an approval channel with fresh
// random passwords. session may be empty and named later with
// [ApprovalConfig.Bind]; until then only the internal identity can connect.
//
// The embedded server is then set up in this order (see [Open]):
//
//	ac.Apply(opts)                      // before server.NewServer(opts)
//	ns.Start(); ns.ReadyForConnections(…)
//	ac.Started(ns)                      // reads the port
//	nats.Connect("", nats.InProcessServer(ns), ac.InternalUserInfo(), …)
func ApprovalOptions(session string) (*ApprovalConfig, error) {
	c := &ApprovalConfig{}
	for _, p := range []*string{&c.internalPassword, &c.responderPassword, &c.approverPassword, &c.readerPassword} {
		var b [32]byte
		if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
			return nil, fmt.Errorf("approval channel: make password: %w", err)
		}
		*p = hex.EncodeToString(b[:])
	}
	if session != "" {
		if err := c.Bind(session); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Apply sets the server options of the approval channel:
//
//   - DontListen false, Host 127.0.0.1, Port server.RANDOM_PORT (-1: in
//     nats-server Port 0 means the default 4222);
//   - CustomClientAuthentication set to this config, which checks every
//     client (in-process ones included) against the three identities;
//   - no other authentication: Users, Nkeys, Username, Password,
//     Authorization, NoAuthUser and TrustedOperators cleared;
//   - no other listener: HTTP(S) monitoring, profiling, cluster, gateway,
//     leaf node, websocket and MQTT ports zero.
func (c *ApprovalConfig) Apply(o *server.Options) {
	o.DontListen = false
	o.Host = "127.0.0.1"
	o.Port = server.RANDOM_PORT
	o.CustomClientAuthentication = approvalAuth{c}
	o.Users, o.Nkeys = nil, nil
	o.Username, o.Password, o.Authorization, o.NoAuthUser = "", "", "", ""
	o.TrustedOperators, o.TrustedKeys = nil, nil
	o.HTTPPort, o.HTTPSPort, o.ProfPort = 0, 0, 0
	o.Cluster.Port, o.Gateway.Port, o.LeafNode.Port = 0, 0, 0
	o.Websocket.Port, o.MQTT.Port = 0, 0
}

// InternalUserInfo is the option with which the store's in-process
// connection authenticates.
func (c *ApprovalConfig) InternalUserInfo() nats.Option {
	return nats.UserInfo(internalUser, c.internalPassword)
}

// Started records the address the server listens on; call it once the
// server is ready for connections. It fails if the listener is not on a
// loopback address.
func (c *ApprovalConfig) Started(ns *server.Server) error {
	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() || addr.Port == 0 {
		return fmt.Errorf("approval channel: the embedded server listens on %v, not on a loopback port", ns.Addr())
	}
	c.mu.Lock()
	c.url = "nats://" + addr.String()
	c.mu.Unlock()
	return nil
}

// URL is the loopback address of the listener ("" before Started).
func (c *ApprovalConfig) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.url
}

// Bind names a session whose approval requests the channel carries. A
// channel serves every session bound to it, each on its own subjects:
// one process serves several sessions when its gateway serves several
// HTTP clients. An identity that connects is allowed the subjects of the
// sessions bound then.
func (c *ApprovalConfig) Bind(session string) error {
	if !schemas.ValidID(session) {
		return fmt.Errorf("approval channel: bad session id %q", session)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions == nil {
		c.sessions = map[string]bool{}
	}
	c.sessions[session] = true
	return nil
}

// Unbind ends what Bind began: identities that connect from now on are not
// allowed session's subjects.
func (c *ApprovalConfig) Unbind(session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sessions, session)
}

// Sessions are the bound sessions, in no order.
func (c *ApprovalConfig) Sessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.sessions))
	for s := range c.sessions {
		out = append(out, s)
	}
	return out
}

// Creds returns what the credentials file of this channel holds. The
// channel must be started and bound.
func (c *ApprovalConfig) Creds(session, stateDir string, started time.Time) (Creds, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.url == "" || !c.sessions[session] {
		return Creds{}, errors.New("approval channel: not started or not bound to the session")
	}
	return Creds{
		V: CredsVersion, Session: session, URL: c.url, User: ApproverUser, Password: c.approverPassword,
		Reader: ReaderUser, ReaderPassword: c.readerPassword,
		PID: os.Getpid(), StateDir: stateDir, Started: started.UTC(),
	}, nil
}

// Listen binds the channel to session and starts answering its approval
// requests with handle, over a connection of its own that may only take
// those requests and answer them. stateDir goes into the credentials
// ([ApprovalListener.Creds]), which the caller writes with
// [WriteApprovalCreds] once Listen returns.
func (c *ApprovalConfig) Listen(ns *server.Server, session, stateDir string, handle func(ApprovalRequest) ApprovalReply) (*ApprovalListener, error) {
	if err := c.Bind(session); err != nil {
		return nil, err
	}
	creds, err := c.Creds(session, stateDir, time.Now())
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.UserInfo(responderUser, c.responderPassword),
		nats.Name("aegis-approvals"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("approval channel: connect responder: %w", err)
	}
	c.mu.Lock()
	host := c.host
	c.mu.Unlock()
	l, err := listenApprovals(nc, session, host, handle)
	if err != nil {
		nc.Close()
		c.Unbind(session)
		return nil, err
	}
	l.ownConn = true
	l.creds = creds
	l.unbind = func() { c.Unbind(session) }
	return l, nil
}

// approvalAuth is the server.Authentication of the channel. Kept apart from
// ApprovalConfig so that Check is not part of its API.
type approvalAuth struct{ c *ApprovalConfig }

func (a approvalAuth) Check(ca server.ClientAuthentication) bool {
	if ca.Kind() != server.CLIENT {
		return false
	}
	o := ca.GetOpts()
	if o == nil || o.Token != "" || o.Nkey != "" || o.JWT != "" {
		return false
	}
	addr := ca.RemoteAddress()
	tcp, isTCP := addr.(*net.TCPAddr)
	c := a.c
	sessions := c.Sessions()
	sort.Strings(sessions)
	switch o.Username {
	case internalUser:
		// In-process connections are net.Pipe ends; only the listener
		// hands out TCP ones.
		if isTCP || addr == nil || !samePassword(o.Password, c.internalPassword) {
			return false
		}
		ca.RegisterUser(&server.User{Username: internalUser})
		return true
	case responderUser:
		if isTCP || addr == nil || len(sessions) == 0 || !samePassword(o.Password, c.responderPassword) {
			return false
		}
		c.mu.Lock()
		host := c.host
		c.mu.Unlock()
		ca.RegisterUser(&server.User{Username: responderUser, Permissions: responderPermissions(sessions, host)})
		return true
	case ApproverUser:
		if !isTCP || !tcp.IP.IsLoopback() || len(sessions) == 0 || !samePassword(o.Password, c.approverPassword) {
			return false
		}
		ca.RegisterUser(&server.User{Username: ApproverUser, Permissions: approverPermissions(sessions)})
		return true
	case ReaderUser:
		if !isTCP || !tcp.IP.IsLoopback() || len(sessions) == 0 || !samePassword(o.Password, c.readerPassword) {
			return false
		}
		ca.RegisterUser(&server.User{Username: ReaderUser, Permissions: readerPermissions()})
		return true
	}
	return false
}

// responderPermissions: take the session's requests and answer them; with
// a fleet host, also those that come over the hub (see fleet.go).
func responderPermissions(sessions []string, host string) *server.Permissions {
	p := &server.Permissions{Publish: &server.SubjectPermission{}, Subscribe: &server.SubjectPermission{}}
	for _, session := range sessions {
		p.Publish.Allow = append(p.Publish.Allow, ApprovalReplyPrefix(session)+".>")
		p.Subscribe.Allow = append(p.Subscribe.Allow, ApprovalSubject(session))
		if host != "" {
			p.Subscribe.Allow = append(p.Subscribe.Allow, FleetSubject(host, session))
		}
	}
	if host != "" {
		p.Publish.Allow = append(p.Publish.Allow, fleetReplyPrefix+"*", fleetReplyPrefix+host+".*")
		p.Subscribe.Allow = append(p.Subscribe.Allow, FleetHostSubject(host), FleetListSubject)
	}
	return p
}

// approverPermissions: publish the session's requests, receive the replies.
// The deny lists repeat what the allow lists already exclude, so that a
// wider allow added later still keeps the stream, the JetStream and system
// APIs and the shared inboxes out of reach.
func approverPermissions(sessions []string) *server.Permissions {
	never := []string{"aegis.>", "$JS.>", "$KV.>", "$O.>", "$SYS.>", "_INBOX.>"}
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Deny: never},
		Subscribe: &server.SubjectPermission{Deny: never},
	}
	for _, session := range sessions {
		p.Publish.Allow = append(p.Publish.Allow, ApprovalSubject(session))
		p.Subscribe.Allow = append(p.Subscribe.Allow, ApprovalReplyPrefix(session)+".>")
	}
	return p
}

// readerPermissions: direct gets of the stream, the stored-message
// headers, the reader's own inboxes. Direct gets read and change nothing;
// the rest of the JetStream API (consumers, which a reader could point
// anywhere, stream updates, deletes) stays out of reach, as do the stream's
// subjects themselves, the approval channel and the shared inboxes.
func readerPermissions() *server.Permissions {
	never := []string{"aegis.>", "aegis-approve.>", "aegis-approve-reply.>", "$KV.>", "$O.>", "$SYS.>", "_INBOX.>"}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.DIRECT.GET." + StreamName}, Deny: never},
		Subscribe: &server.SubjectPermission{Allow: []string{StoredPrefix + ".>", ReadReplyPrefix + ".>"}, Deny: append(never, "$JS.>")},
	}
}

func samePassword(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// ApprovalListener answers one session's approval requests until Close.
type ApprovalListener struct {
	nc      *nats.Conn
	ownConn bool
	creds   Creds
	session string
	host    string // fleet host name, "" without a hub
	handle  func(ApprovalRequest) ApprovalReply
	subs    []*nats.Subscription
	msgs    chan *nats.Msg
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	unbind  func() // set by ApprovalConfig.Listen
}

// ListenApprovals subscribes nc to session's approval requests and answers
// each with handle, one at a time, in arrival order. It returns once the
// server has the subscription. Requests are checked before handle sees
// them: valid JSON with no unknown fields, at most
// [MaxApprovalRequestBytes], a known op, and an approval id for approve and
// deny. A request whose reply subject is not under
// [ApprovalReplyPrefix](session) is dropped unanswered and never reaches
// handle.
func ListenApprovals(nc *nats.Conn, session string, handle func(ApprovalRequest) ApprovalReply) (*ApprovalListener, error) {
	return listenApprovals(nc, session, "", handle)
}

// listenApprovals is ListenApprovals that, with a fleet host name, also
// takes the session's requests that come over the hub ([FleetSubject],
// [FleetListSubject]).
func listenApprovals(nc *nats.Conn, session, host string, handle func(ApprovalRequest) ApprovalReply) (*ApprovalListener, error) {
	if !schemas.ValidID(session) {
		return nil, fmt.Errorf("approval channel: bad session id %q", session)
	}
	if host != "" && !ValidHost(host) {
		return nil, fmt.Errorf("approval channel: bad host name %q", host)
	}
	if handle == nil {
		return nil, errors.New("approval channel: no handler")
	}
	l := &ApprovalListener{
		nc: nc, session: session, host: host, handle: handle,
		msgs: make(chan *nats.Msg, 64), stop: make(chan struct{}), done: make(chan struct{}),
	}
	subjects := []string{ApprovalSubject(session)}
	if host != "" {
		subjects = append(subjects, FleetSubject(host, session), FleetHostSubject(host), FleetListSubject)
	}
	unsubscribe := func() {
		for _, sub := range l.subs {
			sub.Unsubscribe()
		}
	}
	for _, subject := range subjects {
		sub, err := nc.ChanSubscribe(subject, l.msgs)
		if err != nil {
			unsubscribe()
			return nil, fmt.Errorf("approval channel: subscribe: %w", err)
		}
		l.subs = append(l.subs, sub)
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		unsubscribe()
		return nil, fmt.Errorf("approval channel: subscribe: %w", err)
	}
	// A subscription the server refused shows as the connection's last
	// error once the flush is through.
	if err := nc.LastError(); err != nil && errors.Is(err, nats.ErrPermissionViolation) {
		for _, subject := range subjects {
			if strings.Contains(err.Error(), subject) {
				unsubscribe()
				return nil, fmt.Errorf("approval channel: subscribe: %w", err)
			}
		}
	}
	go l.loop()
	return l, nil
}

// ServeApprovals is [ListenApprovals] until ctx ends; it returns ctx's
// error, or the error that kept it from listening.
func ServeApprovals(ctx context.Context, nc *nats.Conn, session string, handle func(ApprovalRequest) ApprovalReply) error {
	l, err := ListenApprovals(nc, session, handle)
	if err != nil {
		return err
	}
	<-ctx.Done()
	l.Close()
	return ctx.Err()
}

// Creds are the credentials of the listener's channel, for
// [WriteApprovalCreds]. Only a listener made by [ApprovalConfig.Listen] has
// them.
func (l *ApprovalListener) Creds() Creds { return l.creds }

// Close stops taking requests; ones already received are answered "closing".
// It waits for a request being handled, and closes the connection if the
// listener opened it.
func (l *ApprovalListener) Close() error {
	var err error
	l.once.Do(func() {
		for _, sub := range l.subs {
			if uerr := sub.Unsubscribe(); err == nil {
				err = uerr
			}
		}
		close(l.stop)
		<-l.done
		if l.ownConn {
			l.nc.Close()
		}
		if l.unbind != nil {
			l.unbind()
		}
	})
	return err
}

func (l *ApprovalListener) loop() {
	defer close(l.done)
	for {
		select {
		case m := <-l.msgs:
			l.serve(m, false)
		case <-l.stop:
			for {
				select {
				case m := <-l.msgs:
					l.serve(m, true)
				default:
					return
				}
			}
		}
	}
}

func (l *ApprovalListener) serve(m *nats.Msg, closing bool) {
	reply, ok := l.replyTo(m)
	if !ok {
		return
	}
	fleet := m.Subject != ApprovalSubject(l.session)
	var rep ApprovalReply
	switch req, err := decodeApprovalRequest(m.Data); {
	case closing:
		rep = ApprovalReply{Error: "the aegis process is closing this session"}
	case err != nil:
		rep = ApprovalReply{Error: err.Error()}
	case fleet && m.Subject != FleetSubject(l.host, l.session) && req.Op != OpList:
		rep = ApprovalReply{Error: "only list requests go to a whole host or fleet; send approve and deny to the session's own subject"}
	case m.Subject == FleetListSubject:
		// Anyone on the hub can answer here in any host's name: say
		// only who is here, and let the asker ask each host on the
		// subjects only that host can answer.
		rep = ApprovalReply{OK: true}
	default:
		if fleet {
			req.By = overTheHub(req.By)
		}
		rep = l.handle(req)
		if !rep.OK && rep.Error == "" {
			rep.Error = "refused"
		}
	}
	rep.Session, rep.PID, rep.Host = l.session, os.Getpid(), l.host
	b, err := json.Marshal(rep)
	if err != nil {
		b, _ = json.Marshal(ApprovalReply{Error: "internal error: " + err.Error(), Session: l.session})
	}
	l.nc.Publish(reply, b)
}

func decodeApprovalRequest(data []byte) (ApprovalRequest, error) {
	var req ApprovalRequest
	if len(data) > MaxApprovalRequestBytes {
		return req, fmt.Errorf("request of %d bytes is larger than the %d KiB limit", len(data), MaxApprovalRequestBytes>>10)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("malformed request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("malformed request: data after the JSON object")
	}
	switch req.Op {
	case OpApprove, OpDeny:
		if req.ApprovalID == "" {
			return req, fmt.Errorf("malformed request: %s needs an approval_id", req.Op)
		}
		if len(req.ApprovalID) > MaxApprovalIDBytes {
			return req, fmt.Errorf("malformed request: approval_id longer than %d bytes", MaxApprovalIDBytes)
		}
	case OpList:
	case "":
		return req, errors.New("malformed request: no op")
	default:
		return req, fmt.Errorf("malformed request: unknown op %q (want approve, deny or list)", req.Op)
	}
	return req, nil
}
