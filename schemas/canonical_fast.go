package schemas

import (
	"bytes"
	"errors"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// A fast path for reading audit lines. DecodeValue walks encoding/json's
// tokenizer, which costs tens of microseconds per line, and every consumer
// then re-encodes the tree to hash or verify it. The parser below reads the
// audit value space directly in one pass and, as it goes, checks whether the
// input is already in RFC 8785 form (the normal case for a record written by
// an emitter): then the canonical form is the input itself and nothing needs
// re-encoding, and the signing input is the input without the bytes of the
// signature member. It accepts exactly what DecodeValue accepts and builds
// the same tree; the differential tests (FuzzFastDecode) hold the two equal,
// including the class (ErrSyntax or ErrValueSpace) of every refusal.
//
// For a canonical line, DecodeCanonicalLine does not even build the tree: it
// checks the whole line and keeps only the top-level members, decoding a
// nested object or array when someone asks for it. A verifier reads a few
// header members of each line and nothing below them.

// maxFastDepth bounds the recursion of the fast parser. Deeper input is
// handed to DecodeValue, which decides.
const maxFastDepth = 1000

// errTooDeep tells the callers of fastParser to fall back to DecodeValue.
var errTooDeep = errors.New("nesting too deep for the fast parser")

type fastMember struct {
	key string
	val any
}

// Kinds of a top-level member kept by a fields parse.
const (
	fieldString = iota + 1
	fieldInteger
	fieldBool
	fieldNested // an object or an array, decoded on demand
)

// field is one top-level member of a line.
type field struct {
	key        string
	str        string // fieldString
	num        uint64 // fieldInteger; fieldBool: 1 for true
	start, end int    // fieldNested: its bytes in the input
	kind       uint8
}

type fastParser struct {
	s         string // the input, converted once; decoded strings share it
	pos       int
	depth     int
	canonical bool // no whitespace, sorted members, canonical escapes so far
	members   []fastMember
	buf       []byte // scratch for strings with escapes

	// build makes value return trees; without it value only checks.
	build bool
	// fields keeps the members of the top-level object in fieldBuf
	// instead of building it (build is then off).
	fields   bool
	fieldBuf []field

	topObject bool // the input is an object

	// The top-level object's signature member: its byte span in s, and
	// whether a member precedes it.
	sigStart, sigEnd int
	sigFirst         bool
}

// fastInfo is what a fast parse learnt about its input besides the value.
type fastInfo struct {
	canonical        bool // EncodeValue of the value is the input
	object           bool // the input is an object
	sigStart, sigEnd int  // the top-level signature member, sigStart < 0 if none
	sigFirst         bool // it is the first member
}

var fastParsers = sync.Pool{New: func() any { return new(fastParser) }}

// fastDecode parses raw like DecodeValue. It also reports whether raw is
// already canonical and, when raw is an object, where its top-level
// signature member is. Errors are *ParseError with the class DecodeValue
// gives, or errTooDeep.
func fastDecode(raw []byte) (any, fastInfo, error) {
	v, _, info, err := fastParse(raw, string(raw), false)
	return v, info, err
}

// fastParse parses s (raw as a string) like DecodeValue. With fields it
// builds no tree: it returns the top-level members of an object instead, in
// input order, in a slice of its own.
func fastParse(raw []byte, s string, fields bool) (any, []field, fastInfo, error) {
	if !utf8.Valid(raw) {
		// DecodeValue checks this before anything else; let it report.
		_, err := DecodeValue(raw)
		return nil, nil, fastInfo{}, err
	}
	p := fastParsers.Get().(*fastParser)
	*p = fastParser{
		s: s, canonical: true, sigStart: -1, build: !fields, fields: fields,
		members: p.members[:0], buf: p.buf[:0], fieldBuf: p.fieldBuf[:0],
	}
	v, err := p.parse(raw)
	info := fastInfo{canonical: p.canonical, sigStart: p.sigStart, sigEnd: p.sigEnd, sigFirst: p.sigFirst}
	info.object = p.topObject
	var fs []field
	if err == nil && fields && len(p.fieldBuf) > 0 {
		fs = make([]field, len(p.fieldBuf))
		copy(fs, p.fieldBuf)
	}
	// Keep the scratch space for the next line, unless it grew large.
	p.s = ""
	clear(p.fieldBuf)
	if cap(p.members) > 1<<10 {
		p.members = nil
	}
	if cap(p.fieldBuf) > 1<<10 {
		p.fieldBuf = nil
	}
	if cap(p.buf) > 64<<10 {
		p.buf = nil
	}
	fastParsers.Put(p)
	return v, fs, info, err
}

func (p *fastParser) parse(raw []byte) (any, error) {
	v, err := p.value()
	if err == nil && p.pos < len(p.s) {
		p.canonical = false
		p.skipSpace()
		if p.pos < len(p.s) {
			err = syntaxErrorf(int64(p.pos), "trailing data")
		}
	}
	if err != nil {
		clear(p.members[:cap(p.members)])
		if err == errTooDeep {
			return nil, err
		}
		// DecodeValue looks for unpaired surrogate escapes before it parses,
		// so such an escape anywhere decides the class.
		if serr := checkSurrogates(raw); serr != nil {
			return nil, serr
		}
		return nil, err
	}
	return v, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (p *fastParser) skipSpace() {
	for p.pos < len(p.s) && isSpace(p.s[p.pos]) {
		p.pos++
		p.canonical = false
	}
}

func (p *fastParser) eof() error {
	return syntaxErrorf(int64(p.pos), "unexpected end of input")
}

func (p *fastParser) unexpected() error {
	return syntaxErrorf(int64(p.pos), "invalid character %q", p.s[p.pos])
}

// value parses one value at p.pos; whitespace before it is skipped.
func (p *fastParser) value() (any, error) {
	if p.pos < len(p.s) && isSpace(p.s[p.pos]) {
		p.skipSpace()
	}
	if p.pos >= len(p.s) {
		return nil, p.eof()
	}
	switch c := p.s[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		if err != nil || !p.build {
			return nil, err
		}
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		n, err := p.number()
		if err != nil || !p.build {
			return nil, err
		}
		return n, nil
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		if _, err := p.literal("null", nil); err != nil {
			return nil, err
		}
		return nil, spaceErrorf(int64(p.pos-4), "null is not allowed")
	}
	return nil, p.unexpected()
}

func (p *fastParser) literal(word string, v any) (any, error) {
	for i := 0; i < len(word); i++ {
		if p.pos >= len(p.s) {
			return nil, p.eof()
		}
		if p.s[p.pos] != word[i] {
			return nil, p.unexpected()
		}
		p.pos++
	}
	return v, nil
}

// number reads the longest JSON number at p.pos; a well-formed number
// outside the value space is ErrValueSpace, a malformed one ErrSyntax.
func (p *fastParser) number() (uint64, error) {
	start := p.pos
	s := p.s
	plain := true
	if s[p.pos] == '-' {
		plain = false
		p.pos++
	}
	if p.pos >= len(s) {
		return 0, p.eof()
	}
	switch c := s[p.pos]; {
	case c == '0':
		p.pos++
	case c >= '1' && c <= '9':
		for p.pos < len(s) && s[p.pos] >= '0' && s[p.pos] <= '9' {
			p.pos++
		}
	default:
		return 0, p.unexpected()
	}
	if p.pos < len(s) && s[p.pos] == '.' {
		plain = false
		p.pos++
		if err := p.digits(); err != nil {
			return 0, err
		}
	}
	if p.pos < len(s) && (s[p.pos] == 'e' || s[p.pos] == 'E') {
		plain = false
		p.pos++
		if p.pos < len(s) && (s[p.pos] == '+' || s[p.pos] == '-') {
			p.pos++
		}
		if err := p.digits(); err != nil {
			return 0, err
		}
	}
	tok := s[start:p.pos]
	if !plain || len(tok) > 16 {
		_, err := parseInteger(tok)
		return 0, spaceErrorf(int64(start), "%v", err)
	}
	var n uint64
	for i := 0; i < len(tok); i++ {
		n = n*10 + uint64(tok[i]-'0')
	}
	if n >= MaxInteger {
		return 0, spaceErrorf(int64(start), "integer %s is not below 2^53", tok)
	}
	return n, nil
}

// digits reads one or more decimal digits.
func (p *fastParser) digits() error {
	if p.pos >= len(p.s) {
		return p.eof()
	}
	if c := p.s[p.pos]; c < '0' || c > '9' {
		return p.unexpected()
	}
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	return nil
}

// str reads a JSON string at p.pos (which holds the opening quote). A
// string without escapes is a substring of the input.
func (p *fastParser) str() (string, error) {
	s := p.s
	p.pos++
	start := p.pos
	// Skip eight plain bytes at a time; the loop below finds what stopped
	// this one.
	for p.pos+8 <= len(s) && !special8(s[p.pos:p.pos+8]) {
		p.pos += 8
	}
	for p.pos < len(s) {
		c := s[p.pos]
		switch {
		case c == '"':
			p.pos++
			return s[start : p.pos-1], nil
		case c == '\\':
			return p.escapedString(start)
		case c < 0x20:
			return "", p.unexpected()
		}
		p.pos++
	}
	return "", p.eof()
}

// ReadString decodes the JSON string that b starts with, as strictly as
// the line parser does (valid UTF-8, no raw control characters, no unpaired
// surrogate escapes), and returns it with the number of bytes it took. It
// serves callers that need one string member without decoding an object.
func ReadString(b []byte) (string, int, error) {
	if len(b) == 0 || b[0] != '"' {
		return "", 0, syntaxErrorf(0, "not a JSON string")
	}
	if !utf8.Valid(b) {
		return "", 0, syntaxErrorf(0, "invalid utf-8")
	}
	// Only the string is copied for the parser, not what follows it, and
	// an escaped string is decoded into a buffer of its size, never longer
	// than the encoded string.
	tok := b
	if end := stringEnd(b); end > 0 {
		tok = b[:end]
	}
	p := &fastParser{s: string(tok), canonical: true, sigStart: -1}
	if bytes.IndexByte(tok, '\\') >= 0 {
		p.buf = make([]byte, 0, len(tok))
	}
	v, err := p.str()
	if err != nil {
		return "", 0, err
	}
	return v, p.pos, nil
}

// stringEnd returns the length of the JSON string that b starts with,
// closing quote included, skipping what a backslash escapes; 0 if it does
// not end in b. It judges nothing else: the parser does.
func stringEnd(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return 0
}

// special8 reports whether any of the eight bytes of b is a quote, a
// backslash or a control character (the classic SWAR tests for a zero byte
// and for a byte below 0x20).
func special8(b string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return ((q-ones)&^q|(bs-ones)&^bs|(x-ones*0x20)&^x)&highs != 0
}

// escapedString continues str from the first backslash; start is the
// first byte of the string's contents.
func (p *fastParser) escapedString(start int) (string, error) {
	s := p.s
	b := append(p.buf[:0], s[start:p.pos]...)
	for p.pos < len(s) {
		c := s[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.buf = b
			return string(b), nil
		case c < 0x20:
			return "", p.unexpected()
		case c != '\\':
			// Copy the run up to the next quote, backslash or control byte.
			j := p.pos + 1
			for j < len(s) && s[j] != '"' && s[j] != '\\' && s[j] >= 0x20 {
				j++
			}
			b = append(b, s[p.pos:j]...)
			p.pos = j
			continue
		}
		// A backslash.
		p.pos++
		if p.pos >= len(s) {
			return "", p.eof()
		}
		e := s[p.pos]
		p.pos++
		switch e {
		case '"', '\\':
			b = append(b, e)
		case '/':
			b = append(b, '/')
			p.canonical = false
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.badEscape()
			}
			esc := p.pos - 6
			switch {
			case r >= 0xd800 && r < 0xdc00:
				lo := rune(-1)
				if p.pos+1 < len(s) && s[p.pos] == '\\' && s[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					var ok bool
					if lo, ok = p.hex4(); !ok {
						return "", p.badEscape()
					}
					if lo < 0xdc00 || lo >= 0xe000 {
						p.pos = save
						lo = -1
					}
				}
				if lo < 0 {
					return "", spaceErrorf(int64(esc), "unpaired surrogate escape %s", s[esc:esc+6])
				}
				b = utf8.AppendRune(b, utf16.DecodeRune(r, lo))
				p.canonical = false
			case r >= 0xdc00 && r < 0xe000:
				return "", spaceErrorf(int64(esc), "unpaired surrogate escape %s", s[esc:esc+6])
			default:
				b = utf8.AppendRune(b, r)
				if !canonicalEscape(s[esc:p.pos], r) {
					p.canonical = false
				}
			}
		default:
			return "", syntaxErrorf(int64(p.pos-1), "invalid escape character %q", e)
		}
	}
	return "", p.eof()
}

// canonicalEscape reports whether esc (`\uXXXX` for r) is how RFC 8785
// writes r: only control characters without a short form are escaped this
// way, in lowercase hex.
func canonicalEscape(esc string, r rune) bool {
	if r >= 0x20 {
		return false
	}
	switch r {
	case '\b', '\t', '\n', '\f', '\r':
		return false
	}
	const hexDigits = "0123456789abcdef"
	return esc[2] == '0' && esc[3] == '0' && esc[4] == hexDigits[r>>4] && esc[5] == hexDigits[r&0xf]
}

func (p *fastParser) hex4() (rune, bool) {
	r, ok := hex4(p.s[p.pos:])
	if ok {
		p.pos += 4
	}
	return r, ok
}

func (p *fastParser) badEscape() error {
	return syntaxErrorf(int64(p.pos), "invalid \\u escape")
}

func (p *fastParser) array() (any, error) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, errTooDeep
	}
	p.pos++
	var arr []any
	if p.build {
		arr = make([]any, 0)
	}
	p.skipSpace()
	if p.pos < len(p.s) && p.s[p.pos] == ']' {
		p.pos++
		p.depth--
		return arr, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if p.build {
			arr = append(arr, v)
		}
		p.skipSpace()
		if p.pos >= len(p.s) {
			return nil, p.eof()
		}
		switch p.s[p.pos] {
		case ',':
			p.pos++
			continue
		case ']':
			p.pos++
			p.depth--
			return arr, nil
		}
		return nil, p.unexpected()
	}
}

