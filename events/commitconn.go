package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// commitConn is the committer's own connection to the embedded server: the
// few lines of the NATS client protocol a durable publish needs (CONNECT,
// SUB, HPUB, and reading the JetStream acknowledgement), spoken over an
// in-process pipe by the committer goroutine itself.
//
// A publish through nats.go passes through its flusher goroutine on the way
// out and its reader and subscription goroutines on the way back; on a
// small virtual machine each of those hand-offs costs tens of microseconds
// of wake-up. Here the committer writes the message and then reads the pipe
// until the acknowledgement arrives, so the only goroutines between an event
// and its fsync are the server's own.
//
// The connection is strictly request/response: nothing is in flight between
// commits. The server sends nothing unsolicited to it (the store disables
// the server's keep-alive PINGs, see Open), and a PING that does arrive
// while a commit is read is answered.
type commitConn struct {
	conn    net.Conn
	br      *bufio.Reader
	out     []byte
	inbox   string
	timeout time.Duration
	seq     uint64 // the last acknowledged stream sequence

	stopped atomic.Bool
}

// interrupt makes a publish in progress, or the next one, fail at once.
func (c *commitConn) interrupt() {
	c.stopped.Store(true)
	c.conn.SetDeadline(time.Unix(1, 0))
}

// A message refused at the stream's MaxBytes (DiscardNew) is answered
// with the JetStream error JSStreamStoreFailedF (err_code 10077) and the
// store's error text.
const jsStoreFailed = 10077

// errStreamFull marks a message the stream refused at its MaxBytes.
var errStreamFull = errors.New("stream at its byte limit")

// bigPublish is the message size above which publish writes the message
// apart from its protocol line instead of copying it behind the line.
const bigPublish = 256 << 10

// commitInbox is the reply subject of the committer's acknowledgements. It
// is outside the stream's subjects, and the connection is the only
// subscriber on it.
const commitInbox = "_INBOX.aegis-commit"

// dialCommit opens the committer's connection to ns, authenticating as user
// when user is not empty.
func dialCommit(ns *server.Server, user, pass string, timeout time.Duration) (*commitConn, error) {
	conn, err := ns.InProcessConn()
	if err != nil {
		return nil, fmt.Errorf("connect committer: %w", err)
	}
	c := &commitConn{conn: conn, br: bufio.NewReaderSize(conn, 4096), inbox: commitInbox, timeout: timeout}
	if err := c.handshake(user, pass); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect committer: %w", err)
	}
	return c, nil
}

func (c *commitConn) handshake(user, pass string) error {
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	defer c.conn.SetDeadline(time.Time{})
	line, err := c.readLine()
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("INFO ")) {
		return fmt.Errorf("server greeted with %q, not INFO", trunc(line))
	}
	connect := map[string]any{
		"verbose": false, "pedantic": false, "headers": true, "no_responders": true,
		"protocol": 1, "name": "aegis-commit", "lang": "go",
	}
	if user != "" {
		connect["user"], connect["pass"] = user, pass
	}
	cj, err := json.Marshal(connect)
	if err != nil {
		return err
	}
	msg := fmt.Appendf(nil, "CONNECT %s\r\nSUB %s 1\r\nPING\r\n", cj, c.inbox)
	if _, err := c.conn.Write(msg); err != nil {
		return err
	}
	for {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		switch {
		case bytes.Equal(line, []byte("PONG")):
			return nil
		case bytes.HasPrefix(line, []byte("-ERR")):
			return fmt.Errorf("server refused: %s", trunc(line))
		}
	}
}

