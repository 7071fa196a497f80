package verifier

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

// testWriter is a small, deliberately bendable chain writer for building
// records in tests, including broken ones. It follows the chain rule unless
// told otherwise. The verifier's tests do not use projector.Chain so that
// the verifier stays testable without the projector's dependencies.
type testWriter struct {
	t     testing.TB
	key   ed25519.PrivateKey
	lines [][]byte
	seq   uint64
	prev  string // line_hash of the last line of this session
	tail  string // line_hash of the last line of the record
}

func devKey() ed25519.PrivateKey { return ed25519.NewKeyFromSeed([]byte(schemas.InsecureDevKeySeed)) }

func otherKey() ed25519.PrivateKey { return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)) }

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func newTestWriter(t testing.TB, key ed25519.PrivateKey) *testWriter {
	return &testWriter{t: t, key: key}
}

// lineOpt bends one line: pre runs before signing, post after it (so post
// edits break the signature). unsigned skips signing; sign signs a line
// whose type is outside the signed set; signer signs with another key (and
// its key_id).
type lineOpt struct {
	pre, post func(*schemas.Line)
	unsigned  bool
	sign      bool
	signer    ed25519.PrivateKey
}

func pre(f func(*schemas.Line)) lineOpt     { return lineOpt{pre: f} }
func post(f func(*schemas.Line)) lineOpt    { return lineOpt{post: f} }
func unsigned() lineOpt                     { return lineOpt{unsigned: true} }
func signedBy(k ed25519.PrivateKey) lineOpt { return lineOpt{signer: k} }
func signed() lineOpt                       { return lineOpt{sign: true} }
func set(name string, v any) func(*schemas.Line) {
	return func(l *schemas.Line) {
		if err := l.Set(name, v); err != nil {
			panic(err)
		}
	}
}
func del(name string) func(*schemas.Line) { return func(l *schemas.Line) { l.Delete(name) } }

// open starts a session, linking to the record's tail when there is one.
func (w *testWriter) open(opts ...lineOpt) *testWriter {
	l, err := schemas.Open{PublicKey: schemas.PublicKeyHex(pubOf(w.key)), PrevSessionTail: w.tail}.Line()
	if err != nil {
		w.t.Fatal(err)
	}
	w.seq, w.prev = 0, schemas.GenesisHash
	return w.add(l, opts...)
}

func (w *testWriter) intent(callID string, opts ...lineOpt) *testWriter {
	l, err := schemas.Intent{CallID: callID, ToolID: "echo", RequestDigest: schemas.HashHex([]byte(callID))}.Line()
	if err != nil {
		w.t.Fatal(err)
	}
	return w.add(l, opts...)
}

func (w *testWriter) outcome(callID string, opts ...lineOpt) *testWriter {
	c := schemas.WrapCall{CallID: callID, ToolID: "echo", RequestDigest: schemas.HashHex([]byte(callID)), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
	l, err := c.Answered(schemas.HashHex([]byte("response "+callID)), 3).Line()
	if err != nil {
		w.t.Fatal(err)
	}
	return w.add(l, opts...)
}

func (w *testWriter) decision(approvalID string, opts ...lineOpt) *testWriter {
	l, err := schemas.Decision{ApprovalID: approvalID, Verdict: schemas.Approved(schemas.ApprovalScope{ToolID: "echo"})}.Line()
	if err != nil {
		w.t.Fatal(err)
	}
	return w.add(l, opts...)
}

func (w *testWriter) close(opts ...lineOpt) *testWriter {
	return w.add(schemas.CloseLine(), opts...)
}

// add runs the chain rule on l with the bends in opts and appends it.
func (w *testWriter) add(l schemas.Line, opts ...lineOpt) *testWriter {
	w.t.Helper()
	var o lineOpt
	for _, x := range opts {
		if x.pre != nil {
			o.pre = x.pre
		}
		if x.post != nil {
			o.post = x.post
		}
		o.unsigned = o.unsigned || x.unsigned
		o.sign = o.sign || x.sign
		if x.signer != nil {
			o.signer = x.signer
		}
	}
	set(schemas.FieldSeq, w.seq)(&l)
	set(schemas.FieldPrevHash, w.prev)(&l)
	signer := w.key
	if o.signer != nil {
		signer = o.signer
	}
	sign := (schemas.Signed(l.Type()) || o.sign) && !o.unsigned
	if sign {
		set(schemas.FieldKeyID, schemas.KeyID(pubOf(signer)))(&l)
	}
	if o.pre != nil {
		o.pre(&l)
	}
	if sign {
		msg, err := l.SigningInput()
		if err != nil {
			w.t.Fatal(err)
		}
		set(schemas.FieldSignature, hex.EncodeToString(ed25519.Sign(signer, msg)))(&l)
	}
	if o.post != nil {
		o.post(&l)
	}
	b, err := l.Canonical()
	if err != nil {
		w.t.Fatal(err)
	}
	seq, _ := l.Integer(schemas.FieldSeq)
	w.seq = seq + 1
	w.prev = schemas.HashHex(b)
	w.tail = w.prev
	w.lines = append(w.lines, b)
	return w
}

// raw appends bytes as a line, outside the chain rule.
func (w *testWriter) raw(s string) *testWriter {
	w.lines = append(w.lines, []byte(s))
	return w
}

// drop removes line i (0-based) from the record, as an attacker would.
func (w *testWriter) drop(i int) *testWriter {
	w.lines = append(w.lines[:i:i], w.lines[i+1:]...)
	return w
}

// edit changes line i after the fact without re-signing or re-chaining.
func (w *testWriter) edit(i int, f func(*schemas.Line)) *testWriter {
	l, err := schemas.DecodeLine(w.lines[i])
	if err != nil {
		w.t.Fatal(err)
	}
	f(&l)
	if w.lines[i], err = l.Canonical(); err != nil {
		w.t.Fatal(err)
	}
	return w
}

// bytes returns the record: every line followed by '\n'.
func (w *testWriter) bytes() []byte {
	var b bytes.Buffer
	for _, l := range w.lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// salvaged replaces lines [from, to) with a gap line, as aegis export
// --salvage writes where stream messages were lost.
func (w *testWriter) salvaged(from, to int) *testWriter {
	w.t.Helper()
	prev := schemas.GenesisHash
	if from > 0 {
		prev = schemas.HashHex(w.lines[from-1])
	}
	gl, err := schemas.GapLine(prev, "120-130")
	if err != nil {
		w.t.Fatal(err)
	}
	rest := append([][]byte{gl}, w.lines[to:]...)
	w.lines = append(w.lines[:from:from], rest...)
	return w
}