// topField reads the value of a top-level member into f.
func (p *fastParser) topField(f *field) error {
	p.skipSpace()
	if p.pos >= len(p.s) {
		return p.eof()
	}
	var err error
	switch c := p.s[p.pos]; {
	case c == '"':
		f.kind = fieldString
		f.str, err = p.str()
	case c == '-' || c >= '0' && c <= '9':
		f.kind = fieldInteger
		f.num, err = p.number()
	case c == 't':
		f.kind, f.num = fieldBool, 1
		_, err = p.literal("true", nil)
	case c == 'f':
		f.kind = fieldBool
		_, err = p.literal("false", nil)
	default:
		f.kind, f.start = fieldNested, p.pos
		_, err = p.value()
		f.end = p.pos
	}
	return err
}

func (p *fastParser) object() (any, error) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, errTooDeep
	}
	top := p.depth == 1
	keep := top && p.fields
	if top {
		p.topObject = true
	}
	p.pos++
	base := len(p.members)
	sorted := true
	var seen map[string]struct{} // once the members are out of order
	p.skipSpace()
	if p.pos < len(p.s) && p.s[p.pos] == '}' {
		p.pos++
		p.depth--
		if !p.build {
			return nil, nil
		}
		return make(map[string]any), nil
	}
	for {
		if p.pos >= len(p.s) {
			return nil, p.eof()
		}
		if p.s[p.pos] != '"' {
			return nil, p.unexpected()
		}
		kstart := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		n := len(p.members) - base
		if sorted && n > 0 {
			if c := compareUTF16(p.members[len(p.members)-1].key, key); c == 0 {
				return nil, spaceErrorf(int64(kstart), "duplicate member %q", key)
			} else if c > 0 {
				sorted = false
				p.canonical = false
			}
		}
		if !sorted {
			if seen == nil && n > 8 {
				seen = make(map[string]struct{}, 2*n)
				for _, m := range p.members[base:] {
					seen[m.key] = struct{}{}
				}
			}
			dup := false
			if seen != nil {
				_, dup = seen[key]
				seen[key] = struct{}{}
			} else {
				for _, m := range p.members[base:] {
					if m.key == key {
						dup = true
						break
					}
				}
			}
			if dup {
				return nil, spaceErrorf(int64(kstart), "duplicate member %q", key)
			}
		}
		p.skipSpace()
		if p.pos >= len(p.s) {
			return nil, p.eof()
		}
		if p.s[p.pos] != ':' {
			return nil, p.unexpected()
		}
		p.pos++
		var v any
		if keep {
			p.fieldBuf = append(p.fieldBuf, field{key: key})
			err = p.topField(&p.fieldBuf[len(p.fieldBuf)-1])
		} else {
			v, err = p.value()
		}
		if err != nil {
			return nil, err
		}
		if top && key == FieldSignature {
			p.sigStart, p.sigEnd, p.sigFirst = kstart, p.pos, n == 0
		}
		p.members = append(p.members, fastMember{key, v})
		p.skipSpace()
		if p.pos >= len(p.s) {
			return nil, p.eof()
		}
		switch p.s[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
			continue
		case '}':
			p.pos++
			p.depth--
			ms := p.members[base:]
			var obj map[string]any
			if p.build {
				obj = make(map[string]any, len(ms))
				for _, m := range ms {
					obj[m.key] = m.val
				}
			}
			clear(ms)
			p.members = p.members[:base]
			if obj == nil {
				return nil, nil
			}
			return obj, nil
		}
		return nil, p.unexpected()
	}
}

