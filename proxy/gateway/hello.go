package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
)

// The capabilities each server is told are the host's (docs/GATEWAY-PARITY.md):
// the servers are started at once, but initialized only once the host's
// first frame, its initialize, has been read, so that a server offers
// what it would offer the host directly (server-everything lists
// trigger-sampling-request only to a client with sampling). Of the host's
// capabilities the servers are told those the gateway carries: roots,
// sampling and elicitation. A host that sends nothing for [helloWait],
// or whose first frame is not an initialize, has its servers told every
// capability the gateway carries; a request the host then cannot take is
// refused at the gateway (-32601), as before. A stateless host
// (2026-07-28) has no initialize: the capabilities of its first request's
// _meta are the ones the servers are told.

// helloWait is how long the gateway waits for the host's initialize before
// it initializes the servers without it.
const helloWait = 10 * time.Second

// gatewayCaps are the capabilities the gateway can carry to a host.
func gatewayCaps() *mcp.ClientCapabilities {
	return &mcp.ClientCapabilities{
		RootsV2:     &mcp.RootCapabilities{ListChanged: true},
		Sampling:    &mcp.SamplingCapabilities{Tools: &mcp.SamplingToolsCapabilities{}},
		Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}},
	}
}

// hostTransport builds the host's side of the gateway: frames recorded as
// they are read and written, cancellations followed, task requests taken
// out for the task layer.
func (g *gateway) hostTransport() (io.ReadCloser, io.WriteCloser) {
	host := g.guardHost(&mcp.IOTransport{Reader: &frameTap{r: g.cfg.Stdin, g: g, kind: schemas.KindFrameC2S}, Writer: &frameTapW{w: g.cfg.Stdout, g: g}})
	g.tk.out = &hostOut{w: host.Writer, t: g.tk}
	g.tk.hostRaw = newDownRaw("", g.tk.out)
	g.tk.plainCalls = true
	return &frameFilter{r: host.Reader, take: g.hostTake}, g.tk.out
}

// hello is the host's stream with its first frame read ahead: a reader that
// gives that frame again, then the rest.
type hello struct {
	r    io.ReadCloser
	done chan struct{} // closed once the first frame is read, or reading failed
	buf  []byte        // read ahead, not yet given
	err  error
}

func readHello(r io.ReadCloser) *hello {
	h := &hello{r: r, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tmp := make([]byte, 4096)
		for {
			n, err := r.Read(tmp)
			h.buf = append(h.buf, tmp[:n]...)
			switch {
			case err != nil:
				h.err = err
				return
			case len(h.buf) > proxy.MaxFrame:
				return
			case bytes.IndexByte(h.buf, '\n') >= 0 || endsValue(h.buf):
				// The filter below passes whole values: the first is here
				// once the text read holds one, or cannot.
				if rd := reading.Read(h.buf); len(rd.Values) > 0 || !rd.More {
					return
				}
			}
		}
	}()
	return h
}

// await waits at most d for the first frame and returns the capabilities
// the servers are to be told, and the host's capabilities.tasks (nil: it
// has none).
func (h *hello) await(ctx context.Context, d time.Duration, offered bool) (*mcp.ClientCapabilities, json.RawMessage, bool) {
	if !waitFirst(ctx, h.done, d) {
		return gatewayCaps(), nil, false
	}
	if !offered || !statelessHello(h.buf) {
		caps, tasks := serverCaps(h.buf, false)
		return caps, tasks, false
	}
	caps, tasks := serverCaps(h.buf, true)
	return caps, tasks, true
}

// statelessHello reports whether the host's first frame, the first value
// of text, is a request of a stateless host (2026-07-28 and later: its
// _meta names the protocol version), read as serverCaps reads it.
func statelessHello(text []byte) bool {
	rd := reading.Read(text)
	if len(rd.Values) == 0 {
		return false
	}
	r := readMessage(rd.Values[0])
	if !r.message || r.ambiguous != "" || r.params == nil || r.method == "initialize" {
		return false
	}
	meta, why := r.params.Get("_meta")
	if why != "" {
		return false
	}
	v, why := meta.Get(mcp.MetaKeyProtocolVersion)
	s, ok := v.String()
	return why == "" && ok && s >= newProtocol
}

