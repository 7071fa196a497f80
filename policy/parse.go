package policy

import (
	"bytes"
	"cel.dev/cel-go/cel"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/aegis-dev/aegis/schemas"
)

// ParseError is the only error [Parse] returns. File is the name given to
// Parse; Line is the 1-based line the problem was found on, or 0 when it
// belongs to no line (an empty file); Key is the path of the offending key,
// such as "rules[1].rate" (rule indexes count from 0), or "" for the
// document as a whole; Msg says what is wrong. Error formats them as
//
//	policy.yaml:7: rules[1].rate: only valid on a rate_limit action
type ParseError struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Bounds of the integers in a policy file. Rate and timeout values fit a
// uint32, so that their durations cannot overflow; limits stay below 2^53,
// so that they fit an integer of the audit record.
const (
	maxSeconds = math.MaxUint32
	maxLimit   = schemas.MaxInteger - 1
)

var (
	topKeys    = []string{"version", "default", "rules", "on_tool_change", "witnesses"}
	ruleKeys   = []string{"id", "action", "tool", "capability", "role", "when", "priority", "reason", "rate", "limits", "park", "timeout_seconds"}
	rateKeys   = []string{"max", "per_seconds"}
	limitsKeys = []string{"max_memory_bytes", "max_wall_ms", "max_output_bytes"}
)

// Parse reads one policy file. name is used only in error messages; data is
// the file's contents (the caller does the file I/O). The format and the
// strictness rules are described in the package documentation. Any problem
// is reported as a *[ParseError], and the Set is nil.
func Parse(name string, data []byte) (*Set, error) {
	p := parser{file: name}
	s, err := p.parse(data)
	if err != nil {
		return nil, err
	}
	return s, nil
}

type parser struct {
	file string
	env  *cel.Env // of conditions, made at the first when:
}

func (p *parser) errorf(line int, key, format string, args ...any) *ParseError {
	return &ParseError{File: p.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

// yamlError turns an error of the YAML parser ("yaml: line 3: did not find
// expected key") in data into a ParseError that names the offending line.
func (p *parser) yamlError(data []byte, err error) *ParseError {
	line, msg := yamlLine(err)
	if line > 0 {
		line = offendingLine(data, line, msg)
	}
	return p.errorf(line, "", "invalid YAML: %s", msg)
}

// yamlLine splits a YAML parser error into its line (0: none) and message.
func yamlLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				return n, tail
			}
		}
	}
	return 0, msg
}

// maxBlameLines bounds how far past the line the parser names
// offendingLine looks, and maxBlameBytes the files it looks into.
const (
	maxBlameLines = 1000
	maxBlameBytes = 256 << 10
)

// offendingLine returns the line that makes data fail with msg. The YAML
// parser names where the enclosing block began ("did not find expected
// key" at a mapping's first line when a later line is misindented), so
// the line is found as the shortest prefix of data, from that line on,
// that fails with the same message.
func offendingLine(data []byte, reported int, msg string) int {
	if len(data) > maxBlameBytes {
		return reported
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for n := reported; n <= len(lines) && n < reported+maxBlameLines; n++ {
		var v yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:n], nil), &v)
		if err == nil {
			continue
		}
		if _, m := yamlLine(err); m == msg {
			return n
		}
	}
	return reported
}

// document decodes the one YAML document of a policy or gateway file (what
// names which, for messages) and returns its root node. An empty file, a
// second document and anchors or aliases are refused.
func (p *parser) document(data []byte, what string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errorf(0, "", "empty %s file", what)
		}
		return nil, p.yamlError(data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, p.yamlError(data, err)
	default:
		return nil, p.errorf(extra.Line, "", "a second YAML document; a %s file holds exactly one", what)
	}
	if err := p.plain(&doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errorf(doc.Line, "", "not a YAML document")
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, p.errorf(0, "", "empty %s file", what)
	}
	return root, nil
}

