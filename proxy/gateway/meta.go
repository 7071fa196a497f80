package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func (g *gateway) addMetaTools() {
	obj := func(prop string) *jsonSchema {
		return &jsonSchema{Type: "object", Properties: map[string]*jsonSchema{prop: {Type: "string"}}, Required: []string{prop}}
	}
	noop := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("meta-tools are answered by the gateway middleware")
	}
	setProfile, status := policy.MetaToolNames(g.cfg.DottedMetaTools)
	g.srv.AddTool(&mcp.Tool{Name: setProfile, Description: "Switch the active aegis profile. Along an allowed transition it switches at once; otherwise a human must approve (see " + status + ").", InputSchema: obj("name")}, noop)
	g.srv.AddTool(&mcp.Tool{Name: status, Description: "Ask whether a profile switch was approved; an approved switch is applied now.", InputSchema: obj("id")}, noop)
}

// Capability ids of the meta-tools, whatever names they are listed under:
// what the record's decision axes, approvals and escalation targets say.
const (
	metaSetProfile     = "aegis.set_profile"
	metaApprovalStatus = "aegis.approval_status"
)

// isMeta reports whether name is in the gateway's own namespace, listed
// or not: no server's tool is ever called by such a name (server "aegis"
// is reserved, and shadows refuses an unprefixed or aliased one).
func isMeta(name string) bool {
	return strings.HasPrefix(name, "aegis.") || strings.HasPrefix(name, "aegis__")
}

// metaName is the name the meta-tool of capability id c is listed under.
func (g *gateway) metaName(c string) string {
	setProfile, status := policy.MetaToolNames(g.cfg.DottedMetaTools)
	if c == metaSetProfile {
		return setProfile
	}
	return status
}

// metaCapability is the capability id of the meta-tool listed as name,
// or "" for a name in the gateway's namespace that it does not list (the
// other spelling included: only the listed names are tools).
func (g *gateway) metaCapability(name string) string {
	setProfile, status := policy.MetaToolNames(g.cfg.DottedMetaTools)
	switch name {
	case setProfile:
		return metaSetProfile
	case status:
		return metaApprovalStatus
	}
	return ""
}

type jsonSchema struct {
	Type       string                 `json:"type"`
	Properties map[string]*jsonSchema `json:"properties,omitempty"`
	Required   []string               `json:"required,omitempty"`
}