// CanonicalLine is an audit line decoded together with its canonical form.
// It answers [Line.Get], [Line.Str], [Line.Type] and [Line.Header] as the
// Line that [DecodeLine] returns would. A line that was canonical already is
// checked in full but only its top-level members are decoded; Line builds
// the rest.
type CanonicalLine struct {
	// Canonical is the RFC 8785 form of the line. When the input was
	// already canonical it is the input itself, not a copy.
	Canonical []byte

	fields []field // the top-level members, when the input was canonical
	src    string  // the input, which fields' nested spans index
	line   Line    // the decoded line, otherwise
	// cut is the span of Canonical to drop for the signing input: the
	// signature member with one adjacent comma. cut[0] < 0 when the span is
	// unknown.
	cut [2]int
}

// DecodeCanonicalLine decodes raw as [DecodeLine] does and also returns the
// line's canonical form. It accepts and refuses exactly what DecodeLine
// does; a refusal is DecodeLine's own error. Strings taken from the line
// share one copy of raw, so keep a [strings.Clone] of any that outlive it.
func DecodeCanonicalLine(raw []byte) (CanonicalLine, error) {
	src := string(raw)
	_, fs, info, err := fastParse(raw, src, true)
	if err == nil && info.object && info.canonical {
		c := CanonicalLine{Canonical: raw, fields: fs, src: src}
		switch {
		case info.sigStart < 0:
			c.cut = [2]int{0, 0}
		case !info.sigFirst:
			c.cut = [2]int{info.sigStart - 1, info.sigEnd}
		case raw[info.sigEnd] == ',':
			c.cut = [2]int{info.sigStart, info.sigEnd + 1}
		default:
			c.cut = [2]int{info.sigStart, info.sigEnd}
		}
		return c, nil
	}
	if err == nil && info.object {
		// Valid but not canonical: build the tree and encode it, as
		// Line.Canonical would.
		v, _, _, err := fastParse(raw, src, false)
		if m, ok := v.(map[string]any); err == nil && ok {
			canon, err := EncodeValue(m)
			if err != nil {
				return CanonicalLine{}, err
			}
			return CanonicalLine{Canonical: canon, line: Line{m: m}, cut: [2]int{-1, -1}}, nil
		}
	}
	// Anything else, the refusals included, is DecodeLine's to decide, so
	// that its errors stay exactly what they were.
	l, err := DecodeLine(raw)
	if err != nil {
		return CanonicalLine{}, err
	}
	canon, err := l.Canonical()
	if err != nil {
		return CanonicalLine{}, err
	}
	return CanonicalLine{Canonical: canon, line: l, cut: [2]int{-1, -1}}, nil
}