// publish stores data on subject as one stream message, with hdr (a
// complete NATS header block, or nil), and returns its stream sequence once
// the server has acknowledged it, which under SyncAlways means the write is
// fsynced.
func (c *commitConn) publish(subject string, hdr, data []byte) (uint64, error) {
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	if c.stopped.Load() {
		return 0, errors.New("event store is closing")
	}
	// PUB <subject> <reply> <size>, or HPUB with the header size first.
	b := c.out[:0]
	if len(hdr) > 0 {
		b = append(b, 'H')
	}
	b = append(b, "PUB "...)
	b = append(b, subject...)
	b = append(b, ' ')
	b = append(b, c.inbox...)
	b = append(b, ' ')
	if len(hdr) > 0 {
		b = strconv.AppendInt(b, int64(len(hdr)), 10)
		b = append(b, ' ')
	}
	b = strconv.AppendInt(b, int64(len(hdr)+len(data)), 10)
	b = append(b, "\r\n"...)
	b = append(b, hdr...)
	if len(data) <= bigPublish {
		// One write: each write on the in-process pipe is a hand-off to
		// the server's reader.
		b = append(b, data...)
		b = append(b, "\r\n"...)
		c.out = b
		if _, err := c.conn.Write(b); err != nil {
			return 0, err
		}
	} else {
		// A large message is written where it lies, not copied behind
		// the protocol line first: three writes, no second copy of up to
		// MaxEventBytes in memory.
		c.out = b
		for _, p := range [][]byte{b, data, []byte("\r\n")} {
			if _, err := c.conn.Write(p); err != nil {
				return 0, err
			}
		}
	}
	if cap(c.out) > 1<<20 {
		c.out = nil // do not keep a batch-sized buffer between commits
	}
	for {
		line, err := c.readLine()
		if err != nil {
			return 0, err
		}
		switch {
		case bytes.Equal(line, []byte("PING")):
			if _, err := c.conn.Write([]byte("PONG\r\n")); err != nil {
				return 0, err
			}
		case bytes.Equal(line, []byte("PONG")), bytes.Equal(line, []byte("+OK")), bytes.HasPrefix(line, []byte("INFO ")):
		case bytes.HasPrefix(line, []byte("-ERR")):
			return 0, fmt.Errorf("server error: %s", trunc(line))
		case bytes.HasPrefix(line, []byte("MSG ")), bytes.HasPrefix(line, []byte("HMSG ")):
			return c.readAck(line)
		default:
			return 0, fmt.Errorf("unexpected protocol line %q", trunc(line))
		}
	}
}

// readAck reads the body announced by line (MSG subject sid [reply] size, or
// HMSG subject sid [reply] hdrsize size) and decodes the acknowledgement.
func (c *commitConn) readAck(line []byte) (uint64, error) {
	f := bytes.Fields(line)
	if len(f) < 4 || string(f[1]) != c.inbox {
		return 0, fmt.Errorf("unexpected message %q", trunc(line))
	}
	size, err := strconv.Atoi(string(f[len(f)-1]))
	if err != nil || size < 0 || size > 1<<20 {
		return 0, fmt.Errorf("bad message size in %q", trunc(line))
	}
	hsize := 0
	if f[0][0] == 'H' {
		if len(f) < 5 {
			return 0, fmt.Errorf("unexpected message %q", trunc(line))
		}
		if hsize, err = strconv.Atoi(string(f[len(f)-2])); err != nil || hsize < 0 || hsize > size {
			return 0, fmt.Errorf("bad header size in %q", trunc(line))
		}
	}
	body := make([]byte, size+2)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return 0, err
	}
	if !bytes.HasSuffix(body, []byte("\r\n")) {
		return 0, errors.New("message body not terminated")
	}
	hdr, payload := body[:hsize], body[hsize:size]
	if hsize > 0 {
		// A status header without a body: 503 means no stream listens.
		first, _, _ := bytes.Cut(hdr, []byte("\r\n"))
		if st := bytes.TrimSpace(bytes.TrimPrefix(first, []byte("NATS/1.0"))); len(st) > 0 {
			if bytes.HasPrefix(st, []byte("503")) {
				return 0, errors.New("no stream took the message (no responders)")
			}
			return 0, fmt.Errorf("status %q", trunc(st))
		}
	}
	var ack struct {
		Stream string `json:"stream"`
		Seq    uint64 `json:"seq"`
		Error  *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(payload, &ack); err != nil {
		return 0, fmt.Errorf("bad acknowledgement %q: %w", trunc(payload), err)
	}
	if ack.Error != nil {
		err := fmt.Errorf("stream refused the message: %s (code %d, err_code %d)", ack.Error.Description, ack.Error.Code, ack.Error.ErrCode)
		if ack.Error.ErrCode == jsStoreFailed && ack.Error.Description == "maximum bytes exceeded" {
			err = fmt.Errorf("%w: %w", errStreamFull, err)
		}
		return 0, err
	}
	if ack.Stream != StreamName {
		return 0, fmt.Errorf("acknowledged by stream %q, not %q", ack.Stream, StreamName)
	}
	if ack.Seq <= c.seq {
		return 0, fmt.Errorf("acknowledged sequence %d after %d", ack.Seq, c.seq)
	}
	c.seq = ack.Seq
	return ack.Seq, nil
}

// readLine returns the next protocol line without its CRLF.
func (c *commitConn) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("protocol line too long")
		}
		return nil, err
	}
	return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
}

func (c *commitConn) close() error { return c.conn.Close() }

func trunc(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
