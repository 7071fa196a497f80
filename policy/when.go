package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/aegis-dev/aegis/schemas"
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
//	principal map    who makes the call, when 'aegis gateway --listen'
//	                 validated an OAuth token for the session: iss, sub,
//	                 client_id (strings), scopes (a list of strings) and
//	                 claims (the claims the gateway was told to keep,
//	                 each a string or a list of strings). Without a
//	                 token (stdio, wrap, a static token) iss, sub and
//	                 client_id are "", scopes and claims empty, so a rule
//	                 on principal.sub matches no one, and one that reads
//	                 a claim that is not there errs, which denies.
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
// Arguments that name a member twice, or twice but for case, or that the
// one reading of frames marks ambiguous (a number beyond the double range,
// an integer beyond 2^53, NaN, a lone surrogate), are refused before a
// condition reads them (readArgs): a condition must see the value the
// server acts on.
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
		cel.Variable("principal", cel.MapType(cel.StringType, cel.DynType)),
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
	if t := bytes.TrimSpace(req.Args); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		v, err := readArgs(t)
		if err != nil {
			return nil, err
		}
		args = v
	}
	return condInput{"tool": req.Tool, "server": req.Server, "args": args, "profile": req.Role, "session": req.Session,
		"principal": principalInput(req.Principal)}, nil
}

// principalInput is p as a condition sees it: every member present, empty
// when there is no principal.
func principalInput(p *schemas.Principal) map[string]any {
	m := map[string]any{"iss": "", "sub": "", "client_id": "", "scopes": []any{}, "claims": map[string]any{}}
	if p == nil {
		return m
	}
	for k, v := range p.Value() {
		m[k] = v
	}
	return m
}

// readArgs reads a call's arguments by the one reading of frames that
// decided the call (proxy/reading) and refuses what readers of JSON read
// differently: an object with two members whose names are equal, or equal
// but for case (Go's encoding/json matches a struct's fields
// case-insensitively and keeps the last; a map keeps both), and anything
// the reading marks ambiguous (a number beyond the double range or an
// integer beyond 2^53, NaN, a lone surrogate, nesting past any reader's
// limit). A condition would see one value and the server might act on
// another.
func readArgs(t []byte) (any, error) {
	r := reading.Read(t)
	v, ok := r.One()
	switch {
	case r.Err != "":
		return nil, fmt.Errorf("the call's arguments are not JSON: %s", r.Err)
	case !ok:
		return nil, fmt.Errorf("the call's arguments are not one JSON value")
	}
	if why := v.CaseCollision(); why != "" {
		return nil, fmt.Errorf("the call's arguments name one member twice (%s), which readers of JSON resolve differently", why)
	}
	if why := cmp.Or(v.Ambiguous, r.Ambiguous); why != "" {
		return nil, fmt.Errorf("readers of JSON read the call's arguments differently: %s", why)
	}
	return celValue(v), nil
}

// celValue is v as a condition sees it: objects as maps, arrays as lists,
// integers that fit as int64 and other numbers as doubles.
func celValue(v *reading.Value) any {
	switch v.Kind {
	case reading.Bool:
		return v.Bool
	case reading.String:
		return v.Str
	case reading.Number:
		if i, err := strconv.ParseInt(string(v.Raw), 10, 64); err == nil {
			return i
		}
		return v.Num
	case reading.Array:
		out := make([]any, len(v.Elems))
		for i, e := range v.Elems {
			out[i] = celValue(e)
		}
		return out
	case reading.Object:
		out := make(map[string]any, len(v.Members))
		for _, m := range v.Members {
			out[m.Name] = celValue(m.Value)
		}
		return out
	}
	return nil
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
