package policy

import (
	"strconv"
	"strings"
	"sync/atomic"
)

// ApprovalWordMax is how many bytes of a rule id, tool or server name an
// approval id keeps.
const ApprovalWordMax = 32

// ApprovalIDs hands out the approval ids of one session: every approval it
// asks for, whatever asks (a pending_approval rule, a changed tool's
// re-pin, a gateway escalation), takes the next number of one counter.
//
// An id is a kind ("apr", "apr-pin", "esc"), the names that say what it is
// about, then "-<session>.<n>": session is the number the session was given
// in its state directory (the stream sequence of its session.opened event,
// which no other session of that directory has), n counts from 1 in the
// session. The part after the last '-' holds no '-', so it reads back as
// the pair (session, n), and no two approvals of a state directory share
// the pair: an id that one session printed can never name a call of
// another session, or of a later run.
//
// Ids are safe to paste into a shell unquoted: each name keeps only
// [A-Za-z0-9._-] (any other character becomes '_') and at most
// [ApprovalWordMax] bytes, so an id is at most about 120 bytes. The names
// are for the person reading the id; what makes it unique is its suffix.
//
// With session 0 (no session: [NewEngine] alone, as aegis policy test and
// replays use it) the suffix is "-<n>", upstream's
// "apr-<rule_id>-<tool>-<n>"; such ids are unique only per counter.
type ApprovalIDs struct {
	session uint64
	n       atomic.Uint64
}

// NewApprovalIDs returns the approval ids of the session numbered session
// in its state directory (0: none), starting at 1.
func NewApprovalIDs(session uint64) *ApprovalIDs { return &ApprovalIDs{session: session} }

// Next returns the next approval id: kind, which must already be of
// [A-Za-z0-9._-] (it is not changed), then each name made shell-safe and
// cut, joined with '-', then the session's number and the counter.
func (a *ApprovalIDs) Next(kind string, names ...string) string {
	n := a.n.Add(1)
	var b strings.Builder
	b.WriteString(kind)
	for _, w := range names {
		b.WriteByte('-')
		safeWord(&b, w)
	}
	b.WriteByte('-')
	if a.session != 0 {
		b.WriteString(strconv.FormatUint(a.session, 10))
		b.WriteByte('.')
	}
	b.WriteString(strconv.FormatUint(n, 10))
	return b.String()
}

// safeWord writes s with every character outside [A-Za-z0-9._-] as '_',
// at most ApprovalWordMax bytes of it; an empty s is written "_".
func safeWord(b *strings.Builder, s string) {
	if s == "" {
		b.WriteByte('_')
		return
	}
	n := 0
	for _, r := range s {
		if n == ApprovalWordMax {
			return
		}
		if r < 0x80 && isApprovalIDByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		n++
	}
}

func isApprovalIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}
