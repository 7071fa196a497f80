package mcptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// exampleServerPkg is the import path of the example server command.
const exampleServerPkg = "github.com/aegis-dev/aegis/cmd/aegis-example-server"

// nodeModules is the folder, relative to the module root, where
// `make interop-deps` installs the Node reference servers.
const nodeModules = ".cache/node/node_modules"

// skipInteropEnv names the environment variable that, set to "1", turns a
// missing Node reference server into a skipped test instead of a failure.
const skipInteropEnv = "AEGIS_SKIP_INTEROP"

// ExampleServer builds cmd/aegis-example-server with `go build` into a
// directory from t.TempDir and returns the argv that runs it. It fails the
// test if the build fails. Call it once per test and share the argv between
// subtests, as each call builds anew (under make test it is the one built
// for every package).
func ExampleServer(t testing.TB) []string {
	t.Helper()
	if p := Prebuilt(t, "aegis-example-server"); p != "" {
		return []string{p}
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("mcptest: %v", err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("mcptest: build example server: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "aegis-example-server")
	cmd := exec.Command(gobin, "build", "-o", bin, exampleServerPkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcptest: go build %s: %v\n%s", exampleServerPkg, err, out)
	}
	return []string{bin}
}

// EverythingServer returns the argv that runs the Node reference server
// @modelcontextprotocol/server-everything over stdio from .cache/node at the
// module root. If node or the package is missing it fails the test with a
// hint to run `make interop-deps`, or skips it when AEGIS_SKIP_INTEROP=1.
func EverythingServer(t testing.TB) []string {
	t.Helper()
	node, entry := nodePackage(t, "@modelcontextprotocol/server-everything")
	return []string{node, entry, "stdio"}
}

// TypeScriptSDK returns node and the directory of the official TypeScript
// SDK (@modelcontextprotocol/sdk) in .cache/node at the module root, for
// tests that drive a session with its client, as hosts built on it do.
// Missing dependencies are handled as in [EverythingServer].
func TypeScriptSDK(t testing.TB) (node, dir string) {
	t.Helper()
	return nodeLibrary(t, "sdk")
}

// nodeLibrary returns node and the directory of the package
// @modelcontextprotocol/name in .cache/node at the module root, one that
// the tests import rather than run. Missing dependencies are handled as
// in [EverythingServer].
func nodeLibrary(t testing.TB, name string) (node, dir string) {
	t.Helper()
	node, _ = nodePackage(t, "@modelcontextprotocol/server-everything") // node, and the install
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("mcptest: %v", err)
	}
	dir = filepath.Join(root, filepath.FromSlash(nodeModules), "@modelcontextprotocol", name)
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		if os.Getenv(skipInteropEnv) == "1" {
			t.Skipf("mcptest: @modelcontextprotocol/%s is not installed (skipping: %s=1)", name, skipInteropEnv)
		}
		t.Fatalf("mcptest: @modelcontextprotocol/%s is not installed under %s; run `make interop-deps`", name, filepath.Dir(dir))
	}
	return node, dir
}

// TypeScriptClient returns node and the directory of the official
// TypeScript SDK's client package of the 2.x line
// (@modelcontextprotocol/client) in .cache/node at the module root: the
// first TypeScript client that speaks MCP 2026-07-28 (server/discover,
// with versionNegotiation). Missing dependencies are handled as in
// [EverythingServer].
func TypeScriptClient(t testing.TB) (node, dir string) {
	t.Helper()
	return nodeLibrary(t, "client")
}

// ConformanceSuite returns the argv that runs the official MCP conformance
// suite (@modelcontextprotocol/conformance) from .cache/node at the module
// root; its server mode takes "server --url URL". Missing dependencies
// are handled as in [EverythingServer].
func ConformanceSuite(t testing.TB) []string {
	t.Helper()
	node, entry := nodePackage(t, "@modelcontextprotocol/conformance")
	return []string{node, entry}
}

// node22Modules holds the newest conformance suite and the Node 22 it
// runs on (make conformance22-deps).
const node22Modules = ".cache/node22/node_modules"

// ConformanceSuite22 returns the argv that runs the newest release of the
// official MCP conformance suite (the first with the scenarios of MCP
// 2026-07-28) on the Node 22 installed beside it in .cache/node22 at the
// module root. Missing dependencies are handled as in [EverythingServer],
// with the hint to run make conformance22-deps.
func ConformanceSuite22(t testing.TB) []string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("mcptest: %v", err)
	}
	mods := filepath.Join(root, filepath.FromSlash(node22Modules))
	node := filepath.Join(mods, "node", "bin", "node")
	entry, err := packageBin(filepath.Join(mods, "@modelcontextprotocol", "conformance"))
	if _, nerr := os.Stat(node); err != nil || nerr != nil {
		msg := fmt.Sprintf("the conformance suite on Node 22 is not installed under %s", mods)
		if os.Getenv(skipInteropEnv) == "1" {
			t.Skipf("mcptest: %s (skipping: %s=1)", msg, skipInteropEnv)
		}
		t.Fatalf("mcptest: %s; run `make conformance22-deps` (or set %s=1 to skip interop tests)", msg, skipInteropEnv)
	}
	return []string{node, entry}
}

