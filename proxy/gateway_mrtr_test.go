package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

var newProtocolMeta = regexp.MustCompile(`"_meta":\{"io\.modelcontextprotocol/serverInfo":\{"name":"aegis","version":"gateway"\}\},?`)

// withoutNewProtocol is what a host saw through the gateway at 2026-07-28
// without what that protocol adds to every result (the result's type, the
// gateway's identity): the protocol's own, not the server's answer. A
// session host's results have neither.
func withoutNewProtocol(via paritySession) paritySession {
	out := paritySession{}
	for k, v := range via {
		out[k] = strings.ReplaceAll(newProtocolMeta.ReplaceAllString(v, ""), `,"resultType":"complete"`, "")
	}
	return out
}

// parityNewProtocol runs the parity script through aegis gateway (which
// offers 2026-07-28 by default), whose go-sdk host then speaks 2026-07-28,
// and compares it with direct, the same host's run directly against
// server-everything (which speaks the session protocol, so the host fell
// back to it there): the gateway serves the host without a session and
// bridges to the server's. A server's sampling, elicitation and roots
// requests during a call come back as the call's input_required result
// and the host's retry answers them; every call is recorded once, its
// intent naming the protocol, and each round of it is recorded.
func parityNewProtocol(t *testing.T, every []string, root string, direct paritySession) {
	script := parityScript
	c := newCLI(t)
	cmd := gatewayCmd(t, c, map[string][]string{"everything": every}, []string{"everything.*"}, []string{"demo://resource/**"})
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	via, gv := runParity(t, script, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, "everything__", root, "")
	if gv != "2026-07-28" {
		t.Fatalf("protocol through the default gateway: %s", gv)
	}
	compareParity(t, script, direct, withoutNewProtocol(via), "everything", stderr)

	evs, _ := c.events()
	intents := payloads(evs, "call.intent")
	rounds := map[string]int{}
	asked := map[string]bool{}
	for _, n := range payloads(evs, "note") {
		if s, ok := n["mrtr"].(string); ok {
			rounds[s]++
			if s == "input_required" {
				asked[n["tool_id"].(string)] = true
			}
		}
	}
	for _, in := range intents {
		if line, _ := in["line"].(string); !strings.Contains(line, `"protocol_version":"2026-07-28"`) {
			t.Errorf("an intent without the protocol version: %v", in)
		}
	}
	// Sampling, form and url elicitation and roots: a round each, each
	// answered by one retry. (server-everything asks for the roots during
	// the first call after the host's arrival: a round of that call.)
	for _, tool := range []string{"trigger-sampling-request", "trigger-elicitation-request", "trigger-url-elicitation"} {
		if !asked["everything__"+tool] {
			t.Errorf("no round recorded for %s: %v", tool, asked)
		}
	}
	if rounds["input_required"] != rounds["retry"] || rounds["retry_refused"] != 0 {
		t.Errorf("rounds recorded: %v, want each input_required answered by one retry", rounds)
	}
	if len(intents) == 0 {
		t.Error("no intents recorded")
	}
	if out, stderr, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Errorf("verify: %d %s %s", code, out, stderr)
	}
}

