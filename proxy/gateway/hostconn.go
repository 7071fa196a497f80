package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
)

// hostConn is the host's side of the gateway when the host is a message
// connection (Config.Host: one HTTP client's session) rather than
// a byte stream. Invariants, the same as hostTransport's for stdio:
//
//   - Every message the host sends is recorded as frame.c2s (its JSON-RPC
//     encoding, one line) before the SDK or the task layer sees it, and
//     every message to the host as frame.s2c before it is handed to the
//     connection. A message the task layer takes (a task request) is
//     recorded and never reaches the SDK.
//   - The gateway's answer to a request the host cancelled is dropped
//     and recorded as frame.dropped, as on stdio.
//   - The host's first message (its initialize) is read ahead, so that the
//     servers are told the host's capabilities, then given to the SDK
//     first.
//   - A tools/call in the plain shape to a local server (see
//     tasker.plainOverHTTP) reaches the SDK as a request of its own method
//     under the host's id, which the task layer answers: the SDK keeps the
//     call's stream, its cancellation and what the server sends during it,
//     without decoding the call.
//   - Write passes the SDK's context on to the connection unchanged: an
//     HTTP session sends a message on the stream of the request it belongs
//     to by that context.
type hostConn struct {
	g     *gateway
	inner mcp.Connection

	done     chan struct{} // closed once the first message is read, or reading failed
	first    jsonrpc.Message
	firstErr error
	given    bool // first handed to the SDK; only the SDK's one reader reads it
}

// hostConnOf sets the gateway's host side up on c and starts reading the
// host's first message.
func (g *gateway) hostConnOf(ctx context.Context, c mcp.Connection) *hostConn {
	h := &hostConn{g: g, inner: c, done: make(chan struct{})}
	g.fw.guard.g = g
	g.tk.out = &hostOut{w: hostSink{h}, t: g.tk}
	g.tk.hostRaw = newDownRaw("", g.tk.out)
	g.tk.rawDown = true
	go func() {
		defer close(h.done)
		h.first, h.firstErr = h.next(ctx)
	}()
	return h
}

// await waits at most d for the host's first message and returns what
// [hello.await] returns for it.
func (h *hostConn) await(ctx context.Context, d time.Duration, offered bool) (*mcp.ClientCapabilities, json.RawMessage, bool) {
	if !waitFirst(ctx, h.done, d) || h.firstErr != nil {
		return gatewayCaps(), nil, false
	}
	b, err := jsonrpc.EncodeMessage(h.first)
	if err != nil {
		return gatewayCaps(), nil, false
	}
	stateless := offered && statelessHello(b)
	caps, tasks := serverCaps(b, stateless)
	return caps, tasks, stateless
}

// next reads the host's next message that the task layer does not take.
func (h *hostConn) next(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := h.inner.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				// Before the SDK sees the end, so that it is not taken for
				// a cancellation of the calls in flight.
				h.g.leave("the host's HTTP session ended")
			}
			return nil, err
		}
		b, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			return msg, nil
		}
		h.g.recordFrame(schemas.KindFrameC2S, b)
		r := readRPCOf(reading.Read(b))
		if h.g.hostTakeRead(b, r) {
			continue
		}
		if sub := h.g.tk.plainOverHTTP(msg, r); sub != nil {
			return sub, nil
		}
		return msg, nil
	}
}

// Read implements mcp.Connection.
func (h *hostConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if !h.given {
		select {
		case <-h.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		h.given = true
		return h.first, h.firstErr
	}
	return h.next(ctx)
}

// Write implements mcp.Connection: what tasks adds to the SDK's message,
// then the cancel guard, the record and the connection.
func (h *hostConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	q := bytes.TrimSuffix(h.g.tk.amend(append(b, '\n')), []byte("\n"))
	if !bytes.Equal(q, b) {
		if msg, err = jsonrpc.DecodeMessage(q); err != nil {
			return err
		}
	}
	return h.send(ctx, q, msg)
}

// send writes one message to the host, encoded as line.
func (h *hostConn) send(ctx context.Context, line []byte, msg jsonrpc.Message) error {
	if h.g.fw.guard.drop(line) {
		return nil
	}
	h.g.recordFrame(schemas.KindFrameS2C, line)
	return h.inner.Write(ctx, msg)
}

// Close implements mcp.Connection.
func (h *hostConn) Close() error { return h.inner.Close() }

// SessionID implements mcp.Connection: the HTTP session's id.
func (h *hostConn) SessionID() string { return h.inner.SessionID() }

// hostSink is where the task layer's own frames to the host go (through
// [hostOut]): each Write is one frame, decoded and sent as a message that
// belongs to no request of the host.
type hostSink struct{ h *hostConn }

func (s hostSink) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(p, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			return 0, err
		}
		if err := s.h.send(context.Background(), line, msg); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (s hostSink) Close() error { return s.h.Close() }

// connTransport is an mcp.Transport whose connection is already made.
type connTransport struct{ c mcp.Connection }

func (t connTransport) Connect(context.Context) (mcp.Connection, error) {
	if t.c == nil {
		return nil, errors.New("no host connection")
	}
	return t.c, nil
}
