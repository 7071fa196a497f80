package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Tool pins. A server's tool is pinned to the digest of its definition as
// the server listed it; a definition that later differs is a change the
// proxy records and acts on (docs/pins.md).
//
// The digest of scheme 2 ([ToolPinScheme], [ToolObjectDigest]) is
// lowercase hex SHA-256 over the RFC 8785 canonical JSON of the whole tool
// object as the host receives it: every member, _meta, icons and
// execution included, since hosts act on each. Pins of scheme 1 (no
// scheme in the event) covered only the object of the tool's name, title,
// description, inputSchema, outputSchema and annotations
// ([ToolDefinition.Digest]); a proxy that finds one upgrades it to scheme
// 2 when the tool is listed as it was pinned. Tool definitions are
// arbitrary JSON (floats, negative numbers and null are common in
// schemas), so they are canonicalized with [CanonicalJSON], the full RFC
// 8785, not with the audit record's narrower [Canonicalize]. Whoever calls
// these has read the definition with proxy/reading first: a definition
// that readers could take two ways is never digested.

// ToolPinScheme is the scheme of the pins a proxy makes now.
const ToolPinScheme = 2

// ToolObjectDigest returns the scheme-2 digest of one tool object and the
// digest of each of its members (SHA-256 of the member's canonical JSON),
// which tell what a change touched.
func ToolObjectDigest(raw []byte) (string, map[string]string, error) {
	c, err := CanonicalJSON(raw)
	if err != nil {
		return "", nil, fmt.Errorf("tool definition: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(c, &m); err != nil || m == nil {
		return "", nil, errors.New("tool definition: not an object")
	}
	fields := make(map[string]string, len(m))
	for k, v := range m {
		fields[k] = HashHex(v) // v is canonical already: c is
	}
	return HashHex(c), fields, nil
}

// ToolPinFields are the members of a tool definition that its digest
// covers, in the order a change names them.
var ToolPinFields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// ToolDefinition is a tool as digested: the pinned members as the server
// sent them.
type ToolDefinition struct {
	Name   string
	Fields map[string]json.RawMessage // member -> raw JSON, pinned members only
}

// ParseToolDefinition reads one entry of a tools/list result's tools
// array. Members are read as encoding/json reads them (the last of a
// duplicated member wins, as in the JSON readers of common hosts). An
// entry without a string name is refused.
func ParseToolDefinition(raw json.RawMessage) (ToolDefinition, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return ToolDefinition{}, fmt.Errorf("tool definition: %w", err)
	}
	var name string
	if err := json.Unmarshal(m["name"], &name); err != nil || name == "" {
		return ToolDefinition{}, errors.New("tool definition: no name")
	}
	d := ToolDefinition{Name: name, Fields: map[string]json.RawMessage{}}
	for _, f := range ToolPinFields {
		if v, ok := m[f]; ok {
			d.Fields[f] = v
		}
	}
	return d, nil
}

// Digest is [ToolDefinitionDigest] of d.
func (d ToolDefinition) Digest() (string, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	keys := make([]string, 0, len(d.Fields))
	for k := range d.Fields {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := writeJCSString(&b, k); err != nil {
			return "", err
		}
		b.WriteByte(':')
		c, err := CanonicalJSON(d.Fields[k])
		if err != nil {
			return "", fmt.Errorf("tool %q: %s: %w", d.Name, k, err)
		}
		b.Write(c)
	}
	b.WriteByte('}')
	return HashHex(b.Bytes()), nil
}

// FieldDigests returns the digest of each pinned member d has (SHA-256 of
// its canonical JSON): what tells a description change from a schema one.
func (d ToolDefinition) FieldDigests() map[string]string {
	out := make(map[string]string, len(d.Fields))
	for k, v := range d.Fields {
		if c, err := CanonicalJSON(v); err == nil {
			out[k] = HashHex(c)
		}
	}
	return out
}

// ToolDefinitionDigest parses one tools/list entry and returns its name and
// digest.
func ToolDefinitionDigest(raw json.RawMessage) (name, digest string, err error) {
	d, err := ParseToolDefinition(raw)
	if err != nil {
		return "", "", err
	}
	digest, err = d.Digest()
	return d.Name, digest, err
}

