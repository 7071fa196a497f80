package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
)

// DefaultApprovalTTL is how long a pending approval can be acted on.
const DefaultApprovalTTL = 10 * time.Minute

// The refusal frame of upstream ADR-0015: the only JSON-RPC aegis authors.
const (
	RefusalCode    = -32042
	RefusalMessage = "aegis wrap refused this tools/call"
)

// Refusal is what a -32042 refusal frame says of one refused call, in
// data.aegis beside layer: the code, why (reason), what to do (hint), and
// for PENDING_APPROVAL the approval to act on.
type Refusal struct {
	Code       string
	Reason     string
	Hint       string
	ApprovalID string
	// Elicitation, for a PENDING_APPROVAL toward a host that shows URL
	// elicitations, is the url-mode elicitation that shows the approval:
	// the frame is then MCP's URLElicitationRequired error (the same code),
	// with data.elicitations holding it beside data.aegis.
	Elicitation *Elicitation
}

// Elicitation is a url-mode elicitation: its id, the link it opens and
// the message shown with it.
type Elicitation struct {
	ID, URL, Message string
}

// ElicitationRequiredMessage is the error message of a refusal frame that
// carries an elicitation.
const ElicitationRequiredMessage = "aegis wrap: this tools/call waits for a human's approval (PENDING_APPROVAL): open the link of the elicitation to approve or deny it, then call again"

// refusalFrame returns the refusal frame of a call refused with code, with
// the code's generic reason and hint.
func refusalFrame(id json.RawMessage, code string) []byte {
	return RefusalFrameOf(id, Refusal{Code: code})
}

// RefusalFrameOf returns the error frame for a refused request with the
// given raw id: upstream's frame, keys sorted as its emitter writes them,
// with data.aegis holding approval_id (PENDING_APPROVAL only), code, hint,
// layer and reason, in that (sorted) order and RFC 8785 form. An empty
// reason or hint is filled in from the code.
func RefusalFrameOf(id json.RawMessage, r Refusal) []byte {
	if r.Reason == "" || r.Hint == "" {
		reason, hint := refusalText(r.Code, r.ApprovalID)
		if r.Reason == "" {
			r.Reason = reason
		}
		if r.Hint == "" {
			r.Hint = hint
		}
	}
	data := map[string]any{"code": r.Code, "hint": r.Hint, "layer": "wrap", "reason": r.Reason}
	if r.ApprovalID != "" {
		data["approval_id"] = r.ApprovalID
	}
	for k, v := range data {
		data[k] = strings.ToValidUTF8(v.(string), "\uFFFD")
	}
	aegis, err := schemas.EncodeValue(data)
	if err != nil {
		// Only strings, made valid above: cannot happen.
		aegis = []byte(`{"code":"` + policy.CodeHostDenied + `","layer":"wrap"}`)
	}
	message := RefusalMessage
	var elicitations []byte
	if el := r.Elicitation; el != nil {
		message = ElicitationRequiredMessage
		elicitations, err = schemas.EncodeValue([]any{map[string]any{"elicitationId": strings.ToValidUTF8(el.ID, "\uFFFD"), "message": strings.ToValidUTF8(el.Message, "\uFFFD"),
			"mode": "url", "url": strings.ToValidUTF8(el.URL, "\uFFFD")}})
		if err != nil {
			elicitations, message = nil, RefusalMessage // strings only, made valid: cannot happen
		}
	}
	b := make([]byte, 0, 128+len(aegis)+len(elicitations)+len(id))
	b = append(b, `{"error":{"code":-32042,"data":{"aegis":`...)
	b = append(b, aegis...)
	if elicitations != nil {
		b = append(b, `,"elicitations":`...)
		b = append(b, elicitations...)
	}
	b = append(b, `},"message":"`...)
	b = append(b, message...)
	b = append(b, `"},"id":`...)
	b = append(b, id...)
	b = append(b, `,"jsonrpc":"2.0"}`...)
	return b
}

