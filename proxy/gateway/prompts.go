package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

// Prompts and resource templates under the profile.
//
// The gateway aggregates the prompts of every downstream server as
// <server>__<prompt> and their resource templates as offered (the first
// server, by name, to offer a URI template keeps it). Invariants:
//
//   - The host is shown only what the active profile allows: a prompt that
//     one of its prompts entries matches ([Policy.PromptAllowed]), a
//     template that its resource patterns can reach
//     ([Policy.TemplateAllowed]). Each profile switch adds and
//     removes them, and the SDK tells the host (prompts/list_changed,
//     resources/list_changed).
//   - Every prompts/get and resources/read is decided against the active
//     profile and its verdict is a durable call.verdict event before the
//     request goes downstream or the refusal goes back: a hidden prompt
//     or a URI outside the profile is refused with the -32042 refusal
//     (AEGIS_PROMPT_DENIED, AEGIS_RESOURCE_DENIED), never silently. A read
//     through a template is a read of its URI, decided by the URI.
//   - A prompt whose wire name another server's prompt already took is
//     refused, recorded and never shown; a template the SDK cannot parse is
//     likewise refused and recorded.

// promptTable is what the gateway knows of the downstream prompts and
// templates, and which of them the host is shown now. The entries are set
// before the host is served; the visibility changes under the gateway's
// pmu (with the profile), or before the host is served.
type promptTable struct {
	prompts    map[string]promptEntry // wire name -> entry
	templates  []*templateEntry
	visPrompts map[string]bool
	visTmpl    map[string]bool
}

type promptEntry struct {
	server, prompt string
	def            *mcp.Prompt // named with the wire name
	down           *downstream
}

type templateEntry struct {
	server  string
	def     *mcp.ResourceTemplate
	down    *downstream
	refused bool // the SDK refused its URI template
}

// notePrompt records a fact about a downstream prompt or template, and says it
// on stderr.
func (g *gateway) notePrompt(what string, payload map[string]string) {
	fmt.Fprintf(g.cfg.Stderr, "aegis: warning: %s\n", what)
	if _, err := g.sess.Fact(schemas.KindNote, payload); err != nil {
		g.log.Warn("record note", "err", err)
	}
}

// applyPrompts shows the host the prompts and templates that profile
// allows, and no others.
func (g *gateway) applyPrompts(profile string) {
	t := &g.pt
	if t.visPrompts == nil {
		t.visPrompts, t.visTmpl = map[string]bool{}, map[string]bool{}
	}
	wires := make([]string, 0, len(t.prompts))
	for w := range t.prompts {
		wires = append(wires, w)
	}
	sort.Strings(wires)
	var remove []string
	for _, wire := range wires {
		e := t.prompts[wire]
		ok, _ := g.cfg.Policy.PromptAllowed(profile, e.server, e.prompt)
		ok = ok && !g.pins.hiddenKind(schemas.PinKindPrompt, e.server, e.prompt)
		switch {
		case ok && !t.visPrompts[wire]:
			g.srv.AddPrompt(e.def, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return e.down.session().GetPrompt(ctx, &mcp.GetPromptParams{Name: e.prompt, Arguments: req.Params.Arguments})
			})
			t.visPrompts[wire] = true
		case !ok && t.visPrompts[wire]:
			remove = append(remove, wire)
			delete(t.visPrompts, wire)
		}
	}
	if len(remove) > 0 {
		g.srv.RemovePrompts(remove...)
	}
	var tremove []string
	for _, te := range t.templates {
		if te.refused {
			continue
		}
		uriT := te.def.URITemplate
		ok, _ := g.cfg.Policy.TemplateAllowed(profile, uriT)
		if !ok {
			ok, _ = g.cfg.Policy.ServerResourcesAllowed(profile, te.server)
		}
		ok = ok && !g.pins.hiddenKind(schemas.PinKindResourceTemplate, te.server, uriT)
		switch {
		case ok && !t.visTmpl[uriT]:
			if err := g.showTemplate(te); err != nil {
				te.refused = true
				g.notePrompt(fmt.Sprintf("resource template %q of server %s refused: %v", uriT, te.server, err),
					map[string]string{"server": te.server, "template": uriT, "refused": err.Error()})
				continue
			}
			t.visTmpl[uriT] = true
		case !ok && t.visTmpl[uriT]:
			tremove = append(tremove, uriT)
			delete(t.visTmpl, uriT)
		}
	}
	if len(tremove) > 0 {
		g.srv.RemoveResourceTemplates(tremove...)
	}
}

// showTemplate shows te to the host; a read through it goes to te's server.
// The SDK panics on a URI template it cannot parse: that is an error here.
func (g *gateway) showTemplate(te *templateEntry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	d := te.down
	g.srv.AddResourceTemplate(te.def, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return d.session().ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
	})
	return nil
}

// recordVerdict records the verdict on a prompts/get or resources/read and waits
// until it is durable.
func (g *gateway) recordVerdict(ctx context.Context, payload map[string]any) error {
	rc, err := g.sess.Fact(schemas.KindCallVerdict, payload)
	if err == nil {
		_, err = rc.Wait(ctx)
	}
	return err
}

