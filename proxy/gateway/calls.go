package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// capDenied is the AEGIS_CAP_DENIED payload.
func (g *gateway) capDenied(server, tool, profile string) string {
	m := map[string]string{"code": "AEGIS_CAP_DENIED", "capability": server + "." + tool, "active_profile": profile,
		"hint": "capability requires a profile that allows it"}
	if g.cfg.Verbose {
		if rp := g.cfg.Policy.RequiredProfile(profile, server, tool); rp != "" {
			m["required_profile"] = rp
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func textResult(s string, isErr bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, IsError: isErr}
}

// middleware records and enforces tools/call, prompts/get and
// resources/read (see prompts.go); what they refuse or fail with
// reaches the host as a JSON-RPC error with a real code (refusal.go).
func (g *gateway) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case plainMethod:
			return g.tk.plainOfHTTP(ctx, req)
		case extMethod:
			return g.tk.extOfHTTP(ctx, req)
		case "tools/call":
			r, ok := req.(*mcp.CallToolRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			return g.toolsCall(ctx, method, r, next)
		case "prompts/get":
			r, ok := req.(*mcp.GetPromptRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			return g.promptsGet(ctx, method, r, next)
		case "resources/read":
			r, ok := req.(*mcp.ReadResourceRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			return g.resourcesRead(ctx, method, r, next)
		case "tools/list":
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				r.Tools = metaLast(r.Tools)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// metaLast is tools with the gateway's meta-tools after the servers' tools,
// each part in the SDK's order (by name): a host that takes the first tool
// listed (as the conformance suite's client does) takes a server's, as it
// would directly.
func metaLast(tools []*mcp.Tool) []*mcp.Tool {
	out := make([]*mcp.Tool, 0, len(tools))
	var meta []*mcp.Tool
	for _, t := range tools {
		if isMeta(t.Name) {
			meta = append(meta, t)
			continue
		}
		out = append(out, t)
	}
	return append(out, meta...)
}

// toolsCall records one tools/call: intent before anything runs, outcome
// before the answer goes back.
func (g *gateway) toolsCall(ctx context.Context, method string, r *mcp.CallToolRequest, next mcp.MethodHandler) (mcp.Result, error) {
	if v := requestVersion(r.Params.Meta); v != "" {
		// A stateless call of a 2026-07-28 host (mrtr.go).
		var res mcp.Result
		var err error
		if r.Params.RequestState != "" || r.Params.InputResponses != nil {
			res, err = g.mrtrRetry(ctx, r)
		} else {
			res, err = g.mrtrStart(ctx, method, r, next, v)
		}
		return completeResult(res), err
	}
	res, err := g.decideCall(withTraceParent(ctx, r.Params.Meta), method, r.Params.Name, r.Params.Arguments, func(cctx context.Context, _ schemas.WrapCall, e toolEntry) (any, error) {
		if d := g.downs[e.server]; g.tk.rawDown && d != nil && d.raw != nil {
			return g.rawToolCall(cctx, r, e, d.raw)
		}
		return next(cctx, method, r)
	})
	if err != nil {
		return nil, err
	}
	if r, ok := res.(mcp.Result); ok {
		return r, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("aegis: no answer to tools/call (%T)", res)}
}

// rawToolCall sends tools/call r, as the SDK read it from the host and
// decideCall let it through, to tool e of a local server on the gateway's
// own JSON-RPC channel (the one that carries tasks and a stdio host's
// plain calls) rather than through the gateway's SDK client of the server:
// the same name, arguments and _meta that forwardTool sends, under the
// SDK's context of the host's request, so that whatever the server sends
// during the call (progress, its requests) reaches the host as it does
// through the SDK client, on that request's stream. The answer is the
// server's result as it sent it (but for a related task, as on the plain
// path), which the SDK encodes unchanged ([rawResult]); an error is the
// server's JSON-RPC error as it sent it.
func (g *gateway) rawToolCall(ctx context.Context, r *mcp.CallToolRequest, e toolEntry, d *downRaw) (any, error) {
	defer g.fw.begin(ctx, e.server, r.Session, r.Params.GetProgressToken())()
	params := map[string]any{"name": e.tool}
	if len(r.Params.Arguments) > 0 {
		params["arguments"] = r.Params.Arguments
	}
	if meta := bridgeMeta(r.Params.Meta); meta != nil {
		params["_meta"] = g.tk.metaToServer(e.server, meta)
	}
	raw, err := d.call(ctx, "tools/call", params)
	if err != nil {
		return nil, err
	}
	return rawResult{CallToolResult: &mcp.CallToolResult{}, raw: g.tk.relatedToHost(e.server, raw)}, nil
}

// rawResult is a server's tools/call result, encoded as the server sent it:
// the SDK hands the host the bytes rather than a CallToolResult decoded and
// encoded again. The embedded CallToolResult, empty, makes it an
// mcp.Result, and takes what the SDK adds to every result for a host of
// 2026-07-28 (resultType, and the gateway's serverInfo in _meta), which
// the encoding adds to the server's bytes where the server has not set
// them.
type rawResult struct {
	*mcp.CallToolResult
	raw json.RawMessage
	// complete: the answer of a 2026-07-28 host's request, whose result
	// says resultType "complete" (the SDK sets it only on the results of
	// its own handler, which the gateway's middleware answers instead).
	complete bool
}

func (r rawResult) MarshalJSON() ([]byte, error) {
	if r.CallToolResult == nil {
		return r.raw, nil
	}
	b, err := json.Marshal(r.CallToolResult)
	if err != nil {
		return nil, err
	}
	var added struct {
		ResultType json.RawMessage            `json:"resultType"`
		Meta       map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(b, &added); err != nil {
		return nil, err
	}
	if added.ResultType == nil && r.complete {
		added.ResultType = json.RawMessage(`"complete"`)
	}
	if added.ResultType == nil && len(added.Meta) == 0 {
		return r.raw, nil
	}
	return withMembers(r.raw, added.ResultType, added.Meta)
}

// completeResult is res, a tools/call result of the gateway's middleware
// for a 2026-07-28 host, with resultType "complete" where it has none (an
// input_required result has its own).
func completeResult(res mcp.Result) mcp.Result {
	switch r := res.(type) {
	case rawResult:
		r.complete = true
		return r
	case *rawResult:
		c := *r
		c.complete = true
		return c
	case *mcp.CallToolResult:
		return typedResult{r}
	}
	return res
}

// typedResult is a CallToolResult of the gateway's own for a 2026-07-28
// host: encoded as the SDK encodes it, with resultType "complete" unless
// it has one.
type typedResult struct{ *mcp.CallToolResult }

func (r typedResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(r.CallToolResult)
	if err != nil {
		return nil, err
	}
	return withMembers(b, json.RawMessage(`"complete"`), nil)
}

// withMembers is the JSON object raw with resultType, when it has none,
// and each member of meta that its _meta lacks (a _meta made when it has
// none): every value of raw keeps its bytes. A raw that is not one object
// comes back as it is.
func withMembers(raw json.RawMessage, resultType json.RawMessage, meta map[string]json.RawMessage) ([]byte, error) {
	v, ok := reading.Read(raw).One()
	if !ok || v.Kind != reading.Object {
		return raw, nil
	}
	var out bytes.Buffer
	out.WriteByte('{')
	member := func(name string, value []byte) {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		n, _ := json.Marshal(name)
		out.Write(n)
		out.WriteByte(':')
		out.Write(value)
	}
	hasType, hasMeta := false, false
	for _, m := range v.Members {
		value := m.Value.Raw
		switch m.Name {
		case "resultType":
			hasType = true
		case "_meta":
			hasMeta = true
			if m.Value.Kind == reading.Object {
				value = withMetaMembers(m.Value, meta)
			}
		}
		member(m.Name, value)
	}
	if !hasType && resultType != nil {
		member("resultType", resultType)
	}
	if !hasMeta && len(meta) > 0 {
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		member("_meta", b)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// withMetaMembers is the object v with each member of meta that it lacks.
func withMetaMembers(v *reading.Value, meta map[string]json.RawMessage) []byte {
	var out bytes.Buffer
	out.WriteByte('{')
	have := map[string]bool{}
	for _, m := range v.Members {
		have[m.Name] = true
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		n, _ := json.Marshal(m.Name)
		out.Write(n)
		out.WriteByte(':')
		out.Write(m.Value.Raw)
	}
	names := make([]string, 0, len(meta))
	for name := range meta {
		if !have[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		n, _ := json.Marshal(name)
		out.Write(n)
		out.WriteByte(':')
		out.Write(meta[name])
	}
	out.WriteByte('}')
	return out.Bytes()
}

// callRunner runs a tools/call that decideCall let through, as call wc
// of tool e, under cctx.
type callRunner func(cctx context.Context, wc schemas.WrapCall, e toolEntry) (any, error)

// decideCall decides and records one tools/call of the wire tool name with
// args: intent before anything runs, outcome before the answer goes back.
// run runs it when it is let through. The answer is a *mcp.CallToolResult
// (a meta-tool's, or a refusal) or what run returned.
func (g *gateway) decideCall(ctx context.Context, method, name string, args json.RawMessage, run callRunner) (any, error) {
	// The call runs under cctx (see callContext); recording waits for the
	// store whatever happens to the call or the host.
	cctx, release := g.callContext(ctx)
	defer release()
	ctx = context.WithoutCancel(ctx)
	reqBytes, _ := json.Marshal(map[string]any{"name": name, "arguments": json.RawMessage(orEmptyObject(args))})
	dg := proxy.SHA(reqBytes)
	profile := g.active()
	policyHash := schemas.WrapPassthroughPolicySetHash
	if g.cfg.Rules != nil {
		policyHash = g.cfg.Rules.Hash()
	}
	wc := schemas.WrapCall{CallID: g.sess.NextCallID(), ToolID: name, RequestDigest: dg, PolicySetHash: policyHash}
	axes := schemas.DecisionAxes{Role: profile}
	in := proxy.IntentOf(wc, traceParentOf(ctx))
	in.Principal = g.cfg.Principal
	in.ProtocolVersion = protocolOf(ctx)
	rc, err := g.sess.Intent(in)
	if err == nil {
		_, err = rc.Wait(ctx)
	}
	if err != nil {
		return nil, auditRefusal(method, fmt.Errorf("record the intent, so the call was not run: %w", err))
	}
	finish := func(o schemas.Outcome, res any) (any, error) {
		rc, err := g.sess.Outcome(o)
		if err == nil {
			_, err = rc.Wait(ctx)
		}
		if err != nil {
			return nil, auditRefusal(method, fmt.Errorf("record the outcome, so the answer is withheld: %w", err))
		}
		return res, nil
	}
	start := g.cfg.Now()
	if isMeta(name) {
		axes.Capability = name
		if c := g.metaCapability(name); c != "" {
			axes.Capability = c
		}
		res := g.meta(name, args)
		b, _ := json.Marshal(res)
		o := wc.Answered(proxy.SHA(b), uint64(g.cfg.Now().Sub(start).Milliseconds()))
		o.DecisionAxes = axes
		return finish(o, res)
	}
	e, known := g.tool(name)
	if !known {
		o := wc.Refused(schemas.PolicyDenied("unknown tool"), "")
		o.DecisionAxes = axes
		if server, why := g.skippedFor(name); why != "" {
			// The tool of a server this session could not use: say why.
			return finish(o, textResult(fmt.Sprintf("unknown tool %q: aegis: server %s is not available in this session (%s)", name, server, why), true))
		}
		return finish(o, textResult(fmt.Sprintf("unknown tool %q", name), true))
	}
	axes.Capability = e.server + "." + e.name
	allowed, pattern := g.cfg.Policy.ToolAllowed(profile, e.server, e.name)
	axes.MatchedRule = pattern
	if !allowed {
		o := wc.Refused(schemas.PolicyDenied("not in active profile allow-list"), "")
		o.DecisionAxes = axes
		return finish(o, textResult(g.capDenied(e.server, e.name, profile), true))
	}
	axes.ToolPin = g.pins.pinOf(e.server, e.tool)
	if d, why, refused := g.pins.refuse(e.server, e.tool, start); refused {
		// Changed since it was pinned: hidden, and refused until re-pinned.
		o := wc.Refused(d.Record(), d.MatchedRule)
		axes.MatchedRule = d.MatchedRule
		o.DecisionAxes = axes
		why["code"], why["capability"], why["active_profile"] = policy.RefusalCode(d), axes.Capability, profile
		b, _ := json.Marshal(why)
		return finish(o, textResult(string(b), true))
	}
	if g.cfg.Rules != nil {
		// Decided and, when an approval lets it through, that approval
		// spent, in one step: concurrent calls never share one.
		req := g.cfg.Policy.RuleRequest(profile, e.server, e.name, g.sess.ID())
		req.Principal = g.cfg.Principal
		gd := g.gate.DecideRequest(req, args, start)
		if err := proxy.RecordLapsed(g.sess, gd.Lapsed); err != nil {
			g.log.Error("record approval expiry", "err", err)
		}
		if gd.Decision.Verdict == policy.PendingApproval {
			// The retry of a call whose elicited approval a human
			// denied: refused as denied, not asked again (elicit.go).
			if dn, ok := g.el.Denied(name, gd.ArgsDigest, start); ok {
				gd.Decision = dn.Decision(gd.Decision.MatchedRule)
			}
		}
		if gd.Decision.Verdict != policy.Allow {
			var pending *proxy.PendingApproval
			o := wc.Refused(gd.Decision.Record(), gd.Decision.MatchedRule)
			axes.MatchedRule = gd.Decision.MatchedRule
			o.DecisionAxes = axes
			if gd.Decision.Verdict == policy.PendingApproval {
				p := proxy.PendingApproval{ApprovalID: gd.Decision.ApprovalID, ToolID: name, RequestDigest: dg, ArgsDigest: gd.ArgsDigest,
					Session: g.sess.ID(), RequestedAt: start.UTC(), ExpiresAt: start.Add(g.gate.TTL).UTC(),
					MatchedRule: gd.Decision.MatchedRule, Profile: profile, Principal: g.cfg.Principal}
				p.Args, p.ArgsBytes = proxy.ArgsPreview(proxy.CanonicalArgs(args))
				g.sess.Fact(schemas.KindApprovalRequested, p)
				g.gate.Request(p)
				fmt.Fprint(g.cfg.Stderr, proxy.ApprovalPrompt(p))
				pending = &p
			}
			refusal := map[string]string{"code": policy.RefusalCode(gd.Decision), "capability": axes.Capability, "active_profile": profile, "reason": gd.Decision.Reason}
			if id := gd.Decision.ApprovalID; id != "" {
				// Only a pending approval has an id; a denial or a rate
				// limit names none.
				refusal["approval_id"] = id
				refusal["hint"] = "run: aegis approve " + proxy.QuoteArg(id) + " (or: aegis deny " + proxy.QuoteArg(id) + "), then call the tool again with the same arguments: the approval lets it through once"
			}
			if pending != nil && g.urlElicitsFor(ctx) {
				// A host that shows URL elicitations: the human opens
				// the approval from the host itself (elicit.go).
				el, why := g.approvalElicitation(*pending, gd.Decision.Reason)
				if el == nil {
					refusal["hint"] += "; to approve from the host instead: " + why
				} else {
					refusal["hint"] = proxy.ElicitedHint(pending.ApprovalID)
					if _, err := finish(o, nil); err != nil {
						return nil, err
					}
					if _, stateless := ctx.Value(urlHostKey{}).(bool); stateless {
						// A 2026-07-28 host: a round of its call
						// (mrtrApproval), not an error.
						g.elicited(*pending)
						b, _ := json.Marshal(refusal)
						return nil, &approvalWait{p: *pending, el: el, callID: wc.CallID, refusal: textResult(string(b), true)}
					}
					return nil, g.elicitRefusal(*pending, refusal, el)
				}
			}
			b, _ := json.Marshal(refusal)
			return finish(o, textResult(string(b), true))
		}
		axes.ApprovalRef = gd.Approval
		if gd.Decision.MatchedRule != "" {
			axes.MatchedRule = gd.Decision.MatchedRule
		}
	}
	res, err := g.runCall(cctx, wc, e, run)
	if err != nil {
		if o, ok := g.cancelledOutcome(cctx, wc, g.downs[e.server], start); ok {
			o.DecisionAxes = axes
			if _, ferr := finish(o, nil); ferr != nil {
				return nil, ferr
			}
			return nil, err
		}
		o := wc.Seed()
		o.Policy = schemas.PolicyAllowed()
		o.Capability = schemas.CapabilityGranted(schemas.DenyAllGrant(name, schemas.WrapGrantPrefix+wc.CallID))
		o.GrantID = schemas.WrapGrantPrefix + wc.CallID
		o.Execution = schemas.ExecutionTrap("downstream error: " + err.Error())
		o.DecisionAxes = axes
		if _, ferr := finish(o, nil); ferr != nil {
			return nil, ferr
		}
		return nil, hostError(err)
	}
	b, _ := json.Marshal(res)
	o := wc.Answered(proxy.SHA(b), uint64(g.cfg.Now().Sub(start).Milliseconds()))
	o.DecisionAxes = axes
	defer g.undelivered(wc)
	return finish(o, res)
}

func orEmptyObject(b json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}")
	}
	return b
}
