package reading

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting read as unambiguous: arrays and objects
// nested more deeply are read, but marked, since readers stop at different
// depths. No MCP message needs a tenth of it.
const MaxDepth = 256

// maxReadDepth bounds the recursion of the reader itself: a text nested
// more deeply is not read past it.
const maxReadDepth = 10_001

// maxSafeInteger is 2^53: every integer up to it is exact as a double.
const maxSafeInteger = 1 << 53

// Kind is the JSON type of a value.
type Kind uint8

// The kinds of values.
const (
	Null Kind = iota + 1
	Bool
	Number
	String
	Array
	Object
)

// Value is one JSON value as read.
type Value struct {
	Kind Kind
	// Raw is the value's exact bytes in the text.
	Raw []byte
	// Str is a String's value, escapes resolved (invalid UTF-8 and lone
	// surrogates as U+FFFD, and the value marked).
	Str string
	// Bool is a Bool's value.
	Bool bool
	// Num is a Number's value as a double.
	Num float64
	// Members are an Object's members in the order of the text.
	Members []Member
	// Elems are an Array's elements.
	Elems []*Value
	// Ambiguous says why some reader could take this value, or anything
	// in it, differently from another; "" when none could.
	Ambiguous string
}

// Member is one member of an object.
type Member struct {
	Name  string // escapes resolved
	Value *Value
}

// Reading is what [Read] makes of a text.
type Reading struct {
	// Values are the complete values of the text, in order.
	Values []*Value
	// Err says where the text stops being JSON; "" when it is read to the
	// end. What follows the error is not read.
	Err string
	// Ambiguous is the first reason any reader could take the text
	// differently: an ambiguous value, more than one value, or a byte
	// order mark.
	Ambiguous string
	// End is the offset in the text just past the last complete value (0
	// when there is none): what a stream reader has consumed when it stops.
	End int
	// More says that the text ends inside a value (Err is then set): more
	// text could complete it, as a reader of a stream waits for.
	More bool
}

// One returns the text's only value, if it holds exactly one and is read
// to its end.
func (r Reading) One() (*Value, bool) {
	if len(r.Values) != 1 || r.Err != "" {
		return nil, false
	}
	return r.Values[0], true
}

// Read reads text as a sequence of JSON values separated by white space.
// It never fails: what it cannot read is said in Err.
func Read(text []byte) Reading {
	p := parser{b: text}
	var r Reading
	if len(text) >= 3 && text[0] == 0xEF && text[1] == 0xBB && text[2] == 0xBF {
		r.Ambiguous = "the text starts with a byte order mark, which some readers skip and others refuse"
		p.i = 3
	}
	for {
		p.space()
		if p.i >= len(p.b) {
			break
		}
		v, err := p.value(1)
		if err != "" {
			r.Err = err
			r.More = p.more
			if p.tooDeep {
				r.Ambiguous = "nesting deeper than aegis reads (" + strconv.Itoa(maxReadDepth-1) + "), which some readers read"
			}
			break
		}
		r.Values = append(r.Values, v)
		r.End = p.i
	}
	if r.Ambiguous == "" {
		for _, v := range r.Values {
			if v.Ambiguous != "" {
				r.Ambiguous = v.Ambiguous
				break
			}
		}
	}
	if r.Ambiguous == "" && len(r.Values) > 1 {
		r.Ambiguous = "the text holds " + strconv.Itoa(len(r.Values)) + " JSON values: a reader of one value per line refuses it, a stream reader reads each"
	}
	return r
}

// Get returns the member of an object named name exactly, and why reading
// it is ambiguous ("" when it is not): the name's ambiguity ([Value.Lookup])
// or the member's value's.
func (v *Value) Get(name string) (*Value, string) {
	m, why := v.Lookup(name)
	if why == "" && m != nil {
		why = m.Ambiguous
	}
	return m, why
}

// Lookup returns the member of an object named name exactly, and why
// readers could find another member by that name ("" when none could):
// the name given twice, or another member whose name equals it under case
// folding (encoding/json matches struct fields so). It returns nil when v
// is no object or has no such member; a member in another case alone is
// still reported, since a reader that folds case finds it. The member's
// own value may be ambiguous: see its Ambiguous.
func (v *Value) Lookup(name string) (*Value, string) {
	if v == nil || v.Kind != Object {
		return nil, ""
	}
	var found *Value
	why := ""
	for _, m := range v.Members {
		switch {
		case m.Name == name:
			if found != nil {
				why = "duplicate member " + strconv.Quote(name)
			}
			found = m.Value
		case strings.EqualFold(m.Name, name):
			if why == "" {
				why = "member " + strconv.Quote(m.Name) + ", which differs from " + strconv.Quote(name) + " only in case"
			}
		}
	}
	return found, why
}

