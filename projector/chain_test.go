package projector

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

func intentLine(t *testing.T, callID string) schemas.Line {
	t.Helper()
	l, err := schemas.Intent{CallID: callID, ToolID: "echo", RequestDigest: schemas.HashHex([]byte(callID))}.Line()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func outcomeLine(t *testing.T, callID string) schemas.Line {
	t.Helper()
	c := schemas.WrapCall{CallID: callID, ToolID: "echo", RequestDigest: schemas.HashHex([]byte(callID)), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
	l, err := c.Answered(schemas.HashHex([]byte("r"+callID)), 1).Line()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestOpenMatchesUpstreamGolden: the dev key's open line on an empty record
// is byte for byte the specification's golden line 0.
func TestOpenMatchesUpstreamGolden(t *testing.T) {
	c, err := NewChain(InsecureDevKey())
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Open("")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key_id":"77a2c2f5952039243c043b69e7e812a2deb69e3271adb3013b8f24d3b8ea40f6","line_type":"open","prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","public_key":"3de537a06e04b2ffe1fb0558ea16d3c0f042ed99f7e392698aa5120f568d4e2c","schema_version":2,"seq":0,"signature":"f27b7f566bce4e0e8126a30dd951411a5ea82333b7b41740ee047f0382788b3239d382aa9506cf3ef7f34137cf9cd7f57388018c67a46b2c3285af8fcc2a7901"}`
	if string(e.Bytes) != want {
		t.Fatalf("open = %s\nwant %s", e.Bytes, want)
	}
	if got, want := e.Hash, "ace4118a6a4ec1bf47503431aaa769ebb74de9c61174bf64470561a99abf4066"; got != want {
		t.Fatalf("open hash = %s, want %s", got, want)
	}
	// The golden intent (line 1) follows from it.
	l, err := schemas.Intent{CallID: "call-golden-0", ToolID: "smoke", RequestDigest: "fb0288872031fc4818c03a7253bd3a78de192d05e6bccd09ceabeda65b4d7c6f"}.Line()
	if err != nil {
		t.Fatal(err)
	}
	e, err = c.Append(l)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.Hash, "5d923c33bede5bef42ee41556fed00fa0660ab30feb57355b3316a2263ffa7f9"; got != want {
		t.Fatalf("intent hash = %s, want %s (%s)", got, want, e.Bytes)
	}
}

func TestChainLifecycle(t *testing.T) {
	c, err := NewChain(testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(intentLine(t, "call-1")); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("Append before Open = %v, want ErrNotOpen", err)
	}
	if _, err := c.Open("ABC"); err == nil {
		t.Fatal("Open with a bad tail succeeded")
	}
	if _, err := c.Open(""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(""); !errors.Is(err, ErrAlreadyOpen) {
		t.Fatalf("second Open = %v, want ErrAlreadyOpen", err)
	}
	for _, typ := range []string{schemas.LineOpen, schemas.LineCheckpoint, "heartbeat", ""} {
		if _, err := c.Append(schemas.NewLine(typ)); !errors.Is(err, ErrLineType) {
			t.Errorf("Append(%q) = %v, want ErrLineType", typ, err)
		}
	}
	e, err := c.Append(intentLine(t, "call-1"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 1 || bytes.Contains(e.Bytes, []byte(`"signature"`)) || bytes.Contains(e.Bytes, []byte(`"key_id"`)) {
		t.Fatalf("intent entry = %+v; want seq 1, unsigned", e)
	}
	e, err = c.Append(outcomeLine(t, "call-1"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 2 || !bytes.Contains(e.Bytes, []byte(`"signature"`)) {
		t.Fatalf("outcome entry = %s; want seq 2, signed", e.Bytes)
	}
	if _, err := c.Append(schemas.CloseLine()); err != nil {
		t.Fatal(err)
	}
	if !c.Closed() {
		t.Fatal("Closed() = false after close")
	}
	if _, err := c.Append(intentLine(t, "call-2")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after close = %v, want ErrClosed", err)
	}
	if _, err := NewChain(PrivateKey{}); !errors.Is(err, ErrZeroKey) {
		t.Fatalf("NewChain(zero) = %v", err)
	}
}

// TestAppendIgnoresCallerHeader: a caller cannot choose its own seq,
// prev_hash or signature and so cannot fork the chain.
func TestAppendIgnoresCallerHeader(t *testing.T) {
	c, _ := NewChain(testKey(t))
	open, _ := c.Open("")
	l := outcomeLine(t, "call-1")
	for name, v := range map[string]any{
		schemas.FieldSeq: 99, schemas.FieldPrevHash: strings.Repeat("f", 64),
		schemas.FieldSignature: strings.Repeat("0", 128), schemas.FieldKeyID: strings.Repeat("e", 64),
	} {
		if err := l.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	e, err := c.Append(l)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := schemas.DecodeLine(e.Bytes)
	h, _ := got.Header()
	if h.Seq != 1 || h.PrevHash != open.Hash {
		t.Fatalf("header = %+v, want seq 1 prev %s", h, open.Hash)
	}
	if kid, _ := got.Str(schemas.FieldKeyID); kid != c.KeyID() {
		t.Fatalf("key_id = %s, want %s", kid, c.KeyID())
	}
	// The caller's line is not modified.
	if seq, _ := l.Integer(schemas.FieldSeq); seq != 99 {
		t.Fatalf("caller's line changed: seq %d", seq)
	}
}

// TestFailedCommitDoesNotAdvance: a line the store did not take must not be
// in the chain, or the next line would chain to a hash no reader can see.
func TestFailedCommitDoesNotAdvance(t *testing.T) {
	c, _ := NewChain(testKey(t))
	if _, err := c.OpenFunc("", func(Entry) error { return errors.New("disk full") }); err == nil {
		t.Fatal("OpenFunc with a failing commit succeeded")
	}
	if _, err := c.Append(intentLine(t, "call-1")); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("Append after failed open = %v, want ErrNotOpen", err)
	}
	open, err := c.Open("")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("fsync failed")
	_, err = c.AppendFunc(intentLine(t, "call-1"), func(Entry) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("AppendFunc error = %v, want wrapped %v", err, boom)
	}
	if seq, tail := c.Tail(); seq != 1 || tail != open.Hash {
		t.Fatalf("Tail after failed commit = %d %s, want 1 %s", seq, tail, open.Hash)
	}
	if _, err := c.AppendFunc(schemas.CloseLine(), func(Entry) error { return boom }); err == nil || c.Closed() {
		t.Fatal("a failed close closed the chain")
	}
	var committed Entry
	e, err := c.AppendFunc(intentLine(t, "call-1"), func(e Entry) error { committed = e; return nil })
	if err != nil || e.Seq != 1 || !bytes.Equal(committed.Bytes, e.Bytes) {
		t.Fatalf("AppendFunc = %+v, %v; committed %+v", e, err, committed)
	}
}

// TestConcurrentAppendsDoNotFork: many goroutines append through one chain
// into one store; the store order must be the chain order.
func TestConcurrentAppendsDoNotFork(t *testing.T) {
	c, _ := NewChain(testKey(t))
	var store [][]byte
	commit := func(e Entry) error { store = append(store, e.Bytes); return nil }
	if _, err := c.OpenFunc("", commit); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := schemas.CallID(uint64(w*each + i + 1))
				if _, err := c.AppendFunc(intentLine(t, id), commit); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.AppendFunc(outcomeLine(t, id), commit); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	prev := ""
	for i, b := range store {
		l, err := schemas.DecodeLine(b)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := l.Header()
		if h.Seq != uint64(i) {
			t.Fatalf("store[%d] has seq %d", i, h.Seq)
		}
		if i > 0 && h.PrevHash != prev {
			t.Fatalf("store[%d] chains to %s, want %s", i, h.PrevHash, prev)
		}
		prev = schemas.HashHex(b)
	}
	if got, want := len(store), 1+2*workers*each; got != want {
		t.Fatalf("store has %d lines, want %d", got, want)
	}
}

func TestTailOf(t *testing.T) {
	c, _ := NewChain(testKey(t))
	open, _ := c.Open("")
	in, _ := c.Append(intentLine(t, "call-1"))
	file := string(open.Bytes) + "\n" + string(in.Bytes) + "\n"
	for _, tc := range []struct {
		name, in string
		want     Tail
	}{
		{"empty", "", Tail{}},
		{"blank lines only", "\n\n", Tail{}},
		{"two lines", file, Tail{Hash: in.Hash, Lines: 2}},
		{"trailing blank lines", file + "\n\n", Tail{Hash: in.Hash, Lines: 2}},
		{"no final newline", strings.TrimSuffix(file, "\n"), Tail{Hash: in.Hash, Lines: 2, NeedsNewline: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TailOf(strings.NewReader(tc.in))
			if err != nil || got != tc.want {
				t.Fatalf("TailOf = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestTailOfRefusesTornLine: appending a session after a torn write would
// turn a verifiable torn tail into a malformed line in the middle.
func TestTailOfRefusesTornLine(t *testing.T) {
	c, _ := NewChain(testKey(t))
	open, _ := c.Open("")
	for _, tail := range []string{
		string(open.Bytes[:len(open.Bytes)/2]),
		string(open.Bytes[:len(open.Bytes)/2]) + "\n",
		`{"line_type":"intent"}` + "\n", // parses, but no header
		`{"a":null}`,
	} {
		_, err := TailOf(strings.NewReader(string(open.Bytes) + "\n" + tail))
		if !errors.Is(err, ErrTornTail) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("TailOf(... %q) = %v, want ErrTornTail naming line 2", tail, err)
		}
	}
}
