package httpfront

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of [Limits].
const (
	DefaultMaxConns          = 2048
	DefaultMaxConnsPerClient = 1024
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultConnIdleTimeout   = 2 * time.Minute
	// turningAway bounds the connections being answered 503 at once (each
	// holds its descriptor for up to a second, until its request's headers
	// are in); past it, the one turned away longest is closed unanswered,
	// so that a client's fresh connection is answered during a flood.
	turningAway = 64
	// BaseReserve is the descriptors kept for aegis itself (its store,
	// record files, logs) beside the connections; [Limits.Fit] adds the
	// sessions' own.
	BaseReserve = 128 + turningAway
)

// Limits bound what a client of the listener can hold, so that no client,
// with the token or without, can take the process's descriptors or hold
// a connection without sending: connections at once, in all and from one
// address; how long a request's headers and body may take to arrive; how
// long a kept-alive connection may wait for its next request.
type Limits struct {
	MaxConns          int           // connections at once (0: DefaultMaxConns)
	MaxConnsPerClient int           // connections at once from one IP address (0: DefaultMaxConnsPerClient)
	HeaderTimeout     time.Duration // to send a request's headers, from its first byte or the connection's start (0: DefaultHeaderTimeout)
	BodyTimeout       time.Duration // to send a request's body, from the end of its headers (0: DefaultBodyTimeout)
	ConnIdleTimeout   time.Duration // a kept-alive connection without a request (0: DefaultConnIdleTimeout)
}

// WithDefaults fills the zero fields of l with their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerClient <= 0 {
		l.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	l.MaxConnsPerClient = min(l.MaxConnsPerClient, l.MaxConns)
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = DefaultHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.ConnIdleTimeout <= 0 {
		l.ConnIdleTimeout = DefaultConnIdleTimeout
	}
	return l
}

// ErrFileLimit is wrapped by [Limits.Fit]'s refusal: the open file limit
// leaves no descriptor for a connection.
var ErrFileLimit = errors.New("the open file limit leaves no room for connections")

// Fit raises the process's open file limit (RLIMIT_NOFILE) to its hard
// limit where the system allows, and lowers MaxConns (and
// MaxConnsPerClient) so that reserve descriptors, besides
// [BaseReserve], stay free for the sessions' servers and records whatever
// clients do. It returns the limits that fit and the open file limit (0
// where the system has none to tell).
func (l Limits) Fit(reserve int) (Limits, uint64, error) {
	l = l.WithDefaults()
	nofile, err := raiseFileLimit()
	if err != nil || nofile == 0 {
		return l, 0, nil
	}
	room := int64(nofile) - int64(BaseReserve+reserve)
	if room < 8 {
		return l, nofile, fmt.Errorf("%w: %d descriptors (ulimit -n), of which %d are kept for aegis and its sessions' servers", ErrFileLimit, nofile, BaseReserve+reserve)
	}
	if int64(l.MaxConns) > room {
		l.MaxConns = int(room)
		l.MaxConnsPerClient = min(l.MaxConnsPerClient, l.MaxConns)
	}
	return l, nofile, nil
}

// Server returns the HTTP server of h under l: headers and bodies that do
// not arrive in time end their connection, as does a kept-alive one idle
// too long. The connections themselves are bounded by [Limits.Listen].
func (l Limits) Server(h http.Handler, logger *slog.Logger) *http.Server {
	l = l.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           bodyDeadline(h, l.BodyTimeout),
		ReadHeaderTimeout: l.HeaderTimeout,
		IdleTimeout:       l.ConnIdleTimeout,
		ErrorLog:          log.New(slogWriter{logger}, "", 0),
	}
}

type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Warn("HTTP server", "err", string(p))
	return len(p), nil
}

// bodyDeadline gives a request's body d to arrive: its connection's read
// deadline is set when the handler starts and cleared once the body is
// read (an answer that streams for long is not cut). A body that comes
// too slowly fails to read, and its connection is closed.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A request without a body (ContentLength 0) has its connection
		// watched for a close at once: no deadline must be left on it.
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// Listener is a listener that holds at most MaxConns connections at once,
// and MaxConnsPerClient from one IP address. A connection past either is
// answered "503 Service Unavailable" saying which limit it met, and
// closed: a client is told at once, and never waits on a connection that
// is not served.
type Listener struct {
	net.Listener
	lim Limits
	log *slog.Logger

	mu       sync.Mutex
	conns    int
	per      map[string]int
	away     *list.List // of net.Conn being answered 503, oldest first
	awayN    int        // turned away since the last warning
	warnedAt time.Time  // when the last warning was logged
}

// Listen bounds the connections ln accepts by l.
func (l Limits) Listen(ln net.Listener, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: ln, lim: l.WithDefaults(), log: logger, per: map[string]int{}, away: list.New()}
}

// Conns is the number of connections open.
func (l *Listener) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns
}

// Limits are the limits the listener holds to.
func (l *Listener) Limits() Limits { return l.lim }

func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientIP(c.RemoteAddr())
		l.mu.Lock()
		var why string
		switch {
		case l.conns >= l.lim.MaxConns:
			why = fmt.Sprintf("%d connections are open, the most aegis takes at once (--max-conns); try again shortly", l.lim.MaxConns)
		case l.per[ip] >= l.lim.MaxConnsPerClient:
			why = fmt.Sprintf("%d connections are open from %s, the most aegis takes from one address (--max-conns-per-client); close some, or try again shortly", l.lim.MaxConnsPerClient, ip)
		}
		if why == "" {
			l.conns++
			l.per[ip]++
			l.mu.Unlock()
			return &limitedConn{Conn: c, l: l, ip: ip}, nil
		}
		l.awayN++
		warn := time.Since(l.warnedAt) >= 10*time.Second
		n := l.awayN
		if warn {
			l.warnedAt, l.awayN = time.Now(), 0
		}
		var oldest net.Conn
		if l.away.Len() >= turningAway {
			oldest = l.away.Remove(l.away.Front()).(net.Conn)
		}
		e := l.away.PushBack(c)
		l.mu.Unlock()
		if warn {
			l.log.Warn("turned HTTP connections away", "count", n, "why", why)
		}
		if oldest != nil {
			oldest.Close()
		}
		go l.turnAway(c, e, why)
	}
}

// turnAway answers c 503 with why once it has read the headers of c's
// request (a client answered before it sent its request takes the answer
// for a broken connection), giving it a second for them; then it reads
// what else c sent, for a moment, so that closing does not reset the
// connection before the client read the answer.
func (l *Listener) turnAway(c net.Conn, e *list.Element, why string) {
	defer func() {
		l.mu.Lock()
		l.away.Remove(e) // a no-op if it was closed to make room
		l.mu.Unlock()
	}()
	defer c.Close()
	body := "aegis: " + why + "\n"
	c.SetDeadline(time.Now().Add(time.Second))
	var head []byte
	for buf := make([]byte, 1024); !bytes.Contains(head, []byte("\r\n\r\n")); {
		n, err := c.Read(buf)
		head = append(head, buf[:n]...)
		if err != nil || len(head) > 16<<10 {
			return
		}
	}
	if _, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn is a connection counted by its Listener until it closes.
type limitedConn struct {
	net.Conn
	l    *Listener
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.conns--
		if c.l.per[c.ip]--; c.l.per[c.ip] <= 0 {
			delete(c.l.per, c.ip)
		}
		c.l.mu.Unlock()
	})
	return err
}
