package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/schemas"
)

// DefaultApprovalTTL is how long a pending approval can be acted on.
const DefaultApprovalTTL = 10 * time.Minute

// The refusal frame of upstream ADR-0015: the only JSON-RPC aegis authors.
const (
	RefusalCode    = -32042
	RefusalMessage = "aegis wrap refused this tools/call"
)

// refusalFrame returns the error frame for a refused request with the given
// raw id, keys in the order the upstream emitter writes them.
func refusalFrame(id json.RawMessage, code string) []byte {
	b := make([]byte, 0, 160+len(id))
	b = append(b, `{"error":{"code":-32042,"data":{"aegis":{"code":"`...)
	b = append(b, code...)
	b = append(b, `","layer":"wrap"}},"message":"aegis wrap refused this tools/call"},"id":`...)
	b = append(b, id...)
	b = append(b, `,"jsonrpc":"2.0"}`...)
	return b
}

// ApprovalOp is a request from `aegis approve`, `aegis deny` or `aegis
// approvals`, delivered by the caller's approval channel.
type ApprovalOp struct {
	Op         string // "approve", "deny" or "list"
	ApprovalID string
	Reason     string
	By         string
}

// ApprovalReply answers an ApprovalOp.
type ApprovalReply struct {
	OK      bool
	Error   string
	Message string
	Pending []PendingApproval
}

// PendingApproval is one call waiting for a human.
type PendingApproval struct {
	ApprovalID    string    `json:"approval_id"`
	ToolID        string    `json:"tool_id"`
	RequestDigest string    `json:"request_digest"`
	ArgsDigest    string    `json:"args_digest"`
	Session       string    `json:"session"`
	RequestedAt   time.Time `json:"requested_at"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// gate holds the policy engine and the approval state of one session.
type gate struct {
	engine *policy.Engine
	hash   string
	ttl    time.Duration

	mu       sync.Mutex
	pending  map[string]*PendingApproval
	resolved map[string]string   // approval id -> what became of it
	allow    map[string][]string // tool+args key -> approval ids granting one call each
}

func newGate(set *policy.Set, ttl time.Duration) *gate {
	if ttl <= 0 {
		ttl = DefaultApprovalTTL
	}
	return &gate{engine: policy.NewEngine(set), hash: set.Hash(), ttl: ttl,
		pending: map[string]*PendingApproval{}, resolved: map[string]string{}, allow: map[string][]string{}}
}

func allowKey(tool, argsDigest string) string { return tool + "\x00" + argsDigest }

// gated is one call's verdict in a frame.
type gated struct {
	decision   policy.Decision
	argsDigest string
	approval   string // the approval a pending call's allowance comes from
}

// decide evaluates a call. A pending_approval verdict is turned into Allow
// when an approval for the same tool and arguments is waiting to be used;
// the allowance is taken only by take, once the frame is relayed.
func (g *gate) decide(tool string, args json.RawMessage, now time.Time) gated {
	return g.decideRequest(policy.Request{Tool: tool}, args, now)
}

// decideRequest is decide for a full request (the gateway asks with the
// capability and the active profile as role too); req.Tool keys the
// approvals.
func (g *gate) decideRequest(req policy.Request, args json.RawMessage, now time.Time) gated {
	tool := req.Tool
	d := g.engine.Evaluate(req, now)
	gd := gated{decision: d, argsDigest: argsDigest(args)}
	if d.Verdict == policy.PendingApproval {
		g.mu.Lock()
		if ids := g.allow[allowKey(tool, gd.argsDigest)]; len(ids) > 0 {
			gd.approval = ids[0]
			gd.decision.Verdict = policy.Allow
		}
		g.mu.Unlock()
	}
	return gd
}

// take uses up the allowance a decision relied on.
func (g *gate) take(tool string, gd gated) {
	if gd.approval == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	k := allowKey(tool, gd.argsDigest)
	ids := g.allow[k]
	for i, id := range ids {
		if id == gd.approval {
			g.allow[k] = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	if len(g.allow[k]) == 0 {
		delete(g.allow, k)
	}
	g.resolved[gd.approval] = "approved and used"
}

// argsDigest is SHA-256 over the canonical JSON of a call's arguments: RFC
// 8785 when they are in the audit value space, else the same form with
// numbers kept as written (JCS would reformat floats; a retry by the same
// client writes them the same). Absent arguments digest as {}.
func argsDigest(args json.RawMessage) string {
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = json.RawMessage("{}")
	}
	if c, err := schemas.Canonicalize(args); err == nil {
		return sha(c)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return sha(args)
	}
	var b bytes.Buffer
	writeSorted(&b, v)
	return sha(b.Bytes())
}

func writeSorted(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeSorted(b, t[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeSorted(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(t.String())
	default:
		e, _ := json.Marshal(t)
		b.Write(e)
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// request registers a pending approval.
func (g *gate) request(p PendingApproval) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending[p.ApprovalID] = &p
}

// list returns the pending approvals, oldest first.
func (g *gate) list(now time.Time) []PendingApproval {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []PendingApproval
	for _, p := range g.pending {
		if now.Before(p.ExpiresAt) {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	return out
}

// resolve takes a pending approval for a decision, or says why it cannot.
func (g *gate) resolve(id string, now time.Time) (*PendingApproval, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[id]
	if !ok {
		if what, done := g.resolved[id]; done {
			return nil, fmt.Sprintf("approval %s was already %s", id, what)
		}
		return nil, fmt.Sprintf("no approval %s is pending in this session", strconv.Quote(id))
	}
	if !now.Before(p.ExpiresAt) {
		delete(g.pending, id)
		g.resolved[id] = "expired"
		return nil, fmt.Sprintf("approval %s expired at %s", id, p.ExpiresAt.Format(time.RFC3339))
	}
	delete(g.pending, id)
	return p, ""
}

// grant records an approval's single-use allowance.
func (g *gate) grant(p *PendingApproval) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := allowKey(p.ToolID, p.ArgsDigest)
	g.allow[k] = append(g.allow[k], p.ApprovalID)
	g.resolved[p.ApprovalID] = "approved"
}

func (g *gate) denied(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolved[id] = "denied"
}

// expire drops a pending approval whose time ran out; it reports whether
// it was still pending.
func (g *gate) expire(id string) (*PendingApproval, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[id]
	if !ok {
		return nil, false
	}
	delete(g.pending, id)
	g.resolved[id] = "expired"
	return p, true
}
