package relay

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/schemas"
)

// onServerFrame records a server frame and the outcomes of the calls it
// answers; the frame waits for those outcomes. An answer is matched to the
// host's requests in flight the way hosts match it (exactly, or loosely:
// see LooseID), and closes every call that any reading matches. A frame
// with an answer that matches no request in flight (a forged answer, to a
// refused or unsent id, or a second answer) is recorded but not relayed.
// Answers are read line by line and as one continuous stream across
// frames (readServerFrame), as hosts read them.
func (r *relay) onServerFrame(line []byte) (*events.Receipt, bool, bool) {
	select {
	case r.rearm <- struct{}{}:
	default:
	}
	frame := rpc.FrameOf(line)
	if e, ok := rpc.QuickLine(r.ss, frame); ok && r.answerPlain(e) {
		// It answers no call in flight (as below): relayed without
		// waiting for its own commit.
		if err := r.sess.LazyFrame(schemas.KindFrameS2C, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	cls, sc := rpc.ReadServerFrame(r.ss, line)
	if sc.Overflow {
		r.log.Warn("the server left a JSON value unfinished for more than 16 MiB; aegis no longer follows it")
	}
	now := r.cfg.Now()
	var answered []*pendingCall
	if len(cls.Answers) > 0 {
		r.mu.Lock()
		r.readUnreadLocked()
		var matchedBuf [8]bool
		matched := matchedBuf[:0]
		if cls.Elems > len(matchedBuf) {
			matched = make([]bool, cls.Elems)
		} else {
			matched = matchedBuf[:cls.Elems]
		}
		var othersBuf [2]*otherRequest
		others := othersBuf[:0]
		for _, a := range cls.Answers {
			for a.Elem >= len(matched) {
				matched = append(matched, false) // never: Elem < elems
			}
			// The loose reading is parsed only when something in flight
			// is left for it to match: the common answer names a request
			// by its exact id, with no call in flight.
			var id proxy.ReqID
			if len(r.pending) > 0 || r.others[a.Key] == nil {
				id = proxy.NewReqID(a.Key, a.ID)
			} else {
				id = proxy.ReqID{Key: a.Key}
			}
			for _, pc := range r.pending {
				if pc.id.Same(id) && !slices.Contains(answered, pc) {
					answered = append(answered, pc)
					matched[a.Elem] = true
				}
			}
			if o := r.otherWithLocked(id); o != nil {
				if !slices.Contains(others, o) {
					others = append(others, o)
				}
				matched[a.Elem] = true
			}
		}
		var unmatched *rpc.Answer
		for i, a := range cls.Answers {
			if !matched[a.Elem] {
				unmatched = &cls.Answers[i]
				break
			}
		}
		if unmatched != nil {
			r.mu.Unlock()
			id := string(unmatched.ID)
			if id == "" {
				id = "(none)"
			}
			return r.dropServerFrame(frame, "it answers id "+id+", which no request of the host's in flight has")
		}
		for _, pc := range answered {
			delete(r.pending, pc.id.Key)
		}
		for _, o := range others {
			if o.n--; o.n <= 0 {
				delete(r.others, o.id.Key)
			}
		}
		r.mu.Unlock()
	}
	// The frame event rides with the first outcome; a frame that answers
	// no pending call (a ping's answer, a notification, a request to the
	// host) is relayed without waiting for its own commit.
	r.ss = sc.Next
	if len(answered) == 0 {
		if err := r.sess.LazyFrame(schemas.KindFrameS2C, frame); err != nil {
			r.fail(err)
			return nil, false, false
		}
		return nil, true, true
	}
	sortPending(answered)
	fev, err := r.sess.FrameEvent(schemas.KindFrameS2C, frame)
	if err != nil {
		r.fail(err)
		return nil, false, false
	}
	with := []schemas.Event{fev}
	dg := proxy.Digest(frame)
	var last *events.Receipt
	for _, pc := range answered {
		wall := uint64(now.Sub(pc.start).Milliseconds())
		o := pc.call.Answered(dg, wall)
		o.DecisionAxes = pc.axes
		if last, err = r.sess.Outcome(o, with...); err != nil {
			r.fail(err)
			return nil, false, false
		}
		with = nil
	}
	return last, true, true
}

// answerPlain closes the host request that a plain server envelope
// (quickLine) answers and reports whether the frame is then relayed
// without waiting: it is a request or notification of the server's, or
// the answer to a request of the host's other than a tools/call, named by
// its exact id while no call is in flight. That is the common frame, so it
// takes the lock once and allocates nothing. It reports false for any
// other frame, which the general reading then matches (having read the
// unread host line, if any, as that reading would).
func (r *relay) answerPlain(e rpc.Envelope) bool {
	if !e.IsAnswer {
		return true
	}
	var buf [64]byte
	k, ok := rpc.AppendPlainIDKey(buf[:0], e.ID)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readUnreadLocked()
	o := r.others[string(k)]
	if o == nil || len(r.pending) > 0 {
		return false
	}
	if o.n--; o.n <= 0 {
		delete(r.others, o.id.Key)
	}
	return true
}

// dropServerFrame records a server frame that is not relayed, and why, and
// warns on stderr.
func (r *relay) dropServerFrame(frame []byte, why string) (*events.Receipt, bool, bool) {
	if _, err := r.sess.Frame(schemas.KindFrameS2C, frame); err != nil {
		r.fail(err)
		return nil, false, false
	}
	if _, err := r.sess.Fact(schemas.KindFrameDropped, map[string]string{"direction": "s2c", "frame_digest": proxy.Digest(frame), "reason": why}); err != nil {
		r.fail(err)
		return nil, false, false
	}
	r.log.Warn("dropped a server frame instead of relaying it to the host: "+why+"; the host never asked for it, so the server is answering calls it was not sent (check the server, and the frame.dropped event in aegis replay)", "frame_digest", proxy.Digest(frame))
	return nil, false, true
}

// settlePending records an outcome for every call still pending and waits
// until those outcomes are durable. A call the host cancelled says so.
func (r *relay) settlePending(outcome func(schemas.WrapCall) schemas.Outcome) {
	r.mu.Lock()
	calls := make([]*pendingCall, 0, len(r.pending))
	for k, pc := range r.pending {
		calls = append(calls, pc)
		delete(r.pending, k)
	}
	r.mu.Unlock()
	// Settle in call order so the record reads naturally.
	sortPending(calls)
	var last *events.Receipt
	now := r.cfg.Now()
	for _, pc := range calls {
		o := outcome(pc.call)
		if pc.cancelled > 0 {
			o = pc.call.Cancelled(pc.cancelled, uint64(now.Sub(pc.start).Milliseconds()))
			o.DecisionAxes = pc.axes
		}
		rc, err := r.sess.Outcome(o)
		if err != nil {
			r.fail(err)
			return
		}
		last = rc
	}
	if last != nil {
		if _, err := last.Wait(context.Background()); err != nil {
			r.fail(err)
		}
	}
}

func sortPending(calls []*pendingCall) {
	n := func(id string) int {
		v, _ := strconv.Atoi(strings.TrimPrefix(id, "call-"))
		return v
	}
	sort.Slice(calls, func(i, j int) bool { return n(calls[i].call.CallID) < n(calls[j].call.CallID) })
}
