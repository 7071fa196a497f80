package policy

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Resource URI matching (upstream ADR 004, hardened).
//
// A resource URI is split by a small RFC 3986 parser of this package (the
// package may not import net/url: TestDeps keeps every net package out),
// checked, and compared structurally: scheme and host case-insensitively,
// port exactly, path segment by segment after percent-decoding, query and
// fragment byte for byte. Nothing is normalised into acceptance: a URI that
// a server could read differently from the way aegis reads it is refused
// outright, whatever the patterns say. Refused, in the URI or in a
// pattern:
//
//   - no scheme, a scheme outside [A-Za-z][A-Za-z0-9+.-]*, nothing after it;
//   - bytes below 0x21 (controls, space), DEL, and \ " < > ^ ` { | } [ ]
//     (brackets are allowed around an IPv6 host only); invalid UTF-8;
//   - in the authority: userinfo ("a@b" spoofs the host), a
//     percent-encoded or non-ASCII host (write IDNs as xn-- punycode), an
//     empty label or a trailing dot ("example.com."), characters outside
//     [a-z0-9._~-], an empty or out-of-range port, a port with a leading 0;
//   - in the path: a malformed escape, an encoded "/" "\" or "%" (%2F, %5C,
//     and %25, that is double encoding), a control character once decoded,
//     invalid UTF-8 once decoded, an empty segment other than a trailing
//     one ("//"), a "." or ".." segment raw or encoded, also as "..;x" or
//     with trailing dots and spaces (".. ", "..."), a ":" past the first
//     segment, and the Unicode forms that NFKC folds to ".", "/", "\" or
//     "%" (one dot leader, fullwidth full stop, fullwidth solidus, …);
//   - a malformed escape in the query or fragment; more than 8 KiB.
//
// So "../" and percent-encoded traversal are denied, never cleaned into an
// allowed path.

// maxURILen bounds a resource URI or pattern.
const maxURILen = 8 << 10

// resourceURI is a parsed and checked URI. Segments are percent-decoded.
type resourceURI struct {
	scheme      string // lowercase
	authority   bool   // "//" was present
	host        string // lowercase; "" for file:///x; "[...]" for IPv6
	port        string // canonical digits or ""
	rooted      bool   // the path starts with "/"
	segs        []string
	hasQuery    bool
	query       string // raw, escapes kept
	hasFragment bool
	fragment    string // raw
}

// URIError is the error of [CanonicalURI]: Reason says why the URI is
// refused. The URI itself is not repeated.
type URIError struct {
	Reason string
}

func (e *URIError) Error() string { return "resource uri refused: " + e.Reason }

// CanonicalURI returns the canonical form of a resource URI that the
// matcher would consider, or a *[URIError] saying why every pattern would
// refuse it. The canonical form has a lowercase scheme and host, every path
// segment decoded and re-encoded one way (only unreserved characters and
// !$&'()*+,;=:@ stay literal; %XX is uppercase), and the query and
// fragment as given. Two URIs with the same canonical form are matched
// alike.
func CanonicalURI(raw string) (string, error) {
	u, reason := parseURI(raw)
	if reason != "" {
		return "", &URIError{Reason: reason}
	}
	return u.String(), nil
}

// String writes u in canonical form.
func (u *resourceURI) String() string {
	var b strings.Builder
	b.WriteString(u.scheme)
	b.WriteByte(':')
	if u.authority {
		b.WriteString("//")
		b.WriteString(u.host)
		if u.port != "" {
			b.WriteByte(':')
			b.WriteString(u.port)
		}
	}
	if u.rooted {
		b.WriteByte('/')
	}
	for i, s := range u.segs {
		if i > 0 {
			b.WriteByte('/')
		}
		escapeSegment(&b, s)
	}
	if u.hasQuery {
		b.WriteByte('?')
		b.WriteString(u.query)
	}
	if u.hasFragment {
		b.WriteByte('#')
		b.WriteString(u.fragment)
	}
	return b.String()
}

func escapeSegment(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
}