func (p *parser) parse(data []byte) (*Set, error) {
	root, err := p.document(data, "policy")
	if err != nil {
		return nil, err
	}
	fields, err := p.mapping(root, "", topKeys)
	if err != nil {
		return nil, err
	}

	s := &Set{}
	for _, f := range fields {
		switch f.name {
		case "version":
			v, err := p.integer(f.val, f.path, math.MinInt64, math.MaxInt64)
			if err != nil {
				return nil, err
			}
			if v != 1 {
				return nil, p.errorf(f.val.Line, f.path, "unsupported version %d; this aegis reads version 1", v)
			}
		case "default":
			v, err := p.str(f.val, f.path)
			if err != nil {
				return nil, err
			}
			switch v {
			case "allow":
			case "deny":
				s.defaultDeny = true
			default:
				return nil, p.errorf(f.val.Line, f.path, "unknown default %q; want allow or deny", v)
			}
		case "rules":
			if err := p.rules(s, f.val, f.path); err != nil {
				return nil, err
			}
		case "on_tool_change":
			if s.onToolChange, err = p.toolChange(f.val, f.path); err != nil {
				return nil, err
			}
		case "witnesses":
			if s.witnesses, err = p.witnesses(f.val, f.path); err != nil {
				return nil, err
			}
		}
	}
	if s.rules == nil {
		s.rules = []rule{}
	}
	h, err := s.Projection().Hash()
	if err != nil {
		// Every member of the projection is a string or a boolean, so the
		// canonical form cannot fail; report it rather than trust that.
		return nil, p.errorf(0, "", "cannot hash the policy set: %v", err)
	}
	s.hash = h
	return s, nil
}

// plain rejects anchors, aliases and merge keys anywhere in the tree: a
// policy file is read literally, one key at a time, so that what a reviewer
// sees is what is enforced and every value has one line to point at.
func (p *parser) plain(root *yaml.Node) error {
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.Kind == yaml.AliasNode || n.Anchor != "" {
			return p.errorf(n.Line, "", "YAML anchors and aliases are not supported in a policy file")
		}
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, n.Content[i])
		}
	}
	return nil
}

// field is one key of a mapping, in document order.
type field struct {
	name string
	path string // the key path for messages
	key  *yaml.Node
	val  *yaml.Node
}

// mapping returns the keys of n in document order, refusing anything but a
// plain mapping with string keys, each allowed and each at most once.
func (p *parser) mapping(n *yaml.Node, path string, allowed []string) ([]field, error) {
	if n.Kind != yaml.MappingNode || n.ShortTag() != "!!map" {
		return nil, p.errorf(n.Line, path, "expected a mapping, got %s", describe(n))
	}
	fields := make([]field, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, p.errorf(k.Line, path, "keys must be strings, got %s", describe(k))
		}
		f := field{name: k.Value, path: keyPath(path, k.Value), key: k, val: v}
		if !contains(allowed, f.name) {
			return nil, p.errorf(k.Line, f.path, "unknown key; want one of %s", strings.Join(allowed, ", "))
		}
		for _, prev := range fields {
			if prev.name == f.name {
				return nil, p.errorf(k.Line, f.path, "duplicate key (first at line %d)", prev.key.Line)
			}
		}
		fields = append(fields, f)
	}
	return fields, nil
}

func (p *parser) rules(s *Set, n *yaml.Node, path string) error {
	if n.Kind != yaml.SequenceNode || n.ShortTag() != "!!seq" {
		return p.errorf(n.Line, path, "expected a sequence of rules, got %s", describe(n))
	}
	s.rules = make([]rule, 0, len(n.Content))
	firstID := make(map[string]int, len(n.Content))
	for i, rn := range n.Content {
		rpath := fmt.Sprintf("%s[%d]", path, i)
		r, idLine, err := p.rule(rn, rpath)
		if err != nil {
			return err
		}
		if line, dup := firstID[r.id]; dup {
			return p.errorf(idLine, rpath+".id", "duplicate rule id %q (first at line %d)", r.id, line)
		}
		firstID[r.id] = idLine
		s.rules = append(s.rules, r)
	}
	return nil
}

