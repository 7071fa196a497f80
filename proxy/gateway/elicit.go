package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy"
)

// In-band approvals: a tools/call that waits for a human, toward a host
// that shows URL elicitations. Invariants:
//
//   - Only a host whose initialize declared the elicitation capability
//     with url mode (capabilities.elicitation.url), and only when
//     [Config.ApprovalLink] makes a link (an aegis console runs for the
//     state directory), gets MCP's URLElicitationRequired error: code
//     -32042 (the refusal code aegis has always used), data.elicitations
//     holding one url-mode elicitation whose elicitationId is the approval
//     id and whose url opens that approval, and data.aegis the refusal's
//     members as every host gets them (code PENDING_APPROVAL, approval_id,
//     hint, ...) with layer "gateway". Every other host gets the refusal
//     of calls.go unchanged, byte for byte; a url-mode host without a
//     link gets it with why there is none (and how to start the console)
//     added to its hint. The decision, the approval and the record are
//     the same either way: the elicitation only shows the human the
//     approval that the gate already holds.
//   - When that approval is decided (approve or deny, by any of aegis
//     approve, deny, the console or the link), the host is sent
//     notifications/elicitation/complete with the elicitationId, after
//     the decision is durable. A retry after an approve runs on the
//     approval, once, as every approved call does. After a deny, a
//     retry of the same tool with the same arguments (the same
//     args_digest) is refused as denied, naming the approval and its
//     reason, until the denied approval would have expired, instead of
//     asking the human again; that refusal is recorded as every refusal.
//   - A host of 2026-07-28 declares its capabilities per request: when
//     the call's own request declares elicitation.url (urlElicitsFor)
//     and a link can be made, decideCall records the call refused as
//     pending, as for every host, and answers mrtrStart with an
//     approvalWait instead of an error; mrtrApproval makes it a round of
//     the call (mrtr.go): one url-mode elicitation/create input request,
//     the same elicitation as above, under a requestState whose MAC
//     covers the call, its tool and arguments and the approval id. The
//     accepting retry waits (el.Wait) until the approval is decided,
//     expires, or the host cancels, and the call is then decided again by
//     decideCall like every call: the approval lets through only the same
//     tool with the same arguments, once; a denial refuses it as denied.
//     A retry that declines, cancels or answers nothing gets the refusal
//     every host gets; a request without elicitation.url gets it byte for
//     byte.

// elicits are the approvals shown to the host through URL elicitation,
// and the denials of them (proxy.Elicits, which wrap shares).
type elicits struct {
	hostURL bool // the host declared capabilities.elicitation.url
	proxy.Elicits
}

// urlElicits reports whether the host takes URL elicitations, as its own
// initialize declared them: a host that probed with server/discover first
// made the gateway record its own capabilities (hostTakesURLElicitation).
func (g *gateway) urlElicits() bool {
	return g.cfg.ApprovalLink != nil && g.hostTakesURLElicitation()
}

// urlElicitsFor reports whether the host of the call of ctx takes URL
// elicitations: a stateless (2026-07-28) request by its own capabilities
// (mrtrStart), any other by its session's.
func (g *gateway) urlElicitsFor(ctx context.Context) bool {
	if url, stateless := ctx.Value(urlHostKey{}).(bool); stateless {
		return url && g.cfg.ApprovalLink != nil
	}
	return g.urlElicits()
}

// approvalElicitation is the url-mode elicitation that shows pending
// approval p to the human, reason being why it waits; "" and why not when
// no link can be made.
func (g *gateway) approvalElicitation(p proxy.PendingApproval, reason string) (*mcp.ElicitParams, string) {
	link, none := g.cfg.ApprovalLink(p)
	if link == "" {
		return nil, none
	}
	return &mcp.ElicitParams{Mode: "url", ElicitationID: p.ApprovalID, URL: link, Message: proxy.ElicitationMessage(p, reason)}, ""
}

// elicitRefusal is the URLElicitationRequired error of a pending call:
// the refusal's members (refusal) in data.aegis, el in data.elicitations.
// It registers el's approval, so that its decision is told to the host.
func (g *gateway) elicitRefusal(p proxy.PendingApproval, refusal map[string]string, el *mcp.ElicitParams) *jsonrpc.Error {
	aegis := make(map[string]string, len(refusal)+1)
	for k, v := range refusal {
		aegis[k] = strings.ToValidUTF8(v, "\uFFFD")
	}
	aegis["layer"] = "gateway"
	data, err := json.Marshal(map[string]any{"aegis": aegis, "elicitations": []*mcp.ElicitParams{el}})
	if err != nil {
		data = nil // strings only: cannot happen
	}
	g.elicited(p)
	return &jsonrpc.Error{Code: mcp.CodeURLElicitationRequired, Data: data,
		Message: "aegis gateway: this tools/call waits for a human's approval (PENDING_APPROVAL): open the link of the elicitation to approve or deny it, then call again"}
}

// elicited registers pending approval p as shown to the host through an
// elicitation: its decision is told to the host (elicitDecided), and a
// denial of it refuses the same call again (el.Denied).
func (g *gateway) elicited(p proxy.PendingApproval) { g.el.Add(p, g.cfg.Now()) }

// elicitDecided tells the host that an elicited approval was decided
// (rep answered op, and the decision is durable), and keeps a denial.
func (g *gateway) elicitDecided(op proxy.ApprovalOp, rep proxy.ApprovalReply) {
	p := g.el.Decided(op, rep, g.cfg.Now())
	if p == nil || g.srv == nil {
		return
	}
	// Not on the approval channel's answer: a host that reads slowly
	// holds only this.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for ss := range g.srv.Sessions() {
			if err := ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: p.ApprovalID}); err != nil {
				g.log.Warn("tell the host an elicitation is complete", "approval", p.ApprovalID, "err", err)
			}
		}
	}()
}