// waitFirst waits at most d, and not past ctx, until done is closed, and
// reports whether it was.
func waitFirst(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// serverCaps returns what servers are told of a host whose first frame is
// the first value of text: its roots, sampling and elicitation, if it is
// its initialize, or, when stateless (the gateway serves the host without
// a session), the clientCapabilities of its _meta; else all the gateway
// carries. It returns the host's
// capabilities.tasks too. It reads the frame as the gateway reads every
// frame (rpcRead); an ambiguous one never gets here (the host's frames
// are taken first), and is read as no initialize if it did.
func serverCaps(text []byte, stateless bool) (*mcp.ClientCapabilities, json.RawMessage) {
	rd := reading.Read(text)
	if len(rd.Values) == 0 {
		return gatewayCaps(), nil
	}
	r := readMessage(rd.Values[0])
	if !r.message || r.ambiguous != "" || r.params == nil {
		return gatewayCaps(), nil
	}
	var host *reading.Value
	var why string
	switch {
	case r.method == "initialize":
		host, why = r.params.Get("capabilities")
	case !stateless:
		// Not a host the gateway serves without a session (a host that
		// probes with server/discover, then initializes, among them).
		return gatewayCaps(), nil
	default:
		// A stateless (2026-07-28) host has no initialize: its first
		// request names its capabilities in its _meta.
		meta, mwhy := r.params.Get("_meta")
		if mwhy != "" || meta == nil || meta.Kind != reading.Object {
			return gatewayCaps(), nil
		}
		v, vwhy := meta.Get(mcp.MetaKeyProtocolVersion)
		if s, ok := v.String(); vwhy != "" || !ok || s < newProtocol {
			return gatewayCaps(), nil
		}
		host, why = meta.Get(mcp.MetaKeyClientCapabilities)
	}
	if why != "" || host == nil || host.Kind != reading.Object {
		return gatewayCaps(), nil
	}
	c := &mcp.ClientCapabilities{}
	var tasks json.RawMessage
	for _, name := range capMembers {
		v, why := host.Get(name)
		if why != "" {
			return gatewayCaps(), nil
		}
		if v == nil || v.Kind == reading.Null {
			continue
		}
		switch name {
		case "roots":
			// listChanged whatever the host's: a server that asks before
			// the host is connected is answered with no roots, and told
			// when the host's arrive.
			c.RootsV2 = &mcp.RootCapabilities{ListChanged: true}
		case "sampling":
			// Read by exact names, as the host's SDK and the go-sdk read
			// them (a "Tools" is no tools).
			if v.Kind != reading.Object {
				return gatewayCaps(), nil
			}
			c.Sampling = &mcp.SamplingCapabilities{}
			if has(v, "context") {
				c.Sampling.Context = &mcp.SamplingContextCapabilities{}
			}
			if has(v, "tools") {
				c.Sampling.Tools = &mcp.SamplingToolsCapabilities{}
			}
		case "elicitation":
			if v.Kind != reading.Object {
				return gatewayCaps(), nil
			}
			c.Elicitation = &mcp.ElicitationCapabilities{}
			if has(v, "form") {
				c.Elicitation.Form = &mcp.FormElicitationCapabilities{}
			}
			if has(v, "url") {
				c.Elicitation.URL = &mcp.URLElicitationCapabilities{}
			}
		case "tasks":
			if v.Kind == reading.Object {
				tasks = json.RawMessage(v.Raw)
			}
		}
	}
	return c, tasks
}

// has reports whether object v has a member named name exactly that is
// an object, as the SDK reads a capability (any other value it refuses).
func has(v *reading.Value, name string) bool {
	m, _ := v.Lookup(name)
	return m != nil && m.Kind == reading.Object
}

func (h *hello) Read(p []byte) (int, error) {
	<-h.done
	if len(h.buf) > 0 {
		n := copy(p, h.buf)
		h.buf = h.buf[n:]
		return n, nil
	}
	if h.err != nil {
		return 0, h.err
	}
	return h.r.Read(p)
}

func (h *hello) Close() error { return h.r.Close() }
