package proxy_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy/relay"
	"github.com/aegis-dev/aegis/sandbox"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

var (
	binOnce   sync.Once
	binDir    string
	binShared bool // binDir is make test's, not this run's
	binErr    error
)

// bin builds the aegis binaries and test fixtures once per test run and
// returns the path of the named one. Under make test they are the ones it
// built for every package (AEGIS_TEST_BINDIR), linked once.
func bin(t testing.TB, name string) string {
	t.Helper()
	binOnce.Do(func() {
		if d := os.Getenv("AEGIS_TEST_BINDIR"); d != "" {
			binDir, binShared = d, true
			return
		}
		binDir, binErr = os.MkdirTemp("", "aegis-proxy-test-bin")
		if binErr != nil {
			return
		}
		var root string
		if root, binErr = filepath.Abs(".."); binErr != nil {
			return
		}
		// One build of the tools (go builds them side by side), and the
		// probe, static so that it needs no loader grants, beside it.
		builds := []*exec.Cmd{
			exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/aegis", "./cmd/aegis-example-server",
				"./proxy/testdata/rawserver", "./proxy/testdata/growserver", "./proxy/testdata/taskserver",
				"./proxy/testdata/spawner", "./proxy/testdata/pinserver", "./proxy/testdata/authclient"),
			exec.Command("go", "build", "-o", filepath.Join(binDir, "probe"), "./sandbox/testdata/probe"),
		}
		builds[1].Env = append(os.Environ(), "CGO_ENABLED=0")
		errs := make([]error, len(builds))
		var wg sync.WaitGroup
		for i, cmd := range builds {
			cmd.Dir = root
			wg.Go(func() {
				if b, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
				}
			})
		}
		wg.Wait()
		binErr = errors.Join(errs...)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); binShared && err != nil {
		t.Fatalf("%s is not among the binaries of AEGIS_TEST_BINDIR: add its package to TESTBINS in the Makefile (%v)", name, err)
	}
	return p
}