// String returns v's value when v is a string.
func (v *Value) String() (string, bool) {
	if v == nil || v.Kind != String {
		return "", false
	}
	return v.Str, true
}

type parser struct {
	b       []byte
	i       int
	tooDeep bool
	more    bool    // the text ended where more could follow
	slab    []Value // values are carved from it: one allocation for many
}

// alloc returns a new value holding v, carved from the parser's slab.
func (p *parser) alloc(v Value) *Value {
	if len(p.slab) == cap(p.slab) {
		p.slab = make([]Value, 0, min(max(8, 2*cap(p.slab)), 1024))
	}
	p.slab = append(p.slab, v)
	return &p.slab[len(p.slab)-1]
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) fail(what string) string {
	if p.i >= len(p.b) {
		p.more = true
	}
	return what + " at offset " + strconv.Itoa(p.i)
}

func (p *parser) value(depth int) (*Value, string) {
	p.space()
	if p.i >= len(p.b) {
		return nil, p.fail("unexpected end of text")
	}
	start := p.i
	var v *Value
	var err string
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		if depth >= maxReadDepth {
			p.tooDeep = true
			return nil, p.fail("nesting too deep to read")
		}
		if c == '{' {
			v, err = p.object(depth)
		} else {
			v, err = p.array(depth)
		}
		if err == "" && depth > MaxDepth && v.Ambiguous == "" {
			v.Ambiguous = "nesting deeper than " + strconv.Itoa(MaxDepth) + ", where readers stop at different depths"
		}
	case c == '"':
		var s, why string
		s, why, err = p.str()
		v = p.alloc(Value{Kind: String, Str: s, Ambiguous: why})
	case c == '-' || (c >= '0' && c <= '9'):
		v, err = p.number()
	case c == 't':
		v, err = p.literal("true", p.alloc(Value{Kind: Bool, Bool: true}))
	case c == 'f':
		v, err = p.literal("false", p.alloc(Value{Kind: Bool}))
	case c == 'n':
		v, err = p.literal("null", p.alloc(Value{Kind: Null}))
	case c == 'N':
		v, err = p.literal("NaN", p.alloc(Value{Kind: Number, Num: math.NaN(), Ambiguous: "NaN, which only some readers take"}))
	case c == 'I':
		v, err = p.literal("Infinity", p.alloc(Value{Kind: Number, Num: math.Inf(1), Ambiguous: "Infinity, which only some readers take"}))
	default:
		return nil, p.fail("unexpected byte " + strconv.QuoteRune(rune(c)))
	}
	if err != "" {
		return nil, err
	}
	v.Raw = p.b[start:p.i]
	return v, ""
}

func (p *parser) literal(word string, v *Value) (*Value, string) {
	if rest := p.b[p.i:]; len(rest) < len(word) && strings.HasPrefix(word, string(rest)) {
		p.more = true
	}
	if !strings.HasPrefix(string(p.b[p.i:min(len(p.b), p.i+len(word))]), word) || len(p.b)-p.i < len(word) {
		return nil, p.fail("invalid literal")
	}
	p.i += len(word)
	return v, ""
}

func (p *parser) object(depth int) (*Value, string) {
	v := p.alloc(Value{Kind: Object})
	var seen names
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return v, ""
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.fail("expected a member name")
		}
		name, why, err := p.str()
		if err != "" {
			return nil, err
		}
		if why != "" && v.Ambiguous == "" {
			v.Ambiguous = "member name: " + why
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.i++
		m, err := p.value(depth + 1)
		if err != "" {
			return nil, err
		}
		if v.Ambiguous == "" {
			if m.Ambiguous != "" {
				v.Ambiguous = m.Ambiguous
			} else if seen.has(v.Members, name) {
				v.Ambiguous = "member " + strconv.Quote(name) + " is given twice, and readers keep the first or the last"
			}
		}
		v.Members = append(v.Members, Member{Name: name, Value: m})
		p.space()
		if p.i >= len(p.b) {
			return nil, p.fail("unexpected end of text in an object")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return v, ""
		default:
			return nil, p.fail("expected ',' or '}'")
		}
	}
}

// names finds a member name among an object's members read so far: by a
// scan while there are few, by a set once there are many, so that an
// object of a million members costs a million lookups, not their square.
type names map[string]struct{}

// namesScan is how many members are scanned before a set is built.
const namesScan = 16

// has reports whether name is among ms, the members before it, and
// remembers it.
func (s *names) has(ms []Member, name string) bool {
	if len(ms) < namesScan {
		for _, m := range ms {
			if m.Name == name {
				return true
			}
		}
		return false
	}
	if *s == nil {
		*s = make(names, 2*len(ms))
		for _, m := range ms {
			(*s)[m.Name] = struct{}{}
		}
	}
	_, dup := (*s)[name]
	(*s)[name] = struct{}{}
	return dup
}