// RefusalText is the generic reason and hint of a refusal code, as a
// refusal frame without its own says them.
func RefusalText(code, approvalID string) (reason, hint string) { return refusalText(code, approvalID) }

// refusalText is the generic reason and hint of a refusal code.
func refusalText(code, approvalID string) (reason, hint string) {
	switch code {
	case policy.CodePolicyDenied:
		return "the policy denies this tool", "do not retry; the policy must change for this call to run"
	case policy.CodeRateLimited:
		return "the rule's rate limit is spent", "retry once the rate window has passed"
	case policy.CodePendingApproval:
		if approvalID == "" {
			return "a human must approve this call", "ask the operator to approve it, then send the same call again"
		}
		return "a human must approve this call",
			"run: aegis approve " + QuoteArg(approvalID) + " (or: aegis deny " + QuoteArg(approvalID) + "), then send the same call again: the approval lets it through once"
	}
	return "aegis refused this call before it reached the server", "see aegis's stderr and the record for why"
}

// ApprovalOp is a request from `aegis approve`, `aegis deny` or `aegis
// approvals`, delivered by the caller's approval channel.
type ApprovalOp struct {
	Op         string // "approve", "deny" or "list"
	ApprovalID string
	Reason     string
	By         string
	// Approver is the approver's signature an approve carries; with an
	// approvers file ([WrapConfig.Approvers]) an approve without a valid
	// one is refused.
	Approver *schemas.ApproverSignature
}

// ApprovalReply answers an ApprovalOp. Decided is the approval an approve
// or deny resolved: what was approved or denied (tool, arguments' digest,
// session), for the person who asked.
type ApprovalReply struct {
	OK      bool
	Error   string
	Message string
	Pending []PendingApproval
	Decided *PendingApproval
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
	// Args is the canonical JSON of the call's arguments (as digested in
	// ArgsDigest), cut to at most ArgsPreviewBytes at a character
	// boundary; ArgsBytes is its whole length. They are shown to the
	// approver, not recorded: the frame event holds the arguments.
	Args      string `json:"-"`
	ArgsBytes int    `json:"-"`
	// MatchedRule is the rule that asked for the approval, and Profile
	// the gateway's active profile when it did ("" in wrap). Shown to the
	// approver; the outcome line records the rule.
	MatchedRule string `json:"-"`
	Profile     string `json:"-"`
	// PinDigest, for an approval that re-pins a changed tool, is the
	// digest of the definition an approve pins (pins.go).
	PinDigest string `json:"pin_digest,omitempty"`
	// Principal is who made the call, when a validated OAuth token named
	// them (gateway --listen): shown to the approver, and named in the
	// signed decision line.
	Principal *schemas.Principal `json:"principal,omitempty"`
}

// Gate holds the policy engine and the approval state of one session.
type Gate struct {
	engine *policy.Engine
	Hash   string
	TTL    time.Duration

	mu       sync.Mutex
	pending  map[string]*PendingApproval
	resolved map[string]string      // approval id -> what became of it
	allow    map[string][]allowance // tool+args key -> single-use allowances

	// Pins re-pins a changed tool when its approval is approved (pins.go).
	Pins PinApprover
	// IDs are the session's approval ids ([policy.ApprovalIDs]), which
	// its rules, re-pins and escalations share; set by number.
	IDs *policy.ApprovalIDs
}

// Number gives the gate the approval ids of its session, once the session
// is open and before it decides a call.
func (g *Gate) Number(ids *policy.ApprovalIDs) {
	g.IDs = ids
	if g.engine != nil {
		g.engine.SetApprovalIDs(ids)
	}
}

// allowance is what an approval grants: one call of its tool with its
// arguments, before the approval's expiry.
type allowance struct {
	id      string
	expires time.Time
}

// NewGate returns the gate of a session that decides calls by the rules
// of set, or, with set nil, one that holds approvals only (the gateway
// without rules: its escalations and re-pins); ttl <= 0 is
// [DefaultApprovalTTL].
func NewGate(set *policy.Set, ttl time.Duration) *Gate {
	if ttl <= 0 {
		ttl = DefaultApprovalTTL
	}
	g := &Gate{TTL: ttl, pending: map[string]*PendingApproval{}, resolved: map[string]string{}, allow: map[string][]allowance{}}
	if set != nil {
		g.engine, g.Hash = policy.NewEngine(set), set.Hash()
	}
	return g
}