// parseURI splits and checks raw. It returns the reason for a refusal, or
// "" and the URI.
func parseURI(raw string) (resourceURI, string) {
	var u resourceURI
	if len(raw) > maxURILen {
		return u, "longer than " + strconv.Itoa(maxURILen) + " bytes"
	}
	if !utf8.ValidString(raw) {
		return u, "not valid UTF-8"
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c < 0x21 || c == 0x7f:
			return u, "a control character or space"
		case c == '\\':
			return u, `a backslash`
		case strings.IndexByte("\"<>^`{|}", c) >= 0:
			return u, "a character not allowed in a URI: " + strconv.QuoteRune(rune(c))
		}
	}

	colon := strings.IndexByte(raw, ':')
	if colon < 1 {
		return u, "no scheme"
	}
	u.scheme = strings.ToLower(raw[:colon])
	for i := 0; i < len(u.scheme); i++ {
		c := u.scheme[i]
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return u, "an invalid scheme"
		}
	}
	rest := raw[colon+1:]
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		u.hasFragment, u.fragment, rest = true, rest[i+1:], rest[:i]
		if r := checkOpaque(u.fragment); r != "" {
			return u, "fragment: " + r
		}
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		u.hasQuery, u.query, rest = true, rest[i+1:], rest[:i]
		if r := checkOpaque(u.query); r != "" {
			return u, "query: " + r
		}
	}

	path := rest
	if a, ok := strings.CutPrefix(rest, "//"); ok {
		u.authority = true
		auth := a
		path = ""
		if i := strings.IndexByte(a, '/'); i >= 0 {
			auth, path = a[:i], a[i:]
		}
		if r := u.parseAuthority(auth); r != "" {
			return u, r
		}
	} else if path == "" {
		return u, "nothing after the scheme"
	}
	if strings.ContainsAny(path, "[]") {
		return u, "a bracket in the path"
	}
	if path == "" {
		return u, ""
	}
	body := path
	if body[0] == '/' {
		u.rooted, body = true, body[1:]
	}
	raws := strings.Split(body, "/")
	u.segs = make([]string, len(raws))
	for i, s := range raws {
		if s == "" && i != len(raws)-1 {
			return u, "an empty path segment (//)"
		}
		d, r := decodeSegment(s)
		if r != "" {
			return u, r
		}
		if r := checkSegment(d, i); r != "" {
			return u, r
		}
		u.segs[i] = d
	}
	return u, ""
}

// parseAuthority checks the authority and sets host and port.
func (u *resourceURI) parseAuthority(a string) string {
	switch {
	case strings.IndexByte(a, '@') >= 0:
		return "userinfo in the authority (a@b names host b)"
	case strings.IndexByte(a, '%') >= 0:
		return "a percent-encoded host"
	}
	for i := 0; i < len(a); i++ {
		if a[i] >= 0x80 {
			return "a non-ASCII host (write it as xn-- punycode)"
		}
	}
	host, port := a, ""
	hasPort := false
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "an unclosed [ in the host"
		}
		host = a[:end+1]
		inner := a[1:end]
		if inner == "" || !strings.Contains(inner, ":") {
			return "an invalid IP literal"
		}
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.') {
				return "an invalid IP literal"
			}
		}
		switch tail := a[end+1:]; {
		case tail == "":
		case tail[0] == ':':
			port, hasPort = tail[1:], true
		default:
			return "text after the IP literal"
		}
	} else {
		if i := strings.IndexByte(a, ':'); i >= 0 {
			host, port, hasPort = a[:i], a[i+1:], true
		}
		if host != "" {
			for label := range strings.SplitSeq(host, ".") {
				if label == "" {
					return "an empty host label or a trailing dot"
				}
				for i := 0; i < len(label); i++ {
					c := label[i]
					if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '~') {
						if c == '*' {
							return "a '*' in the host"
						}
						return "a character not allowed in a host: " + strconv.QuoteRune(rune(c))
					}
				}
			}
		}
	}
	if hasPort {
		if host == "" {
			return "a port without a host"
		}
		if port == "" || len(port) > 5 || port[0] == '0' {
			return "an invalid port"
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "an invalid port"
		}
	}
	u.host, u.port = strings.ToLower(host), port
	return ""
}

// checkOpaque checks a query or fragment, which are compared as written:
// escapes must be well formed and brackets and a second '#' are refused.
func checkOpaque(s string) string {
	if strings.ContainsAny(s, "[]#") {
		return "a bracket or '#'"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return "a malformed percent escape"
			}
		}
	}
	return ""
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// decodeSegment percent-decodes one path segment, refusing what a second
// decoder or a path join could read differently.
func decodeSegment(s string) (string, string) {
	if strings.IndexByte(s, '%') < 0 {
		return s, ""
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", "a malformed percent escape in the path"
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", "a malformed percent escape in the path"
		}
		d := byte(hi<<4 | lo)
		switch d {
		case '/':
			return "", "an encoded slash (%2F) in the path"
		case '\\':
			return "", "an encoded backslash (%5C) in the path"
		case '%':
			return "", "double percent-encoding (%25) in the path"
		}
		b = append(b, d)
		i += 2
	}
	return string(b), ""
}