func (c *CanonicalLine) field(name string) *field {
	for i := range c.fields {
		if c.fields[i].key == name {
			return &c.fields[i]
		}
	}
	return nil
}

// Get returns the member called name.
func (c *CanonicalLine) Get(name string) (any, bool) {
	if c.line.m != nil {
		return c.line.Get(name)
	}
	f := c.field(name)
	if f == nil {
		return nil, false
	}
	return f.value(c.src), true
}

func (f *field) value(src string) any {
	switch f.kind {
	case fieldString:
		return f.str
	case fieldInteger:
		return f.num
	case fieldBool:
		return f.num == 1
	}
	p := fastParsers.Get().(*fastParser)
	*p = fastParser{s: src[f.start:f.end], canonical: true, sigStart: -1, build: true,
		members: p.members[:0], buf: p.buf[:0], fieldBuf: p.fieldBuf[:0], depth: 1}
	v, err := p.value()
	p.s = ""
	fastParsers.Put(p)
	if err != nil {
		// Unreachable: the span passed this parser once already.
		panic("schemas: nested member does not parse again: " + err.Error())
	}
	return v
}

// Str returns the member called name if it is a JSON string.
func (c *CanonicalLine) Str(name string) (string, bool) {
	if c.line.m != nil {
		return c.line.Str(name)
	}
	if f := c.field(name); f != nil && f.kind == fieldString {
		return f.str, true
	}
	return "", false
}