func allowKey(tool, argsDigest string) string { return tool + "\x00" + argsDigest }

// Gated is one call's verdict in a frame.
type Gated struct {
	Decision   policy.Decision
	ArgsDigest string
	// Approval is the approval whose allowance this call took (its
	// verdict is then Allow); the allowance is spent unless given back
	// with giveBack.
	Approval string
	granted  allowance
	// Lapsed are allowances of this tool and arguments found expired
	// unused, and dropped, while deciding; the caller records them.
	Lapsed []string
	// Hint and pinDigest are set when the call is refused because its
	// tool changed since it was pinned (checkPin).
	Hint      string
	PinDigest string
}

// DecideRequest evaluates a call: wrap asks with the tool and the
// session, the gateway with the capability, the active profile as role
// and the server too; its arguments go to the rules' conditions. A
// pending_approval verdict is turned into Allow when an approval for the
// same tool (req.Tool) and arguments is waiting to be used, and that
// approval is spent in the same step, under the gate's lock: two calls
// decided at once (in one batch, or concurrently in the gateway) never
// ride on one approval.
func (g *Gate) DecideRequest(req policy.Request, args json.RawMessage, now time.Time) Gated {
	req.Args = args
	d := g.engine.Evaluate(req, now)
	gd := Gated{Decision: d, ArgsDigest: ArgsDigest(args)}
	if d.Verdict == policy.PendingApproval {
		if a, ok := g.use(req.Tool, gd.ArgsDigest, now, &gd.Lapsed); ok {
			gd.Approval, gd.granted = a.id, a
			gd.Decision.Verdict = policy.Allow
			gd.Decision.ApprovalID = ""
		}
	}
	return gd
}

// use takes the allowance for tool and digest that expires first, among
// those still valid at now; the expired ones it meets are dropped and
// appended to lapsed.
func (g *Gate) use(tool, digest string, now time.Time, lapsed *[]string) (allowance, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := allowKey(tool, digest)
	as := g.allow[k]
	if len(as) == 0 {
		return allowance{}, false
	}
	kept := as[:0]
	best := -1
	for _, a := range as {
		if !now.Before(a.expires) {
			g.resolved[a.id] = "approved, but expired unused"
			*lapsed = append(*lapsed, a.id)
			continue
		}
		kept = append(kept, a)
		if best < 0 || a.expires.Before(kept[best].expires) {
			best = len(kept) - 1
		}
	}
	if best < 0 {
		delete(g.allow, k)
		return allowance{}, false
	}
	a := kept[best]
	kept = append(kept[:best], kept[best+1:]...)
	if len(kept) == 0 {
		delete(g.allow, k)
	} else {
		g.allow[k] = kept
	}
	g.resolved[a.id] = "approved and used"
	return a, true
}

// GiveBack returns the allowance a call took when its frame is refused for
// another reason after all: the call did not run, so its approval is not
// spent. Whether it is still valid is checked when it is next used.
func (g *Gate) GiveBack(tool string, gd Gated) {
	if gd.Approval == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	k := allowKey(tool, gd.ArgsDigest)
	g.allow[k] = append(g.allow[k], gd.granted)
	g.resolved[gd.Approval] = "approved"
}

// ArgsDigest is SHA-256 over the canonical JSON of a call's arguments
// ([canonicalArgs]).
func ArgsDigest(args json.RawMessage) string { return SHA(CanonicalArgs(args)) }

