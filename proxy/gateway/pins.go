package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/rpc"
	"github.com/aegis-dev/aegis/schemas"
)

// Tool pins in the gateway (pins.go states the invariants). Each server's
// pins are keyed by its config name. Every listing of a server, at start
// and after its list_changed, is read into its pins. A tool that changed
// is hidden from the host's tools/list and a call to it is refused; with
// on_tool_change pending_approval, the change asks at once for an
// approval (aegis approvals lists it), whose approve pins the new
// definition and shows the tool again.
//
// Prompts and resource templates are pinned the same way (kinds), each by
// its name or uriTemplate: a changed one is hidden from the host's lists
// and a prompts/get of it refused, until its approval pins it (or, under
// deny, a pins reset). Each server's instructions (which the gateway
// forwards to the host, marked with the server) are one pin of kind
// instructions: changed ones are withheld from the host, whose
// instructions are fixed at its initialize, and asked for approval, which
// pins them for the next session (instructions.go).
type gatewayPins struct {
	g     *gateway
	books map[string]*proxy.PinBook            // by server name
	kinds map[string]map[string]*proxy.PinBook // by kind (schemas.PinKind), then server name
}

func newGatewayPins(g *gateway) *gatewayPins {
	gp := &gatewayPins{g: g, books: map[string]*proxy.PinBook{}, kinds: map[string]map[string]*proxy.PinBook{}}
	for _, s := range g.cfg.Servers {
		b := proxy.NewPinBookMode(g.sess, g.gate.IDs, s.Name, true, g.cfg.OnToolChange)
		b.Names = []string{s.Name}
		gp.books[s.Name] = b
		for _, kind := range []string{schemas.PinKindPrompt, schemas.PinKindResourceTemplate, schemas.PinKindInstructions} {
			if gp.kinds[kind] == nil {
				gp.kinds[kind] = map[string]*proxy.PinBook{}
			}
			kb := proxy.NewKindBook(g.sess, g.gate.IDs, s.Name, kind, true, g.cfg.OnToolChange)
			kb.Names = append(kb.Names, s.Name)
			gp.kinds[kind][s.Name] = kb
		}
	}
	return gp
}

// book returns server's book of kind ("" for tools), or nil.
func (gp *gatewayPins) book(kind, server string) *proxy.PinBook {
	if gp == nil {
		return nil
	}
	if kind == "" {
		return gp.books[server]
	}
	return gp.kinds[kind][server]
}

// observeKind reads a complete listing of what kind pins of server (as the
// go-sdk decoded them: tools for kind "", prompts, templates) into its
// pins, warns of each it newly found changed, and asks for their approval.
func (gp *gatewayPins) observeKind(kind, server string, objs []any) {
	b := gp.book(kind, server)
	if b == nil {
		return
	}
	key := "name"
	if kind == schemas.PinKindResourceTemplate {
		key = "uriTemplate"
	}
	raws := make([][]byte, 0, len(objs))
	for _, o := range objs {
		if raw, err := json.Marshal(o); err == nil {
			raws = append(raws, raw)
		}
	}
	gp.observed(b, kind, server, proxy.ReadObjects(raws, key))
}

// observeInstructions reads server's instructions (text, "" when it gave
// none) into its pin of them, as observeKind reads a listing.
func (gp *gatewayPins) observeInstructions(server, text string) {
	if b := gp.book(schemas.PinKindInstructions, server); b != nil {
		gp.observed(b, schemas.PinKindInstructions, server, proxy.InstructionsOf(text))
	}
}

// observed reads what server listed of kind into b, warns of each it
// newly found changed, and asks for their approval.
func (gp *gatewayPins) observed(b *proxy.PinBook, kind, server string, listed []proxy.ListedTool) {
	fresh, rc, err := b.ObserveChanges(listed, false, false)
	if err == nil && rc != nil {
		_, err = rc.Wait(context.Background())
	}
	if err != nil {
		gp.g.log.Error("record pins", "server", server, "kind", kind, "err", err)
		return
	}
	for _, name := range fresh {
		if why := b.Unpinnable(name); why != "" {
			fmt.Fprintf(gp.g.cfg.Stderr, "aegis: warning: server %s: %s cannot be pinned (%s); it is hidden until the server lists it readably, once\n",
				server, projector.Printable(b.What(name)), projector.Printable(why))
			continue
		}
		fmt.Fprintf(gp.g.cfg.Stderr, "aegis: warning: server %s: %s changed since it was pinned; it is hidden until its new definition is pinned\n",
			server, projector.Printable(b.What(name)))
		gp.request(b, server, name, gp.g.cfg.Now())
	}
}

// hiddenKind reports whether server's prompt or template name is changed
// and not shown.
func (gp *gatewayPins) hiddenKind(kind, server, name string) bool {
	return gp.book(kind, server).Hidden(name)
}

