package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// A server's list_changed makes the gateway list that server again and
// apply the difference; the SDK then tells the host that its lists
// changed, when what the host sees did. Invariants:
//
//   - Checked again. Every tool of the new list is namespaced and checked
//     as at start: a tool whose wire name another server's tool already
//     has, that the server lists twice, or that would shadow the
//     gateway's meta-tools (aegis.…) is refused: it is not shown, a call
//     to it is refused as unknown, and the refusal is recorded (a note
//     event with refused "tool_shadowing") and said on stderr. What the
//     host already saw keeps its place: of two tools with one name, the
//     one the gateway had is kept.
//   - Under the profile. New tools and resources are shown only if the
//     active profile allows them, as at start; a removed one is removed
//     from the host's list.
//   - One at a time, and only once a host is there: relistings are
//     serialized, and one that comes before the host initialized waits for
//     it.

type listKind uint8

const (
	listTools listKind = 1 << iota
	listPrompts
	listResources
)

// wireName is the name the host sees of server's tool or prompt name:
// <server>__<name>, or name itself for a server with prefix: false.
func (g *gateway) wireName(server, name string) string {
	for _, s := range g.cfg.Servers {
		if s.Name == server && s.Unprefixed {
			return name
		}
	}
	return policy.Namespace(server, name)
}

// toolName is what profiles, rules, the record and the host call server's
// tool: its alias, if the gateway file gives one, else its own name. Only
// the server is told the tool's own name.
func (g *gateway) toolName(server, tool string) string {
	for _, s := range g.cfg.Servers {
		if a, ok := s.Alias[tool]; s.Name == server && ok {
			return a
		}
	}
	return tool
}

// toolWire is the name the host sees of server's tool: wireName of its
// toolName.
func (g *gateway) toolWire(server, tool string) string {
	return g.wireName(server, g.toolName(server, tool))
}

// yamlKey is tool as a key of the gateway file: as it is when it is a
// plain tool name ([policy.ValidToolName]), else double-quoted with escapes.
func yamlKey(tool string) string {
	if policy.ValidToolName(tool) {
		return tool
	}
	return strconv.Quote(tool)
}

// toolDef is the gateway's definition of server's tool t: the server's,
// renamed (see toolWire), with its origin in the description.
func (g *gateway) toolDef(server string, t *mcp.Tool) *mcp.Tool {
	def := *t
	def.Name = g.toolWire(server, t.Name)
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = "(no description)"
	}
	def.Description = desc + " [origin: " + server + "]"
	return &def
}

// shadows says why a tool of server with wire name wire cannot be shown
// beside the tools already taken ("" if it can).
func (g *gateway) shadows(server, tool, wire string, taken map[string]toolEntry) string {
	if isMeta(wire) {
		return "its name would shadow the gateway's meta-tools"
	}
	if !policy.HostSafeName(wire) {
		return fmt.Sprintf("its name toward the host, %q, is not one every host accepts (1 to %d characters of A-Z a-z 0-9 _ -); "+
			"give it another in the gateway file: servers: %s: alias: {%s: NEW_NAME}", wire, policy.MaxHostToolNameLen, server, yamlKey(tool))
	}
	if _, dup := taken[wire]; dup {
		return "the server lists this name twice"
	}
	if e, ok := g.tools[wire]; ok && e.server != server {
		return fmt.Sprintf("its wire name %q is already %s.%s's", wire, e.server, e.name)
	}
	return ""
}

func sameDef(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// listChanged lists server again now, or once a host is there.
func (g *gateway) listChanged(server string, k listKind) {
	f := &g.fw
	f.mu.Lock()
	f.init()
	if !f.ready {
		f.pending[server] |= k
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	go g.relist(server, k)
}

// relist lists server's k lists again and applies them.
func (g *gateway) relist(server string, k listKind) {
	f := &g.fw
	f.relistMu.Lock()
	defer f.relistMu.Unlock()
	d := g.downs[server]
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), relistTimeout)
	defer cancel()
	if k&listTools != 0 {
		tools, err := collect(d.session().Tools(ctx, nil))
		if err != nil {
			g.log.Warn("list tools again", "server", server, "err", err)
		} else {
			g.applyTools(server, tools)
		}
	}
	if k&listResources != 0 {
		res, err := collect(d.session().Resources(ctx, nil))
		if err != nil {
			g.log.Warn("list resources again", "server", server, "err", err)
		} else {
			tmpls, terr := collect(d.session().ResourceTemplates(ctx, nil)) // none, for a server without templates
			if terr == nil {
				g.pins.observeKind(schemas.PinKindResourceTemplate, server, anys(tmpls))
			}
			g.applyResources(ctx, server, res, tmpls)
		}
	}
	if k&listPrompts != 0 {
		prompts, err := collect(d.session().Prompts(ctx, nil))
		if err != nil {
			g.log.Warn("list prompts again", "server", server, "err", err)
		} else {
			g.pins.observeKind(schemas.PinKindPrompt, server, anys(prompts))
			g.relistPrompts(server, prompts)
		}
	}
}

