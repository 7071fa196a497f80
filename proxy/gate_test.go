package proxy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

func pendingGate(t *testing.T) *Gate {
	t.Helper()
	set, err := policy.Parse("policy.yaml", []byte("version: 1\nrules:\n  - id: gate\n    action: pending_approval\n    tool: deploy\n"))
	if err != nil {
		t.Fatal(err)
	}
	return NewGate(set, time.Minute)
}

// approveNext makes the next deploy call pending, and approves it.
func approveNext(t *testing.T, g *Gate, args json.RawMessage, now time.Time) string {
	t.Helper()
	gd := g.decide("deploy", args, now)
	if gd.Decision.Verdict != policy.PendingApproval {
		t.Fatalf("deploy: %v", gd.Decision.Verdict)
	}
	g.Request(PendingApproval{ApprovalID: gd.Decision.ApprovalID, ToolID: "deploy", ArgsDigest: gd.ArgsDigest, RequestedAt: now, ExpiresAt: now.Add(g.TTL)})
	p, why := g.resolve(gd.Decision.ApprovalID, now)
	if p == nil {
		t.Fatal(why)
	}
	g.grant(p)
	return p.ApprovalID
}

// Two calls decided before either runs (two calls of one batch, or two
// concurrent calls in the gateway) cannot both ride on one approval: the
// approval is spent where the first is decided.
func TestOneApprovalIsSpentWhereTheCallIsDecided(t *testing.T) {
	g := pendingGate(t)
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	args := json.RawMessage(`{"v":1}`)
	id := approveNext(t, g, args, now)
	first := g.decide("deploy", args, now)
	second := g.decide("deploy", args, now)
	if first.Decision.Verdict != policy.Allow || first.Approval != id {
		t.Fatalf("the approved call: %v approval %q", first.Decision.Verdict, first.Approval)
	}
	if second.Decision.Verdict != policy.PendingApproval || second.Approval != "" {
		t.Fatalf("a second call decided before the first ran: %v approval %q, want pending_approval", second.Decision.Verdict, second.Approval)
	}
}

// An approval is of the arguments as every reader takes them. Arguments
// that readers take differently have no canonical form to share with the
// approved ones: a retry that adds a first copy of a member (which a
// server keeping the first acts on) is a new call, held for its own
// approval.
func TestApprovalOfOneReadingDoesNotLetAnotherThrough(t *testing.T) {
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		attack, approved, retry string
	}{
		{"a first copy of the approved member", `{"path":"/tmp/x"}`, `{"path":"/etc/passwd","path":"/tmp/x"}`},
		{"a first copy under an escaped name", `{"path":"/tmp/x"}`, `{"p\u0061th":"/etc/passwd","path":"/tmp/x"}`},
		{"a duplicate deep inside", `{"opts":{"mode":1}}`, `{"opts":{"mode":7,"mode":1}}`},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			g := pendingGate(t)
			approveNext(t, g, json.RawMessage(tc.approved), now)
			if gd := g.decide("deploy", json.RawMessage(tc.retry), now); gd.Decision.Verdict != policy.PendingApproval || gd.Approval != "" {
				t.Fatalf("%s rides on the approval of %s: %v", tc.retry, tc.approved, gd.Decision.Verdict)
			}
			if gd := g.decide("deploy", json.RawMessage(tc.approved), now); gd.Decision.Verdict != policy.Allow {
				t.Fatalf("the approved call itself: %v", gd.Decision.Verdict)
			}
		})
	}
	// The same text again is the call the human approved.
	g := pendingGate(t)
	dup := json.RawMessage(`{"path":"/etc/passwd","path":"/tmp/x"}`)
	approveNext(t, g, dup, now)
	if gd := g.decide("deploy", dup, now); gd.Decision.Verdict != policy.Allow {
		t.Fatalf("the approved text itself: %v", gd.Decision.Verdict)
	}
}

