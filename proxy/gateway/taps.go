package gateway

import (
	"bytes"
	"io"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

// frameTap records the host's frames as they are read.
type frameTap struct {
	r    io.ReadCloser
	g    *gateway
	kind schemas.Kind
	buf  []byte
}

func (t *frameTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil {
		// Before the SDK sees the end, so that it is not taken for a
		// cancellation of the calls in flight.
		defer t.g.leave("the host closed its stdin")
	}
	t.buf = append(t.buf, p[:n]...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.g.recordFrame(t.kind, t.buf[:i])
		t.buf = t.buf[i+1:]
	}
	return n, err
}

func (t *frameTap) Close() error { return t.r.Close() }

// frameTapW records the frames written to the host.
type frameTapW struct {
	w   io.WriteCloser
	g   *gateway
	buf []byte
}

func (t *frameTapW) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.g.recordFrame(schemas.KindFrameS2C, t.buf[:i])
		t.buf = t.buf[i+1:]
	}
	return t.w.Write(p)
}

func (t *frameTapW) Close() error { return t.w.Close() }

func (g *gateway) recordFrame(kind schemas.Kind, b []byte) {
	if len(b) > proxy.MaxFrame {
		return
	}
	// A copy: the store keeps it until the commit that takes it.
	if err := g.sess.LazyFrame(kind, append([]byte(nil), b...)); err != nil {
		g.log.Warn("record frame", "err", err)
	}
}
