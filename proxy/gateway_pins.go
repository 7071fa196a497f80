package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// Tool pins in the gateway (pins.go states the invariants). Each server's
// pins are keyed by its config name. Every listing of a server, at start
// and after its list_changed, is read into its pins. A tool that changed
// is hidden from the host's tools/list and a call to it is refused; with
// on_tool_change pending_approval, the change asks at once for an
// approval (aegis approvals lists it), whose approve pins the new
// definition and shows the tool again.
type gatewayPins struct {
	g     *gateway
	books map[string]*pinBook // by server name
}

func newGatewayPins(g *gateway) *gatewayPins {
	gp := &gatewayPins{g: g, books: map[string]*pinBook{}}
	for _, s := range g.cfg.Servers {
		b := newPinBookMode(g.sess, g.gate.ids, s.Name, true, g.cfg.OnToolChange)
		b.names = []string{s.Name}
		gp.books[s.Name] = b
	}
	return gp
}

// observe reads a complete listing of server's tools into its pins, and
// asks for the approval of each tool it newly found changed.
func (gp *gatewayPins) observe(server string, tools []*mcp.Tool) {
	if gp == nil || gp.books[server] == nil {
		return
	}
	b := gp.books[server]
	raws := make([]json.RawMessage, 0, len(tools))
	for _, t := range tools {
		if raw, err := json.Marshal(t); err == nil {
			raws = append(raws, raw)
		}
	}
	fresh, rc, err := b.observeChanges(raws, false, false)
	if err == nil && rc != nil {
		_, err = rc.Wait(context.Background())
	}
	if err != nil {
		gp.g.log.Error("record tool pins", "server", server, "err", err)
		return
	}
	for _, tool := range fresh {
		fmt.Fprintf(gp.g.cfg.Stderr, "aegis: warning: server %s: tool %s changed since it was pinned; it is hidden until its new definition is pinned\n",
			server, projector.Printable(tool))
		gp.request(b, server, tool, gp.g.cfg.Now())
	}
}

// request asks for the re-pin approval of server's changed tool.
func (gp *gatewayPins) request(b *pinBook, server, tool string, now time.Time) (string, bool) {
	id, digest, ok := b.ask(tool)
	if !ok {
		return "", false
	}
	g := gp.g
	p := PendingApproval{ApprovalID: id, ToolID: policy.Namespace(server, tool), ArgsDigest: argsDigest(nil), Session: g.sess.ID(),
		RequestedAt: now.UTC(), ExpiresAt: now.Add(g.gate.ttl).UTC(), MatchedRule: pinRule, Profile: g.active(), PinDigest: digest}
	p.Args, p.ArgsBytes = argsPreview(canonicalArgs(nil))
	if _, err := g.sess.Fact(schemas.KindApprovalRequested, p); err != nil {
		g.log.Error("record approval request", "err", err)
		return "", false
	}
	g.gate.request(p)
	fmt.Fprint(g.cfg.Stderr, approvalPrompt(p))
	return id, true
}

// hidden reports whether server's tool is changed and not shown.
func (gp *gatewayPins) hidden(server, tool string) bool {
	return gp != nil && gp.books[server].hidden(tool)
}

// pinOf is the digest server's tool is pinned to.
func (gp *gatewayPins) pinOf(server, tool string) string {
	if gp == nil {
		return ""
	}
	return gp.books[server].pinOf(tool)
}

// refuse answers a call to a hidden tool: a refusal that says why and,
// under pending_approval, the approval to act on (a new one each call, as
// for rules).
func (gp *gatewayPins) refuse(server, tool string, now time.Time) (policy.Decision, map[string]string, bool) {
	if gp == nil || gp.books[server] == nil {
		return policy.Decision{}, nil, false
	}
	b := gp.books[server]
	pr := b.check(tool)
	if pr == nil {
		return policy.Decision{}, nil, false
	}
	d := pr.decision
	out := map[string]string{"reason": d.Reason, "hint": pr.hint}
	if d.Verdict == policy.PendingApproval {
		// check asked for one; register it like the change's own.
		b.mu.Lock()
		delete(b.asked, d.ApprovalID)
		b.mu.Unlock()
		if id, ok := gp.request(b, server, tool, now); ok {
			d.ApprovalID = id
			out["approval_id"] = id
			out["hint"] = "review the server's new definition, then run: aegis approve " + quoteArg(id) + " to pin it (or: aegis deny " + quoteArg(id) + "), and call the tool again"
		}
	} else {
		out["hint"] = "review the server's new definition; to accept it, end this session and run: aegis pins reset --server " + quoteArg(server) + " --tool " + quoteArg(tool)
	}
	return d, out, true
}

// approved re-pins the tool of a re-pin approval and shows it again.
func (gp *gatewayPins) approved(id string) (bool, error) {
	for _, b := range gp.books {
		ok, err := b.approved(id)
		if !ok && err == nil {
			continue
		}
		if ok {
			gp.g.pmu.Lock()
			gp.g.applyProfile()
			gp.g.pmu.Unlock()
		}
		return ok, err
	}
	return false, nil
}
