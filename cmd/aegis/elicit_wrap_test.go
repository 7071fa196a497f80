package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

// aegis wrap shows an approval through URL elicitation as the gateway
// does, and every host that did not declare it, or declared it in a way
// readers could take differently, gets the refusal frame it always got,
// byte for byte. An approve or a deny is told to the host
// (notifications/elicitation/complete, recorded as a frame aegis wrote);
// the approved retry runs once, and the denied one is refused as denied
// without asking the human again.
func TestWrapApprovalThroughURLElicitation(t *testing.T) {
	t.Parallel() // it waits on processes: beside the others
	l := newLive(t, "version: 1\nrules:\n  - id: gate-add\n    action: pending_approval\n    tool: add\n")
	start := func(caps string) *wrapProc {
		w := l.wrap(false)
		w.call(0, "initialize", `{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"raw","version":"1"}}`)
		w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return w
	}
	add := func(w *wrapProc, n, a int) string {
		return strings.TrimSpace(w.call(n, "tools/call", fmt.Sprintf(`{"name":"add","arguments":{"a":%d,"b":3}}`, a)))
	}
	approvalOf := func(t *testing.T, answer string) string {
		t.Helper()
		var f struct {
			Error struct {
				Data struct{ Aegis map[string]string }
			}
		}
		json.Unmarshal([]byte(answer), &f)
		if f.Error.Data.Aegis["code"] != "PENDING_APPROVAL" {
			t.Fatalf("not a pending approval's refusal: %s", answer)
		}
		return f.Error.Data.Aegis["approval_id"]
	}

	// No URL elicitation declared, or declared so that readers could take
	// it differently: the refusal frame of every host, byte for byte.
	for _, tc := range []struct{ attack, caps string }{
		{"no elicitation", `{}`},
		{"form mode only", `{"elicitation":{"form":{}}}`},
		{"url given twice, the second not an object", `{"elicitation":{"url":{},"url":false}}`},
		{"url in another case beside it", `{"elicitation":{"url":{},"URL":{}}}`},
		{"elicitation given twice", `{"elicitation":{"url":{}},"elicitation":{}}`},
		{"url not an object", `{"elicitation":{"url":true}}`},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			w := start(tc.caps)
			defer w.finish()
			got := add(w, 1, 2)
			id := approvalOf(t, got)
			want := string(proxy.RefusalFrameOf(json.RawMessage("1"), proxy.Refusal{Code: "PENDING_APPROVAL", ApprovalID: id,
				Reason: "a human must approve this call (rule gate-add)", Hint: "run: aegis approve " + id + " (or: aegis deny " + id + "), then send the same call again: the approval lets it through once"}))
			if got != want {
				t.Errorf("host with capabilities %s:\n got %s\nwant %s", tc.caps, got, want)
			}
		})
	}

	// URL elicitation, no console: the same refusal, its hint saying how
	// to start one.
	w := start(`{"elicitation":{"url":{}}}`)
	if a := add(w, 1, 2); !strings.Contains(a, "no aegis console runs for this state directory; start it in a terminal: aegis console --state-dir "+l.state) || strings.Contains(a, "elicitations") {
		t.Errorf("no console: %s", a)
	}
	w.finish()

	con := l.console()
	w = start(`{"elicitation":{"url":{}}}`)
	defer w.finish()
	elicited := func(answer string) (id, link string) {
		t.Helper()
		var f urlElicitationError
		if json.Unmarshal([]byte(answer), &f) != nil || f.Error.Code != -32042 || len(f.Error.Data.Elicitations) != 1 {
			t.Fatalf("no URLElicitationRequired: %s", answer)
		}
		el, a := f.Error.Data.Elicitations[0], f.Error.Data.Aegis
		if el.Mode != "url" || a["code"] != "PENDING_APPROVAL" || a["layer"] != "wrap" || a["approval_id"] != el.ElicitationID ||
			!strings.HasPrefix(el.URL, "http://"+con.host+"/approval/") || !strings.Contains(el.Message, `add with {"a":`) ||
			!strings.HasPrefix(a["hint"], "open the link the host shows") || !strings.Contains(f.Error.Message, "waits for a human's approval") {
			t.Fatalf("the URLElicitationRequired error: %s", answer)
		}
		return el.ElicitationID, el.URL
	}
	idA, _ := elicited(add(w, 1, 1))
	idB, _ := elicited(add(w, 2, 2))

	// A approved: the host is told, once the decision is durable, and
	// its retry runs.
	if out, code := l.aegis("approve", "--state-dir", l.state, idA); code != 0 {
		t.Fatalf("aegis approve: %d %s", code, out)
	}
	complete := func(id string) string {
		return `{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{"elicitationId":"` + id + `"}}`
	}
	w.until(t, complete(idA))
	if a := add(w, 3, 1); !strings.Contains(a, `"sum":4`) {
		t.Fatalf("A's retry: %s", a)
	}
	// B denied: told, and its retry is refused as denied, not asked again.
	if out, code := l.aegis("deny", "--state-dir", l.state, "--reason", "not now", idB); code != 0 {
		t.Fatalf("aegis deny: %d %s", code, out)
	}
	w.until(t, complete(idB))
	a := add(w, 4, 2)
	var f struct {
		Error struct {
			Data struct{ Aegis map[string]string }
		}
	}
	json.Unmarshal([]byte(a), &f)
	if m := f.Error.Data.Aegis; m["code"] != "POLICY_DENIED" || !strings.Contains(m["reason"], "a human denied this call (approval "+idB+": not now)") || m["approval_id"] != "" {
		t.Errorf("B's retry: %s", a)
	}
	// Other arguments ask anew.
	elicited(add(w, 5, 7))
	w.finish()

	// The record: both notifications as frames aegis wrote to the host.
	told := map[string]bool{}
	for _, e := range streamEventsOf(t, l.state) {
		if e.Kind != schemas.KindFrameRefusal {
			continue
		}
		var p struct{ Bytes string }
		json.Unmarshal(e.Payload, &p)
		b, _ := base64.StdEncoding.DecodeString(p.Bytes)
		for _, id := range []string{idA, idB} {
			if string(b) == complete(id) {
				told[id] = true
			}
		}
	}
	if !told[idA] || !told[idB] {
		t.Errorf("the record holds the notifications to the host: %v", told)
	}
}
