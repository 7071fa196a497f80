package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aegis-dev/aegis/schemas"
)

// Timeouts of the approver side.
const (
	// DefaultApprovalDialTimeout bounds connecting to a proxy.
	DefaultApprovalDialTimeout = 5 * time.Second
	// DefaultApprovalTimeout bounds one request when ctx has no deadline.
	DefaultApprovalTimeout = 10 * time.Second
)

// Why an approver could not reach a proxy; an [*ApproverError] wraps one.
var (
	// ErrNotListening: nothing accepts connections at the credentials'
	// address, or the connection was closed under the request.
	ErrNotListening = errors.New("no aegis process is listening")
	// ErrCredsRejected: the process refused the credentials.
	ErrCredsRejected = errors.New("credentials were rejected")
	// ErrNotServing: connected, but nobody takes the session's requests.
	ErrNotServing = errors.New("not taking approval requests")
	// ErrNoAnswer: the request was not answered in time.
	ErrNoAnswer = errors.New("no answer")
)

// ApproverError says which session could not be reached and why.
type ApproverError struct {
	Session string
	Kind    error // ErrNotListening, ErrCredsRejected, ErrNotServing or ErrNoAnswer
	Err     error // the underlying error
}

func (e *ApproverError) Error() string {
	switch e.Kind {
	case ErrNotListening:
		return fmt.Sprintf("no aegis process is listening for session %s (it may have exited)", e.Session)
	case ErrCredsRejected:
		return fmt.Sprintf("credentials for session %s were rejected", e.Session)
	case ErrNotServing:
		return fmt.Sprintf("the aegis process of session %s is not taking approval requests", e.Session)
	case ErrNoAnswer:
		return fmt.Sprintf("the aegis process of session %s did not answer (%v)", e.Session, e.Err)
	}
	return fmt.Sprintf("session %s: %v", e.Session, e.Err)
}

func (e *ApproverError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Approver is a connection to one proxy's approval channel as the approver
// identity.
type Approver struct {
	nc      *nats.Conn
	session string

	mu       sync.Mutex
	asyncErr error // the last error the server reported outside a reply
}

// DialApprover connects to the proxy that creds name. The address must be a
// loopback one: the password is never sent anywhere else.
func DialApprover(ctx context.Context, creds Creds) (*Approver, error) {
	if !schemas.ValidID(creds.Session) {
		return nil, fmt.Errorf("approval credentials: bad session id %q", creds.Session)
	}
	u, err := url.Parse(creds.URL)
	if err != nil || u.Scheme != "nats" {
		return nil, fmt.Errorf("approval credentials of session %s: bad url %q", creds.Session, creds.URL)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() || u.Port() == "" {
		return nil, fmt.Errorf("approval credentials of session %s: %s is not a loopback address; refusing to send the password there", creds.Session, u.Host)
	}
	timeout := DefaultApprovalDialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, ctx.Err()
	}
	a := &Approver{session: creds.Session}
	nc, err := nats.Connect("nats://"+u.Host,
		nats.UserInfo(creds.User, creds.Password),
		nats.CustomInboxPrefix(ApprovalReplyPrefix(creds.Session)),
		nats.Name("aegis approve"),
		nats.NoReconnect(),
		nats.Timeout(timeout),
		nats.NoCallbacksAfterClientClose(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			a.mu.Lock()
			a.asyncErr = err
			a.mu.Unlock()
		}),
	)
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired):
			return nil, &ApproverError{Session: creds.Session, Kind: ErrCredsRejected, Err: err}
		case errors.Is(err, nats.ErrNoServers):
			return nil, &ApproverError{Session: creds.Session, Kind: ErrNotListening, Err: err}
		}
		return nil, fmt.Errorf("connect to the aegis process of session %s at %s: %w", creds.Session, u.Host, err)
	}
	a.nc = nc
	return a, nil
}

// Session is the session this approver talks to.
func (a *Approver) Session() string { return a.session }

// Close closes the connection.
func (a *Approver) Close() { a.nc.Close() }

// Do sends one request and returns the proxy's reply, which may be a
// refusal (OK false with Error). An error means there was no reply. Without
// a deadline in ctx, Do waits at most [DefaultApprovalTimeout].
func (a *Approver) Do(ctx context.Context, req ApprovalRequest) (ApprovalReply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return ApprovalReply{}, err
	}
	if len(data) > MaxApprovalRequestBytes {
		return ApprovalReply{}, fmt.Errorf("approval request of %d bytes is larger than the %d KiB limit", len(data), MaxApprovalRequestBytes>>10)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultApprovalTimeout)
		defer cancel()
	}
	msg, err := a.nc.RequestWithContext(ctx, ApprovalSubject(a.session), data)
	if err != nil {
		a.mu.Lock()
		async := a.asyncErr
		a.mu.Unlock()
		switch {
		case async != nil && errors.Is(async, nats.ErrPermissionViolation):
			return ApprovalReply{}, fmt.Errorf("the aegis process of session %s refused the request: %w", a.session, async)
		case errors.Is(err, nats.ErrNoResponders):
			return ApprovalReply{}, &ApproverError{Session: a.session, Kind: ErrNotServing, Err: err}
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return ApprovalReply{}, &ApproverError{Session: a.session, Kind: ErrNoAnswer, Err: err}
		case errors.Is(err, nats.ErrConnectionClosed):
			return ApprovalReply{}, &ApproverError{Session: a.session, Kind: ErrNotListening, Err: err}
		}
		return ApprovalReply{}, fmt.Errorf("approval request to session %s: %w", a.session, err)
	}
	var rep ApprovalReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return ApprovalReply{}, fmt.Errorf("malformed reply from the aegis process of session %s: %v", a.session, err)
	}
	if !rep.OK && rep.Error == "" {
		rep.Error = "refused"
	}
	return rep, nil
}
