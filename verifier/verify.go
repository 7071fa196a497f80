package verifier

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aegis-dev/aegis/schemas"
)

// MaxLineBytes bounds one line of a record. Real lines are a few KiB; a
// longer one is a MalformedLine rather than a reason to exhaust memory.
const MaxLineBytes = 16 << 20

// Verify reads a record (JSON Lines, see package schemas) and returns its
// verdict. It reads until the first Tampered reason or the end of r (with
// at most a few chunks of read-ahead past that reason), never
// writes, and uses no network, clock or randomness. A read error is
// returned in Result.Err.
//
// The lines are parsed, hashed and signature-checked in parallel (see
// parallel.go), ahead of one sequential walk that decides the verdict
// exactly as [verifySequential] does. A record of at most smallRecord
// bytes is walked sequentially: the workers would cost more to start than
// they save, and the walk checks no line past the first Tampered one.
func Verify(r io.Reader, opts Options) Result {
	b, err := io.ReadAll(io.LimitReader(r, smallRecord+1))
	if err == nil && len(b) <= smallRecord {
		return verifySequential(bytes.NewReader(b), opts)
	}
	rest := r
	if err != nil {
		rest = failedReader{err}
	}
	return verifyParallel(io.MultiReader(bytes.NewReader(b), rest), opts, defaultConfig())
}

// failedReader returns the read error that ended [Verify]'s first read,
// after the bytes read before it.
type failedReader struct{ err error }

func (f failedReader) Read([]byte) (int, error) { return 0, f.err }

// smallRecord is the size up to which [Verify] walks a record without
// workers.
const smallRecord = 64 << 10

// verifySequential is the plain walk: one line at a time, each parsed,
// hashed and verified when the walk reaches it. It is the reference that
// the tests hold [Verify] to.
func verifySequential(r io.Reader, opts Options) Result {
	w := newWalker(opts)
	size := 64 << 10
	if br, ok := r.(*bytes.Reader); ok {
		size = min(size, int(br.Len())+1) // a small record needs no more
	}
	lr := lineReader{br: bufio.NewReaderSize(r, size)}
	cur, err := lr.next()
	for cur != nil && err == nil && w.tampered == nil {
		var nxt *rawLine
		if nxt, err = lr.next(); err != nil {
			break
		}
		w.line(cur, nxt == nil, nil)
		cur = nxt
	}
	if err != nil {
		return Result{Err: fmt.Errorf("read record: %w", err)}
	}
	return w.finish()
}

type rawLine struct {
	no      int
	b       []byte
	tooLong bool
}

// lineReader yields the non-empty lines of a record with their 1-based line
// numbers (empty lines count). With a tree it also adds every line, empty
// ones included, to it as a leaf.
type lineReader struct {
	br  *bufio.Reader
	no  int
	eof bool
	// tree, when not nil, gets every line without its '\n'; a line longer
	// than MaxLineBytes marks it broken.
	tree *leafTree
	// noNL is set when the record's last line does not end in '\n'.
	noNL bool
}

func (lr *lineReader) next() (*rawLine, error) {
	l, ok, _, err := lr.read(nil)
	if err != nil || !ok {
		return nil, err
	}
	return &l, nil
}

