package gateway

import (
	"bytes"
	"io"
	"sync"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cancelGuard keeps the gateway from answering a request that the host
// cancelled: the SDK writes an answer (an error) to every request, even a
// cancelled one, and MCP says the receiver of a cancellation should not
// answer. It follows the host's requests by id as they are read and drops
// the one answer to each id cancelled while in flight; the drop is
// recorded (frame.dropped), and so is the cancellation (call.cancelled).
// An answer written before its cancellation is read goes out: the host
// ignores it, as MCP asks of the sender of a cancellation.
type cancelGuard struct {
	g         *gateway
	mu        sync.Mutex
	inflight  map[string]string // ids of host requests not yet answered -> method
	cancelled map[string]bool   // of those, the ones the host cancelled
}

// hostFrame follows one frame read from the host, as read once by the
// gateway (never an ambiguous one: those are refused before).
func (c *cancelGuard) hostFrame(r rpcRead) {
	msgs := []rpcRead{r}
	if r.isBatch {
		msgs = r.batch
	}
	for _, h := range msgs {
		switch {
		case !h.message:
		case h.method == "notifications/cancelled":
			k := cancelledKey(h.params)
			c.mu.Lock()
			method, ok := c.inflight[k]
			ok = ok && k != ""
			if ok {
				c.cancelled[k] = true
			}
			c.mu.Unlock()
			// A tools/call's cancellation is recorded with its outcome
			// (cancelledOutcome), naming the call; any other request's here.
			if ok && method != "tools/call" {
				id, _ := h.params.Get("requestId")
				if _, err := c.g.sess.Fact(schemas.KindCallCancelled, map[string]string{"request_id": string(id.Raw), "method": method, "by": "host"}); err != nil {
					c.g.log.Warn("record a cancellation", "err", err)
				}
			}
		case h.hasMethod && h.idKey != "":
			c.mu.Lock()
			if c.inflight == nil {
				c.inflight, c.cancelled = map[string]string{}, map[string]bool{}
			}
			c.inflight[h.idKey] = h.method
			c.mu.Unlock()
		}
	}
}

// drop reports whether frame, about to be written to the host, is the
// answer to a cancelled request, and forgets the requests it answers.
func (c *cancelGuard) drop(frame []byte) bool {
	c.mu.Lock()
	n := len(c.inflight)
	c.mu.Unlock()
	if n == 0 {
		return false // no request of the host is in flight
	}
	r := readRPC(frame)
	hs := []rpcRead{r}
	if r.isBatch {
		hs = r.batch
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	drop := !r.isBatch
	for _, h := range hs {
		if !h.message || h.hasMethod {
			drop = false
			continue
		}
		k := h.idKey
		delete(c.inflight, k)
		if !c.cancelled[k] {
			drop = false
		}
		delete(c.cancelled, k)
	}
	if drop {
		if _, err := c.g.sess.Fact(schemas.KindFrameDropped, map[string]string{"direction": "s2c", "frame_digest": proxy.Digest(bytes.TrimRight(frame, "\n")),
			"reason": "the host cancelled this request, so its answer is not sent"}); err != nil {
			c.g.log.Warn("record a dropped answer", "err", err)
		}
	}
	return drop
}

// writer writes to w every frame but the answers to cancelled requests.
// Each Write is one frame: the SDK's stdio transport writes a message and
// its newline at once.
func (c *cancelGuard) writer(w io.WriteCloser) io.WriteCloser { return &guardWriter{c: c, w: w} }

type guardWriter struct {
	c *cancelGuard
	w io.WriteCloser
}

func (w *guardWriter) Write(p []byte) (int, error) {
	if w.c.drop(p) {
		return len(p), nil
	}
	return w.w.Write(p)
}

func (w *guardWriter) Close() error { return w.w.Close() }

// guardHost puts the cancel guard on the host's transport: it follows the
// host's frames through the gateway's take of them (hostTake), and drops
// the answers to cancelled requests as they are written.
func (g *gateway) guardHost(t *mcp.IOTransport) *mcp.IOTransport {
	g.fw.guard.g = g
	return &mcp.IOTransport{Reader: t.Reader, Writer: g.fw.guard.writer(t.Writer)}
}