// setCaps judges the servers' listings under the capabilities they are
// told of the host (pins.go: first sight is per capability set).
func (gp *gatewayPins) setCaps(c *mcp.ClientCapabilities) {
	if gp == nil || c == nil {
		return
	}
	var names []string
	if c.Elicitation != nil {
		names = append(names, "elicitation")
	}
	if c.RootsV2 != nil || c.Roots.ListChanged {
		names = append(names, "roots")
	}
	if c.Sampling != nil {
		names = append(names, "sampling")
	}
	for _, b := range gp.books {
		b.SetCaps(rpc.CapsKey(names...))
	}
	for _, m := range gp.kinds {
		for _, b := range m {
			b.SetCaps(rpc.CapsKey(names...))
		}
	}
}

// observe reads a complete listing of server's tools into its pins, and
// asks for the approval of each tool it newly found changed.
func (gp *gatewayPins) observe(server string, tools []*mcp.Tool) {
	gp.observeKind("", server, anys(tools))
}

// request asks for the re-pin approval of server's changed tool.
func (gp *gatewayPins) request(b *proxy.PinBook, server, tool string, now time.Time) (string, bool) {
	id, digest, ok := b.Ask(tool)
	if !ok {
		return "", false
	}
	g := gp.g
	target := policy.Namespace(server, tool)
	if b.Kind != "" {
		target = b.Noun() + " " + tool + " of " + server // what the approval pins is no tool
	}
	p := proxy.PendingApproval{ApprovalID: id, ToolID: target, ArgsDigest: proxy.ArgsDigest(nil), Session: g.sess.ID(),
		RequestedAt: now.UTC(), ExpiresAt: now.Add(g.gate.TTL).UTC(), MatchedRule: proxy.PinRule, Profile: g.active(), PinDigest: digest}
	p.Args, p.ArgsBytes = proxy.ArgsPreview(proxy.CanonicalArgs(nil))
	if _, err := g.sess.Fact(schemas.KindApprovalRequested, p); err != nil {
		g.log.Error("record approval request", "err", err)
		return "", false
	}
	g.gate.Request(p)
	if b.Kind != "" {
		pid := projector.Printable(id)
		fmt.Fprintf(g.cfg.Stderr, "aegis: %s changed: %s is hidden from the host: its definition changed since it was pinned (now %s); approval %s (expires %s)\n"+
			"aegis: hint: review the new definition (aegis replay shows the listing), then run: aegis approve %s to pin it   (or: aegis deny %s)\n",
			b.Noun(), projector.Printable(target), proxy.Short(digest), pid, p.ExpiresAt.Local().Format(time.Kitchen), pid, pid)
	} else {
		fmt.Fprint(g.cfg.Stderr, proxy.ApprovalPrompt(p))
	}
	return id, true
}

// hidden reports whether server's tool is changed and not shown.
func (gp *gatewayPins) hidden(server, tool string) bool {
	return gp != nil && gp.books[server].Hidden(tool)
}

// pinOf is the digest server's tool is pinned to.
func (gp *gatewayPins) pinOf(server, tool string) string {
	if gp == nil {
		return ""
	}
	return gp.books[server].PinOf(tool)
}

// refuse answers a call to a hidden tool: a refusal that says why and,
// under pending_approval, the approval to act on (a new one each call, as
// for rules).
func (gp *gatewayPins) refuse(server, tool string, now time.Time) (policy.Decision, map[string]string, bool) {
	return gp.refuseKind("", server, tool, now)
}

// refuseKind is refuse for what kind pins (a prompt: its prompts/get).
func (gp *gatewayPins) refuseKind(kind, server, tool string, now time.Time) (policy.Decision, map[string]string, bool) {
	b := gp.book(kind, server)
	if b == nil {
		return policy.Decision{}, nil, false
	}
	pr := b.Check(tool)
	if pr == nil {
		return policy.Decision{}, nil, false
	}
	d := pr.Decision
	out := map[string]string{"reason": d.Reason, "hint": pr.Hint}
	if d.Verdict == policy.PendingApproval {
		// check asked for one; register it like the change's own.
		b.ForgetAsked(d.ApprovalID)
		if id, ok := gp.request(b, server, tool, now); ok {
			d.ApprovalID = id
			out["approval_id"] = id
			again := "call the tool again"
			if kind == schemas.PinKindPrompt {
				again = "get the prompt again"
			}
			out["hint"] = "review the server's new definition, then run: aegis approve " + proxy.QuoteArg(id) + " to pin it (or: aegis deny " + proxy.QuoteArg(id) + "), and " + again
		}
	} else if !pr.Final {
		out["hint"] = "review the server's new definition; to accept it, end this session and run: aegis pins reset --server " + proxy.QuoteArg(server) + " --tool " + proxy.QuoteArg(tool)
	}
	return d, out, true
}

// approved re-pins the tool, prompt or template of a re-pin approval and
// shows it again.
func (gp *gatewayPins) Approved(id string) (bool, error) {
	all := make([]*proxy.PinBook, 0, 3*len(gp.books))
	for _, b := range gp.books {
		all = append(all, b)
	}
	for _, m := range gp.kinds {
		for _, b := range m {
			all = append(all, b)
		}
	}
	for _, b := range all {
		ok, err := b.Approved(id)
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
