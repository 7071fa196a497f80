package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// heldLines is a gateway's stderr that tells, by approval id, each
// host's retry the gateway holds for a human's decision.
type heldLines struct {
	syncBuffer
	mu   sync.Mutex
	line []byte
	held chan string
}

// jsonText is v as JSON.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

var heldRetry = regexp.MustCompile(`waits for a human's decision on approval (\S+) .*held until then`)

func (h *heldLines) Write(p []byte) (int, error) {
	h.syncBuffer.Write(p)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.line = append(h.line, p...)
	for {
		i := bytes.IndexByte(h.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if m := heldRetry.FindSubmatch(h.line[:i]); m != nil {
			h.held <- string(m[1])
		}
		h.line = h.line[i+1:]
	}
}

// A call of a 2026-07-28 host that waits for a human comes back as the
// call's input_required result: one url-mode elicitation/create whose
// link opens the approval in aegis console, under a requestState bound
// to the call, its arguments and the approval. The host's retry that
// accepts it runs the call once when the human approves (held until the
// human decides, if need be), is refused as denied when the human
// denies, and gets the refusal every host gets when it declines. A host
// that declared no URL elicitation gets that refusal, exactly. Retries
// that are not the decided call are refused and recorded; each round
// and retry is recorded.
func TestGatewayApprovalAsAnInputRequest(t *testing.T) {
	t.Parallel()
	l := newLive(t, "")
	con := l.console()
	lc := &linkClient{t: t, base: "http://" + con.host}
	cmd := exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", elicitConfig(t, l), "--audit", l.audit,
		"--signing-key", l.key, "--state-dir", l.state, "--protocol", "2026-07-28")
	cmd.Env = l.env
	stderr := &heldLines{held: make(chan string, 8)}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	complete := make(chan string, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "mrtr-host", Version: "1"}, &mcp.ClientOptions{
		Capabilities:   &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, errors.New("asked as a request, not as an input request")
		},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			complete <- r.Params.ElicitationID
		},
	})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	defer func() {
		if t.Failed() {
			t.Logf("gateway stderr:\n%s", stderr.String())
		}
	}()
	recv := func(ch <-chan string, what string) string {
		t.Helper()
		select {
		case s := <-ch:
			return s
		case <-ctx.Done():
			t.Fatalf("no %s", what)
			return ""
		}
	}
	add := func(a int) map[string]any { return map[string]any{"a": a, "b": 3} }
	type round struct{ state, key, id, link string }
	ask := func(a int) round {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__add", Arguments: add(a)})
		if err != nil || !res.NeedsInput() || len(res.InputRequests) != 1 || res.RequestState == "" {
			t.Fatalf("add %d: %v %s, want input_required", a, err, jsonText(res))
		}
		for k, ir := range res.InputRequests {
			el, ok := ir.(*mcp.ElicitParams)
			if !ok || el.Mode != "url" || !strings.HasPrefix(el.ElicitationID, "apr-add-needs-a-human-example__add-") ||
				!strings.HasPrefix(el.URL, lc.base+"/approval/") || !strings.Contains(el.Message, fmt.Sprintf(`{"a":%d,"b":3}`, a)) {
				t.Fatalf("add %d: the input request %#v is not the approval's url elicitation", a, ir)
			}
			return round{res.RequestState, k, el.ElicitationID, el.URL}
		}
		panic("unreachable")
	}
	retry := func(r round, name string, a int, action string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: add(a), RequestState: r.state,
			InputResponses: mcp.InputResponseMap{r.key: &mcp.ElicitResult{Action: action}}})
	}
	decide := func(r round, op string) {
		t.Helper()
		page, cookie := lc.open(r.link)
		if code, body, _ := lc.do("POST", page+"decide", cookie, lc.base, `{"op":"`+op+`"}`); code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", op, r.id, code, body)
		}
	}
	refusalOf := func(res *mcp.CallToolResult, err error) map[string]string {
		t.Helper()
		var m map[string]string
		if err != nil || res.NeedsInput() || !res.IsError || len(res.Content) != 1 || json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &m) != nil {
			t.Fatalf("not a refusal result: %v %s", err, jsonText(res))
		}
		return m
	}

	// A host that declared no URL elicitation in this request: the
	// refusal every host gets, exactly.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__add", Arguments: add(1),
		Meta: mcp.Meta{mcp.MetaKeyClientCapabilities: map[string]any{}}})
	m := refusalOf(res, err)
	id := m["approval_id"]
	want := map[string]string{"code": "PENDING_APPROVAL", "capability": "example.add", "active_profile": "developer", "reason": "", "approval_id": id,
		"hint": "run: aegis approve " + id + " (or: aegis deny " + id + "), then call the tool again with the same arguments: the approval lets it through once"}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("a host without URL elicitation: %v, want %v", m, want)
	}

	a, b := ask(2), ask(9)
	refused := func(name string, res *mcp.CallToolResult, err error) {
		t.Helper()
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != -32042 || !strings.Contains(string(we.Data), "MRTR_REFUSED") {
			t.Errorf("%s: %v %s, want a -32042 MRTR_REFUSED refusal", name, err, jsonText(res))
		}
	}
	for _, tc := range []struct {
		attack, name string
		args         int
		approved     bool
	}{
		{"a retry of the approval's round with other arguments", "example__add", 9, false},
		{"a retry of the approval's round naming another tool", "example__echo", 2, false},
		{"a retry with other arguments after the approval", "example__add", 9, true},
	} {
		if tc.approved && len(complete) == 0 {
			decide(a, "approve")
			if got := recv(complete, "notifications/elicitation/complete"); got != a.id {
				t.Fatalf("complete: %s, want %s", got, a.id)
			}
		}
		res, err := retry(a, tc.name, tc.args, "accept")
		refused(tc.attack, res, err)
	}
	// Another call's retry is not let through by this approval: held
	// until its own is decided, then refused as denied.
	bres := make(chan error, 1)
	go func() {
		res, err := retry(b, "example__add", 9, "accept")
		if err == nil && !strings.Contains(jsonText(res), "a human denied this call (approval "+b.id) {
			err = fmt.Errorf("%s", jsonText(res))
		}
		bres <- err
	}()
	if got := recv(stderr.held, "held retry"); got != b.id {
		t.Fatalf("held %s, want %s", got, b.id)
	}
	decide(b, "deny")
	select {
	case err = <-bres:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		t.Errorf("the retry of another call than the approved one: %v, want it refused as denied", err)
	}
	// The approved call's retry runs, once.
	res, err = retry(a, "example__add", 2, "accept")
	if err != nil || res.NeedsInput() || !strings.Contains(jsonText(res), `"sum":5`) {
		t.Fatalf("the approved retry: %v %s", err, jsonText(res))
	}
	res, err = retry(a, "example__add", 2, "accept")
	refused("a spent requestState", res, err)
	// A retry held until the human approves, then runs.
	c := ask(4)
	cres := make(chan string, 1)
	go func() {
		res, err := retry(c, "example__add", 4, "accept")
		cres <- fmt.Sprint(err, jsonText(res))
	}()
	if got := recv(stderr.held, "held retry"); got != c.id {
		t.Fatalf("held %s, want %s", got, c.id)
	}
	decide(c, "approve")
	if got := recv(cres, "answer to the held retry"); !strings.Contains(got, `"sum":7`) {
		t.Errorf("the held retry: %s", got)
	}
	// A host that declines to show the link: the refusal every host
	// gets, and the approval still waits.
	d := ask(5)
	if m := refusalOf(retry(d, "example__add", 5, "decline")); m["code"] != "PENDING_APPROVAL" || m["approval_id"] != d.id {
		t.Errorf("declined: %v", m)
	}
	cs.Close()

	evs := streamEventsOf(t, l.state)
	notes := map[string][]map[string]any{}
	for _, e := range evs {
		if e.Kind != "note" {
			continue
		}
		var n map[string]any
		json.Unmarshal(e.Payload, &n)
		if s, ok := n["mrtr"].(string); ok {
			notes[s] = append(notes[s], n)
		}
	}
	approvals := func(kind string) string {
		var ids []string
		for _, n := range notes[kind] {
			s, _ := n["approval_id"].(string)
			ids = append(ids, s)
		}
		return strings.Join(ids, " ")
	}
	if got, want := approvals("input_required"), strings.Join([]string{a.id, b.id, c.id, d.id}, " "); got != want {
		t.Errorf("rounds recorded for approvals %q, want %q", got, want)
	}
	if got, want := approvals("retry"), strings.Join([]string{b.id, a.id, c.id, d.id}, " "); got != want {
		t.Errorf("retries recorded for approvals %q, want %q", got, want)
	}
	if len(notes["retry_refused"]) != 4 {
		t.Errorf("refused retries recorded: %v, want 4", notes["retry_refused"])
	}
	var cited []string
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, l.audit))), "\n") {
		var o map[string]any
		json.Unmarshal([]byte(line), &o)
		if ax, ok := o["decision_axes"].(map[string]any); ok && o["line_type"] == "outcome" && ax["approval_ref"] != nil {
			cited = append(cited, fmt.Sprint(ax["approval_ref"]))
		}
	}
	if got := strings.Join(cited, " "); got != a.id+" "+c.id {
		t.Errorf("outcomes citing an approval: %q, want %s and %s once each", got, a.id, c.id)
	}
	if out, code := l.aegis("verify", "--key", l.publicKey(), l.audit); code != 0 {
		t.Errorf("verify: %d %s", code, out)
	}
}
