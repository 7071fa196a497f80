package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
	"unicode"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Conditions. A rule may carry `when:`, a CEL expression (cel.dev/cel-go,
// the implementation Kubernetes uses) over the call, which must hold for
// the rule to match. Its inputs:
//
//	tool     string  the tool's name as the call gives it
//	args     dyn     params.arguments, decoded from JSON ({} when absent):
//	                 objects are maps, arrays lists, integers int, other
//	                 numbers double
//	server   string  the gateway's server name ("" in wrap)
//	profile  string  the gateway's active profile ("" in wrap)
//	session  string  the session id
//
// and two functions of this package:
//
//	within(path, dir)  path, made absolute and cleaned lexically (so
//	                   /repo/../etc is /etc), is dir or under it; false for
//	                   a relative path or one holding a NUL
//	url_host(u)        the host of an absolute URL u, lowercased, without
//	                   port or brackets; "" when u is not one, or is one
//	                   that readers of URLs could read differently (a user
//	                   in it, user@host; a backslash; see uri.go)
//
// Arguments that name a member twice, or twice but for case, are refused
// before a condition reads them (oneReading): a condition must see the
// value the server acts on.
//
// An expression is compiled and type-checked when the file is parsed and
// must be of type bool; an error points at the file's line. Each
// evaluation may cost at most condCostLimit (CEL's own cost units: a
// string function costs per character, so a huge argument cannot buy
// unbounded work), and an evaluation that errors (a missing key, a type
// that does not fit) or runs out of cost denies the call, whatever the
// rule's action, with the reason recorded: a condition that cannot be
// decided never lets a call through.
//
// A rule with a condition is one axis more specific than the same rule
// without one.

// condCostLimit bounds one evaluation of one condition.
const condCostLimit = 1_000_000

// maxCondBytes bounds the text of a condition.
const maxCondBytes = 4096

// condition is a compiled when: expression.
type condition struct {
	src  string
	prog cel.Program
}

// condEnv is the environment every condition is compiled in.
func condEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.DynType),
		cel.Variable("server", cel.StringType),
		cel.Variable("profile", cel.StringType),
		cel.Variable("session", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
		cel.Function("within",
			cel.Overload("within_string_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(p, dir ref.Val) ref.Val {
					ps, ok1 := p.Value().(string)
					ds, ok2 := dir.Value().(string)
					if !ok1 || !ok2 {
						return types.NewErr("within takes two strings")
					}
					return types.Bool(within(ps, ds))
				}))),
		cel.Function("url_host",
			cel.Overload("url_host_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(u ref.Val) ref.Val {
					s, ok := u.Value().(string)
					if !ok {
						return types.NewErr("url_host takes a string")
					}
					return types.String(urlHost(s))
				}))),
	)
}

// compileCondition compiles src, or says why it cannot be a condition.
// line is the YAML line of the expression, to which CEL's own line is
// added.
func compileCondition(env *cel.Env, src string) (*condition, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("must not be empty; omit it for a rule that always applies")
	}
	if len(src) > maxCondBytes {
		return nil, fmt.Errorf("is %d bytes long; a condition may hold at most %d", len(src), maxCondBytes)
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("does not compile: %s", oneLine(iss.Err().Error()))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		hint := ""
		if ast.OutputType().IsExactType(cel.DynType) {
			hint = " (an argument's type is only known at run time: compare it, as in args.force == true)"
		}
		return nil, fmt.Errorf("is of type %s; a condition must be true or false%s", ast.OutputType(), hint)
	}
	prog, err := env.Program(ast, cel.CostLimit(condCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("does not compile: %s", oneLine(err.Error()))
	}
	return &condition{src: src, prog: prog}, nil
}

// oneLine folds CEL's multi-line messages (with a caret under the
// column) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// condInput is what a condition sees of one request.
type condInput map[string]any

// input decodes req for conditions; a malformed args is an error, which
// denies any call a condition decides.
func input(req *Request) (condInput, error) {
	args := any(map[string]any{})
	if len(bytes.TrimSpace(req.Args)) > 0 && !bytes.Equal(bytes.TrimSpace(req.Args), []byte("null")) {
		if err := oneReading(req.Args); err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(req.Args))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("the call's arguments are not JSON: %v", err)
		}
		args = numbers(v)
	}
	return condInput{"tool": req.Tool, "args": args, "server": req.Server, "profile": req.Role, "session": req.Session}, nil
}

// numbers turns the json.Numbers of v into int64 (integers that fit) or
// float64.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return x.String()
		}
		return f
	}
	return v
}

// eval evaluates c on in: whether it holds, or why it could not be told.
func (c *condition) eval(in condInput) (bool, error) {
	out, _, err := c.prog.Eval(map[string]any(in))
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("gave %v, not true or false", out)
	}
	return b, nil
}

// within reports whether p, cleaned lexically, is dir or under it. Both
// must be absolute; p may hold no NUL.
func within(p, dir string) bool {
	if !strings.HasPrefix(p, "/") || !strings.HasPrefix(dir, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	p, dir = path.Clean(p), path.Clean(dir)
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// urlHost returns the lowercased host of an absolute URL, "" when s is
// not one or names a user.
func urlHost(s string) string {
	u, reason := parseURI(s)
	if reason != "" || !u.authority || u.host == "" {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(u.host, "["), "]")
}

// oneReading refuses arguments that readers of JSON read differently: an
// object with two members whose names are equal, or equal but for case
// (Go's encoding/json matches a struct's fields case-insensitively and
// keeps the last; a map keeps both). A condition would see one value and
// the server might act on the other.
func oneReading(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]string // folded name -> name as written
		key    bool              // the next token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the call's arguments are not JSON: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
				continue
			}
			name, _ := tok.(string)
			f := foldName(name)
			if prev, dup := top.keys[f]; dup {
				return fmt.Errorf("the call's arguments name one member twice (%q and %q), which readers of JSON resolve differently", prev, name)
			}
			top.keys[f] = name
			top.key = false
			continue
		}
		switch d, _ := tok.(json.Delim); d {
		case '{':
			stack = append(stack, &frame{object: true, keys: map[string]string{}, key: true})
			continue
		case '[':
			stack = append(stack, &frame{})
			continue
		case ']':
			stack = stack[:len(stack)-1]
		}
		// A value (or the end of an array) ends a member.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}

// foldName maps a member name to one form for all its case variants: each
// rune to the least rune of its Unicode case-folding orbit (so "K", "k"
// and the Kelvin sign fold together, as encoding/json folds them).
func foldName(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < least {
				least = f
			}
		}
		b.WriteRune(least)
	}
	return b.String()
}