func (p *parser) array(depth int) (*Value, string) {
	v := p.alloc(Value{Kind: Array})
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return v, ""
	}
	for {
		e, err := p.value(depth + 1)
		if err != "" {
			return nil, err
		}
		if v.Ambiguous == "" {
			v.Ambiguous = e.Ambiguous
		}
		v.Elems = append(v.Elems, e)
		p.space()
		if p.i >= len(p.b) {
			return nil, p.fail("unexpected end of text in an array")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return v, ""
		default:
			return nil, p.fail("expected ',' or ']'")
		}
	}
}

func (p *parser) number() (*Value, string) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
		if p.i < len(p.b) && p.b[p.i] == 'I' {
			if _, err := p.literal("Infinity", nil); err != "" {
				return nil, err
			}
			return p.alloc(Value{Kind: Number, Num: math.Inf(-1), Ambiguous: "-Infinity, which only some readers take"}), ""
		}
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, p.fail("invalid number")
	}
	integer := true
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		integer = false
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		integer = false
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	text := string(p.b[start:p.i])
	f, err := strconv.ParseFloat(text, 64)
	v := p.alloc(Value{Kind: Number, Num: f})
	switch {
	case err != nil || math.IsInf(f, 0):
		v.Ambiguous = "number " + clip(text) + " is beyond the double range: Infinity to some readers, an error to others"
	case integer && math.Abs(f) >= maxSafeInteger && strconv.FormatFloat(f, 'f', -1, 64) != text:
		v.Ambiguous = "integer " + clip(text) + " is beyond 2^53 and no double: exact to some readers, rounded by others"
	}
	return v, ""
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// str reads a string at p.i (its opening quote) and returns its value and
// why it is ambiguous.
func (p *parser) str() (string, string, string) {
	p.i++ // "
	start := p.i
	// The common string: no escapes, ASCII.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return s, "", ""
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
		p.i++
	}
	var sb strings.Builder
	sb.Write(p.b[start:p.i])
	why := ""
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return sb.String(), why, ""
		case c < 0x20:
			return "", "", p.fail("control character in a string")
		case c == '\\':
			if p.i+1 >= len(p.b) {
				p.more = true
				return "", "", p.fail("unexpected end of text in a string")
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				sb.WriteByte(e)
			case 'b':
				sb.WriteByte('\b')
			case 'f':
				sb.WriteByte('\f')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", "", p.fail("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if r < 0xDC00 && p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						r2, ok := p.hex4()
						if ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
							sb.WriteRune(utf16.DecodeRune(r, r2))
							continue
						}
						p.i = save
					}
					if why == "" {
						why = "a lone UTF-16 surrogate escape, which readers keep, replace or refuse"
					}
					r = utf8.RuneError
				}
				sb.WriteRune(r)
			default:
				return "", "", p.fail("invalid escape")
			}
		case c < 0x80:
			sb.WriteByte(c)
			p.i++
		default:
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n <= 1 {
				if why == "" {
					why = "invalid UTF-8, which readers replace or refuse"
				}
				sb.WriteRune(utf8.RuneError)
				p.i++
				continue
			}
			sb.Write(p.b[p.i : p.i+n])
			p.i += n
		}
	}
	return "", "", p.fail("unexpected end of text in a string")
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		if _, err := strconv.ParseUint("0"+string(p.b[p.i:]), 16, 16); err == nil {
			p.more = true
		}
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

// Fold maps a member name to one form for all its case variants: each rune
// to the least rune of its Unicode simple case-folding orbit, so that "K",
// "k" and the Kelvin sign fold together, as encoding/json folds them.
func Fold(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// CaseCollision says why some object in v, at any depth, has two members
// whose names are equal under case folding (or equal outright), which a
// reader that folds case (encoding/json matching a struct) takes as one;
// "" when none has.
func (v *Value) CaseCollision() string {
	if v == nil {
		return ""
	}
	switch v.Kind {
	case Object:
		seen := make(map[string]string, len(v.Members))
		for _, m := range v.Members {
			f := Fold(m.Name)
			if prev, dup := seen[f]; dup {
				return "members " + strconv.Quote(prev) + " and " + strconv.Quote(m.Name) + " are one member to a reader that folds case"
			}
			seen[f] = m.Name
		}
		for _, m := range v.Members {
			if why := m.Value.CaseCollision(); why != "" {
				return why
			}
		}
	case Array:
		for _, e := range v.Elems {
			if why := e.CaseCollision(); why != "" {
				return why
			}
		}
	}
	return ""
}
