package relay

import (
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/proxy/rpc"
)

// onServerFramePins is onServerFrame that then reads the tools/list
// answers of a frame it relays into the server's pins, before the frame
// is handed to the writer: the host never sees a listing whose changes are
// not in force, and the frame waits for its pin events to be durable
// (they follow it in the stream, so their receipt covers it too).
func (r *relay) onServerFramePins(line []byte) (*events.Receipt, bool, bool) {
	// Asked only after onServerFrame: it registers the requests of a host
	// line relayed unread (readUnreadLocked) before it matches an answer,
	// so a listing that overtakes the host reader's reading of its
	// request is still read. The stream as it was before the line gives
	// what a stream reader joins.
	prev := r.ss
	wait, relay, ok := r.onServerFrame(line)
	if ok && relay && r.lists.InFlight() {
		// What the relay reads of the line (readServerFrame): the line,
		// and where a stream reader joins it to earlier ones, the joined
		// value and what follows it.
		texts := [][]byte{rpc.FrameOf(line)}
		if sc := prev.Scan(line); sc.Joined != nil {
			texts = append(texts, sc.Joined, sc.Rest)
		}
		rc, err := r.lists.NoteServer(texts, r.books)
		if err != nil {
			r.fail(err)
			return nil, false, false
		}
		if rc != nil {
			wait = rc
		}
	}
	return wait, relay, ok
}
