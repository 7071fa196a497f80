package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aegis-dev/aegis/schemas"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// resourceOwner is the server that owns uri: the one that lists it, else
// the first whose URI template is uri or matches it.
func (g *gateway) resourceOwner(uri string) (string, bool) {
	s, _ := g.owners(uri)
	return s, s != ""
}

// soleOwner is the server a URI belongs to for a profile's "<server>.*"
// resources entry: the server that lists it, else the one server whose
// templates match it. When templates of two servers match it, none is: a
// grant of one server must never let a read reach another.
func (g *gateway) soleOwner(uri string) (string, bool) { return g.owners(uri) }

// owners returns resourceOwner's server for uri, and whether it is the
// only server that lists uri or has a template that is uri or matches it.
func (g *gateway) owners(uri string) (first string, sole bool) {
	f := &g.fw
	f.tmu.RLock()
	defer f.tmu.RUnlock()
	if s, ok := g.res[uri]; ok {
		return s, true
	}
	first = f.templates[uri]
	sole = true
	for _, t := range f.tmplOrder {
		tmpl, err := uritemplate.New(t)
		if err != nil || !(t == uri || tmpl.Regexp().MatchString(uri)) {
			continue
		}
		switch s := f.templates[t]; {
		case first == "":
			first = s
		case s != first:
			sole = false
		}
	}
	return first, first != "" && sole
}

// resourceAllowed reports whether profile may read (or subscribe to) uri,
// and the entry that allows it: one of its URI patterns, or the
// "<server>.*" entry of the server the URI belongs to (soleOwner).
func (g *gateway) resourceAllowed(profile, uri string) (bool, string) {
	if ok, pattern := g.cfg.Policy.ResourceAllowed(profile, uri); ok {
		return ok, pattern
	}
	if s, ok := g.soleOwner(uri); ok {
		return g.cfg.Policy.ServerResourcesAllowed(profile, s)
	}
	return false, ""
}

// complete routes completion/complete to the server that owns the prompt
// or resource it names.
func (g *gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := *req.Params
	ref := *p.Ref
	var server string
	switch ref.Type {
	case "ref/prompt":
		g.fw.tmu.RLock()
		pr, ok := g.fw.prompts[ref.Name]
		g.fw.tmu.RUnlock()
		if ok {
			// A prompt the profile hides is not there for the host.
			ok, _ = g.cfg.Policy.PromptAllowed(g.active(), pr.server, pr.name)
		}
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", ref.Name)}
		}
		server, ref.Name = pr.server, pr.name
	case "ref/resource":
		s, ok := g.resourceOwner(ref.URI)
		if ok {
			profile := g.active()
			byURI, _ := g.resourceAllowed(profile, ref.URI) // a "<server>.*" entry too, of the sole owner
			byTmpl, _ := g.cfg.Policy.TemplateAllowed(profile, ref.URI)
			ok = byURI || byTmpl
		}
		if !ok {
			return nil, mcp.ResourceNotFoundError(ref.URI)
		}
		server = s
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown reference type %q", ref.Type)}
	}
	d := g.downs[server]
	if d == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such server " + server}
	}
	p.Ref = &ref
	p.Meta = bridgeMeta(p.Meta)
	res, err := d.session().Complete(ctx, &p)
	return res, asSent(err)
}

// subscribe forwards resources/subscribe to the server that owns the URI,
// if the active profile allows the URI; the decision is recorded as a
// read's is.
func (g *gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	profile := g.active()
	allowed, pattern := g.resourceAllowed(profile, uri)
	if _, err := g.sess.Fact(schemas.KindCallVerdict, map[string]any{
		"method": "resources/subscribe", "uri": uri, "profile": profile, "allowed": allowed, "pattern": pattern}); err != nil {
		return fmt.Errorf("aegis could not record this subscription, so it was not made: %w", err)
	}
	if !allowed {
		b, _ := json.Marshal(map[string]string{"code": "AEGIS_RESOURCE_DENIED", "uri": uri, "active_profile": profile, "hint": "resource not permitted in active profile"})
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: string(b)}
	}
	server, ok := g.resourceOwner(uri)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	return asSent(g.downs[server].session().Subscribe(ctx, &mcp.SubscribeParams{Meta: bridgeMeta(req.Params.Meta), URI: uri}))
}

func (g *gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	server, ok := g.resourceOwner(req.Params.URI)
	if !ok {
		return mcp.ResourceNotFoundError(req.Params.URI)
	}
	return asSent(g.downs[server].session().Unsubscribe(ctx, &mcp.UnsubscribeParams{Meta: bridgeMeta(req.Params.Meta), URI: req.Params.URI}))
}

// readFrom is the handler of a resource that server cs lists.
func readFrom(d *downstream) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return d.session().ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
	}
}
