package projector

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// The arguments of recorded calls, for the policy's conditions (when:),
// which read them. An intent line carries the request's digest, not the
// request: the arguments come from the host's frame, recorded just before
// (wrap records the frame with the first intent it holds; the gateway
// records each frame as it reads it). A recheck queues the tools/call
// requests of each host frame of a session and gives each intent the first
// queued request of its tool whose digest is the intent's: wrap's request
// digest is the frame's, the gateway's that of {"arguments", "name"}. A
// request no intent takes stays queued, at most maxQueuedCalls per
// session; an intent no request matches gets no arguments, and a condition
// that reads them then denies, as it would have live.

// maxQueuedCalls bounds the requests a recheck holds per session.
const maxQueuedCalls = 256

type queuedCall struct {
	name          string
	args          json.RawMessage
	frame, byName string // the digests wrap and the gateway give it
}

// callQueue holds the requests of each session not yet taken by an intent.
type callQueue map[string][]queuedCall

// frame queues the tools/call requests of a host frame of session.
func (q callQueue) frame(session string, b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	var objs []json.RawMessage
	if b[0] == '[' {
		if json.Unmarshal(b, &objs) != nil {
			return
		}
	} else {
		objs = []json.RawMessage{b}
	}
	fd := hexSHA(b)
	for _, o := range objs {
		var req struct {
			Method string `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(o, &req) != nil || req.Method != "tools/call" || req.Params.Name == "" {
			continue
		}
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		named, err := json.Marshal(map[string]any{"name": req.Params.Name, "arguments": args})
		if err != nil {
			continue
		}
		calls := append(q[session], queuedCall{name: req.Params.Name, args: req.Params.Arguments, frame: fd, byName: hexSHA(named)})
		if len(calls) > maxQueuedCalls {
			calls = calls[len(calls)-maxQueuedCalls:]
		}
		q[session] = calls
	}
}

// take returns the arguments of the queued request of tool whose digest
// is digest, and drops it.
func (q callQueue) take(session, tool, digest string) (json.RawMessage, bool) {
	calls := q[session]
	for i, c := range calls {
		if c.name == tool && (c.frame == digest || c.byName == digest) {
			q[session] = append(calls[:i:i], calls[i+1:]...)
			return c.args, true
		}
	}
	return nil, false
}

func hexSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