// Type returns line_type, or "" when it is missing or not a string.
func (c *CanonicalLine) Type() string {
	s, _ := c.Str(FieldLineType)
	return s
}

// Header returns what [Line.Header] returns.
func (c *CanonicalLine) Header() (Header, error) {
	if c.line.m != nil {
		return c.line.Header()
	}
	sv, lt := c.field(FieldSchemaVersion), c.field(FieldLineType)
	seq, ph := c.field(FieldSeq), c.field(FieldPrevHash)
	if sv != nil && sv.kind == fieldInteger && sv.num == AuditSchemaVersion &&
		lt != nil && lt.kind == fieldString && seq != nil && seq.kind == fieldInteger &&
		ph != nil && ph.kind == fieldString && isDigestFast(ph.str) {
		return Header{SchemaVersion: sv.num, LineType: lt.str, Seq: seq.num, PrevHash: ph.str}, nil
	}
	// Something is wrong: let Line.Header say what, in its words.
	m := map[string]any{}
	for _, f := range []*field{sv, lt, seq, ph} {
		if f != nil {
			m[f.key] = f.value(c.src)
		}
	}
	return Line{m: m}.Header()
}

// lowerHexValue maps a lowercase hex digit to its value and every other
// byte to 0xff.
var lowerHexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

// isDigestFast is IsDigest without a branch per character: digests are
// random, so a branch on digit or letter is mispredicted half the time.
func isDigestFast(s string) bool {
	if len(s) != 64 {
		return false
	}
	var bad byte
	for i := 0; i < len(s); i++ {
		bad |= lowerHexValue[s[i]]
	}
	return bad&0xf0 == 0
}