// A host that retries an input_required call with other arguments than
// the call was decided with (an approval spent on harmless arguments,
// then a retry that carries others), or with a requestState it altered,
// or one already spent, is refused and recorded; only the true retry
// answers the server, and the call is decided and recorded once. The
// same holds for a prompts/get and a resources/read during which the
// server asks the host (growserver -reads): their retries naming another
// prompt or resource, other arguments, or an altered state are refused,
// and each is decided (a call.verdict) once.
func TestGatewayRefusesAnMRTRRetryThatIsNotTheDecidedCall(t *testing.T) {
	parallel(t)
	every := mcptest.EverythingServer(t)
	c := newCLI(t)
	cmd := gatewayCmd(t, c, map[string][]string{"everything": every, "grow": {bin(t, "growserver"), "-reads"}}, []string{"everything.*"}, []string{"grow://asked"})
	cmd.Args = append(cmd.Args, "--protocol", "2026-07-28")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "mrtr-host", Version: "1"}, &mcp.ClientOptions{
		Capabilities:   &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		CreateMessageWithToolsHandler: func(context.Context, *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
			return nil, errors.New("asked as a request, not as an input request")
		},
	})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	defer cs.Close()
	args := map[string]any{"prompt": "say hello", "maxTokens": 20}
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: args})
	if err != nil || !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("first call: %v %+v\n%s", err, first, stderr)
	}
	answers := mcp.InputResponseMap{}
	for k := range first.InputRequests {
		answers[k] = &mcp.CreateMessageWithToolsResult{Model: "m", Role: "assistant", Content: []mcp.Content{&mcp.TextContent{Text: "the true answer"}}}
	}
	state := first.RequestState
	forged := []byte(state)
	forged[len(forged)-2] ^= 1
	attacks := []struct {
		name  string
		args  map[string]any
		state string
	}{
		{"other arguments than the decided ones", map[string]any{"prompt": "say something else", "maxTokens": 20}, state},
		{"another tool's name", nil, state},
		{"an altered requestState", args, string(forged)},
		{"a requestState of no call", args, "bm90LWEtY2FsbC4x.AAAA"},
	}
	for _, a := range attacks {
		p := &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: a.args, InputResponses: answers, RequestState: a.state}
		if a.args == nil {
			p.Name, p.Arguments = "everything__echo", map[string]any{"message": "x"}
		}
		_, err := cs.CallTool(ctx, p)
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != -32042 || !strings.Contains(string(we.Data), "MRTR_REFUSED") {
			t.Errorf("%s: %v, want a -32042 MRTR_REFUSED refusal", a.name, err)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: args, InputResponses: answers, RequestState: state})
	if err != nil || res.NeedsInput() || !strings.Contains(canon(res), "the true answer") {
		t.Fatalf("the true retry: %v %s", err, canon(res))
	}
	// Spent: the same state again is refused.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: args, InputResponses: answers, RequestState: state})
	if err == nil || !strings.Contains(err.Error(), "MRTR_REFUSED") {
		t.Errorf("a spent requestState: %v, want MRTR_REFUSED", err)
	}

	// A prompts/get and a resources/read that the server asks during.
	sample := &mcp.CreateMessageWithToolsResult{Model: "m", Role: "assistant", Content: []mcp.Content{&mcp.TextContent{Text: "the sampled word"}}}
	type asked struct {
		res   mcp.Result
		needs bool
		reqs  mcp.InputRequestMap
		state string
	}
	prompt := func(name, topic string, responses mcp.InputResponseMap, state string) (asked, error) {
		r, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"topic": topic}, InputResponses: responses, RequestState: state})
		if err != nil {
			return asked{}, err
		}
		return asked{r, r.NeedsInput(), r.InputRequests, r.RequestState}, nil
	}
	read := func(uri, _ string, responses mcp.InputResponseMap, state string) (asked, error) {
		r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri, InputResponses: responses, RequestState: state})
		if err != nil {
			return asked{}, err
		}
		return asked{r, r.NeedsInput(), r.InputRequests, r.RequestState}, nil
	}
	for _, rq := range []struct {
		method, name, arg string
		do                func(name, arg string, responses mcp.InputResponseMap, state string) (asked, error)
		attacks           [][2]string // name, arg
	}{
		{"prompts/get", "grow__ask", "bees", prompt, [][2]string{{"grow__ask", "wasps"}, {"everything__simple-prompt", "bees"}}},
		{"resources/read", "grow://asked", "", read, [][2]string{{"grow://other", ""}}},
	} {
		first, err := rq.do(rq.name, rq.arg, nil, "")
		if err != nil || !first.needs || len(first.reqs) != 1 || first.state == "" {
			t.Fatalf("%s: %v %s, want input_required", rq.method, err, canon(first.res))
		}
		answers := mcp.InputResponseMap{}
		for k, ir := range first.reqs {
			if _, ok := ir.(*mcp.CreateMessageWithToolsParams); !ok {
				t.Fatalf("%s: the input request %T is not the server's sampling", rq.method, ir)
			}
			answers[k] = sample
		}
		forged := []byte(first.state)
		forged[len(forged)-2] ^= 1
		for _, a := range append(rq.attacks, [2]string{"", string(forged)}) {
			name, arg, st := a[0], a[1], first.state
			if name == "" {
				name, arg, st = rq.name, rq.arg, a[1]
			}
			_, err := rq.do(name, arg, answers, st)
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code != -32042 || !strings.Contains(string(we.Data), "MRTR_REFUSED") {
				t.Errorf("%s retried as %s %q (state altered: %v): %v, want a -32042 MRTR_REFUSED refusal", rq.method, name, arg, st != first.state, err)
			}
		}
		res, err := rq.do(rq.name, rq.arg, answers, first.state)
		if err != nil || res.needs || !strings.Contains(canon(res.res), "the sampled word") {
			t.Fatalf("%s: the true retry: %v %s", rq.method, err, canon(res.res))
		}
		if _, err := rq.do(rq.name, rq.arg, answers, first.state); err == nil || !strings.Contains(err.Error(), "MRTR_REFUSED") {
			t.Errorf("%s: a spent requestState: %v, want MRTR_REFUSED", rq.method, err)
		}
	}
	cs.Close()

	evs, _ := c.events()
	var sampling int
	for _, in := range payloads(evs, "call.intent") {
		if in["tool_id"] == "everything__trigger-sampling-request" {
			sampling++
		}
	}
	rounds := map[string][]string{}
	for _, n := range payloads(evs, "note") {
		if s, ok := n["mrtr"].(string); ok {
			why, _ := n["reason"].(string)
			if m, _ := n["method"].(string); m != "tools/call" {
				s = m + " " + s
			}
			rounds[s] = append(rounds[s], why)
		}
	}
	if sampling != 1 {
		t.Errorf("the call was decided %d times, want once", sampling)
	}
	verdicts := map[string]int{}
	for _, v := range payloads(evs, "call.verdict") {
		what, _ := v["prompt"].(string)
		if uri, ok := v["uri"].(string); ok {
			what = uri
		}
		verdicts[fmt.Sprint(v["method"], " ", what)]++
	}
	if verdicts["prompts/get grow__ask"] != 1 || verdicts["resources/read grow://asked"] != 1 {
		t.Errorf("the prompts/get and resources/read were decided %v times, want once each", verdicts)
	}
	if len(rounds["input_required"]) != 1 || len(rounds["retry"]) != 1 || len(rounds["retry_refused"]) != len(attacks)+1 {
		t.Errorf("rounds recorded: %q", rounds)
	}
	for method, refused := range map[string]int{"prompts/get": 4, "resources/read": 3} {
		if len(rounds[method+" input_required"]) != 1 || len(rounds[method+" retry"]) != 1 || len(rounds[method+" retry_refused"]) != refused {
			t.Errorf("%s rounds recorded: %q", method, rounds)
		}
	}
	if got := strings.Join(rounds["retry_refused"], "|"); !strings.Contains(got, "arguments differ") || !strings.Contains(got, "another tool") {
		t.Errorf("refusals recorded: %s", got)
	}
	if out, stderr, code := c.aegis("verify", "--key", c.pub, c.audit); code != 0 {
		t.Errorf("verify: %d %s %s", code, out, stderr)
	}
	b, _ := json.Marshal(rounds)
	t.Logf("rounds: %s", b)
}