func anys[T any](xs []*T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func collect[T any](seq iter.Seq2[*T, error]) ([]*T, error) {
	var out []*T
	for v, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

// applyTools makes listed the tools of server.
func (g *gateway) applyTools(server string, listed []*mcp.Tool) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	type refusal struct{ tool, wire, kind, why string }
	var refused []refusal
	next := map[string]toolEntry{}
	kept := map[string]*mcp.Tool{} // wire -> the server's tool, as shown
	g.fw.tmu.Lock()
	for _, t := range listed {
		e := toolEntry{server: server, tool: t.Name, name: g.toolName(server, t.Name), def: g.toolDef(server, t)}
		wire := e.def.Name
		if why := g.shadows(server, t.Name, wire, next); why != "" {
			// Of two with one name, keep the one the host already saw.
			if prev, had := g.tools[wire]; had && prev.server == server && next[wire].def != nil &&
				!sameDef(next[wire].def, prev.def) && sameDef(e.def, prev.def) {
				e, next[wire] = next[wire], e
				kept[wire] = t
			}
			kind := "tool_shadowing"
			if !policy.HostSafeName(wire) {
				kind = "tool_name"
			}
			refused = append(refused, refusal{e.tool, wire, kind, why})
			continue
		}
		next[wire] = e
		kept[wire] = t
	}
	var removed, changed []string
	for wire, e := range g.tools {
		if _, still := next[wire]; e.server == server && !still {
			delete(g.tools, wire)
			if g.visible[wire] {
				removed = append(removed, wire)
				delete(g.visible, wire)
			}
		}
	}
	for wire, e := range next {
		if prev, had := g.tools[wire]; had && g.visible[wire] && !sameDef(prev.def, e.def) {
			changed = append(changed, wire)
		}
		g.tools[wire] = e
	}
	g.fw.tmu.Unlock()
	// Pins see the tools the host can be shown, a refused shadow not.
	shown := make([]*mcp.Tool, 0, len(kept))
	for _, wire := range slices.Sorted(maps.Keys(kept)) {
		shown = append(shown, kept[wire])
	}
	g.pins.observe(server, shown)
	if len(removed) > 0 {
		g.srv.RemoveTools(removed...)
	}
	cs := g.downs[server]
	for _, wire := range changed {
		e := next[wire]
		if g.pins.hidden(e.server, e.tool) {
			continue // applyProfile takes it off the host's list
		}
		g.srv.AddTool(e.def, g.forwardTool(e, cs))
	}
	g.applyProfile()
	for _, r := range refused {
		g.refuseTool(server, r.tool, r.wire, r.kind, r.why)
	}
}

// refuseTool says on stderr and records (a note with refused: kind) that
// server's tool is not shown to the host, and why: a name that would
// shadow another (tool_shadowing) or that hosts refuse (tool_name). A call
// by its name is then an unknown tool, refused like any.
func (g *gateway) refuseTool(server, tool, wire, kind, why string) {
	fmt.Fprintf(g.cfg.Stderr, "aegis: warning: server %s: tool %s refused: %s\n", server, projector.Printable(tool), projector.Printable(why))
	if _, err := g.sess.Fact(schemas.KindNote, map[string]string{"server": server, "tool": tool, "wire_name": wire,
		"refused": kind, "reason": why}); err != nil {
		g.log.Warn("record a refused tool", "err", err)
	}
}

// applyResources makes listed the resources and templates of server.
func (g *gateway) applyResources(ctx context.Context, server string, listed []*mcp.Resource, tmpls []*mcp.ResourceTemplate) {
	f := &g.fw
	g.pmu.Lock()
	now := map[string]*mcp.Resource{}
	for _, r := range listed {
		now[r.URI] = r
	}
	nowT := map[string]bool{}
	for _, t := range tmpls {
		nowT[t.URITemplate] = true
	}
	var removed, changed, removedT []string
	f.tmu.Lock()
	for uri, s := range g.res {
		if s == server && now[uri] == nil {
			delete(g.res, uri)
			delete(g.resDefs, uri)
			if g.visRes[uri] {
				removed = append(removed, uri)
				delete(g.visRes, uri)
			}
		}
	}
	for _, uri := range sortedKeys(now) {
		if owner, taken := g.res[uri]; taken && owner != server {
			continue // the first server that listed it keeps it, as at start
		}
		def := *now[uri]
		if prev := g.resDefs[uri]; prev != nil && g.visRes[uri] && !sameDef(prev, &def) {
			changed = append(changed, uri)
		}
		g.res[uri] = server
		g.resDefs[uri] = &def
	}
	for t, s := range f.templates {
		if s == server && !nowT[t] {
			delete(f.templates, t)
			removedT = append(removedT, t)
		}
	}
	f.tmplOrder = slices.DeleteFunc(f.tmplOrder, func(t string) bool { return slices.Contains(removedT, t) })
	for _, t := range tmpls {
		if _, taken := f.templates[t.URITemplate]; !taken {
			f.templates[t.URITemplate] = server
			f.tmplOrder = append(f.tmplOrder, t.URITemplate)
		}
	}
	f.tmu.Unlock()
	if len(removed) > 0 {
		g.srv.RemoveResources(removed...)
	}
	cs := g.downs[server]
	for _, uri := range changed {
		g.srv.AddResource(g.resDefs[uri], readFrom(cs))
	}
	g.relistTemplates(server, tmpls)
	g.applyProfile() // shows what the profile allows of the new lists
	g.pmu.Unlock()
}

// relistTemplates makes tmpls the resource templates of server in the
// prompt table (templates.go's view, under the profile), as at start: a
// URI template another server offers first stays that server's. g.pmu is
// held.
func (g *gateway) relistTemplates(server string, tmpls []*mcp.ResourceTemplate) {
	t := &g.pt
	now := map[string]*mcp.ResourceTemplate{}
	for _, rt := range tmpls {
		now[rt.URITemplate] = rt
	}
	var removed []string
	kept := t.templates[:0]
	for _, te := range t.templates {
		uriT := te.def.URITemplate
		if te.server == server && (now[uriT] == nil || !sameDef(te.def, now[uriT])) {
			if t.visTmpl[uriT] {
				removed = append(removed, uriT)
				delete(t.visTmpl, uriT)
			}
			continue
		}
		kept = append(kept, te)
	}
	t.templates = kept
	if len(removed) > 0 {
		g.srv.RemoveResourceTemplates(removed...)
	}
	have := map[string]bool{}
	for _, te := range t.templates {
		have[te.def.URITemplate] = true
	}
	d := g.downs[server]
	for _, rt := range tmpls {
		if have[rt.URITemplate] {
			continue
		}
		def := *rt
		t.templates = append(t.templates, &templateEntry{server: server, def: &def, down: d})
	}
}

// relistPrompts makes listed the prompts of server: the owners that
// completion routes by, and the prompt table under the profile, where a
// wire name another server's prompt holds is refused and recorded as at
// start.
func (g *gateway) relistPrompts(server string, listed []*mcp.Prompt) {
	f := &g.fw
	g.pmu.Lock()
	defer g.pmu.Unlock()
	now := map[string]*mcp.Prompt{}
	for _, p := range listed {
		now[g.wireName(server, p.Name)] = p
	}
	f.tmu.Lock()
	for wire, p := range f.prompts {
		if p.server == server && now[wire] == nil {
			delete(f.prompts, wire)
		}
	}
	for wire, p := range now {
		if prev, taken := f.prompts[wire]; !taken || prev.server == server {
			f.prompts[wire] = promptRef{server, p.Name}
		}
	}
	f.tmu.Unlock()
	t := &g.pt
	if t.prompts == nil {
		t.prompts = map[string]promptEntry{}
	}
	var removed []string
	for wire, e := range t.prompts {
		if e.server != server {
			continue
		}
		if p := now[wire]; p != nil {
			def := *p
			def.Name = wire
			if sameDef(e.def, &def) {
				continue
			}
		}
		delete(t.prompts, wire)
		if t.visPrompts[wire] {
			removed = append(removed, wire)
			delete(t.visPrompts, wire)
		}
	}
	if len(removed) > 0 {
		g.srv.RemovePrompts(removed...)
	}
	d := g.downs[server]
	for _, wire := range sortedKeys(now) {
		p := now[wire]
		if prev, dup := t.prompts[wire]; dup {
			if prev.server != server {
				g.notePrompt(fmt.Sprintf("prompt %s.%s refused: %s.%s already has the name %q", server, p.Name, prev.server, prev.prompt, wire),
					map[string]string{"server": server, "prompt": p.Name, "refused": "name collision with " + prev.server + "." + prev.prompt})
			}
			continue
		}
		def := *p
		def.Name = wire
		t.prompts[wire] = promptEntry{server: server, prompt: p.Name, def: &def, down: d}
	}
	g.applyPrompts(g.active())
}

// noteOwners records, at start, which server owns each prompt and URI
// template, for completion and subscriptions.
func (g *gateway) noteOwners(ctx context.Context, server string, cs *mcp.ClientSession) {
	f := &g.fw
	prompts, _ := collect(cs.Prompts(ctx, nil))         // none, for a server without prompts
	tmpls, _ := collect(cs.ResourceTemplates(ctx, nil)) // likewise
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if f.prompts == nil {
		f.prompts, f.templates = map[string]promptRef{}, map[string]string{}
	}
	for _, p := range prompts {
		f.prompts[g.wireName(server, p.Name)] = promptRef{server, p.Name}
	}
	for _, t := range tmpls {
		if _, taken := f.templates[t.URITemplate]; !taken {
			f.templates[t.URITemplate] = server
			f.tmplOrder = append(f.tmplOrder, t.URITemplate)
		}
	}
}
