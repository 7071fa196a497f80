package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/proxy/mcptest"
	"github.com/aegis-dev/aegis/schemas"
)

// elicitConfig is a gateway file whose example__add waits for a human.
func elicitConfig(t *testing.T, l *live) string {
	t.Helper()
	path := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
servers:
  example:
    command: `+filepath.Join(l.bin, "aegis-example-server")+`
profiles:
  developer:
    allow: [example.echo, example.add]
activation:
  default_profile: developer
rules:
  - id: add-needs-a-human
    action: pending_approval
    tool: example__add
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// streamEventsOf returns every event of the state directory, once no
// aegis holds it.
func streamEventsOf(t *testing.T, state string) []schemas.Event {
	t.Helper()
	st, err := events.Open(context.Background(), events.Config{Dir: state})
	if err != nil {
		t.Fatalf("open the state directory: %v", err)
	}
	defer st.Close(context.Background())
	var out []schemas.Event
	if err := st.Replay(context.Background(), events.Position{}, func(r events.Record) error {
		out = append(out, r.Event)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// An approval end to end through URL elicitation, for a host on the
// official TypeScript SDK at each protocol:
//   - 2025-11-25 (the SDK's 1.x client): the call gets
//     URLElicitationRequired (-32042) whose link opens the approval in
//     aegis console; once the human has decided, the host is told the
//     elicitation is complete, and its retry returns the server's answer;
//   - 2026-07-28 (the SDK's 2.x client, pinned): the call's answer is an
//     input_required result whose url-mode input request carries the same
//     link; the client shows it (its elicitation handler) and retries, and
//     the gateway holds the retry until the human has decided, then runs
//     the call once and answers it.
//
// Both times a human in a real browser opens the link and approves,
// signed with her approver key, and the record names the approval and
// the approver.
func TestGatewayApprovalThroughURLElicitation(t *testing.T) {
	t.Parallel() // it waits on processes and a browser: beside the others
	chromium := browserPath(t)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		// One after the other: parallel subtests would wait for the
		// package's other parallel tests and end it late.
		t.Run(version, func(t *testing.T) { approveThroughURLElicitation(t, chromium, version) })
	}
}

// approvalInMessage finds the approval id in an elicitation's message.
var approvalInMessage = regexp.MustCompile(`apr-add-needs-a-human-example__add-[0-9]+(\.[0-9]+)*`)

func approveThroughURLElicitation(t *testing.T, chromium, version string) {
	modern := version >= "2026-07-28"
	l := newLive(t, "")
	const pass = "correct horse battery"
	k, keyPath, approvers := approverFiles(t, l.dir, "alice", pass)
	con := l.console("--approver-key", keyPath)
	node, lib := mcptest.TypeScriptSDK(t)
	script, libEnv := "elicit.mjs", "MCP_SDK_DIR="
	if modern {
		node, lib = mcptest.TypeScriptClient(t)
		script, libEnv = "elicit2026.mjs", "MCP_CLIENT_DIR="
	}
	script, err := filepath.Abs(filepath.Join("testdata", "tsclient", script))
	if err != nil {
		t.Fatal(err)
	}
	host := exec.Command(node, script, filepath.Join(l.bin, "aegis"), "gateway", "--config", elicitConfig(t, l), "--audit", l.audit,
		"--signing-key", l.key, "--state-dir", l.state, "--approvers", approvers)
	host.Env = append(l.env, libEnv+lib, `CALL={"name":"example__add","arguments":{"a":2,"b":3}}`)
	var stderr syncBuffer
	host.Stderr = &stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- host.Wait() }()
	t.Cleanup(func() {
		host.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("host and gateway stderr:\n%s", stderr.String())
		}
	})
	lines := bufio.NewScanner(out)
	next := func(want string) map[string]json.RawMessage {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the host said nothing more (want %s)", want)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil || m[want] == nil {
			t.Fatalf("the host said %s, want %s", lines.Text(), want)
		}
		return m
	}

	if modern {
		if v := next("version"); string(v["version"]) != `"2026-07-28"` {
			t.Fatalf("the host is served at %s, want 2026-07-28", v["version"])
		}
	}
	first := next("elicitation")
	var el struct {
		Mode, ElicitationID, URL, Message string
	}
	json.Unmarshal(first["elicitation"], &el)
	// At 2025-11-25 the approval is the elicitation's id (the SDK keeps
	// only data.elicitations of the error; the raw host of
	// TestApprovalLinkRefusesAttacks reads data.aegis too); 2026-07-28
	// has no elicitation ids (the client drops the member), and the
	// message names the approval.
	id := el.ElicitationID
	if modern {
		id = approvalInMessage.FindString(el.Message)
	} else if string(first["code"]) != "-32042" {
		t.Fatalf("URLElicitationRequired: %s", lines.Text())
	}
	if el.Mode != "url" || !strings.HasPrefix(id, "apr-add-needs-a-human-example__add-") {
		t.Fatalf("the elicitation is not the approval's: %s", lines.Text())
	}
	login := strings.TrimPrefix(con.login[strings.Index(con.login, "token="):], "token=")
	if !strings.HasPrefix(el.URL, "http://"+con.host+"/approval/") || strings.Contains(el.URL, login) {
		t.Fatalf("the link %q is not an approval link of the console at %s (or carries its login token)", el.URL, con.host)
	}
	for _, want := range []string{"example__add", `{"a":2,"b":3}`, "add-needs-a-human", "aegis console", id} {
		if !strings.Contains(el.Message, want) {
			t.Errorf("the elicitation's message %q does not say %q", el.Message, want)
		}
	}

	// The human opens the link in a browser, reads what is asked and
	// approves, with the passphrase of her key.
	ctx := headless(t, chromium)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(el.URL),
		chromedp.WaitVisible(chromedp.CSS("#approval")),
		waitJS(`document.querySelector("#approval .tool").textContent === "example__add"`),
		waitJS(`document.querySelector("#approval .args").textContent.includes('"a": 2')`),
		waitJS(`document.querySelector("#ask").textContent.includes("a human must approve this call")`),
		waitJS(`!document.querySelector("#approval .passphrase").hidden`),
		chromedp.SendKeys(chromedp.CSS("#approval .passphrase"), pass),
		chromedp.Click(chromedp.CSS("#approval button.approve")),
		waitJS(`document.querySelector("#result").textContent.startsWith("approved `+id+`")`),
	); err != nil {
		res, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("approve through the link: %v; the page says: %s", err, res)
	}

	if modern {
		// The retry the client made at once was held until the human
		// decided; it returns the server's answer.
		if r := next("answer"); !strings.Contains(string(r["answer"]), `"sum":5`) {
			t.Fatalf("the call: %s", lines.Text())
		}
	} else {
		if c := next("complete"); string(c["complete"]) != `"`+id+`"` {
			t.Fatalf("complete: %s", lines.Text())
		}
		if r := next("retry"); !strings.Contains(string(r["retry"]), `"sum":5`) {
			t.Fatalf("the retried call: %s", lines.Text())
		}
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("the host: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the host did not end")
	}

	// The record: the signed decision names the approval and the
	// approver's key, the outcome of the call that ran cites the approval,
	// and the stream names the approver and the link it came through (and,
	// at 2026-07-28, the round that showed the link and the retry that
	// answered it, both naming the approval).
	var decided, cited bool
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, l.audit))), "\n") {
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		switch m["line_type"] {
		case "decision":
			decided = decided || m["approval_id"] == id && m["approver_key_id"] == schemas.KeyID(k.PublicKey())
		case "outcome":
			if ax, ok := m["decision_axes"].(map[string]any); ok && ax["approval_ref"] == id {
				cited = true
			}
		}
	}
	if !decided || !cited {
		t.Errorf("the record: a decision on %s by the approver's key %v, an outcome citing it %v", id, decided, cited)
	}
	var resolved map[string]string
	rounds := map[string]bool{}
	for _, e := range streamEventsOf(t, l.state) {
		switch e.Kind {
		case schemas.KindApprovalResolved:
			json.Unmarshal(e.Payload, &resolved)
		case schemas.KindNote:
			var n map[string]any
			json.Unmarshal(e.Payload, &n)
			if r, ok := n["mrtr"].(string); ok && n["approval_id"] == id {
				rounds[r] = true
			}
		}
	}
	if resolved["approval_id"] != id || resolved["approver"] != "alice" || !strings.Contains(resolved["by"], "approval link") {
		t.Errorf("approval.resolved: %v", resolved)
	}
	if modern && (!rounds["input_required"] || !rounds["retry"]) {
		t.Errorf("the rounds recorded with the approval: %v, want input_required and retry", rounds)
	}
}

