package projector_test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

func TestSessionIndex(t *testing.T) {
	s, killed := scripted(t)
	closed := s.open("srv2")
	s.intent(closed, wrapCall(1, "echo"))
	s.outcome(closed, wrapCall(1, "echo").Answered(schemas.HashHex(nil), 2))
	s.requested(closed, "apr-g-x-1", "x", time.Minute)
	s.add(closed, schemas.KindApprovalExpired, map[string]string{"approval_id": "apr-g-x-1"})
	s.add(closed, schemas.KindApprovalRefused, map[string]string{"approval_id": "apr-g-x-1", "op": "approve", "by": "b", "reason": "expired"})
	s.add(closed, schemas.KindChildExited, map[string]any{"code": 3, "server_exited_first": true})
	s.tick(time.Second)
	s.close(closed)
	running := s.open("srv3")
	s.add(running, schemas.KindNote, map[string]string{"text": "hi"})
	// Events of a session whose open was never seen are not a session.
	stray := s.id()
	s.add(stray, schemas.KindNote, map[string]string{})

	var ix projector.SessionIndex
	for _, r := range s.recs {
		ix.Fold(r)
	}
	list := ix.Sessions(4242)
	if len(list) != 3 {
		t.Fatalf("%d sessions, want 3: %+v", len(list), list)
	}
	k, c, r := list[0], list[1], list[2]
	if k.ID != killed || k.State != projector.StateKilled || k.Calls != 5 || k.Refusals != 2 || k.InFlight != 1 || !k.Confined || k.Profile != "strict" || k.Ended != nil {
		t.Errorf("killed session: %+v", k)
	}
	if k.Approvals != (projector.ApprovalCounts{Requested: 1, Approved: 1, Used: 1}) {
		t.Errorf("killed session approvals: %+v", k.Approvals)
	}
	if c.State != projector.StateClosed || c.Ended == nil || c.Exit == nil || *c.Exit.Code != 3 || !c.Exit.ServerExitedFirst || c.Calls != 1 || c.InFlight != 0 || c.Profile != projector.NoProfile {
		t.Errorf("closed session: %+v", c)
	}
	if c.Approvals != (projector.ApprovalCounts{Requested: 1, Expired: 1, Refused: 1}) {
		t.Errorf("closed session approvals: %+v", c.Approvals)
	}
	// All three were opened by pid 4242: only the last can be the one
	// that holds the store.
	if r.State != projector.StateRunning || r.Events != 2 {
		t.Errorf("running session: %+v", r)
	}
	if got := ix.Sessions(0)[2].State; got != projector.StateKilled {
		t.Errorf("with no holder the unclosed session is %s", got)
	}
	if got, ok := ix.Get(closed, 0); !ok || got.ID != closed {
		t.Errorf("Get(%s) = %+v, %v", closed, got, ok)
	}
	if _, ok := ix.Get(stray, 0); ok {
		t.Error("a session without an open is in the index")
	}
}

func TestApprovalsFold(t *testing.T) {
	s := newScript(t)
	a := s.open("a")
	b := s.open("b")
	s.requested(a, "apr-1", "deploy", 10*time.Minute)
	s.tick(time.Second)
	s.requested(b, "apr-1", "deploy", 10*time.Minute) // same id, other session
	s.requested(a, "apr-2", "deploy", time.Minute)
	s.requested(a, "apr-3", "deploy", 10*time.Minute)
	s.requested(a, "apr-4", "deploy", 10*time.Minute)
	s.resolved(a, "apr-3", "deny", "bob", schemas.Rejected("not today"))
	s.resolved(a, "apr-4", "approve", "ann", schemas.Approved(schemas.ApprovalScope{ToolID: "deploy"}))
	o := wrapCall(1, "deploy").Answered(schemas.HashHex(nil), 1)
	o.DecisionAxes.ApprovalRef = "apr-4"
	s.outcome(a, o)
	var ap projector.Approvals
	for _, r := range s.recs {
		ap.Fold(r)
	}
	pending := func(at time.Time) []string {
		var out []string
		for _, p := range ap.Pending(at) {
			out = append(out, p.Session[:4]+"/"+p.ApprovalID)
		}
		return out
	}
	now := s.at
	want := []string{a[:4] + "/apr-1", b[:4] + "/apr-1", a[:4] + "/apr-2"}
	if got := pending(now); !reflect.DeepEqual(got, want) {
		t.Errorf("pending now = %v, want %v", got, want)
	}
	if got := pending(now.Add(2 * time.Minute)); len(got) != 2 {
		t.Errorf("pending after apr-2 expired = %v", got)
	}
	all := ap.All()
	if all[3].State != projector.ApprovalDenied || all[3].By != "bob" || all[3].Reason != "not today" {
		t.Errorf("denied approval: %+v", all[3])
	}
	if all[4].State != projector.ApprovalUsed || all[4].By != "ann" || all[4].UsedBy != "call-1" {
		t.Errorf("used approval: %+v", all[4])
	}
	// A closed session's approvals can no longer be acted on.
	s.close(b)
	ap.Fold(s.recs[len(s.recs)-1])
	if got := pending(now); len(got) != 2 {
		t.Errorf("pending after session b closed = %v", got)
	}
	s.add(a, schemas.KindApprovalExpired, map[string]string{"approval_id": "apr-1"})
	ap.Fold(s.recs[len(s.recs)-1])
	if got := pending(now); len(got) != 1 {
		t.Errorf("pending after apr-1 expired = %v", got)
	}
}