// rule parses one rule and returns it with the line of its id.
func (p *parser) rule(n *yaml.Node, path string) (rule, int, error) {
	var r rule
	fields, err := p.mapping(n, path, ruleKeys)
	if err != nil {
		return r, 0, err
	}
	var (
		seen           = make(map[string]*field, len(fields))
		park           bool
		idLine         int
		ferr           error
		timeoutSeconds int64
	)
	for i := range fields {
		f := &fields[i]
		seen[f.name] = f
		switch f.name {
		case "id":
			r.id, ferr = p.str(f.val, f.path)
			if ferr == nil {
				ferr = p.checkID(f.val, f.path, r.id)
			}
			idLine = f.val.Line
		case "action":
			var a string
			if a, ferr = p.str(f.val, f.path); ferr == nil {
				r.action, ferr = p.action(f.val, f.path, a)
			}
		case "tool":
			r.tool, ferr = p.axis(f.val, f.path)
		case "capability":
			r.capability, ferr = p.axis(f.val, f.path)
		case "role":
			r.role, ferr = p.axis(f.val, f.path)
		case "when":
			r.when, ferr = p.condition(f.val, f.path)
		case "priority":
			var v int64
			v, ferr = p.integer(f.val, f.path, math.MinInt32, math.MaxInt32)
			r.priority = int32(v)
		case "reason":
			r.reason, ferr = p.str(f.val, f.path)
			if ferr == nil && r.reason == "" {
				ferr = p.errorf(f.val.Line, f.path, "must not be empty; omit it for the default reason")
			}
		case "rate":
			r.max, r.perSeconds, ferr = p.rate(f.val, f.path)
		case "limits":
			r.limits, ferr = p.limits(f.val, f.path)
		case "park":
			park, ferr = p.boolean(f.val, f.path)
		case "timeout_seconds":
			timeoutSeconds, ferr = p.integer(f.val, f.path, 1, maxSeconds)
		}
		if ferr != nil {
			return r, 0, ferr
		}
	}

	if seen["id"] == nil {
		return r, 0, p.errorf(n.Line, path, "missing required key \"id\"")
	}
	if seen["action"] == nil {
		return r, 0, p.errorf(n.Line, path, "missing required key \"action\"")
	}
	onlyOn := func(name, msg string) error {
		f := seen[name]
		return p.errorf(f.key.Line, f.path, "only valid on %s", msg)
	}
	hasRate := seen["rate"] != nil
	switch {
	case hasRate && r.action != actionRateLimit:
		return r, 0, onlyOn("rate", "a rate_limit action")
	case !hasRate && r.action == actionRateLimit:
		return r, 0, p.errorf(n.Line, path, "a rate_limit action requires a rate block")
	case seen["limits"] != nil && r.action != actionAllow && r.action != actionRateLimit:
		return r, 0, onlyOn("limits", "an allow or rate_limit action")
	case seen["park"] != nil && r.action != actionPendingApproval:
		return r, 0, onlyOn("park", "a pending_approval action")
	case seen["timeout_seconds"] != nil && r.action != actionPendingApproval:
		return r, 0, onlyOn("timeout_seconds", "a pending_approval action")
	case seen["timeout_seconds"] != nil && !park:
		f := seen["timeout_seconds"]
		return r, 0, p.errorf(f.key.Line, f.path, "only valid with park: true")
	case park && seen["timeout_seconds"] == nil:
		f := seen["park"]
		return r, 0, p.errorf(f.key.Line, f.path, "park: true requires timeout_seconds, so that a parked call cannot wait forever")
	}

	r.park = park
	r.timeoutSeconds = uint32(timeoutSeconds)
	r.per = time.Duration(r.perSeconds) * time.Second
	for _, axis := range [...]string{r.tool, r.capability, r.role} {
		if axis != "" {
			r.specificity++
		}
	}
	if r.when != nil {
		r.specificity++
	}
	switch r.action {
	case actionDeny:
		r.denyReason = cmp.Or(r.reason, "denied by rule `"+r.id+"`")
	case actionRateLimit:
		r.denyReason = cmp.Or(r.reason, fmt.Sprintf("rate limit exceeded for `%s` (%d per %ds)", r.id, r.max, r.perSeconds))
	}
	return r, idLine, nil
}

func (p *parser) checkID(n *yaml.Node, path, id string) error {
	if id == "" {
		return p.errorf(n.Line, path, "must not be empty")
	}
	for _, c := range id {
		if unicode.IsControl(c) {
			return p.errorf(n.Line, path, "rule id %q contains a control character", id)
		}
	}
	return nil
}

// condition compiles a when: expression (see when.go).
func (p *parser) condition(n *yaml.Node, path string) (*condition, error) {
	src, err := p.str(n, path)
	if err != nil {
		return nil, err
	}
	if p.env == nil {
		if p.env, err = condEnv(); err != nil {
			return nil, p.errorf(n.Line, path, "conditions unavailable: %v", err)
		}
	}
	c, err := compileCondition(p.env, src)
	if err != nil {
		return nil, p.errorf(n.Line, path, "%v", err)
	}
	return c, nil
}