// Prebuilt returns the path of the named binary among those make test
// builds once for every package's tests (AEGIS_TEST_BINDIR, TESTBINS in
// the Makefile), or "" when the tests run without it (go test alone), and
// the caller builds its own. A name missing there fails the test, with
// what to do.
func Prebuilt(t testing.TB, name string) string {
	t.Helper()
	d := os.Getenv("AEGIS_TEST_BINDIR")
	if d == "" {
		return ""
	}
	p := filepath.Join(d, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("mcptest: %s is not among the binaries of AEGIS_TEST_BINDIR: add its package to TESTBINS in the Makefile (%v)", name, err)
	}
	return p
}

// goConformanceServerPkg is the go-sdk's server for the conformance suite.
const goConformanceServerPkg = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"

// GoConformanceServer builds the go-sdk's conformance everything-server
// (the module's go-sdk version) into a directory from t.TempDir and
// returns its path: without flags it serves stdio, with
// -http=ADDR -stateless=false streamable HTTP. Under make test it is the
// one built for every package.
func GoConformanceServer(t testing.TB) string {
	t.Helper()
	if p := Prebuilt(t, "everything-server"); p != "" {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("mcptest: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "conformance-everything-server")
	cmd := exec.Command("go", "build", "-o", bin, goConformanceServerPkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcptest: go build %s: %v\n%s", goConformanceServerPkg, err, out)
	}
	return bin
}

// goConformanceClientPkg is the go-sdk's client for the conformance suite.
const goConformanceClientPkg = "github.com/modelcontextprotocol/go-sdk/conformance/everything-client"

// GoConformanceClient builds the go-sdk's conformance everything-client
// (the module's go-sdk version) into a directory from t.TempDir and
// returns its path: the suite's client mode runs it with the scenario's
// server url. Under make test it is the one built for every package.
func GoConformanceClient(t testing.TB) string {
	t.Helper()
	if p := Prebuilt(t, "everything-client"); p != "" {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("mcptest: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "conformance-everything-client")
	cmd := exec.Command("go", "build", "-o", bin, goConformanceClientPkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcptest: go build %s: %v\n%s", goConformanceClientPkg, err, out)
	}
	return bin
}

// FilesystemServer returns the argv that runs the Node reference server
// @modelcontextprotocol/server-filesystem from .cache/node at the module root,
// allowed to access the directories roots. Missing dependencies are handled
// as in [EverythingServer].
func FilesystemServer(t testing.TB, roots ...string) []string {
	t.Helper()
	node, entry := nodePackage(t, "@modelcontextprotocol/server-filesystem")
	return append([]string{node, entry}, roots...)
}

// nodePackage returns the node binary and the entry script of the npm package
// pkg, as named by the "bin" field of its package.json.
func nodePackage(t testing.TB, pkg string) (node, entry string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv(skipInteropEnv) == "1" {
			t.Skipf("mcptest: %s (skipping: %s=1)", msg, skipInteropEnv)
		}
		t.Fatalf("mcptest: %s; run `make interop-deps` (or set %s=1 to skip interop tests)", msg, skipInteropEnv)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("mcptest: %v", err)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing("node not found in PATH: %v", err)
	}
	dir := filepath.Join(root, filepath.FromSlash(nodeModules), filepath.FromSlash(pkg))
	entry, err = packageBin(dir)
	if errors.Is(err, fs.ErrNotExist) {
		missing("%s is not installed under %s", pkg, filepath.Join(root, filepath.FromSlash(nodeModules)))
	}
	if err != nil {
		t.Fatalf("mcptest: %s: %v", pkg, err)
	}
	return node, entry
}

// packageBin returns the absolute path of the single executable declared in
// the "bin" field of dir/package.json, after checking that it exists.
func packageBin(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", fmt.Errorf("read package.json: %w", err)
	}
	var manifest struct {
		Bin json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		return "", fmt.Errorf("parse %s: %w", filepath.Join(dir, "package.json"), err)
	}
	// "bin" is either a path or an object mapping command names to paths.
	var rel string
	if err := json.Unmarshal(manifest.Bin, &rel); err != nil {
		var bins map[string]string
		if err := json.Unmarshal(manifest.Bin, &bins); err != nil || len(bins) != 1 {
			return "", fmt.Errorf("package.json in %s: want one \"bin\" entry, got %s", dir, manifest.Bin)
		}
		for _, p := range bins {
			rel = p
		}
	}
	entry := filepath.Join(dir, filepath.FromSlash(rel))
	if _, err := os.Stat(entry); err != nil {
		return "", fmt.Errorf("package entry point: %w", err)
	}
	return entry, nil
}

// moduleRoot returns the nearest directory at or above the working directory
// that holds a go.mod file.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find module root: no go.mod at or above %s", wd)
		}
		dir = parent
	}
}
