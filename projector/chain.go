package projector

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/aegis-dev/aegis/schemas"
)

var (
	// ErrNotOpen is returned by [Chain.Append] before [Chain.Open] succeeded.
	ErrNotOpen = errors.New("chain is not open")
	// ErrAlreadyOpen is returned by a second [Chain.Open].
	ErrAlreadyOpen = errors.New("chain is already open")
	// ErrClosed is returned by [Chain.Append] after a close line was appended.
	ErrClosed = errors.New("chain is closed")
	// ErrLineType is returned for a line whose type the chain does not emit.
	ErrLineType = errors.New("line type not emitted by this chain")
	// ErrTornTail is returned by [TailOf] when the last line of a record does
	// not parse: the previous writer died mid-write, and appending after it
	// would bury the damage in the middle of the file.
	ErrTornTail = errors.New("record ends in a torn line")
)

// Entry is one line as the chain committed it.
type Entry struct {
	Seq  uint64
	Type string
	// Hash is the line_hash, the new tail of the session.
	Hash string
	// Bytes is the canonical line without a trailing newline; a file store
	// writes Bytes followed by '\n'.
	Bytes []byte
}

// Chain is the writer core of one session's audit chain: it assigns seq and
// prev_hash, signs the lines of the signed set and computes line hashes. All
// methods are safe for concurrent use; each append happens in one critical
// section, so the order of committed entries is the chain order.
type Chain struct {
	mu     sync.Mutex
	key    PrivateKey
	keyID  string
	pubHex string
	opened bool
	closed bool
	seq    uint64 // seq of the next line
	tail   string // line_hash of the last committed line
}

// NewChain returns a chain that signs with key. It refuses the zero key.
func NewChain(key PrivateKey) (*Chain, error) {
	if key.IsZero() {
		return nil, fmt.Errorf("new chain: %w", ErrZeroKey)
	}
	return &Chain{
		key:    key,
		keyID:  key.KeyID(),
		pubHex: schemas.PublicKeyHex(key.PublicKey()),
	}, nil
}

// KeyID returns the key_id the chain signs under.
func (c *Chain) KeyID() string { return c.keyID }

// Tail returns the seq the next line will get and the line_hash of the last
// committed line ("" before Open).
func (c *Chain) Tail() (nextSeq uint64, hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq, c.tail
}

// Closed reports whether a close line has been committed.
func (c *Chain) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Open builds and signs the session's open line: seq 0, prev_hash
// [schemas.GenesisHash], the public key, and prevSessionTail (the line_hash of
// the record's last line, see [TailOf]) unless it is empty, which is right
// only for an empty record.
func (c *Chain) Open(prevSessionTail string) (Entry, error) {
	return c.OpenFunc(prevSessionTail, nil)
}

// OpenFunc is [Chain.Open] with a commit step; see [Chain.AppendFunc].
func (c *Chain) OpenFunc(prevSessionTail string, commit func(Entry) error) (Entry, error) {
	return c.OpenExtraFunc(prevSessionTail, nil, commit)
}