func (p *parser) action(n *yaml.Node, path, v string) (action, error) {
	for a, name := range actionNames {
		if v == name {
			return action(a), nil
		}
	}
	return 0, p.errorf(n.Line, path, "unknown action %q; want allow, deny, rate_limit or pending_approval", v)
}

// axis parses tool, capability or role: "*" matches anything and is stored
// as ""; any other value must match exactly.
func (p *parser) axis(n *yaml.Node, path string) (string, error) {
	v, err := p.str(n, path)
	if err != nil {
		return "", err
	}
	switch v {
	case "":
		return "", p.errorf(n.Line, path, "must not be empty; omit it or write \"*\" to match any")
	case "*":
		return "", nil
	}
	return v, nil
}

func (p *parser) rate(n *yaml.Node, path string) (max, per uint32, err error) {
	fields, err := p.mapping(n, path, rateKeys)
	if err != nil {
		return 0, 0, err
	}
	var has [2]bool
	for _, f := range fields {
		v, err := p.integer(f.val, f.path, 1, maxSeconds)
		if err != nil {
			return 0, 0, err
		}
		if f.name == "max" {
			max, has[0] = uint32(v), true
		} else {
			per, has[1] = uint32(v), true
		}
	}
	for i, ok := range has {
		if !ok {
			return 0, 0, p.errorf(n.Line, path, "missing required key %q", rateKeys[i])
		}
	}
	return max, per, nil
}

func (p *parser) limits(n *yaml.Node, path string) (Limits, error) {
	var l Limits
	fields, err := p.mapping(n, path, limitsKeys)
	if err != nil {
		return l, err
	}
	if len(fields) == 0 {
		return l, p.errorf(n.Line, path, "must set at least one of %s", strings.Join(limitsKeys, ", "))
	}
	for _, f := range fields {
		v, err := p.integer(f.val, f.path, 1, maxLimit)
		if err != nil {
			return l, err
		}
		switch f.name {
		case "max_memory_bytes":
			l.MaxMemoryBytes = uint64(v)
		case "max_wall_ms":
			l.MaxWallMS = uint64(v)
		case "max_output_bytes":
			l.MaxOutputBytes = uint64(v)
		}
	}
	return l, nil
}

func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", p.errorf(n.Line, path, "expected a string, got %s", describe(n))
	}
	if !utf8.ValidString(n.Value) {
		return "", p.errorf(n.Line, path, "not valid UTF-8")
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		switch n.Value {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, p.errorf(n.Line, path, "expected true or false, got %s", describe(n))
}

// integer accepts a plain decimal integer in [lo, hi]. YAML's other integer
// spellings (0x1f, 0o17, 1_000, +5, leading zeros) are refused, so that a
// number means what it looks like.
func (p *parser) integer(n *yaml.Node, path string, lo, hi int64) (int64, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && isDecimal(n.Value) {
		// Digits only, but too large for YAML's integers.
		return 0, p.errorf(n.Line, path, "must be between %d and %d, got %s", lo, hi, n.Value)
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, p.errorf(n.Line, path, "expected an integer, got %s", describe(n))
	}
	if !isDecimal(n.Value) {
		return 0, p.errorf(n.Line, path, "expected a plain decimal integer, got %q", n.Value)
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	switch {
	case err == nil && v >= lo && v <= hi:
		return v, nil
	case lo == 1 && (v == 0 || strings.HasPrefix(n.Value, "-")):
		return 0, p.errorf(n.Line, path, "must be > 0, got %s", n.Value)
	default:
		return 0, p.errorf(n.Line, path, "must be between %d and %d, got %s", lo, hi, n.Value)
	}
}

func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// describe names what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		if t := n.ShortTag(); t != "!!map" {
			return fmt.Sprintf("a mapping tagged %q", t)
		}
		return "a mapping"
	case yaml.SequenceNode:
		if t := n.ShortTag(); t != "!!seq" {
			return fmt.Sprintf("a sequence tagged %q", t)
		}
		return "a sequence"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch t := n.ShortTag(); t {
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number with a fraction or exponent"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	case "!!merge":
		return "a merge key (<<)"
	default:
		return fmt.Sprintf("a value tagged %q", t)
	}
}

// keyPath appends key to path: "rules[0].tool", or rules[0]["odd key"] for
// a key that is not a plain word, so that untrusted keys stay quoted.
func keyPath(path, key string) string {
	plain := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