// removeBins deletes the binaries built by bin; TestMain calls it.
func removeBins() {
	if binDir != "" && !binShared {
		os.RemoveAll(binDir)
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// harness is one state directory, key and record file.
type harness struct {
	t     *testing.T
	dir   string
	state string
	audit string
	key   projector.PrivateKey
	store *events.Store
	// confine and self, when set, run the server confined.
	confine *sandbox.Profile
	self    string
	// policy, when set, gates the calls.
	policy *policy.Set
}

// parallelTests counts the parallel tests running. They run only once
// every serial test has ended.
var parallelTests atomic.Int32

// parallel marks t parallel (t.Parallel), counted for serialOnly.
func parallel(t *testing.T) {
	t.Parallel()
	parallelTests.Add(1)
	t.Cleanup(func() { parallelTests.Add(-1) })
}

// serialOnly fails t when parallel tests run: a relay or gateway run in
// this test process starts its servers as trees (sandbox.StartTree), and
// a tree's sweep takes every child of the process that it did not start as
// a leader for an orphan of the tree and ends it, the processes of the
// tests beside it too.
func serialOnly(t *testing.T) {
	t.Helper()
	if parallelTests.Load() > 0 {
		t.Fatal("this test runs the relay or the gateway in the test process, which ends every child process it did not start: it must not be parallel")
	}
}

// newHarness runs the relay in this test process: see serialOnly.
func newHarness(t *testing.T) *harness {
	t.Helper()
	serialOnly(t)
	dir := t.TempDir()
	key, err := projector.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: dir, state: filepath.Join(dir, "state"), audit: filepath.Join(dir, "calls.aarl"), key: key}
	h.open()
	return h
}

func (h *harness) open() {
	h.t.Helper()
	s, err := events.Open(context.Background(), events.Config{Dir: h.state})
	if err != nil {
		h.t.Fatalf("open store: %v", err)
	}
	h.store = s
	h.t.Cleanup(func() { s.Close(context.Background()) })
}

// wrapRun is one relay run.
type wrapRun struct {
	out    []byte
	res    relay.Result
	err    error
	sessID string
}

// run wraps argv, feeds it input from a host that then closes stdin, and
// closes the session. sigs, if not nil, is the signal channel.
func (h *harness) run(argv []string, input io.Reader, grace time.Duration, sigs chan os.Signal) wrapRun {
	h.t.Helper()
	ctx := context.Background()
	open := func(fact *sandbox.Fact) (*projector.Session, error) {
		cfg := projector.SessionConfig{Store: h.store, Key: h.key, AuditPath: h.audit, Argv: argv, Version: "test"}
		if fact != nil {
			cfg.Confinement = fact
		}
		return projector.OpenSession(ctx, cfg)
	}
	var out bytes.Buffer
	var stderr bytes.Buffer
	res, werr := relay.Wrap(ctx, relay.Config{
		Open: open, Confine: h.confine, Self: h.self, Stdin: input, Stdout: &out, Stderr: &stderr,
		Argv: argv, Grace: grace, Signals: sigs, Policy: h.policy,
	})
	sess := res.Session
	if sess == nil {
		return wrapRun{res: res, err: werr, out: out.Bytes()}
	}
	var stopped *relay.StoppedError
	if werr == nil || isStartError(werr) || errors.As(werr, &stopped) {
		if err := sess.Close(ctx); err != nil {
			h.t.Fatalf("session Close = %v", err)
		}
	} else {
		sess.Abandon()
	}
	if stderr.Len() > 0 {
		h.t.Logf("server stderr: %s", cut(stderr.String(), 2000))
	}
	return wrapRun{out: out.Bytes(), res: res, err: werr, sessID: sess.ID()}
}

func isStartError(err error) bool {
	_, ok := err.(*relay.StartError)
	return ok
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// lines returns the record file's lines, decoded.
func (h *harness) lines() []schemas.Line {
	h.t.Helper()
	b, err := os.ReadFile(h.audit)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []schemas.Line
	for _, raw := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		l, err := schemas.DecodeLine(raw)
		if err != nil {
			h.t.Fatalf("record line %q: %v", raw, err)
		}
		out = append(out, l)
	}
	return out
}

// verify runs the offline verifier pinned to the harness key.
func (h *harness) verify() verifier.Result {
	h.t.Helper()
	f, err := os.Open(h.audit)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	return verifier.Verify(f, verifier.Options{Keys: []ed25519.PublicKey{h.key.PublicKey()}})
}

// events returns every event of the stream.
func (h *harness) events() []events.Record {
	h.t.Helper()
	var out []events.Record
	if err := h.store.Replay(context.Background(), events.Position{}, func(r events.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// count returns how many events of kind the stream holds.
func (h *harness) count(kind schemas.Kind) int {
	n := 0
	for _, r := range h.events() {
		if r.Event.Kind == kind {
			n++
		}
	}
	return n
}

// frames returns the recorded frames of one direction, in order.
func (h *harness) frames(kind schemas.Kind) [][]byte {
	var out [][]byte
	for _, r := range h.events() {
		if r.Event.Kind != kind {
			continue
		}
		var fp schemas.FramePayload
		if err := json.Unmarshal(r.Event.Payload, &fp); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, fp.Bytes)
	}
	return out
}

func str(l schemas.Line, name string) string {
	s, _ := l.Str(name)
	return s
}

// obj returns a nested member as a map.
func obj(l schemas.Line, name string) map[string]any {
	v, _ := l.Get(name)
	m, _ := v.(map[string]any)
	return m
}

func ofType(ls []schemas.Line, typ string) []schemas.Line {
	var out []schemas.Line
	for _, l := range ls {
		if l.Type() == typ {
			out = append(out, l)
		}
	}
	return out
}

func joinLines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// exportAll rebuilds the record of every session from the stream.
func exportAll(t *testing.T, h *harness) []byte {
	t.Helper()
	rec, err := projector.ReadRecord(context.Background(), h.store)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range rec.Sessions {
		ids = append(ids, s.ID)
	}
	var b bytes.Buffer
	if _, err := rec.WriteSessions(&b, ids); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("confinement tests run as root (CI does)")
	}
}
