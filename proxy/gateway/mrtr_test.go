package gateway

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func testCall(m *mrtr, host *mcp.ServerSession, key, server string) *mrtrCall {
	c := &mrtrCall{key: key, method: "tools/call", host: host, server: server, name: server + "__t", args: []byte(`{"a":1}`), keys: map[string]bool{}, callID: "call-" + key, runs: true}
	m.calls[key] = c
	return c
}

// A host's calls that wait on it are bounded per host session: below the
// limit a server's request opens one more round, at the limit it is
// refused, naming the call for the record; a call already waiting takes
// more, and another host's calls are not counted.
func TestMRTRRoundsAtTheLimit(t *testing.T) {
	m := newMRTR()
	m.limit = 3
	host, other := &mcp.ServerSession{}, &mcp.ServerSession{}
	for i, s := range []string{"a", "b"} {
		c := testCall(m, host, "k"+s, s)
		c.state = m.stateOf(c, i+1)
	}
	third := testCall(m, host, "kc", "c")
	// Two of three open: the third is admitted, and is open from then on.
	if c, a, err := m.admit(host, "c", "sampling/createMessage", nil); err != nil || c != third || a == nil {
		t.Fatalf("below the limit: %v %v %v", c, a, err)
	}
	if !third.open() {
		t.Fatal("an admitted request does not count")
	}
	fourth := testCall(m, host, "kd", "d")
	c, a, err := m.admit(host, "d", "elicitation/create", nil)
	if err == nil || a != nil || c != fourth || !strings.Contains(err.Message, "limit") {
		t.Fatalf("at the limit: %v %v %v", c, a, err)
	}
	// A call already waiting on the host takes another request.
	if _, a, err := m.admit(host, "a", "roots/list", nil); err != nil || a == nil || a.key != "aegis-1" {
		t.Fatalf("a waiting call: %v %v", a, err)
	}
	// Another host's calls are its own.
	testCall(m, other, "ke", "d")
	if _, a, err := m.admit(other, "d", "sampling/createMessage", nil); err != nil || a == nil {
		t.Fatalf("another host: %v", err)
	}
	// Two calls of one host waiting on one server: whose request it is
	// cannot be told, so it is refused.
	testCall(m, other, "kf", "d")
	if _, _, err := m.admit(other, "d", "sampling/createMessage", nil); err == nil || !strings.Contains(err.Message, "2 calls of the host are in flight to this server") ||
		!strings.Contains(err.Message, "left unanswered stays in flight for 10m0s") {
		t.Fatalf("two calls on one server: %v", err)
	}
	// No call: refused; nor is a call not yet let through (undecided, or
	// refused) anyone's.
	if _, _, err := m.admit(host, "z", "sampling/createMessage", nil); err == nil {
		t.Fatal("a request with no call was admitted")
	}
	testCall(m, host, "kz", "z").runs = false
	if _, _, err := m.admit(host, "z", "sampling/createMessage", nil); err == nil {
		t.Fatal("a request was admitted to a call not let through")
	}
}

// requestState is unforgeable: altered in its round, its call, its MAC,
// or made under another process's key, it names no call; the true one
// names its call and round.
func TestMRTRRequestStateCannotBeForged(t *testing.T) {
	m, m2 := newMRTR(), newMRTR()
	c := testCall(m, &mcp.ServerSession{}, "0123456789abcdef", "s")
	testCall(m2, c.host, c.key, "s")
	state := m.stateOf(c, 2)
	if got, n, why := m.parseState(state); got != c || n != 2 || why != "" {
		t.Fatalf("the true state: %v %d %q", got, n, why)
	}
	body, mac, _ := strings.Cut(state, ".")
	enc := base64.RawURLEncoding.EncodeToString
	flip := []byte(mac)
	flip[0] ^= 1
	forged := map[string]string{
		"another round":                  enc([]byte(c.key+".3")) + "." + mac,
		"another call":                   enc([]byte("fedcba9876543210.2")) + "." + mac,
		"an altered MAC":                 body + "." + string(flip),
		"no MAC":                         body,
		"another process's key":          m2.stateOf(c, 2),
		"the state of other arguments":   func() string { d := *c; d.args = []byte(`{"a":2}`); return m.stateOf(&d, 2) }(),
		"the state of another tool name": func() string { d := *c; d.name = "s__other"; return m.stateOf(&d, 2) }(),
		"the state of another approval":  func() string { d := *c; d.approval = "apr-other"; return m.stateOf(&d, 2) }(),
		"the state of another method":    func() string { d := *c; d.method = "prompts/get"; return m.stateOf(&d, 2) }(),
		"not base64":                     "@@@.@@@",
	}
	for name, s := range forged {
		if got, _, why := m.parseState(s); got != nil || why == "" {
			t.Errorf("%s: took %q as call %v", name, s, got)
		}
	}
}