// promptsGet decides, records and then serves or refuses one prompts/get.
func (g *gateway) promptsGet(ctx context.Context, method string, r *mcp.GetPromptRequest, next mcp.MethodHandler) (mcp.Result, error) {
	name := r.Params.Name
	version := requestVersion(r.Params.Meta)
	if version != "" && (r.Params.RequestState != "" || r.Params.InputResponses != nil) {
		// A 2026-07-28 host's retry: the request as decided, never
		// decided again (mrtr.go).
		return g.mrtrRetryOf(ctx, retry{host: r.Session, method: method, name: name, args: promptArgs(r.Params.Arguments),
			state: r.Params.RequestState, responses: r.Params.InputResponses})
	}
	profile := g.active()
	e, known := g.pt.prompts[name]
	v := map[string]any{"method": method, "prompt": name, "profile": profile, "allowed": false}
	var allowed bool
	if known {
		var pattern string
		allowed, pattern = g.cfg.Policy.PromptAllowed(profile, e.server, e.prompt)
		v["capability"] = policy.Capability(e.server, e.prompt)
		v["allowed"], v["pattern"] = allowed, pattern
		if !allowed {
			v["reason"] = "not in active profile prompts list"
		}
	} else {
		v["reason"] = "unknown prompt"
	}
	var pinWhy map[string]string
	if known && allowed {
		var d policy.Decision
		var refused bool
		if d, pinWhy, refused = g.pins.refuseKind(schemas.PinKindPrompt, e.server, e.prompt, g.cfg.Now()); refused {
			allowed = false
			v["allowed"], v["reason"], v["matched_rule"] = false, d.Reason, d.MatchedRule
			pinWhy["code"] = policy.RefusalCode(d)
		} else {
			pinWhy = nil
		}
	}
	if err := g.recordVerdict(ctx, v); err != nil {
		return nil, auditRefusal(method, err)
	}
	if pinWhy != nil {
		// Changed since it was pinned: hidden, and refused until re-pinned.
		pinWhy["prompt"], pinWhy["active_profile"] = policy.Capability(e.server, e.prompt), profile
		return nil, gatewayRefusal(method, pinWhy, "prompt changed since it was pinned")
	}
	if !known {
		// The go-sdk's answer to a prompt it does not have.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", name)}
	}
	if !allowed {
		payload := map[string]string{"code": string(policy.GatewayPromptDenied), "prompt": policy.Capability(e.server, e.prompt),
			"active_profile": profile, "hint": "prompt requires a profile that allows it"}
		if g.cfg.Verbose {
			if rp := g.cfg.Policy.RequiredPromptProfile(profile, e.server, e.prompt); rp != "" {
				payload["required_profile"] = rp
			}
		}
		return nil, gatewayRefusal(method, payload, "prompt not permitted in active profile")
	}
	if version != "" {
		// A server's request during it becomes its input_required result.
		return g.mrtrServe(ctx, method, r.Session, e.server, name, promptArgs(r.Params.Arguments), version, func(cctx context.Context) (mcp.Result, error) {
			return next(cctx, method, r)
		})
	}
	res, err := next(ctx, method, r)
	if err != nil {
		return nil, hostError(err)
	}
	return res, nil
}

// promptArgs is a prompt's arguments as canonical JSON.
func promptArgs(args map[string]string) []byte {
	b, _ := json.Marshal(args) // sorted keys; strings only
	return proxy.CanonicalArgs(b)
}

// resourcesRead decides, records and then serves or refuses one
// resources/read. A URI that the profile allows but no server offers gets
// the SDK's "Resource not found" (-32602), as from the server itself.
func (g *gateway) resourcesRead(ctx context.Context, method string, r *mcp.ReadResourceRequest, next mcp.MethodHandler) (mcp.Result, error) {
	uri := r.Params.URI
	version := requestVersion(r.Params.Meta)
	if version != "" && (r.Params.RequestState != "" || r.Params.InputResponses != nil) {
		// A 2026-07-28 host's retry: the read as decided, never decided
		// again (mrtr.go).
		return g.mrtrRetryOf(ctx, retry{host: r.Session, method: method, name: uri, state: r.Params.RequestState, responses: r.Params.InputResponses})
	}
	profile := g.active()
	allowed, pattern := g.resourceAllowed(profile, uri)
	v := map[string]any{"method": method, "uri": uri, "profile": profile, "allowed": allowed, "pattern": pattern}
	if !allowed {
		v["reason"] = "resource not permitted"
	}
	if err := g.recordVerdict(ctx, v); err != nil {
		return nil, auditRefusal(method, err)
	}
	if !allowed {
		return nil, gatewayRefusal(method, map[string]string{"code": string(policy.GatewayResourceDenied), "uri": uri,
			"active_profile": profile, "hint": "resource not permitted in active profile"}, "resource not permitted in active profile")
	}
	if server, ok := g.resourceOwner(uri); ok && version != "" {
		// A server's request during it becomes its input_required result.
		return g.mrtrServe(ctx, method, r.Session, server, uri, nil, version, func(cctx context.Context) (mcp.Result, error) {
			return next(cctx, method, r)
		})
	}
	res, err := next(ctx, method, r)
	if err != nil {
		return nil, hostError(err)
	}
	return res, nil
}