// meta answers a meta-tool.
func (g *gateway) meta(name string, args json.RawMessage) *mcp.CallToolResult {
	var a struct {
		Name string `json:"name"`
		ID   string `json:"id"`
	}
	if err := json.Unmarshal(orEmptyObject(args), &a); err != nil {
		return textResult("invalid arguments: "+err.Error(), true)
	}
	now := g.cfg.Now().UTC()
	switch g.metaCapability(name) {
	case metaSetProfile:
		from := g.active()
		switch {
		case !g.cfg.Policy.HasProfile(a.Name):
			return textResult(fmt.Sprintf("code=AEGIS_PROFILE_UNKNOWN active=%s approval=", from), false)
		case a.Name == from:
			return textResult(fmt.Sprintf("code=OK active=%s approval=", from), false)
		case !g.admits(a.Name):
			return textResult(fmt.Sprintf("code=AEGIS_PROFILE_NOT_YOURS active=%s approval=", from), false)
		case g.cfg.Policy.Transition(from, a.Name):
			ev := policy.ProfileEvent{Kind: policy.EventSwitched, From: from, To: a.Name, Source: policy.SourceAgent, At: now}
			if err := g.profileEvent(ev, schemas.KindProfileSwitched, nil); err != nil {
				return textResult("switch failed: "+err.Error(), true)
			}
			return textResult(fmt.Sprintf("code=OK active=%s approval=", a.Name), false)
		}
		id := g.gate.IDs.Next("esc")
		exp := now.Add(g.gate.TTL)
		ev := policy.ProfileEvent{Kind: policy.EventSwitchRequested, ID: id, From: from, To: a.Name, Source: policy.SourceAgent, At: now, ExpiresAt: exp}
		if err := g.profileEvent(ev, schemas.KindApprovalRequested, map[string]any{"approval_id": id, "kind": "profile", "from": from, "to": a.Name, "expires_at": exp}); err != nil {
			return textResult("request failed: "+err.Error(), true)
		}
		fmt.Fprintf(g.cfg.Stderr, "aegis: approval needed: switch from profile %q to %q (approval %s)\naegis: hint: run: aegis approve %s   (or: aegis deny %s)\n", from, a.Name, id, proxy.QuoteArg(id), proxy.QuoteArg(id))
		return textResult(fmt.Sprintf("code=AEGIS_PENDING_APPROVAL active=%s approval=%s", from, id), false)
	case metaApprovalStatus:
		g.expireDue(now)
		g.mu.Lock()
		e, ok := g.state.Escalation(a.ID)
		g.mu.Unlock()
		if !ok {
			return textResult("unknown: no such approval", false)
		}
		switch e.Status {
		case policy.EscalationApproved:
			ev := policy.ProfileEvent{Kind: policy.EventSwitchApplied, ID: e.ID, From: e.From, To: e.To, Source: policy.SourceHuman, At: now}
			if err := g.profileEvent(ev, schemas.KindProfileSwitched, map[string]any{"approval_id": e.ID}); err != nil {
				if errors.Is(err, policy.ErrApprovalWrongProfile) {
					return textResult(fmt.Sprintf("pending: approved for a switch from %s, but the active profile is %s", e.From, g.active()), false)
				}
				return textResult("not applied: "+err.Error(), false)
			}
			return textResult("approved", false)
		case policy.EscalationApplied:
			return textResult("denied: already used", false)
		}
		return textResult(e.Status.String(), false)
	}
	return textResult(fmt.Sprintf("unknown tool %q", name), true)
}

// expireDue records the expiry of every escalation whose time ran out.
func (g *gateway) expireDue(now time.Time) {
	g.mu.Lock()
	due := g.state.Due(now)
	g.mu.Unlock()
	for _, id := range due {
		ev := policy.ProfileEvent{Kind: policy.EventSwitchExpired, ID: id, At: now}
		if err := g.profileEvent(ev, schemas.KindApprovalExpired, map[string]any{"approval_id": id}); err != nil {
			g.log.Warn("record expiry", "err", err)
		}
	}
}