// An allowance a refused frame took is given back; one that outlives its
// approval lapses, and is reported once.
func TestApprovalGivenBackAndLapsed(t *testing.T) {
	g := pendingGate(t)
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	args := json.RawMessage(`{"v":1}`)
	id := approveNext(t, g, args, now)
	gd := g.decide("deploy", args, now)
	g.GiveBack("deploy", gd)
	if again := g.decide("deploy", args, now); again.Approval != id {
		t.Fatalf("the approval given back was not usable again: %+v", again)
	} else {
		g.GiveBack("deploy", again)
	}
	if _, why := g.resolve(id, now); !strings.Contains(why, "already approved") {
		t.Errorf("resolve an approval given back: %q", why)
	}
	late := g.decide("deploy", args, now.Add(time.Minute))
	if late.Decision.Verdict != policy.PendingApproval || len(late.Lapsed) != 1 || late.Lapsed[0] != id {
		t.Fatalf("at the approval's expiry: %v lapsed %v, want pending_approval and %s lapsed", late.Decision.Verdict, late.Lapsed, id)
	}
	if g.Lapse(id, now.Add(time.Hour)) {
		t.Error("a lapsed allowance lapsed twice")
	}
	if _, why := g.resolve(id, now); !strings.Contains(why, "expired unused") {
		t.Errorf("resolve a lapsed approval: %q", why)
	}
	// The expiry timer's path.
	id2 := approveNext(t, g, args, now)
	if g.Lapse(id2, now.Add(time.Minute-time.Nanosecond)) {
		t.Error("an allowance lapsed before its approval expired")
	}
	if !g.Lapse(id2, now.Add(time.Minute)) {
		t.Error("an allowance did not lapse at its approval's expiry")
	}
	if gd := g.decide("deploy", args, now); gd.Approval != "" || len(gd.Lapsed) != 0 {
		t.Errorf("after the timer's lapse: %+v", gd)
	}
}

// Every refusal frame is canonical JSON (RFC 8785), keeps upstream's
// members and order, and says why and what to do; the golden file holds
// one of each kind.
func TestRefusalFramesSayWhyAndWhatToDo(t *testing.T) {
	cases := []struct {
		id string
		r  Refusal
	}{
		{`1`, Refusal{Code: policy.CodePolicyDenied, Reason: "rm is not allowed here"}},
		{`"a"`, Refusal{Code: policy.CodeRateLimited, Reason: "rate limit exceeded for `rate-search` (1 per 3600s)"}},
		{`2`, Refusal{Code: policy.CodePendingApproval, Reason: "a human must approve this call (rule gate)", ApprovalID: "apr-gate-deploy-1"}},
		{`3`, Refusal{Code: policy.CodeHostDenied}},
		{`null`, Refusal{Code: policy.CodeHostDenied, Reason: "ambiguous tools/call: duplicate member \"method\"", Hint: "send each member once, with its name in lower case"}},
		{`4`, Refusal{Code: policy.CodePendingApproval, Reason: "quotes \" and \\ and \u001b and \u2028 and <html>", ApprovalID: "apr-gate-x\u001by-2"}},
	}
	var b bytes.Buffer
	for _, c := range cases {
		f := RefusalFrameOf(json.RawMessage(c.id), c.r)
		// Upstream's frame around data.aegis, which is canonical JSON (the
		// frame as a whole is not in the audit value space: -32042, null).
		head, tail := `{"error":{"code":-32042,"data":{"aegis":`, `},"message":"aegis wrap refused this tools/call"},"id":`+c.id+`,"jsonrpc":"2.0"}`
		if !bytes.HasPrefix(f, []byte(head)) || !bytes.HasSuffix(f, []byte(tail)) {
			t.Errorf("refusal frame %s is not upstream's", f)
		} else if inner := f[len(head) : len(f)-len(tail)]; true {
			if canon, err := schemas.Canonicalize(inner); err != nil || !bytes.Equal(canon, inner) {
				t.Errorf("data.aegis is not canonical JSON (%v):\n%s\n%s", err, inner, canon)
			}
		}
		var v struct {
			Error struct {
				Code    int
				Message string
				Data    struct{ Aegis map[string]string }
			}
			ID json.RawMessage
		}
		if err := json.Unmarshal(f, &v); err != nil {
			t.Fatal(err)
		}
		a := v.Error.Data.Aegis
		if v.Error.Code != RefusalCode || v.Error.Message != RefusalMessage || string(v.ID) != c.id || a["layer"] != "wrap" || a["code"] != c.r.Code ||
			a["reason"] == "" || a["hint"] == "" || a["approval_id"] != c.r.ApprovalID {
			t.Errorf("refusal frame %s", f)
		}
		// The command as a shell takes it: an id that needs quotes (none
		// that aegis makes does) is quoted.
		if c.r.ApprovalID != "" && !strings.Contains(a["hint"], "run: aegis approve "+QuoteArg(c.r.ApprovalID)) {
			t.Errorf("a pending refusal without the command to approve it: %s", f)
		}
		b.Write(f)
		b.WriteByte('\n')
	}
	if refusalFrame(json.RawMessage("5"), policy.CodeHostDenied) == nil {
		t.Error("refusalFrame")
	}
	path := filepath.Join("testdata", "refusal-frames.golden")
	if *updateGolden {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("refusal frames differ from %s (go test -run %s -update rewrites it)\n--- got\n%s--- want\n%s", path, t.Name(), b.Bytes(), want)
	}
}