// OpenExtraFunc is [Chain.OpenFunc] with extra members in the open line, so
// that facts known before the session starts (such as the confinement a
// server runs under) are signed with it. Each value must be in the audit
// value space (see [schemas.DecodeValue]); a member may not replace one that
// the open line defines.
func (c *Chain) OpenExtraFunc(prevSessionTail string, extra map[string]any, commit func(Entry) error) (Entry, error) {
	if prevSessionTail != "" && !schemas.IsDigest(prevSessionTail) {
		return Entry{}, fmt.Errorf("open chain: previous session tail %q is not a digest", prevSessionTail)
	}
	l, err := schemas.Open{PublicKey: c.pubHex, PrevSessionTail: prevSessionTail}.Line()
	if err != nil {
		return Entry{}, fmt.Errorf("open chain: %w", err)
	}
	for k, v := range extra {
		if _, taken := l.Get(k); taken || k == schemas.FieldSeq || k == schemas.FieldPrevHash || k == schemas.FieldKeyID || k == schemas.FieldSignature {
			return Entry{}, fmt.Errorf("open chain: extra member %q would replace a defined one", k)
		}
		if err := l.Set(k, v); err != nil {
			return Entry{}, fmt.Errorf("open chain: extra member %q: %w", k, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened {
		return Entry{}, fmt.Errorf("open chain: %w", ErrAlreadyOpen)
	}
	e, err := c.build(l, 0, schemas.GenesisHash)
	if err != nil {
		return Entry{}, fmt.Errorf("open chain: %w", err)
	}
	if commit != nil {
		if err := commit(e); err != nil {
			return Entry{}, fmt.Errorf("open chain: commit: %w", err)
		}
	}
	c.opened = true
	c.seq, c.tail = 1, e.Hash
	return e, nil
}

// Append assigns the next seq and prev_hash to a copy of l, signs it if its
// type is in the signed set, and commits it to the chain. l must be an
// intent, outcome, decision or close line (open goes through [Chain.Open];
// checkpoint is reserved). Members seq, prev_hash, key_id and signature of l
// are replaced. After a close line the chain refuses further appends.
func (c *Chain) Append(l schemas.Line) (Entry, error) {
	return c.AppendFunc(l, nil)
}

// AppendFunc is [Chain.Append] with a commit step inside the critical
// section: commit receives the finished entry and must make it durable (for
// example append Bytes and '\n' to the store and wait for the fsync). The
// chain advances its seq and tail only when commit returns nil; on error
// nothing changes and the error is returned wrapped, so the next line takes
// the same seq and chains to the same tail. If commit cannot tell whether the
// write landed, the session must not go on: a retry could fork the chain.
// commit runs with the chain locked and must not call back into the chain.
func (c *Chain) AppendFunc(l schemas.Line, commit func(Entry) error) (Entry, error) {
	t := l.Type()
	switch t {
	case schemas.LineIntent, schemas.LineOutcome, schemas.LineDecision, schemas.LineClose:
	default:
		return Entry{}, fmt.Errorf("append %q: %w", t, ErrLineType)
	}
	l = l.Clone()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.opened {
		return Entry{}, fmt.Errorf("append %s: %w", t, ErrNotOpen)
	}
	if c.closed {
		return Entry{}, fmt.Errorf("append %s: %w", t, ErrClosed)
	}
	e, err := c.build(l, c.seq, c.tail)
	if err != nil {
		return Entry{}, fmt.Errorf("append %s: %w", t, err)
	}
	if commit != nil {
		if err := commit(e); err != nil {
			return Entry{}, fmt.Errorf("append %s seq %d: commit: %w", t, e.Seq, err)
		}
	}
	c.seq, c.tail = e.Seq+1, e.Hash
	if t == schemas.LineClose {
		c.closed = true
	}
	return e, nil
}

// build runs steps 1-4 of the chain rule on l, which the caller owns. It
// must be called with c.mu held.
func (c *Chain) build(l schemas.Line, seq uint64, prev string) (Entry, error) {
	if err := l.Set(schemas.FieldSchemaVersion, uint64(schemas.AuditSchemaVersion)); err != nil {
		return Entry{}, err
	}
	if err := l.Set(schemas.FieldSeq, seq); err != nil {
		return Entry{}, err
	}
	if err := l.Set(schemas.FieldPrevHash, prev); err != nil {
		return Entry{}, err
	}
	l.Delete(schemas.FieldSignature)
	l.Delete(schemas.FieldKeyID)
	if schemas.Signed(l.Type()) {
		if err := l.Set(schemas.FieldKeyID, c.keyID); err != nil {
			return Entry{}, err
		}
		msg, err := l.SigningInput()
		if err != nil {
			return Entry{}, err
		}
		sig, err := c.key.Sign(msg)
		if err != nil {
			return Entry{}, err
		}
		if err := l.Set(schemas.FieldSignature, hex.EncodeToString(sig)); err != nil {
			return Entry{}, err
		}
	}
	b, err := l.Canonical()
	if err != nil {
		return Entry{}, err
	}
	return Entry{Seq: seq, Type: l.Type(), Hash: schemas.HashHex(b), Bytes: b}, nil
}

// Tail describes the end of an existing record.
type Tail struct {
	// Hash is the line_hash of the last line, the prev_session_tail of the
	// next session; "" when the record holds no line.
	Hash string
	// Lines counts the non-empty lines read.
	Lines int
	// NeedsNewline is true when the record does not end in '\n'; a writer
	// must write one before its first line.
	NeedsNewline bool
}

// TailOf reads a record and returns its tail. Empty lines are skipped. The last
// non-empty line must be a whole audit line (JSON in the value space with a
// valid header); if it is not, TailOf returns an error wrapping [ErrTornTail]
// that names the line, because a new session must not be appended after a
// torn write. Earlier lines are not checked: that is the verifier's job.
func TailOf(r io.Reader) (Tail, error) {
	br := bufio.NewReader(r)
	var (
		t      Tail
		last   []byte
		lineNo int
		lastNo int
	)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			t.NeedsNewline = line[len(line)-1] != '\n'
			if trimmed := bytes.TrimSuffix(line, []byte("\n")); len(trimmed) > 0 {
				last, lastNo = trimmed, lineNo
				t.Lines++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Tail{}, fmt.Errorf("read record tail: %w", err)
		}
	}
	if last == nil {
		return t, nil
	}
	l, err := schemas.DecodeLine(last)
	if err == nil {
		_, err = l.Header()
	}
	if err != nil {
		return Tail{}, fmt.Errorf("line %d: %w: %v", lastNo, ErrTornTail, err)
	}
	if t.Hash, err = l.Hash(); err != nil {
		return Tail{}, fmt.Errorf("line %d: %w: %v", lastNo, ErrTornTail, err)
	}
	return t, nil
}
