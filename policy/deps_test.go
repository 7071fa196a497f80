package policy

import (
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeps keeps the package pure: policy decides, the proxy acts. A
// decision that could reach the network, run a program or read a file would
// no longer be a function of the policy text, the request and the time it
// was given.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("go list is slow; skipped in -short")
	}
	// Forbidden anywhere in the import graph.
	transitive := []struct{ prefix, why string }{
		{"net", "policy decides from its inputs; a network stack here is a way out"},
		{"os/exec", "policy runs nothing"},
		{"github.com/nats-io/", "the event store lives in events/; policy only sees what it is given"},
		{"github.com/modelcontextprotocol/", "MCP framing belongs to proxy/"},
	}
	// Forbidden as direct imports (fmt, which the YAML parser needs, pulls
	// os in underneath, but nothing here may call it).
	direct := []struct{ prefix, why string }{
		{"net", "policy parses what it is given itself; the net tree is kept out"},
		{"os", "file I/O belongs to the caller: Parse takes bytes and a name"},
		{"math/rand", "randomness comes in as a parameter"},
		{"crypto/rand", "randomness comes in as a parameter"},
	}
	deps := goList(t, "{{join .Deps \"\\n\"}}")
	imports := goList(t, "{{join .Imports \"\\n\"}}")
	// cel-go, the conditions' language, pulls in two parsers of the net
	// tree; they open no socket, and no file of this package may import
	// them (policy parses URIs itself, uri.go).
	parsersOnly := map[string]bool{"net/url": true, "net/netip": true}
	for _, dep := range deps {
		for _, f := range transitive {
			if under(dep, f.prefix) && !parsersOnly[dep] {
				t.Errorf("imports %s (directly or not): %s", dep, f.why)
			}
		}
	}
	for _, imp := range imports {
		for _, f := range direct {
			if under(imp, f.prefix) {
				t.Errorf("imports %s: %s", imp, f.why)
			}
		}
	}
}

// TestNoClock stops a call to the wall clock: time is a parameter of
// Evaluate, so that a decision can be replayed.
func TestNoClock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
				switch sel.Sel.Name {
				case "Now", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick", "Sleep":
					t.Errorf("%s: calls time.%s; take the time as a parameter", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}

func goList(t *testing.T, format string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, ".").Output()
	if err != nil {
		t.Fatalf("go list -f %q: %v", format, err)
	}
	list := strings.Fields(string(out))
	if len(list) == 0 {
		t.Fatalf("go list -f %q printed nothing", format)
	}
	return list
}

func under(pkg, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}
