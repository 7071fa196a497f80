package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// hostOut is the host's end of the gateway's stdout: the SDK's frames, with
// what tasks adds, and the task layer's own, one whole frame at a time.
type hostOut struct {
	mu sync.Mutex
	w  io.WriteCloser
	t  *tasker
}

func (o *hostOut) Write(p []byte) (int, error) {
	q := o.t.amend(p)
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := o.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (o *hostOut) Close() error { return o.w.Close() }

// frame writes one frame of the task layer to the host.
func (o *hostOut) frame(f rpcFrame) {
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		o.t.g.log.Warn("write a task frame to the host", "err", err)
	}
}

// downRaw is the gateway's own JSON-RPC channel to one server, beside the
// SDK's session on the same pipes.
type downRaw struct {
	server string // the server's name; "" for the host
	peer   string // "server NAME" or "the host", for errors
	w      io.Writer

	mu      sync.Mutex
	n       uint64
	waiting map[string]chan rpcFrame
	closed  error
}

// send writes one frame of the gateway's own to the peer.
func (d *downRaw) send(f rpcFrame) {
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	d.w.Write(append(b, '\n'))
}

func newDownRaw(server string, w io.Writer) *downRaw {
	peer := "server " + server
	if server == "" {
		peer = "the host"
	}
	return &downRaw{server: server, peer: peer, w: w, waiting: map[string]chan rpcFrame{}}
}

// call sends a request to the server and waits for its answer. When ctx
// ends first, the server is sent notifications/cancelled for it.
func (d *downRaw) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	d.mu.Lock()
	if d.closed != nil {
		d.mu.Unlock()
		return nil, d.closed
	}
	d.n++
	id := rawIDPrefix + strconv.FormatUint(d.n, 10)
	ch := make(chan rpcFrame, 1)
	d.waiting[id] = ch
	d.mu.Unlock()
	forget := func() {
		d.mu.Lock()
		delete(d.waiting, id)
		d.mu.Unlock()
	}
	pb, err := json.Marshal(params)
	if err != nil {
		forget()
		return nil, err
	}
	idb, _ := json.Marshal(id)
	b, _ := json.Marshal(rpcFrame{JSONRPC: "2.0", ID: idb, Method: method, Params: pb})
	if _, err := d.w.Write(append(b, '\n')); err != nil {
		forget()
		return nil, fmt.Errorf("write to %s: %w", d.peer, err)
	}
	select {
	case f := <-ch:
		if f.Error != nil {
			return nil, f.Error
		}
		if f.Result == nil {
			return nil, fmt.Errorf("%s: %w", d.peer, errNoAnswer)
		}
		return f.Result, nil
	case <-ctx.Done():
		forget()
		cause := context.Cause(ctx)
		pc, _ := json.Marshal(map[string]any{"requestId": id, "reason": cause.Error()})
		c, _ := json.Marshal(rpcFrame{JSONRPC: "2.0", Method: "notifications/cancelled", Params: pc})
		d.w.Write(append(c, '\n'))
		return nil, cause
	}
}

var errNoAnswer = errors.New("its output ended before it answered")

func (d *downRaw) deliver(id string, result json.RawMessage, e *jsonrpc.Error) {
	d.mu.Lock()
	ch := d.waiting[id]
	delete(d.waiting, id)
	d.mu.Unlock()
	if ch != nil {
		ch <- rpcFrame{Result: result, Error: e}
	}
}

// fail ends every request waiting for an answer: the server's output
// ended.
func (d *downRaw) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed == nil {
		d.closed = fmt.Errorf("%s: %w (%v)", d.peer, errNoAnswer, err)
	}
	for id, ch := range d.waiting {
		ch <- rpcFrame{Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "aegis: " + d.closed.Error()}}
		delete(d.waiting, id)
	}
}

// serverReader is a server's stdout as the SDK reads it: the answers to
// the gateway's own requests and task statuses taken out, the rest
// unchanged.
type serverReader struct {
	f *frameFilter
	d *downRaw
}

func (t *tasker) serverReader(d *downRaw, r io.Reader) io.ReadCloser {
	return &serverReader{f: &frameFilter{r: r, take: func(text []byte, rd reading.Reading) bool { return t.serverLine(d, text, readRPCOf(rd)) }}, d: d}
}

func (s *serverReader) Read(p []byte) (int, error) {
	n, err := s.f.Read(p)
	if err != nil {
		s.d.fail(err)
	}
	return n, err
}

func (s *serverReader) Close() error { return s.f.Close() }