// What an approver is shown cannot act on a terminal, and says how much
// was cut.
func TestPrintableEscapesWhatCouldActOnATerminal(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"plain text stays", `{"a":"héllo wörld ✓"}`, `{"a":"héllo wörld ✓"}`},
		{"an escape sequence clears the screen", "\x1b[2J", `\x1b[2J`},
		{"an OSC sets the title, ended by a bell", "\x1b]0;owned\a", `\x1b]0;owned\x07`},
		{"a C1 CSI", "\u009b31m", `\u009b31m`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"a bidi override reverses what follows", "abc\u202edef", `abc\u202edef`},
		{"a zero-width space hides a difference", "a\u200bb", `a\u200bb`},
		{"a newline or carriage return forges a line", "a\nb\rc", `a\x0ab\x0dc`},
		{"a line separator", "a\u2028b", `a\u2028b`},
		{"bytes that are not UTF-8", "a\xff\xc3b", `a\xff\xc3b`},
		{"a private-use character above the BMP", "\U000F0000", `\U000f0000`},
	} {
		if got := projector.Printable(c.in); got != c.want {
			t.Errorf("%s: projector.Printable(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
	canon := []byte(`{"text":"` + strings.Repeat("é", 400) + `"}`)
	preview, total := ArgsPreview(canon)
	if len(preview) > ArgsPreviewBytes || !strings.HasPrefix(string(canon), preview) || total != len(canon) || !utf8Valid(preview) {
		t.Errorf("preview of %d bytes: %d bytes, total %d", len(canon), len(preview), total)
	}
	if s := ShowArgs(preview, total, SHA(canon)); !strings.HasSuffix(s, fmt.Sprintf("é…(%d bytes, sha256 %s…)", len(canon), SHA(canon)[:16])) {
		t.Errorf("ShowArgs = %q", s)
	}
	if s := ShowArgs(`{"a":1}`, 7, SHA([]byte(`{"a":1}`))); s != `{"a":1} (7 bytes, sha256 `+SHA([]byte(`{"a":1}`))[:16]+`…)` {
		t.Errorf("ShowArgs = %q", s)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// decide asks about a call of tool, as wrap asks without a session.
func (g *Gate) decide(tool string, args json.RawMessage, now time.Time) Gated {
	return g.DecideRequest(policy.Request{Tool: tool}, args, now)
}