// CanonicalArgs is the canonical JSON of a call's arguments: RFC 8785 when
// they are in the audit value space, else the same form with numbers kept
// as written (JCS would reformat floats; a retry by the same client writes
// them the same). Arguments that readers of JSON take differently (a
// member given twice, anything the one reading of frames marks ambiguous)
// and arguments that are not one JSON value stay as they are, byte for
// byte: no canonical form may stand for them, or an approval of
// {"path":"/tmp/x"} would let {"path":"/etc/passwd","path":"/tmp/x"}
// through to a server that keeps the first. Absent arguments are {}.
func CanonicalArgs(args json.RawMessage) []byte {
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = json.RawMessage("{}")
	}
	if c, err := schemas.Canonicalize(args); err == nil {
		return c
	}
	v, ok := reading.Read(args).One()
	if !ok || v.Ambiguous != "" {
		return args
	}
	var b bytes.Buffer
	writeSorted(&b, v)
	return b.Bytes()
}

// writeSorted writes v with each object's members sorted by name and
// numbers as written.
func writeSorted(b *bytes.Buffer, v *reading.Value) {
	switch v.Kind {
	case reading.Object:
		ms := slices.Clone(v.Members)
		slices.SortStableFunc(ms, func(x, y reading.Member) int { return strings.Compare(x.Name, y.Name) })
		b.WriteByte('{')
		for i, m := range ms {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(m.Name)
			b.Write(kb)
			b.WriteByte(':')
			writeSorted(b, m.Value)
		}
		b.WriteByte('}')
	case reading.Array:
		b.WriteByte('[')
		for i, e := range v.Elems {
			if i > 0 {
				b.WriteByte(',')
			}
			writeSorted(b, e)
		}
		b.WriteByte(']')
	case reading.String:
		e, _ := json.Marshal(v.Str)
		b.Write(e)
	default:
		b.Write(v.Raw)
	}
}

func SHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Request registers a pending approval.
func (g *Gate) Request(p PendingApproval) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending[p.ApprovalID] = &p
}

// List returns the pending approvals, oldest first.
func (g *Gate) List(now time.Time) []PendingApproval {
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
func (g *Gate) resolve(id string, now time.Time) (*PendingApproval, string) {
	return g.resolveIf(id, now, nil)
}

// resolveIf is resolve that first asks check (when set) about the pending
// approval, under the gate's lock; a refusal of check leaves it pending.
func (g *Gate) resolveIf(id string, now time.Time, check func(PendingApproval) string) (*PendingApproval, string) {
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
	if check != nil {
		if why := check(*p); why != "" {
			return nil, why
		}
	}
	delete(g.pending, id)
	return p, ""
}

// grant records an approval's single-use allowance; it lapses at the
// approval's expiry.
func (g *Gate) grant(p *PendingApproval) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := allowKey(p.ToolID, p.ArgsDigest)
	g.allow[k] = append(g.allow[k], allowance{id: p.ApprovalID, expires: p.ExpiresAt})
	g.resolved[p.ApprovalID] = "approved"
}

func (g *Gate) denied(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolved[id] = "denied"
}

// Expire drops a pending approval whose time ran out; it reports whether
// it was still pending.
func (g *Gate) Expire(id string) (*PendingApproval, bool) {
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

// Lapse drops the unused allowance of approval id if now is at or after
// its expiry; it reports whether it did.
func (g *Gate) Lapse(id string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, as := range g.allow {
		for i, a := range as {
			if a.id != id {
				continue
			}
			if now.Before(a.expires) {
				return false
			}
			if as = append(as[:i:i], as[i+1:]...); len(as) == 0 {
				delete(g.allow, k)
			} else {
				g.allow[k] = as
			}
			g.resolved[id] = "approved, but expired unused"
			return true
		}
	}
	return false
}

// RecordLapsed records that the allowances of approvals ids expired
// unused (an approval.expired event each, with the reason).
func RecordLapsed(sess *projector.Session, ids []string) error {
	for _, id := range ids {
		if _, err := sess.Fact(schemas.KindApprovalExpired, map[string]string{"approval_id": id, "reason": ReasonLapsed}); err != nil {
			return err
		}
	}
	return nil
}

// ReasonLapsed is the reason of an approval.expired event for an approval
// that was granted but not used in time.
const ReasonLapsed = "approved, but not used before it expired"