// read returns the next line, or false at the end of the record. The line's
// bytes are appended to arena when they arrive in one piece and fit in its
// capacity, and are allocated on their own otherwise; read returns arena
// with or without them.
func (lr *lineReader) read(arena []byte) (rawLine, bool, []byte, error) {
	for !lr.eof {
		var buf []byte
		n := 0
		for {
			frag, err := lr.br.ReadSlice('\n')
			n += len(frag)
			if n <= MaxLineBytes+1 {
				if buf == nil && err != bufio.ErrBufferFull && len(arena)+len(frag) <= cap(arena) {
					start := len(arena)
					arena = append(arena, frag...)
					buf = arena[start:len(arena):len(arena)]
				} else {
					buf = append(buf, frag...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				lr.eof = true
				break
			}
			if err != nil {
				return rawLine{}, false, arena, err
			}
			break
		}
		if n == 0 {
			continue
		}
		lr.no++
		lr.noNL = lr.eof
		if n > MaxLineBytes+1 {
			if lr.tree != nil {
				lr.tree.broken = true
			}
			return rawLine{no: lr.no, tooLong: true}, true, arena, nil
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		if lr.tree != nil {
			lr.tree.add(buf)
		}
		if len(buf) == 0 {
			continue
		}
		return rawLine{no: lr.no, b: buf}, true, arena, nil
	}
	return rawLine{}, false, arena, nil
}

// lineFields is what the walk reads of a decoded line: a [schemas.Line], or
// the [schemas.CanonicalLine] that the parallel walk decoded ahead, which
// answers the same.
type lineFields interface {
	Header() (schemas.Header, error)
	Get(name string) (any, bool)
	Str(name string) (string, bool)
	SigningInput() ([]byte, error)
}

type session struct {
	index     int
	pub       ed25519.PublicKey
	keyID     string
	nextSeq   uint64
	tail      string
	closed    bool
	intents   []string        // call_ids in record order
	pending   map[string]bool // call_id -> no outcome yet
	decisions map[string]Position
}

type walker struct {
	keys          keyCache // the key of the lines checked inline
	pinned        bool
	trusted       map[string]bool
	trustedIDs    []string
	keyIDs        []string
	seenKeys      map[string]bool
	sess          *session
	sessions      int
	lastHash      string // line_hash of the previous line in the record
	lines         int
	coverage      *Position
	tampered      *Reason
	indeterminate *Reason
	warnings      []string
	// cur holds what was computed ahead for the line being walked, nil in
	// the sequential walk.
	cur *prepared
	// inline counts the signatures and keys the walk had to check itself,
	// for want of (matching) results computed ahead.
	inline int
	// afterGap is set by a gap line (schemas.LineGap) until the next line;
	// orphan while the lines after a gap belong to a session whose open
	// was lost, until the next open.
	afterGap, orphan bool
	allowGaps        bool // Options.AllowGaps
	// file names the record file being walked in a rotated set, "" for a
	// single record; messages then say "<file> line <n>".
	file string
	// fileKeys are the public keys of the sessions whose lines the file
	// being walked holds, in first-seen order without repeats.
	fileKeys []ed25519.PublicKey
	// continued is set when the first session's open links to an earlier
	// session, as the first open of a later segment of a rotated record
	// does.
	continued bool
}

func newWalker(opts Options) *walker {
	w := &walker{pinned: opts.pinned(), allowGaps: opts.AllowGaps, trusted: map[string]bool{}, seenKeys: map[string]bool{}}
	for _, k := range opts.trustedKeys() {
		id := schemas.KeyID(k)
		if !w.trusted[id] {
			w.trusted[id] = true
			w.trustedIDs = append(w.trustedIDs, id)
		}
	}
	return w
}

func (w *walker) tamper(code Code, line int, format string, args ...any) {
	if w.tampered == nil {
		w.tampered = w.reason(code, line, format, args...)
	}
}

func (w *walker) indet(code Code, line int, format string, args ...any) {
	if w.indeterminate == nil {
		w.indeterminate = w.reason(code, line, format, args...)
	}
}

// reason builds a Reason; in a rotated set a message that does not name
// the file yet gets its position appended.
func (w *walker) reason(code Code, line int, format string, args ...any) *Reason {
	msg := fmt.Sprintf(format, args...)
	if w.file != "" && line > 0 && !strings.Contains(msg, w.at(line)) {
		msg += " (" + w.at(line) + ")"
	}
	return &Reason{Code: code, Message: msg, Line: line, File: w.file}
}

// at names a line of the record: "line <n>", or "<file> line <n>" in a
// rotated set.
func (w *walker) at(no int) string {
	if w.file == "" {
		return fmt.Sprintf("line %d", no)
	}
	return fmt.Sprintf("%s line %d", display(w.file), no)
}

// noteFileKey remembers pub as a key of the file being walked.
func (w *walker) noteFileKey(pub ed25519.PublicKey) {
	for _, k := range w.fileKeys {
		if k.Equal(pub) {
			return
		}
	}
	w.fileKeys = append(w.fileKeys, pub)
}

// line walks one line. pre, when not nil, holds the line already decoded
// and hashed and possibly its signature checked; the walk then uses it
// instead of doing that work itself, with the same result.
func (w *walker) line(raw *rawLine, final bool, pre *prepared) {
	w.lines++
	w.cur = pre
	var (
		l   lineFields
		err error
	)
	if raw.tooLong {
		w.tamper(MalformedLine, raw.no, "%s: longer than %d bytes", w.at(raw.no), MaxLineBytes)
		return
	}
	if pre != nil {
		l, err = &pre.line, pre.err
	} else {
		l, err = schemas.DecodeLine(raw.b)
	}
	if err != nil {
		if final && errors.Is(err, schemas.ErrSyntax) {
			w.indet(TornFinalLine, raw.no, "final %s does not parse; torn write", w.at(raw.no))
			return
		}
		w.tamper(MalformedLine, raw.no, "%s: %v", w.at(raw.no), err)
		return
	}
	h, err := l.Header()
	if err != nil {
		w.tamper(MalformedLine, raw.no, "%s: %v", w.at(raw.no), err)
		return
	}
	var hash string
	if pre != nil {
		hash = pre.hash
	} else if hash, err = l.(schemas.Line).Hash(); err != nil {
		w.tamper(MalformedLine, raw.no, "%s: %v", w.at(raw.no), err)
		return
	}
	switch {
	case h.LineType == schemas.LineGap:
		lost, _ := l.Str(schemas.FieldLostStreamSeqs)
		if !w.allowGaps {
			w.tamper(ChainBroken, raw.no, "%s is a gap line: audit lines were dropped here (stream messages %s lost, it says); aegis export --salvage writes these for a damaged state directory, and verify --allow-gaps checks the lines around them",
				w.at(raw.no), display(lost))
			return
		}
		w.indet(RecordGap, raw.no, "%s marks a gap where a salvage export found stream messages %s of a damaged state directory lost, and with them any audit lines they held; the lines around it are checked as far as they go",
			w.at(raw.no), display(lost))
		w.afterGap = true
		w.lastHash = hash
		return
	case h.LineType == schemas.LineOpen:
		w.open(l, h, raw.no)
	default:
		w.member(l, h, raw.no)
	}
	if w.tampered != nil {
		return
	}
	if w.orphan {
		w.lastHash = hash
		return
	}
	w.sess.tail, w.sess.nextSeq = hash, h.Seq+1
	w.lastHash = hash
	w.coverage = &Position{Session: w.sess.index, Seq: h.Seq}
}

func (w *walker) open(l lineFields, h schemas.Header, no int) {
	idx := w.sessions
	pos := Position{Session: idx, Seq: h.Seq}
	pubHex, ok := l.Str(schemas.FieldPublicKey)
	if !ok {
		w.tamper(MalformedLine, no, "%s: open without a string public_key", w.at(no))
		return
	}
	pub, err := schemas.ParsePublicKey(pubHex)
	if err != nil || !w.validKey(pubHex, pub) {
		w.tamper(BadSignature, no, "line at %s: not a valid ed25519 public key", pos)
		return
	}
	keyID := schemas.KeyID(pub)
	if !w.seenKeys[keyID] {
		w.seenKeys[keyID] = true
		w.keyIDs = append(w.keyIDs, keyID)
	}
	pst, hasPST := l.Get(schemas.FieldPrevSessionTail)
	pstStr, _ := pst.(string)
	resync := w.afterGap // the line before was lost: nothing to link to
	w.afterGap, w.orphan = false, false
	switch {
	case resync:
	case w.sess == nil && hasPST:
		w.continued = true
		w.tamper(SessionBoundaryBroken, no, "open at %s links to previous tail %s, but no earlier session is in this record",
			pos, displayValue(pst))
		return
	case w.sess != nil && !hasPST:
		w.tamper(SessionBoundaryBroken, no, "open at %s has no prev_session_tail, but the line before it hashes to %s",
			pos, w.lastHash)
		return
	case w.sess != nil && pstStr != w.lastHash:
		w.tamper(SessionBoundaryBroken, no, "open at %s links to previous tail %s, but the line before it hashes to %s",
			pos, displayValue(pst), w.lastHash)
		return
	}
	if h.Seq != 0 {
		w.tamper(SeqOutOfOrder, no, "session %d expected seq 0, found %d", idx, h.Seq)
		return
	}
	if h.PrevHash != schemas.GenesisHash {
		w.tamper(ChainBroken, no, "line at %s chains to %s, but the line before it hashes to %s", pos, h.PrevHash, schemas.GenesisHash)
		return
	}
	if w.sess != nil && !w.sess.closed {
		w.noteInFlight(w.sess)
	}
	w.sessions++
	w.noteFileKey(pub)
	w.sess = &session{
		index:     idx,
		pub:       pub,
		keyID:     keyID,
		pending:   map[string]bool{},
		decisions: map[string]Position{},
	}
	if !w.verifySignature(l, pos, no) {
		return
	}
	if w.pinned && !w.trusted[keyID] {
		pinned := "none: the trust store is empty"
		if len(w.trustedIDs) > 0 {
			pinned = strings.Join(w.trustedIDs, ", ")
		}
		w.tamper(UntrustedKey, no, "session opened at %s is signed by the key with key_id %s, which is not one you pinned (pinned key_ids: %s; --key takes the 64-hex public key, not its key_id)",
			pos, keyID, pinned)
	}
}

func (w *walker) member(l lineFields, h schemas.Header, no int) {
	s := w.sess
	if w.afterGap {
		// The first line after a gap: the session before it runs on (the
		// chain is taken up at this line), or the gap took the open of
		// the session this line belongs to, whose lines cannot be checked
		// until the next open.
		w.afterGap = false
		if s == nil || s.closed || h.Seq < s.nextSeq {
			w.orphan = true
		} else {
			s.tail = h.PrevHash
		}
	}
	if w.orphan {
		return
	}
	if s == nil {
		w.tamper(SessionBoundaryBroken, no, "%s is %s line before any open; the record is missing the start of its first session",
			w.at(no), article(h.LineType))
		return
	}
	pos := Position{Session: s.index, Seq: h.Seq}
	if s.closed {
		w.tamper(SessionBoundaryBroken, no, "line at %s follows the close of session %d", pos, s.index)
		return
	}
	if h.Seq < s.nextSeq {
		w.tamper(SeqOutOfOrder, no, "session %d expected seq %d, found %d", s.index, s.nextSeq, h.Seq)
		return
	}
	if h.PrevHash != s.tail {
		w.tamper(ChainBroken, no, "line at %s chains to %s, but the line before it hashes to %s", pos, h.PrevHash, s.tail)
		return
	}
	if h.Seq > s.nextSeq {
		w.indet(MissingLine, no, "session %d skips seq %d..%d with the chain intact; a write did not land", s.index, s.nextSeq, h.Seq)
	}
	switch h.LineType {
	case schemas.LineIntent:
		// A signature on an intent is not checked (upstream's known gap);
		// it is covered by the line hash like every other member.
		id, ok := l.Str("call_id")
		if !ok {
			w.tamper(MalformedLine, no, "%s: intent without a string call_id", w.at(no))
			return
		}
		if !s.pending[id] {
			// The id may share memory with the whole line; keep only it.
			id = strings.Clone(id)
			s.pending[id] = true
			s.intents = append(s.intents, id)
		}
	case schemas.LineOutcome:
		if !w.verifySignature(l, pos, no) {
			return
		}
		id, ok := l.Str("call_id")
		if !ok {
			w.tamper(MalformedLine, no, "%s: outcome without a string call_id", w.at(no))
			return
		}
		if s.pending[id] {
			delete(s.pending, id)
		} else {
			w.warnings = append(w.warnings, fmt.Sprintf("outcome %s at %s has no pending intent", display(id), pos))
		}
	case schemas.LineDecision:
		if !w.verifySignature(l, pos, no) {
			return
		}
		id, ok := l.Str("approval_id")
		if !ok {
			w.tamper(MalformedLine, no, "%s: decision without a string approval_id", w.at(no))
			return
		}
		if first, dup := s.decisions[id]; dup {
			w.tamper(DuplicateDecision, no, "line at %s is a second decision for approval %s, first decided at %s", pos, display(id), first)
			return
		}
		s.decisions[strings.Clone(id)] = pos
	case schemas.LineClose:
		if !w.verifySignature(l, pos, no) {
			return
		}
		w.noteInFlight(s)
		s.closed = true
	case schemas.LineCheckpoint:
		if !w.verifySignature(l, pos, no) {
			return
		}
		w.indet(ReservedCheckpoint, no, "reserved checkpoint line at %s; this verifier does not check checkpoints", pos)
	default:
		// A line this verifier cannot interpret caps the verdict whether or
		// not it is signed: a valid signature proves who wrote the line, not
		// what it means, so Verified would vouch for an unknown claim. A
		// signature that is there is still checked, and a bad one is
		// Tampered.
		if _, signed := l.Get(schemas.FieldSignature); signed {
			if !w.verifySignature(l, pos, no) {
				return
			}
			w.indet(UnknownLineType, no, "unknown line type `%s` at %s (%s), newer emitter; its signature verifies, but this verifier cannot tell what it records",
				display(h.LineType), pos, w.at(no))
			return
		}
		w.indet(UnknownLineType, no, "unknown line type `%s` at %s (%s), newer emitter; unsigned, and this verifier cannot tell what it records",
			display(h.LineType), pos, w.at(no))
	}
}

// verifySignature checks the signature pair of l against the current
// session's key and records BadSignature on failure.
func (w *walker) verifySignature(l lineFields, pos Position, no int) bool {
	fail := func(msg string) bool {
		w.tamper(BadSignature, no, "line at %s: %s", pos, msg)
		return false
	}
	s := w.sess
	sigHex, ok := l.Str(schemas.FieldSignature)
	if !ok {
		return fail("line carries no signature")
	}
	keyID, ok := l.Str(schemas.FieldKeyID)
	if !ok {
		keyID = "(none)"
	}
	if keyID != s.keyID {
		return fail(fmt.Sprintf("line was signed under key %s, not %s", display(keyID), s.keyID))
	}
	if p := w.cur; p != nil && p.checkedKey != nil && bytes.Equal(p.checkedKey, s.pub) {
		// Checked ahead (signature parsed, then verified) under the key
		// this session uses.
		if !p.sigOK {
			return fail("signature does not match this line")
		}
		return true
	}
	sig, ok := schemas.ParseSignature(sigHex)
	if !ok {
		return fail("signature does not match this line")
	}
	w.inline++
	msg, err := l.SigningInput()
	if err != nil {
		return fail("canonical form unavailable: " + err.Error())
	}
	if !verifyStrict(&w.keys, s.pub, msg, sig) {
		return fail("signature does not match this line")
	}
	return true
}

// validKey is validPublicKey(pub), taken from the work done ahead when it
// checked the same key.
func (w *walker) validKey(pubHex string, pub ed25519.PublicKey) bool {
	if p := w.cur; p != nil && p.pubChecked && p.pubHex == pubHex {
		return p.pubOK
	}
	w.inline++
	return validPublicKey(pub)
}

// noteInFlight warns about calls of an anchored session that never got an
// outcome; only the last, unanchored session reports them in the verdict.
func (w *walker) noteInFlight(s *session) {
	for _, id := range s.inFlight() {
		w.warnings = append(w.warnings, fmt.Sprintf("intent %s in session %d has no outcome", display(id), s.index))
	}
}

// inFlight returns the call_ids with an intent and no outcome, in record
// order, each once.
func (s *session) inFlight() []string {
	var ids []string
	seen := map[string]bool{}
	for _, id := range s.intents {
		if s.pending[id] && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

func (w *walker) finish() Result {
	r := Result{
		Pinned:        w.pinned,
		TrustedKeyIDs: w.trustedIDs,
		KeyIDs:        w.keyIDs,
		Coverage:      w.coverage,
		Warnings:      w.warnings,
		Continued:     w.continued,
	}
	switch {
	case w.tampered != nil:
		r.Reason = w.tampered
	case w.indeterminate != nil:
		r.Reason = w.indeterminate
	case w.lines == 0:
		r.Reason = &Reason{Code: EmptyChain, Message: "no lines to verify"}
	case w.sess == nil:
		// Unreachable: a line that passed made a session.
		r.Reason = &Reason{Code: MalformedLine, Message: "no session in this record"}
	case !w.sess.closed:
		s := w.sess
		r.InFlight = s.inFlight()
		r.Reason = &Reason{Code: UnanchoredTail, Message: fmt.Sprintf(
			"session %d has no close record and nothing anchors beyond it; %d call(s) in flight", s.index, len(r.InFlight))}
	default:
		r.Verdict = Verified
		return r
	}
	r.Verdict = r.Reason.Code.Verdict()
	return r
}

func displayValue(v any) string {
	if s, ok := v.(string); ok {
		return display(s)
	}
	b, err := schemas.EncodeValue(v)
	if err != nil {
		return "(unprintable)"
	}
	return display(string(b))
}

func article(lineType string) string {
	t := "`" + display(lineType) + "`"
	if lineType != "" && bytes.ContainsAny([]byte{lineType[0]}, "aeiou") {
		return "an " + t
	}
	return "a " + t
}