// checkSegment checks a decoded segment; i is its index in the path.
func checkSegment(d string, i int) string {
	if !utf8.ValidString(d) {
		return "invalid UTF-8 in the path once decoded"
	}
	for _, r := range d {
		switch {
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			return "a control character in the path once decoded"
		case r == '[' || r == ']':
			return "a bracket in the path"
		case foldsToSeparator(r):
			return "a character that Unicode normalisation folds to '.', '/', '\\' or '%' in the path: " + strconv.QuoteRune(r)
		}
	}
	if d == "" {
		return ""
	}
	base := d
	if j := strings.IndexByte(base, ';'); j >= 0 {
		base = base[:j] // "..;x" is ".." to servers that strip path parameters
	}
	if strings.TrimRight(base, ". ") == "" {
		return "a '.' or '..' segment in the path"
	}
	if i > 0 && strings.IndexByte(d, ':') >= 0 {
		return "a ':' past the first path segment"
	}
	return ""
}

// foldsToSeparator reports whether NFKC normalisation maps r to a string
// made of '.', '/', '\' or '%' (U+2024 one dot leader, U+2025 two dot
// leader, U+2026 ellipsis, U+FE19, U+FE30, U+FE52 small full stop, U+FF0E
// fullwidth full stop, U+FF0F fullwidth solidus, U+FE68 and U+FF3C reverse
// solidus forms, U+FE6A and U+FF05 percent sign forms): a server that
// normalises names would read them as traversal.
func foldsToSeparator(r rune) bool {
	switch r {
	case 0x2024, 0x2025, 0x2026, 0xFE19, 0xFE30, 0xFE52, 0xFF0E,
		0xFF0F, 0xFE68, 0xFF3C, 0xFE6A, 0xFF05:
		return true
	}
	return false
}

// globKind is the wildcard at the end of a resource pattern.
type globKind uint8

const (
	globNone globKind = iota // exact
	globOne                  // "/*": exactly one more non-empty segment
	globAny                  // "/**": the prefix itself or anything below it
)

// uriPattern is a parsed entry of a profile's resources list.
type uriPattern struct {
	text string // as written
	u    resourceURI
	glob globKind
}

// parseURIPattern parses a resource pattern: a URI in the grammar above,
// optionally ending in a "/*" or "/**" segment. A '*' anywhere else,
// encoded or not, is refused, so that no pattern silently means a literal
// star.
func parseURIPattern(text string) (uriPattern, string) {
	p := uriPattern{text: text}
	u, reason := parseURI(text)
	if reason != "" {
		return p, reason
	}
	// The glob is read from the raw text, so that an encoded "%2A" stays
	// a (refused) literal star.
	var glob globKind
	var star string
	switch {
	case strings.HasSuffix(text, "/**"):
		glob, star = globAny, "**"
	case strings.HasSuffix(text, "/*"):
		glob, star = globOne, "*"
	}
	if n := len(u.segs); glob != globNone && n > 0 && u.segs[n-1] == star && !u.hasQuery && !u.hasFragment {
		p.glob = glob
		u.segs = u.segs[:n-1]
	}
	for _, s := range u.segs {
		if strings.IndexByte(s, '*') >= 0 {
			return p, "a '*' is only allowed as a final /* or /** segment"
		}
	}
	if strings.IndexByte(u.query, '*') >= 0 || strings.IndexByte(u.fragment, '*') >= 0 {
		return p, "a '*' is only allowed as a final /* or /** segment (a glob pattern has no query or fragment)"
	}
	p.u = u
	return p, ""
}

// match reports whether the checked URI u falls under p.
func (p *uriPattern) match(u *resourceURI) bool {
	q := &p.u
	if u.scheme != q.scheme || u.authority != q.authority || u.host != q.host || u.port != q.port {
		return false
	}
	switch p.glob {
	case globNone:
		return u.rooted == q.rooted && slicesEqual(u.segs, q.segs) &&
			u.hasQuery == q.hasQuery && u.query == q.query &&
			u.hasFragment == q.hasFragment && u.fragment == q.fragment
	}
	if u.hasQuery || u.hasFragment {
		return false
	}
	if len(q.segs) == 0 && len(u.segs) == 0 && !u.rooted && p.glob == globAny {
		return true // "github://repo/**" covers "github://repo"
	}
	if u.rooted != q.rooted || len(u.segs) < len(q.segs) || !slicesEqual(u.segs[:len(q.segs)], q.segs) {
		return false
	}
	if p.glob == globOne {
		return len(u.segs) == len(q.segs)+1 && u.segs[len(q.segs)] != ""
	}
	return true
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
