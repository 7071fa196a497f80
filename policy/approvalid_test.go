package policy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var shellSafeID = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// TestApprovalIDOfHostileToolNameIsShellSafe: whatever a server names its
// tool (or an operator a rule), the approval id is made of characters a
// shell takes as they are, is bounded, and still ends in the session's
// number and the counter.
func TestApprovalIDOfHostileToolNameIsShellSafe(t *testing.T) {
	set, err := Parse("p.yaml", []byte("rules:\n  - {id: \"gate all <x>\", action: pending_approval}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(set)
	e.SetApprovalIDs(NewApprovalIDs(4107))
	seen := map[string]bool{}
	for i, tool := range []string{
		"rm -rf /", "a<b>c", `say "hi" 'there'`, "$(id)`id`;|&", "déploy\u202e", "\x1b[31mred", "",
		strings.Repeat("x", 200), strings.Repeat("ü", 200), "a\nb", "--help", "*?[]~#",
	} {
		d := e.Evaluate(Request{Tool: tool}, time.Unix(0, 0))
		id := d.ApprovalID
		if !shellSafeID.MatchString(id) || len(id) > 128 {
			t.Errorf("tool %q: approval id %q is not 1 to 128 bytes of [A-Za-z0-9._-]", tool, id)
		}
		if !validApprovalID(id) {
			t.Errorf("tool %q: approval id %q is not one aegis takes back", tool, id)
		}
		if want := "-4107." + strconv.Itoa(i+1); !strings.HasPrefix(id, "apr-gate_all__x_-") || !strings.HasSuffix(id, want) {
			t.Errorf("tool %q: approval id %q, want apr-gate_all__x_-…%s", tool, id, want)
		}
		if seen[id] {
			t.Errorf("approval id %q given twice", id)
		}
		seen[id] = true
	}
}

// TestApprovalIDsShareOneCounter: every kind of approval of a session
// takes its number from one counter, so ids whose names read alike (a
// rule "pin" on a tool "srv-t" and the re-pin of server srv's tool t)
// still differ.
func TestApprovalIDsShareOneCounter(t *testing.T) {
	ids := NewApprovalIDs(9)
	a, b, c := ids.Next("apr", "pin", "srv-t"), ids.Next("apr-pin", "srv", "t"), ids.Next("esc")
	if a != "apr-pin-srv-t-9.1" || b != "apr-pin-srv-t-9.2" || c != "esc-9.3" {
		t.Fatalf("ids %q %q %q", a, b, c)
	}
	if got := NewApprovalIDs(0).Next("apr", "gate", "dream"); got != "apr-gate-dream-1" {
		t.Fatalf("without a session: %q, want upstream's apr-gate-dream-1", got)
	}
}

// Every id ApprovalIDs makes is one the profile state takes as an
// escalation id, however long the names.
func TestApprovalIDsFitTheProfileState(t *testing.T) {
	ids := NewApprovalIDs(^uint64(0))
	ids.n.Store(^uint64(0) - 1)
	long := strings.Repeat("\u00e9<x>", 100)
	for _, id := range []string{ids.Next("apr-pin", long, long), ids.Next("esc")} {
		if !validApprovalID(id) {
			t.Errorf("%q (%d bytes) is not a valid approval id", id, len(id))
		}
	}
}
