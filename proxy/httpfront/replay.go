package httpfront

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of what the front keeps for clients that resume a stream.
const (
	// ReplayBytes bounds the bytes of messages kept per session; a
	// message larger than that is kept alone until the next one comes.
	ReplayBytes = 256 << 10
	// ReplayAnswered is how many answered streams (a request's stream
	// whose answer was sent) a session keeps for resumption, the latest;
	// a stream still waiting for its answer is kept until it is answered
	// (within ReplayBytes).
	ReplayAnswered = 8
	// replayStreams bounds the streams a session keeps at all: a stream
	// never answered (its request was cancelled) is forgotten once this
	// many newer ones were opened.
	replayStreams = 1024
)

// replayStore is the front's [mcp.EventStore]: the messages a client that
// lost a stream's connection gets again when it resumes the stream
// (GET with Last-Event-ID). The SDK's MemoryEventStore keeps an entry for
// every stream a session ever opened (one per request) until the session
// ends, and past its byte limit scans every stream of every session on
// each message; a long session grows without bound and slows every
// other. This one keeps, per session, the streams still waiting for
// their answer and the last ReplayAnswered answered ones, within
// ReplayBytes: memory is bounded per session, and so in total by
// [Config.MaxSessions]. A resume of a stream no longer kept is refused
// (the SDK answers 400), as one of a stream the client never had.
type replayStore struct {
	mu       sync.Mutex
	sessions map[string]*replaySession
}

type replaySession struct {
	streams  map[string]*replayStream
	answered []string // answered streams, oldest first
	order    []string // every stream kept, oldest first
	bytes    int
}

type replayStream struct {
	first    int // the index of data[0] in the stream
	data     [][]byte
	size     int
	answered bool
}

func newReplayStore() *replayStore {
	return &replayStore{sessions: map[string]*replaySession{}}
}

var _ mcp.EventStore = (*replayStore)(nil)

// answerKey marks the context of a write that answers a request: the SDK
// passes the write's context to Append (see trackConn.Write).
type answerKey struct{}

func (r *replayStore) session(id string) *replaySession {
	s := r.sessions[id]
	if s == nil {
		s = &replaySession{streams: map[string]*replayStream{}}
		r.sessions[id] = s
	}
	return s
}

// Open implements [mcp.EventStore].
func (r *replayStore) Open(_ context.Context, sessionID, streamID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.session(sessionID)
	if s.streams[streamID] == nil {
		s.streams[streamID] = &replayStream{}
		s.order = append(s.order, streamID)
		for len(s.order) > replayStreams {
			s.drop(s.order[0])
		}
	}
	return nil
}

// Append implements [mcp.EventStore].
func (r *replayStore) Append(ctx context.Context, sessionID, streamID string, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.session(sessionID)
	st := s.streams[streamID]
	if st == nil {
		st = &replayStream{}
		s.streams[streamID] = st
		s.order = append(s.order, streamID)
	}
	st.data = append(st.data, data)
	st.size += len(data)
	s.bytes += len(data)
	if ctx.Value(answerKey{}) != nil && streamID != "" && !st.answered {
		st.answered = true
		s.answered = append(s.answered, streamID)
		for len(s.answered) > ReplayAnswered {
			s.drop(s.answered[0])
		}
	}
	s.trim(streamID)
	return nil
}

// drop forgets stream id of s.
func (s *replaySession) drop(id string) {
	st := s.streams[id]
	if st == nil {
		return
	}
	s.bytes -= st.size
	delete(s.streams, id)
	if i := slices.Index(s.order, id); i >= 0 {
		s.order = slices.Delete(s.order, i, i+1)
	}
	if st.answered {
		if i := slices.Index(s.answered, id); i >= 0 {
			s.answered = slices.Delete(s.answered, i, i+1)
		}
	}
}

// trim brings s within ReplayBytes: the oldest answered streams go
// first, then the oldest messages of the other streams, never the message
// just appended to stream cur.
func (s *replaySession) trim(cur string) {
	for s.bytes > ReplayBytes && len(s.answered) > 0 && s.answered[0] != cur {
		s.drop(s.answered[0])
	}
	for _, id := range slices.Clone(s.order) {
		if s.bytes <= ReplayBytes {
			return
		}
		st := s.streams[id]
		n := len(st.data)
		if id == cur {
			n-- // the message just appended stays
		}
		for i := 0; i < n && s.bytes > ReplayBytes; i++ {
			s.bytes -= len(st.data[0])
			st.size -= len(st.data[0])
			st.data[0] = nil
			st.data = st.data[1:]
			st.first++
		}
	}
}

// After implements [mcp.EventStore].
func (r *replayStore) After(_ context.Context, sessionID, streamID string, index int) iter.Seq2[[]byte, error] {
	r.mu.Lock()
	var (
		out [][]byte
		err error
	)
	s := r.sessions[sessionID]
	switch st := s.streamOf(streamID); {
	case s == nil:
		err = fmt.Errorf("httpfront: replay: unknown session")
	case st == nil:
		err = fmt.Errorf("httpfront: replay: stream %q is no longer kept: %w", streamID, mcp.ErrEventsPurged)
	case index+1 < st.first:
		err = fmt.Errorf("httpfront: replay: stream %q from %d: %w", streamID, index+1, mcp.ErrEventsPurged)
	case index+1-st.first < len(st.data):
		out = slices.Clone(st.data[index+1-st.first:])
	}
	r.mu.Unlock()
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range out {
			if !yield(d, nil) {
				return
			}
		}
	}
}

func (s *replaySession) streamOf(id string) *replayStream {
	if s == nil {
		return nil
	}
	return s.streams[id]
}

// SessionClosed implements [mcp.EventStore].
func (r *replayStore) SessionClosed(_ context.Context, sessionID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sessions, sessionID)
	return nil
}

// bytes is what the store holds, in all.
func (r *replayStore) bytes() (n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sessions {
		n += s.bytes
	}
	return n
}