func TestProfilesFold(t *testing.T) {
	s := newScript(t)
	a := s.open("a")
	b := s.open("b")
	s.add(a, schemas.KindProfileSwitched, map[string]string{"profile": "dev"})
	s.add(a, schemas.KindProfileSwitched, map[string]string{"profile": "prod"})
	s.add(b, schemas.KindProfileSwitched, json.RawMessage(`{"from":"x"}`)) // no profile: no switch
	var p projector.Profiles
	for _, r := range s.recs {
		p.Fold(r)
	}
	if p.Active(a) != "prod" || p.Active(b) != projector.NoProfile {
		t.Errorf("active: %q %q", p.Active(a), p.Active(b))
	}
	if all := p.All(); len(all) != 1 {
		t.Errorf("all = %v", all)
	}
}

// Folding the same events twice gives the same projections, whatever the
// split between an incremental fold and a fresh one.
func TestProjectionsAreDeterministic(t *testing.T) {
	t.Parallel() // it mostly waits on the store's commits: beside the others
	s, _ := scripted(t)
	var whole projector.Projections
	for _, r := range s.recs {
		whole.Fold(r)
	}
	for cut := 0; cut <= len(s.recs); cut++ {
		var a, b projector.Projections
		for _, r := range s.recs[:cut] {
			a.Fold(r)
		}
		for _, r := range s.recs[cut:] {
			a.Fold(r)
		}
		for _, r := range s.recs {
			b.Fold(r)
		}
		if !reflect.DeepEqual(a.Snapshot(), whole.Snapshot()) || !reflect.DeepEqual(b.Snapshot(), whole.Snapshot()) {
			t.Fatalf("cut at %d: projections differ", cut)
		}
	}
	snap := whole.Snapshot()
	if len(snap.Sessions) != 1 || snap.Export[snap.Sessions[0].ID].Lines != 11 || snap.Profiles[snap.Sessions[0].ID] != "strict" {
		t.Errorf("snapshot = %+v", snap)
	}
}

// The folds of the transcript, the session index, approvals, profiles and
// recheck are pure: no I/O, no clock, no randomness. Their files import
// only these packages, and never read the time.
func TestFoldsArePure(t *testing.T) {
	allowed := map[string]bool{
		"bytes": true, "encoding/base64": true, "encoding/json": true, "fmt": true, "sort": true, "strconv": true,
		"strings": true, "time": true, "unicode": true, "unicode/utf8": true,
		"crypto/sha256": true, "encoding/hex": true, // digests are functions of their input
		"github.com/aegis-dev/aegis/events": true, "github.com/aegis-dev/aegis/schemas": true,
	}
	files, _ := filepath.Glob("*.go")
	n := 0
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasSuffix(base, "_test.go") || !(strings.HasPrefix(base, "timeline") || strings.HasPrefix(base, "sessions") || strings.HasPrefix(base, "recheck")) {
			continue
		}
		n++
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
				t.Errorf("%s imports %s", base, p)
			}
		}
		for _, bad := range []string{"time.Now(", "time.Since(", "time.Sleep(", "rand."} {
			if strings.Contains(string(src), bad) {
				t.Errorf("%s calls %s", base, bad)
			}
		}
	}
	if n < 5 {
		t.Errorf("checked only %d files", n)
	}
}

// A gateway's server that could not be used is not lost among the notes:
// the session index lists it, the transcript has a skipped line that says
// why, and the servers that ran are named, with their PIDs and what ended
// them, in their started and exited lines.
func TestGatewaySkippedAndNamedServers(t *testing.T) {
	s := newScript(t)
	id := s.open("gateway")
	s.add(id, schemas.KindNote, map[string]string{"server": "gone", "skipped": "start", "error": `exec: "no-such-server": executable file not found in $PATH`})
	s.add(id, schemas.KindChildStarted, map[string]any{"server": "fs", "pid": 41, "argv": []string{"mcp-fs", "/srv"}})
	s.add(id, schemas.KindNote, map[string]string{"text": "an ordinary note"})
	s.add(id, schemas.KindChildExited, map[string]any{"server": "fs", "pid": 41, "code": 0, "ended_by": "stdin closed"})
	s.close(id)

	var ix projector.SessionIndex
	tl := projector.NewTimeline(id)
	var lines []string
	for _, r := range s.recs {
		ix.Fold(r)
		if st, ok := tl.Fold(r); ok {
			lines = append(lines, st.Label()+" "+st.Text())
		}
	}
	sum, _ := ix.Get(id, 0)
	want := []projector.SkippedServer{{Server: "gone", Stage: "start", Error: `exec: "no-such-server": executable file not found in $PATH`}}
	if !reflect.DeepEqual(sum.Skipped, want) || sum.Exit == nil || sum.Exit.Server != "fs" || sum.Exit.PID != 41 {
		t.Errorf("summary: skipped %+v, exit %+v", sum.Skipped, sum.Exit)
	}
	text := strings.Join(lines, "\n")
	for _, w := range []string{
		`skipped server gone skipped at start: exec: "no-such-server": executable file not found in $PATH`,
		"started fs pid 41 · mcp-fs /srv",
		`note {"text":"an ordinary note"}`,
		"exited fs pid 41 status 0 · ended by stdin closed",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("transcript lacks %q:\n%s", w, text)
		}
	}
}