// linkClient speaks to a console as a browser that opened an approval link.
type linkClient struct {
	t    *testing.T
	base string // http://host:port
}

func (c *linkClient) do(method, path, cookie, origin, body string) (int, string, *http.Response) {
	c.t.Helper()
	var req *http.Request
	var err error
	if body != "" {
		req, err = http.NewRequest(method, c.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, err = http.NewRequest(method, c.base+path, nil)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	bufio.NewReader(res.Body).WriteTo(&b)
	return res.StatusCode, b.String(), res
}

// open redeems a link: the grant's page path and its cookie.
func (c *linkClient) open(link string) (string, string) {
	c.t.Helper()
	code, body, res := c.do("GET", strings.TrimPrefix(link, c.base), "", "", "")
	for _, ck := range res.Cookies() {
		if ck.Name == "aegis_approval" && code == http.StatusOK {
			return ck.Path, ck.Name + "=" + ck.Value
		}
	}
	c.t.Fatalf("open %s: %d %s", link, code, body)
	return "", ""
}

// Attacks on approval links, each refused: a link works once, for its
// approval only, until the approval expires or is decided; the page it
// opens decides that approval only, from the console's own origin. A host
// without URL elicitation gets the refusal it always got, and one with it
// but no console a hint to start one. A denial through the link is told
// to the host, and its retry is refused as denied.
func TestApprovalLinkRefusesAttacks(t *testing.T) {
	t.Parallel()
	l := newLive(t, "")
	config := elicitConfig(t, l)
	gw := func(caps string) *wrapProc {
		w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", config, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state))
		w.call(0, "initialize", `{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"raw","version":"1"}}`)
		w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return w
	}
	add := func(w *wrapProc, n, a int) string {
		return w.call(n, "tools/call", fmt.Sprintf(`{"name":"example__add","arguments":{"a":%d,"b":3}}`, a))
	}
	today := func(t *testing.T, answer string) map[string]string {
		t.Helper()
		var f struct {
			Result struct {
				Content []struct{ Text string }
				IsError bool
			}
		}
		var m map[string]string
		if json.Unmarshal([]byte(answer), &f) != nil || !f.Result.IsError || len(f.Result.Content) != 1 || json.Unmarshal([]byte(f.Result.Content[0].Text), &m) != nil {
			t.Fatalf("not the refusal every host gets: %s", answer)
		}
		return m
	}

	// A host that shows no URL elicitations (none, or form mode only):
	// today's refusal and hint, exactly.
	for _, caps := range []string{`{}`, `{"elicitation":{"form":{}}}`} {
		w := gw(caps)
		m := today(t, add(w, 1, 2))
		id := m["approval_id"]
		want := map[string]string{"code": "PENDING_APPROVAL", "capability": "example.add", "active_profile": "developer", "reason": "", "approval_id": id,
			"hint": "run: aegis approve " + id + " (or: aegis deny " + id + "), then call the tool again with the same arguments: the approval lets it through once"}
		if fmt.Sprint(m) != fmt.Sprint(want) {
			t.Errorf("host with capabilities %s: %v, want %v", caps, m, want)
		}
		w.finish()
	}
	// URL elicitation, but no console runs for the state directory: the
	// same refusal, its hint saying how to start one.
	w := gw(`{"elicitation":{"url":{}}}`)
	if m := today(t, add(w, 1, 2)); !strings.Contains(m["hint"], "no aegis console runs for this state directory; start it in a terminal: aegis console --state-dir "+l.state) {
		t.Errorf("no console: %v", m)
	}
	w.finish()

	con := l.console()
	c := &linkClient{t: t, base: "http://" + con.host}
	origin := "http://" + con.host
	// A console runs, and a host that probes with server/discover before
	// its initialize (as the go-sdk's client does) declares no URL
	// elicitation: today's refusal still, not a link it cannot show.
	w = l.start(exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", config, "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state))
	w.call(0, "server/discover", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`)
	w.call(1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if m := today(t, add(w, 2, 2)); m["code"] != "PENDING_APPROVAL" || !strings.HasPrefix(m["hint"], "run: aegis approve ") {
		t.Errorf("a host that probed first, without URL elicitation: %v", m)
	}
	w.finish()
	w = gw(`{"elicitation":{"url":{}}}`)
	defer w.finish()
	elicited := func(answer string) (id, link string) {
		t.Helper()
		var f urlElicitationError
		if json.Unmarshal([]byte(answer), &f) != nil || f.Error.Code != -32042 || len(f.Error.Data.Elicitations) != 1 ||
			f.Error.Data.Elicitations[0].Mode != "url" || f.Error.Data.Aegis["code"] != "PENDING_APPROVAL" || f.Error.Data.Aegis["layer"] != "gateway" ||
			f.Error.Data.Aegis["approval_id"] != f.Error.Data.Elicitations[0].ElicitationID {
			t.Fatalf("no URLElicitationRequired: %s", answer)
		}
		return f.Error.Data.Elicitations[0].ElicitationID, f.Error.Data.Elicitations[0].URL
	}
	idA, linkA := elicited(add(w, 1, 1))
	idB, linkB := elicited(add(w, 2, 2))
	idC, linkC := elicited(add(w, 3, 3))
	_, linkD := elicited(add(w, 4, 4))
	tok := func(link string) string { return link[strings.Index(link, "?t=")+3:] }
	parts := strings.Split(tok(linkA), ".")
	sessionA := strings.Split(strings.TrimPrefix(linkA, c.base+"/approval/"), "/")[0]
	// An expired link, with a valid MAC: made with the console's own key
	// (the user's file), the expiry in the past.
	rdir, _ := events.RuntimeDirPath(func(k string) string { return map[string]string{"XDG_RUNTIME_DIR": l.runtime}[k] }, l.state)
	cf, key, ok := consoleFor(rdir, l.state)
	if !ok {
		t.Fatal("the console wrote no console file")
	}
	expired, err := console.ApprovalLink(cf.URL, key, sessionA, idA, time.Now().Add(-time.Second), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// C is denied with aegis deny: its link is dead with it.
	if out, code := l.aegis("deny", "--state-dir", l.state, idC); code != 0 {
		t.Fatalf("aegis deny: %d %s", code, out)
	}

	for _, tc := range []struct {
		attack, path, want string
	}{
		{"a guessed token", "/approval/" + sessionA + "/" + idA + "?t=00112233445566778899aabbccddeeff." + parts[1] + "." + strings.Repeat("ab", 32), "not a link of this console"},
		{"the link of one approval opening another", "/approval/" + sessionA + "/" + idB + "?t=" + tok(linkA), "not a link of this console"},
		{"the link of one approval opening it in another session", "/approval/01AAAAAAAAAAAAAAAAAAAAAAAA/" + idA + "?t=" + tok(linkA), "not a link of this console"},
		{"an expiry moved later", "/approval/" + sessionA + "/" + idA + "?t=" + parts[0] + ".4102444800." + parts[2], "not a link of this console"},
		{"a link past its approval's expiry", strings.TrimPrefix(expired, c.base), "expired with its approval"},
		{"the link of an approval decided since", strings.TrimPrefix(linkC, c.base), "no longer pending"},
		{"the console's login token as a link", "/approval/" + sessionA + "/" + idA + "?t=" + strings.SplitN(con.login, "token=", 2)[1], "not a link of this console"},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			code, body, res := c.do("GET", tc.path, "", "", "")
			if code != http.StatusForbidden || !strings.Contains(body, tc.want) || len(res.Cookies()) != 0 {
				t.Errorf("%d %q, cookies %v; want 403 saying %q", code, body, res.Cookies(), tc.want)
			}
		})
	}

	pageA, cookieA := c.open(linkA)
	pageB, cookieB := c.open(linkB)
	if code, body, _ := c.do("GET", pageA+"info", cookieA, "", ""); code != http.StatusOK || !strings.Contains(body, `"approval_id":"`+idA+`"`) || !strings.Contains(body, `"tool_id":"example__add"`) {
		t.Fatalf("A's page: %d %s", code, body)
	}
	lc := loginClient(t, con).cookie
	loginCookie := lc.Name + "=" + lc.Value
	for _, tc := range []struct {
		attack, method, path, cookie, origin, body string
		code                                       int
	}{
		{"the same link used again", "GET", strings.TrimPrefix(linkA, c.base), "", "", "", http.StatusForbidden},
		{"one approval's cookie on another's page", "GET", pageB + "info", cookieA, "", "", http.StatusUnauthorized},
		{"one approval's cookie deciding another", "POST", pageB + "decide", cookieA, origin, `{"op":"approve"}`, http.StatusUnauthorized},
		{"the console's login cookie on an approval page", "GET", pageA + "info", loginCookie, "", "", http.StatusUnauthorized},
		{"no cookie", "POST", pageA + "decide", "", origin, `{"op":"approve"}`, http.StatusUnauthorized},
		{"a decision from another origin", "POST", pageA + "decide", cookieA, "http://evil.example", `{"op":"approve"}`, http.StatusForbidden},
		{"a decision without an origin", "POST", pageA + "decide", cookieA, "", `{"op":"approve"}`, http.StatusForbidden},
		{"a decision naming another approval", "POST", pageA + "decide", cookieA, origin, `{"op":"approve","approval_id":"` + idB + `"}`, http.StatusBadRequest},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			if code, body, _ := c.do(tc.method, tc.path, tc.cookie, tc.origin, tc.body); code != tc.code {
				t.Errorf("%d %q; want %d", code, body, tc.code)
			}
		})
	}
	// Nothing above decided anything: A and B still wait, D too.
	if code, body, _ := c.do("GET", pageB+"info", cookieB, "", ""); code != http.StatusOK || !strings.Contains(body, `"pending":`) {
		t.Fatalf("B after the attacks: %d %s", code, body)
	}
	_ = linkD

	// A is approved through its page: the host is told, its retry runs,
	// and the page decides nothing twice.
	if code, body, _ := c.do("POST", pageA+"decide", cookieA, origin, `{"op":"approve"}`); code != http.StatusOK || !strings.Contains(body, "approved "+idA) {
		t.Fatalf("approve A: %d %s", code, body)
	}
	if code, body, _ := c.do("POST", pageA+"decide", cookieA, origin, `{"op":"deny"}`); code != http.StatusConflict {
		t.Errorf("a second decision through A's link: %d %s", code, body)
	}
	w.until(t, `{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{"elicitationId":"`+idA+`"}}`)
	if a := add(w, 5, 1); !strings.Contains(a, `"sum":4`) {
		t.Fatalf("A's retry: %s", a)
	}
	// B is denied through its page: the host is told, and its retry is
	// refused as denied, naming the approval, not asked again.
	if code, body, _ := c.do("POST", pageB+"decide", cookieB, origin, `{"op":"deny","reason":"not now"}`); code != http.StatusOK || !strings.Contains(body, "denied "+idB) {
		t.Fatalf("deny B: %d %s", code, body)
	}
	w.until(t, `{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{"elicitationId":"`+idB+`"}}`)
	m := today(t, add(w, 6, 2))
	if m["code"] != "POLICY_DENIED" || !strings.Contains(m["reason"], "a human denied this call (approval "+idB+": not now)") || m["approval_id"] != "" {
		t.Errorf("B's retry: %v", m)
	}
}

// urlElicitationError is a URLElicitationRequired error as a host reads it.
type urlElicitationError struct {
	Error struct {
		Code    int
		Message string
		Data    struct {
			Aegis        map[string]string
			Elicitations []struct{ Mode, ElicitationID, URL, Message string }
		}
	}
}

// until reads the host's side until a line equal to want.
func (w *wrapProc) until(t *testing.T, want string) {
	t.Helper()
	for {
		line, err := w.out.ReadString('\n')
		if err != nil {
			t.Fatalf("no %s from aegis: %v", want, err)
		}
		if strings.TrimSpace(line) == want {
			return
		}
	}
}
