package relay

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/aegis-dev/aegis/proxy"
)

// outPath is one direction's output. Frames leave in the order they were
// sent. The sender writes a frame itself when nothing is queued ahead of
// it and either the frame waits for nothing or nothing more is waiting to
// be read behind it; otherwise frames go through ch to the writer, which
// waits for each frame's receipt before writing it. Writing in the sender
// saves goroutine hand-offs on the path of a lone call; handing off lets a
// reader with more frames buffered go on reading them while a commit is in
// flight, so that they share the next one.
//
// Backpressure: the bytes of the frames in ch, and the one the writer
// holds, stay under maxQueuedBytes (a frame that finds nothing queued is
// always taken): a sender over it waits for the writer, so its reader stops
// reading its side until the frames ahead of it are committed and written.
// The events store bounds the frames queued for a commit the same way (see
// events.Config.MaxQueueBytes), so what one direction holds in memory is
// bounded whether its frames wait for a commit or not.
type outPath struct {
	ch       chan outFrame
	dst      io.Writer
	toServer bool

	mu     sync.Mutex
	room   sync.Cond // on mu; signalled when the writer has written a frame
	queued int       // frames in ch or being written by the writer
	bytes  int       // their bytes
	broken bool      // dst failed; later frames are dropped
	closed bool      // ch is closed: its writer drains it and is done
}

// close closes the path's queue: the writer writes what it holds and
// ends, and a later send writes its frame itself. The host's path is fed
// from two readers (the server's frames and aegis's own refusals of host
// frames), so the server's end must not close it under a refusal.
func (p *outPath) close() {
	p.mu.Lock()
	p.closed = true
	close(p.ch)
	p.mu.Unlock()
}

// maxQueuedBytes bounds the bytes of the frames an outPath holds for its
// writer. It is at least one frame of MaxFrame and its terminator, so that
// a frame of any size passes.
const maxQueuedBytes = 2 * (proxy.MaxFrame + 2)

func newOutPath(dst io.Writer, toServer bool) *outPath {
	p := &outPath{ch: make(chan outFrame, 64), dst: dst, toServer: toServer}
	p.room.L = &p.mu
	return p
}

// send hands f to its direction, in order. more says that the sender has
// more frames to read at once.
func (r *relay) send(p *outPath, f outFrame, more bool) {
	p.mu.Lock()
	// direct writes f in this goroutine, p.mu held.
	direct := func() {
		for p.closed && p.queued > 0 {
			p.room.Wait() // the writer drains the queue; then this frame follows
		}
		if f.wait != nil {
			// With no commit in flight, Wait commits in this goroutine.
			// p.mu is held, so nothing overtakes the frame meanwhile.
			if _, err := f.wait.Wait(r.ctx); err != nil {
				r.fail(fmt.Errorf("event not acknowledged: %w", err))
			}
		}
		r.write(p, f.data)
		p.mu.Unlock()
	}
	if p.closed || (p.queued == 0 && (f.wait == nil || !more)) {
		direct()
		return
	}
	for p.queued > 0 && p.bytes+len(f.data) > maxQueuedBytes {
		p.room.Wait()
	}
	if p.closed { // closed while this frame waited for room
		direct()
		return
	}
	p.queued++
	p.bytes += len(f.data)
	p.mu.Unlock()
	p.ch <- f
}

// write writes one frame; p.mu is held.
func (r *relay) write(p *outPath, data []byte) {
	if p.broken || r.failedNow() {
		return
	}
	if _, err := p.dst.Write(data); err != nil {
		p.broken = true
		if !p.toServer {
			r.log.Warn("host stdout closed; dropping server output", "err", err)
		}
	}
}

// writeFrames waits for each queued frame's receipt and writes it. A
// receipt that fails stops the relay: the frame is not written.
func (r *relay) writeFrames(ctx context.Context, p *outPath) {
	for f := range p.ch {
		if f.wait != nil {
			if _, err := f.wait.Wait(ctx); err != nil {
				r.fail(fmt.Errorf("event not acknowledged: %w", err))
			}
		}
		p.mu.Lock()
		r.write(p, f.data)
		p.queued--
		p.bytes -= len(f.data)
		p.room.Broadcast()
		p.mu.Unlock()
	}
}

func (r *relay) failedNow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed != nil
}