// ChangedFields names the members whose digests differ between two maps of
// member digests (a member present in one only counts): those of
// ToolPinFields in that order, then the others sorted.
func ChangedFields(was, now map[string]string) []string {
	var out, rest []string
	for _, f := range ToolPinFields {
		if was[f] != now[f] {
			out = append(out, f)
		}
	}
	seen := func(f string) bool {
		return slices.Contains(ToolPinFields, f) || slices.Contains(rest, f)
	}
	for _, m := range []map[string]string{was, now} {
		for f := range m {
			if !seen(f) && was[f] != now[f] {
				rest = append(rest, f)
			}
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// The payloads of the pin events. Server is the pin's key: the server's
// argv joined by spaces in aegis wrap ([WrapServerKey]), its config name
// in the gateway.

// What a pin can pin besides tools (the Kind of [ToolPinned],
// [ToolChanged] and [PinsReset]; "" is a tool). A prompt is pinned by its
// name, a resource template by its uriTemplate, the server's instructions
// (of its initialize result) under the name "instructions"; each to the
// digest of its whole object as [ToolObjectDigest] takes it (instructions:
// of the object {"instructions": …}).
const (
	PinKindPrompt           = "prompt"
	PinKindResourceTemplate = "resource_template"
	PinKindInstructions     = "instructions"
)

// ToolPinned is the payload of a tool.pinned event.
type ToolPinned struct {
	// Kind is what is pinned: "" for a tool, else a PinKind.
	Kind   string            `json:"kind,omitempty"`
	Server string            `json:"server"`
	Tool   string            `json:"tool"`
	Digest string            `json:"digest"`
	Fields map[string]string `json:"fields,omitempty"`
	// Reason is "first sight", "approved <approval id>", "on_tool_change:
	// allow" or "scheme 2: listed as pinned".
	Reason string `json:"reason"`
	// Scheme is the digest's scheme: [ToolPinScheme], or 0 for the
	// scheme-1 pins of earlier versions.
	Scheme int `json:"scheme,omitempty"`
	// Caps names the host capabilities the tool was first pinned under
	// (elicitation, roots, sampling: those that shape a server's listing),
	// sorted and joined by commas; "" for none. Absent in pins of versions
	// that did not say, which count under every capability set.
	Caps *string `json:"caps,omitempty"`
}

// ToolChanged is the payload of a tool.changed event. Change is
// "changed" (Fields names what), "added" (a tool the server had not
// pinned, listed after its first listing), "removed" (a pinned tool a
// complete listing left out; Digest is then empty), "unreadable" (a
// definition, or with Tool empty a whole listing, that JSON readers could
// take two ways; Reason says how) or "duplicated" (a listing that names
// the tool twice).
type ToolChanged struct {
	Kind   string   `json:"kind,omitempty"` // as in ToolPinned
	Server string   `json:"server"`
	Tool   string   `json:"tool"`
	Change string   `json:"change"`
	Pinned string   `json:"pinned,omitempty"`
	Digest string   `json:"digest,omitempty"`
	Fields []string `json:"fields,omitempty"`
	// Action is what on_tool_change made of it: deny, pending_approval,
	// allow, or record (no policy enforces pins in this session). An
	// unreadable or duplicated definition is refused whatever
	// on_tool_change says (deny), since no one definition could be pinned.
	Action string `json:"action"`
	// Reason says why an unreadable listing or definition is one.
	Reason string `json:"reason,omitempty"`
}

// PinsReset is the payload of a pins.reset event: every pin of Server, or
// only Tool's when set.
type PinsReset struct {
	Kind   string `json:"kind,omitempty"` // of Tool, as in ToolPinned
	Server string `json:"server"`
	Tool   string `json:"tool,omitempty"`
	By     string `json:"by,omitempty"`
}

// The changes a [ToolChanged] names.
const (
	ToolChangeChanged    = "changed"
	ToolChangeAdded      = "added"
	ToolChangeRemoved    = "removed"
	ToolChangeUnreadable = "unreadable"
	ToolChangeDuplicated = "duplicated"
)

// WrapServerKey is the pin key of a wrapped server: its argv, each
// argument quoted when it holds a space or a quote, joined by spaces.
func WrapServerKey(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			parts[i] = strconv.Quote(a)
		} else {
			parts[i] = a
		}
	}
	return strings.Join(parts, " ")
}

// CanonicalJSON returns the RFC 8785 canonical form of any one JSON value
// (null, floats and negative numbers included): members sorted by UTF-16
// code units, numbers as ECMAScript writes the IEEE 754 double they denote,
// strings with only the escapes JCS requires. Duplicate members keep the
// last, as encoding/json reads them. A number beyond the double range is
// refused.
func CanonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if dec.More() {
		return nil, errors.New("canonical json: more than one value")
	}
	var b bytes.Buffer
	if err := writeJCS(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeJCS(b *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		return writeJCSString(b, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("canonical json: number %s is outside the double range", t)
		}
		b.WriteString(esNumber(f))
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJCS(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJCSString(b, k); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := writeJCS(b, t[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("canonical json: unexpected %T", v)
	}
	return nil
}

// writeJCSString writes s as the audit lines' strings are written
// (appendString). encoding/json has already replaced invalid UTF-8 in what
// it decoded with U+FFFD, so appendString's refusal of it never applies.
func writeJCSString(b *bytes.Buffer, s string) error {
	out, err := appendString(b.AvailableBuffer(), s)
	if err != nil {
		return err
	}
	b.Write(out)
	return nil
}

// esNumber writes f as ECMAScript's Number.prototype.toString does (the
// shortest digits that read back as f), which RFC 8785 adopts.
func esNumber(f float64) string {
	if f == 0 {
		return "0" // -0 too
	}
	neg := f < 0
	if neg {
		f = -f
	}
	// Shortest round-trip digits and the decimal exponent: d.ddddde±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expPart, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expPart)
	n := exp + 1 // position of the decimal point after the first n digits
	k := len(digits)
	var s string
	switch {
	case k <= n && n <= 21:
		s = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		s = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		s = "0." + strings.Repeat("0", -n) + digits
	default:
		sign := "+"
		if n-1 < 0 {
			sign = "-"
		}
		x := n - 1
		if x < 0 {
			x = -x
		}
		if k == 1 {
			s = digits + "e" + sign + strconv.Itoa(x)
		} else {
			s = digits[:1] + "." + digits[1:] + "e" + sign + strconv.Itoa(x)
		}
	}
	if neg {
		s = "-" + s
	}
	return s
}