// handleApproval resolves escalations (esc-…) and tool approvals (apr-…).
// An escalation may be approved or denied whatever profile the agent is
// in by then: the approval stays bound to the profile it was requested
// from, which aegis.approval_status checks when it applies the switch (a
// refused apply does not spend it).
func (g *gateway) handleApproval(op proxy.ApprovalOp) proxy.ApprovalReply {
	now := g.cfg.Now().UTC()
	if op.Op == "list" {
		g.expireDue(now)
		out := g.gate.List(now)
		g.mu.Lock()
		for _, e := range g.state.Pending() {
			out = append(out, proxy.PendingApproval{ApprovalID: e.ID, ToolID: EscalationTarget(e.From, e.To),
				Session: g.sess.ID(), RequestedAt: e.RequestedAt, ExpiresAt: e.ExpiresAt, Profile: e.From})
		}
		g.mu.Unlock()
		return proxy.ApprovalReply{OK: true, Pending: out}
	}
	if !strings.HasPrefix(op.ApprovalID, "esc-") {
		rep := proxy.DecideApproval(g.sess, g.gate, g.cfg.Approvers, op, now, func(err error) { g.log.Error("approval", "err", err) })
		g.elicitDecided(op, rep)
		return rep
	}
	if op.Op != "approve" && op.Op != "deny" {
		return proxy.ApprovalReply{Error: fmt.Sprintf("unknown request %q", op.Op)}
	}
	g.expireDue(now)
	refuse := func(why string) proxy.ApprovalReply {
		g.sess.Fact(schemas.KindApprovalRefused, proxy.RefusedFact(op, why))
		return proxy.ApprovalReply{Error: why}
	}
	g.mu.Lock()
	e, ok := g.state.Escalation(op.ApprovalID)
	g.mu.Unlock()
	if !ok {
		return refuse(fmt.Sprintf("no approval %q is pending in this session", op.ApprovalID))
	}
	var approver schemas.Approver
	if g.cfg.Approvers != nil && op.Op == "approve" {
		ap, err := g.cfg.Approvers.Check(schemas.ApprovalClaim{ApprovalID: e.ID, Session: g.sess.ID(), Target: EscalationTarget(e.From, e.To)}, op.Approver)
		if err != nil {
			return refuse(err.Error())
		}
		approver = ap
	}
	kind := policy.EventSwitchApproved
	if op.Op == "deny" {
		kind = policy.EventSwitchDenied
	}
	ev := policy.ProfileEvent{Kind: kind, ID: op.ApprovalID, Source: policy.SourceHuman, At: now}
	d := schemas.Decision{ApprovalID: e.ID, ApproverKeyID: approver.KeyID}
	msg := fmt.Sprintf("approved %s: the switch from %s to %s applies when the agent asks %s", e.ID, e.From, e.To, g.metaName(metaApprovalStatus))
	if active := g.active(); active != e.From {
		// Approved all the same: the binding to e.From is checked when the
		// switch is applied, so the decision waits for the agent's return.
		msg += fmt.Sprintf(" from profile %s (the agent is in %s now; until %s)", e.From, active, e.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if op.Op == "approve" {
		d.Verdict = schemas.Approved(schemas.ApprovalScope{ToolID: metaSetProfile})
	} else {
		reason := op.Reason
		if reason == "" {
			reason = "denied by operator"
		}
		d.Verdict = schemas.Rejected(reason)
		msg = "denied " + e.ID
	}
	// One event says it all: the signed decision line and the profile
	// event it resolves. The state must accept the verdict before anything
	// is signed, and the check and the record are one step, so a second
	// approve or deny of the same escalation is refused, never recorded.
	if approver.KeyID != "" && op.Op == "approve" {
		msg += "; signed by " + approver.Label()
	}
	resolved := map[string]any{"from": e.From, "to": e.To}
	for k, v := range proxy.ResolvedFact(op, e.ID, approver) {
		resolved[k] = v
	}
	err := g.recordProfileEvent(ev, resolved,
		func(payload map[string]any) (*events.Receipt, error) { return g.sess.DecisionWith(d, payload) })
	var re *recordError
	switch {
	case errors.As(err, &re):
		return proxy.ApprovalReply{Error: "could not record the decision: " + re.err.Error()}
	case err != nil:
		return refuse(err.Error())
	}
	return proxy.ApprovalReply{OK: true, Message: msg, Decided: &proxy.PendingApproval{ApprovalID: e.ID, ToolID: EscalationTarget(e.From, e.To),
		Session: g.sess.ID(), RequestedAt: e.RequestedAt, ExpiresAt: e.ExpiresAt, Profile: e.From}}
}

// EscalationTarget is what an escalation from one profile to another is
// listed as, and what an approver signs as its target.
func EscalationTarget(from, to string) string { return "aegis.set_profile " + from + " -> " + to }

// admits reports whether profile may be active for the session's
// principal: a profile bound to groups or scopes (for_groups,
// for_scopes) only for a principal that has them.
func (g *gateway) admits(profile string) bool {
	if b, ok := g.cfg.Policy.(interface {
		Admits(string, *schemas.Principal) bool
	}); ok {
		return b.Admits(profile, g.cfg.Principal)
	}
	return true
}