// DecodeLowerHex decodes s, which must be exactly len(dst) bytes in
// lowercase hex (as [ParseSignature] and [ParsePublicKey] require), into
// dst.
func DecodeLowerHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	var bad byte
	for i := range dst {
		hi, lo := lowerHexValue[s[2*i]], lowerHexValue[s[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo&0x0f
	}
	return bad&0xf0 == 0
}

// Line returns the decoded line, building it when only the top level was
// decoded. The result may share its members with c.
func (c *CanonicalLine) Line() Line {
	if c.line.m != nil {
		return c.line
	}
	m := make(map[string]any, len(c.fields))
	for i := range c.fields {
		m[c.fields[i].key] = c.fields[i].value(c.src)
	}
	return Line{m: m}
}

// Hash returns the line_hash, as [Line.Hash] does.
func (c *CanonicalLine) Hash() string { return HashHex(c.Canonical) }

// SigningInput returns what [Line.SigningInput] returns.
func (c *CanonicalLine) SigningInput() ([]byte, error) {
	if c.cut[0] < 0 {
		return c.line.SigningInput()
	}
	return c.AppendSigningInput(make([]byte, 0, len(c.Canonical)-(c.cut[1]-c.cut[0])))
}

// AppendSigningInput appends the signing input (see SigningInput) to dst.
func (c *CanonicalLine) AppendSigningInput(dst []byte) ([]byte, error) {
	if c.cut[0] < 0 {
		msg, err := c.line.SigningInput()
		if err != nil {
			return dst, err
		}
		return append(dst, msg...), nil
	}
	dst = append(dst, c.Canonical[:c.cut[0]]...)
	return append(dst, c.Canonical[c.cut[1]:]...), nil
}

// fastCanonicalize is Canonicalize through the fast parser: it returns the
// value, the canonical form (raw itself when raw was canonical) and the
// errors' class of DecodeValue. Tests compare it with the reference.
func fastCanonicalize(raw []byte) (any, []byte, error) {
	v, info, err := fastDecode(raw)
	if err == errTooDeep {
		if v, err = DecodeValue(raw); err != nil {
			return nil, nil, err
		}
		b, err := EncodeValue(v)
		return v, b, err
	}
	if err != nil {
		return nil, nil, err
	}
	if info.canonical {
		return v, raw, nil
	}
	b, err := EncodeValue(v)
	return v, b, err
}
