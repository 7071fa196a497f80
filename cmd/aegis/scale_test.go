package main

// What aegis's commands cost on a big state directory, measured with the
// real binaries as a host and a user run them: a store of many recorded
// calls is built through aegis wrap, then a new wrap's start-up (on a new
// record, and continuing the existing one, which catches it up), aegis
// sessions, aegis export and aegis verify are each run as a process and
// timed from start to exit (or to the first initialize answer), with the
// peak RSS the kernel reports for it.
//
//	go test -run TestScaleStoreStaysWithinMemoryAndAnswers ./cmd/aegis/
//	go test -run '^$' -bench BenchmarkScale -benchtime 1x -timeout 60m ./cmd/aegis/
//
// The test (part of make test) builds a modest store and holds the memory
// goal and the answers; the benchmark (part of make bench) builds one of
// scaleBenchCalls calls, or AEGIS_SCALE_CALLS, and reports the start-up,
// memory and time figures against their goals (docs/BENCHMARKS.md, S1-S4).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis-benchreport/benchjson"
	"github.com/aegis-dev/aegis/projector"
)

const (
	scaleTestCalls  = 10_000  // calls of the store TestScale… builds
	scaleBenchCalls = 300_000 // calls of the store BenchmarkScale builds
	scaleCallsEnv   = "AEGIS_SCALE_CALLS"

	// The store is recorded by scaleSessions aegis wrap runs on the same
	// record file, about as many calls in each. The ones before the last
	// end cleanly, and a timed start without calls follows them: it checks
	// a whole closed session against the record. The last is SIGKILLed, so
	// the next start is one after an unclean stop and has a whole session
	// to catch up.
	scaleSessions = 3
	scaleBatch    = 500 // tools/call per JSON-RPC batch
	scaleInFlight = 4   // batches written and not yet answered

	scaleSmallCalls = 10 // calls of the small store the start-ups are compared with

	scaleStartReps    = 5 // timed starts per series in the benchmark, interleaved
	scaleSessionsReps = 3 // timed runs of aegis sessions in the benchmark

	// scaleMaxRSSMiB is the memory goal of catch-up, export, verify and
	// sessions, whatever the record size.
	scaleMaxRSSMiB = 256

	scaleExitTimeout = 2 * time.Minute // for a wrap to exit once its host is gone

	// scaleMessage is the echo argument of every call: 100 bytes.
	scaleMessage = "0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqr"

	// scaleInitialize is the host's first frame. It asks for protocol
	// 2025-03-26, the last one that has JSON-RPC batches (the example
	// server refuses a batch under a later one): the store is filled with
	// batches, each call of which aegis records as its own intent and
	// outcome.
	scaleInitialize  = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"scale-test","version":"1"}}}` + "\n"
	scaleInitialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
)

// scaleStore is a state directory, signing key and record file that real
// aegis wrap runs record into.
type scaleStore struct {
	tb       testing.TB
	bin      string
	dir      string
	state    string
	audit    string
	key      string
	pub      string // the key's public half, as aegis verify --key takes it
	env      []string
	calls    int // tools/calls recorded in the stream
	sessions int // sessions in the stream
}

func newScaleStore(tb testing.TB, bin string) *scaleStore {
	tb.Helper()
	dir := tb.TempDir()
	s := &scaleStore{tb: tb, bin: bin, dir: dir, state: filepath.Join(dir, "state"), audit: filepath.Join(dir, "calls.aarl"),
		key: filepath.Join(dir, "signing.key")}
	runtime := filepath.Join(dir, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		tb.Fatal(err)
	}
	s.env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	r, err := s.run("keygen", "--out", s.key)
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(r.stdout) {
		if v, ok := strings.CutPrefix(line, "public_key "); ok {
			s.pub = strings.TrimSpace(v)
		}
	}
	if s.pub == "" {
		tb.Fatalf("keygen printed no public key: %q", r.stdout)
	}
	return s
}

// scaleRun is one finished aegis command.
type scaleRun struct {
	stdout, stderr string
	code           int
	wall           time.Duration // from just before exec to its exit
	rssMiB         float64       // peak RSS, from the kernel's rusage
}

// run runs the aegis binary to its exit. A non-zero exit is not an error:
// the caller judges the code.
func (s *scaleStore) run(args ...string) (scaleRun, error) {
	c := exec.Command(filepath.Join(s.bin, "aegis"), args...)
	c.Env = s.env
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	t0 := time.Now()
	err := c.Run()
	r := scaleRun{wall: time.Since(t0), stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		return r, fmt.Errorf("aegis %s: %w", strings.Join(args, " "), err)
	}
	r.rssMiB = maxRSSMiB(c.ProcessState)
	return r, nil
}

// maxRSSMiB is the peak resident set of a process that exited, as wait4
// reports it: the largest of the process and the children it waited for
// (Linux counts ru_maxrss in KiB). It is never less than the peak of this
// test process when it started the child: the child begins as this
// process's memory (go starts it with vfork), and Linux takes that
// memory's peak into the child's at exec. So a figure at or under
// selfPeakMiB is an upper bound, not the child's own; one above it is the
// child's own.
func maxRSSMiB(ps *os.ProcessState) float64 {
	return float64(maxRSSKiB(ps)) / 1024
}

// selfPeakMiB is this process's peak resident set so far (VmHWM), or 0 if
// it cannot be read.
func selfPeakMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// scaleWrap is a running aegis wrap around the example server, driven
// over raw JSON-RPC lines.
type scaleWrap struct {
	c      *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer // read only after the process was waited for
	start  time.Time
	nextID int64
	waited bool
}

// startWrap starts aegis wrap on the store with record file audit and
// writes the initialize request at once, as a host does.
func (s *scaleStore) startWrap(audit string) (*scaleWrap, error) {
	c := exec.Command(filepath.Join(s.bin, "aegis"), "wrap", "--audit", audit, "--signing-key", s.key,
		"--state-dir", s.state, "--", filepath.Join(s.bin, "aegis-example-server"))
	c.Env = s.env
	w := &scaleWrap{c: c, nextID: 1}
	c.Stderr = &w.stderr
	var err error
	if w.in, err = c.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.out = bufio.NewReaderSize(out, 1<<20)
	w.start = time.Now()
	if err := c.Start(); err != nil {
		return nil, err
	}
	s.sessions++
	s.tb.Cleanup(func() {
		if !w.waited {
			c.Process.Kill()
			w.wait()
		}
	})
	if _, err := io.WriteString(w.in, scaleInitialize); err != nil {
		return w, fmt.Errorf("write initialize: %w", err)
	}
	return w, nil
}

// initialized reads the initialize answer, returns the time from just
// before the start to its arrival, and sends notifications/initialized.
func (w *scaleWrap) initialized() (time.Duration, error) {
	line, err := w.out.ReadBytes('\n')
	d := time.Since(w.start)
	if err != nil {
		return 0, fmt.Errorf("read initialize answer: %w", err)
	}
	if !bytes.HasPrefix(line, []byte(`{"jsonrpc":"2.0","id":0,"result":`)) {
		return 0, fmt.Errorf("initialize answer: %s", line)
	}
	if _, err := io.WriteString(w.in, scaleInitialized); err != nil {
		return 0, fmt.Errorf("write initialized: %w", err)
	}
	return d, nil
}

// appendEchoBatch appends a JSON-RPC batch of n tools/call echo with ids
// from first on, and a newline.
func appendEchoBatch(buf []byte, first int64, n int) []byte {
	buf = append(buf, '[')
	for i := range n {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"jsonrpc":"2.0","id":`...)
		buf = strconv.AppendInt(buf, first+int64(i), 10)
		buf = append(buf, `,"method":"tools/call","params":{"name":"echo","arguments":{"message":"`+scaleMessage+`"}}}`...)
	}
	return append(buf, ']', '\n')
}

// calls makes n recorded tools/call echo in batches of scaleBatch, with
// scaleInFlight batches outstanding: a writer sends a batch whenever fewer
// are unanswered, and the reader takes the answers (one line per batch)
// in whatever order they come, checking that every call succeeded.
func (w *scaleWrap) calls(n int) error {
	batches := (n + scaleBatch - 1) / scaleBatch
	tokens := make(chan struct{}, scaleInFlight)
	stop := make(chan struct{})
	werr := make(chan error, 1)
	first := w.nextID
	w.nextID += int64(n)
	go func() {
		var buf []byte
		for b := range batches {
			select {
			case tokens <- struct{}{}:
			case <-stop:
				werr <- nil
				return
			}
			buf = appendEchoBatch(buf[:0], first+int64(b*scaleBatch), min(scaleBatch, n-b*scaleBatch))
			if _, err := w.in.Write(buf); err != nil {
				werr <- fmt.Errorf("write batch: %w", err)
				return
			}
		}
		werr <- nil
	}()
	fail := func(err error) error {
		close(stop)
		w.in.Close() // unblocks a writer stuck on a full pipe
		if e := <-werr; e != nil {
			err = fmt.Errorf("%w (and %v)", err, e)
		}
		return err
	}
	answered := 0
	for range batches {
		line, err := w.out.ReadBytes('\n')
		if err != nil {
			return fail(fmt.Errorf("read a batch answer after %d calls: %w", answered, err))
		}
		if line[0] != '[' || bytes.Contains(line, []byte(`"error":`)) || bytes.Contains(line, []byte(`"isError":true`)) {
			return fail(fmt.Errorf("batch answer after %d calls: %.300s", answered, line))
		}
		answered += bytes.Count(line, []byte(`"result":`))
		<-tokens
	}
	if err := <-werr; err != nil {
		return err
	}
	if answered != n {
		return fmt.Errorf("%d calls answered, want %d", answered, n)
	}
	return nil
}

// wait drains the output and waits for the process; it returns its exit
// error.
func (w *scaleWrap) wait() error {
	done := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, w.out)
		done <- w.c.Wait()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(scaleExitTimeout):
		w.c.Process.Kill()
		<-done
		err = fmt.Errorf("did not exit %v after its host left", scaleExitTimeout)
	}
	w.waited = true
	return err
}

// close closes the host's side, waits for aegis to exit and returns its
// peak RSS.
func (w *scaleWrap) close() (float64, error) {
	w.in.Close()
	if err := w.wait(); err != nil {
		return 0, fmt.Errorf("aegis wrap: %w\nstderr:\n%s", err, w.stderr.Bytes())
	}
	return maxRSSMiB(w.c.ProcessState), nil
}

// kill SIGKILLs aegis wrap (its server then reads EOF and exits) and
// returns its peak RSS.
func (w *scaleWrap) kill() (float64, error) {
	w.c.Process.Signal(syscall.SIGKILL)
	err := w.wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, fmt.Errorf("aegis wrap killed: %v\nstderr:\n%s", err, w.stderr.Bytes())
	}
	return maxRSSMiB(w.c.ProcessState), nil
}

// record records calls tools/calls in sessions aegis wrap runs on the
// store's record file, about as many in each; with killLast the last run
// is SIGKILLed once every answer arrived. It returns the peak RSS of the
// runs.
func (s *scaleStore) record(calls, sessions int, killLast bool) (float64, error) {
	rss := 0.0
	for i := range sessions {
		n := calls / sessions
		if i == sessions-1 {
			n = calls - (sessions-1)*(calls/sessions)
		}
		w, err := s.startWrap(s.audit)
		if err != nil {
			return 0, err
		}
		if _, err := w.initialized(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := w.calls(n); err != nil {
			return 0, err
		}
		s.calls += n
		d := time.Since(t0)
		var r float64
		if i == sessions-1 && killLast {
			r, err = w.kill()
		} else {
			r, err = w.close()
		}
		if err != nil {
			return 0, err
		}
		rss = max(rss, r)
		s.tb.Logf("session %d of the store: %d calls in %.1f s, %.0f calls/s; aegis wrap peak RSS %.1f MiB", s.sessions, n, d.Seconds(), float64(n)/d.Seconds(), r)
	}
	return rss, nil
}

// timedStart starts aegis wrap on record file audit, returns the time to
// its initialize answer, then closes the host's side and returns its peak
// RSS once it exited.
func (s *scaleStore) timedStart(audit string) (time.Duration, float64, error) {
	w, err := s.startWrap(audit)
	if err != nil {
		return 0, 0, err
	}
	d, err := w.initialized()
	if err != nil {
		w.c.Process.Kill()
		w.wait()
		return 0, 0, fmt.Errorf("%w\nstderr:\n%s", err, w.stderr.Bytes())
	}
	rss, err := w.close()
	return d, rss, err
}

// scaleSession is what the checks need of aegis sessions --json.
type scaleSession struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Calls int    `json:"calls"`
}

// checkSessions runs aegis sessions --json and checks it lists every
// session of the store and counts every recorded call.
func (s *scaleStore) checkSessions() (scaleRun, error) { return s.checkSessionsIn(s.state) }

// checkSessionsIn is checkSessions of the state directory dir: the live
// one, or the archive a rotation rolled the whole store over into.
func (s *scaleStore) checkSessionsIn(dir string) (scaleRun, error) {
	r, err := s.run("sessions", "--state-dir", dir, "--json")
	if err != nil {
		return r, err
	}
	if r.code != 0 {
		return r, fmt.Errorf("aegis sessions: exit %d\n%s", r.code, r.stderr)
	}
	var list []scaleSession
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		return r, fmt.Errorf("aegis sessions --json: %w", err)
	}
	calls := 0
	for _, x := range list {
		calls += x.Calls
	}
	if len(list) != s.sessions || calls != s.calls {
		return r, fmt.Errorf("aegis sessions --json lists %d sessions and %d calls, want %d and %d", len(list), calls, s.sessions, s.calls)
	}
	return r, nil
}

// checkExport runs aegis export of the whole stream and checks that it
// rebuilt the record file byte for byte.
func (s *scaleStore) checkExport() (scaleRun, error) {
	out := filepath.Join(s.dir, "rebuilt.aarl")
	defer os.Remove(out)
	r, err := s.run("export", "--state-dir", s.state, "--out", out)
	if err != nil {
		return r, err
	}
	if r.code != 0 {
		return r, fmt.Errorf("aegis export: exit %d\n%s", r.code, r.stderr)
	}
	same, err := sameFiles(out, s.audit)
	if err != nil {
		return r, err
	}
	if !same {
		return r, fmt.Errorf("aegis export wrote %s, which differs from the record %s", out, s.audit)
	}
	return r, nil
}

// checkVerify runs aegis verify, pinned to the store's key, on the record
// file and checks that it is Verified.
func (s *scaleStore) checkVerify() (scaleRun, error) {
	r, err := s.run("verify", "--key", s.pub, s.audit)
	if err != nil {
		return r, err
	}
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Verified (pinned") {
		return r, fmt.Errorf("aegis verify: exit %d\n%.2000s\n%s", r.code, r.stdout, r.stderr)
	}
	return r, nil
}

// sameFiles reports whether the files a and b hold the same bytes, read
// in pieces.
func sameFiles(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ra, rb := bufio.NewReaderSize(fa, 1<<20), bufio.NewReaderSize(fb, 1<<20)
	pa, pb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, ea := io.ReadFull(ra, pa)
		nb, eb := io.ReadFull(rb, pb)
		if !bytes.Equal(pa[:na], pb[:nb]) {
			return false, nil
		}
		if ea != nil || eb != nil {
			ends := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
			if !ends(ea) || !ends(eb) {
				return false, errors.Join(ea, eb)
			}
			return ends(ea) && ends(eb), nil
		}
	}
}

// fileLines counts the lines of a file, read in pieces.
func fileLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	buf := make([]byte, 1<<20)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// scaleFigures is what one scale run measured.
type scaleFigures struct {
	calls       int
	fill        time.Duration // recording every call, starts and exits included
	fillRSS     float64       // peak RSS of the wraps that recorded them
	stateBytes  int64
	recordBytes int64
	recordLines int

	// The first start continuing the record after the clean sessions, and
	// the first after the unclean stop: each has a whole session to read
	// back, the second one to catch up.
	afterClean, afterKill       time.Duration
	afterCleanRSS, afterKillRSS float64

	// Start-ups to the initialize answer, interleaved: on a new record
	// file and continuing the store's own, on the big and the small store.
	newBig, newSmall, contBig, contSmall []time.Duration
	newBigRSS, contBigRSS                float64 // the peak of the series

	sessions       []time.Duration
	sessionsRSS    float64 // the peak of the runs
	export, verify scaleRun

	// rotate is aegis rotate of the big store; afterRotateKill the first
	// start after a session killed on the rotated store.
	rotate scaleRun
	// archiveSessions and archiveReplay are aegis sessions (its first
	// call) and aegis replay last of the archive the rotation made.
	archiveSessions, archiveReplay scaleRun
	afterRotateKill                time.Duration

	// selfPeak is this test process's peak RSS at the end: no peak RSS
	// above is less (see maxRSSMiB).
	selfPeak float64
}

// scaleMeasure builds a store of calls calls and takes every figure of
// scaleFigures, checking every answer on the way: a start-up answers
// initialize, aegis sessions lists every session and call, aegis export
// rebuilds the record byte for byte and aegis verify finds it Verified.
// Each start-up series runs reps times (after one untimed round), aegis
// sessions sessionsReps times.
func scaleMeasure(tb testing.TB, calls, reps, sessionsReps int) *scaleFigures {
	bin := bins(tb)
	big := newScaleStore(tb, bin)
	f := &scaleFigures{calls: calls}

	t0 := time.Now()
	clean := calls * (scaleSessions - 1) / scaleSessions
	rss, err := big.record(clean, scaleSessions-1, false)
	if err != nil {
		tb.Fatal(err)
	}
	f.fill = time.Since(t0)
	if f.afterClean, f.afterCleanRSS, err = big.timedStart(big.audit); err != nil {
		tb.Fatalf("first start after the clean sessions: %v", err)
	}
	tb.Logf("first start continuing the record after %d clean sessions: initialize answered after %.1f ms; peak RSS %.1f MiB",
		scaleSessions-1, ms(f.afterClean), f.afterCleanRSS)
	t0 = time.Now()
	if f.fillRSS, err = big.record(calls-clean, 1, true); err != nil {
		tb.Fatal(err)
	}
	f.fill += time.Since(t0)
	f.fillRSS = max(f.fillRSS, rss)
	if f.stateBytes, err = dirBytes(big.state); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d calls in %d sessions in %.1f s: %.0f calls/s; state directory %.0f MiB",
		calls, scaleSessions, f.fill.Seconds(), float64(calls)/f.fill.Seconds(), float64(f.stateBytes)/(1<<20))

	// The killed session left its record file behind the stream; the next
	// start catches it up and closes cleanly, so the record verifies.
	if f.afterKill, f.afterKillRSS, err = big.timedStart(big.audit); err != nil {
		tb.Fatalf("first start after the unclean stop: %v", err)
	}
	tb.Logf("first start after the unclean stop: initialize answered after %.1f ms; peak RSS %.1f MiB", ms(f.afterKill), f.afterKillRSS)
	fi, err := os.Stat(big.audit)
	if err != nil {
		tb.Fatal(err)
	}
	f.recordBytes = fi.Size()
	if f.recordLines, err = fileLines(big.audit); err != nil {
		tb.Fatal(err)
	}

	for range sessionsReps {
		r, err := big.checkSessions()
		if err != nil {
			tb.Fatal(err)
		}
		f.sessions = append(f.sessions, r.wall)
		f.sessionsRSS = max(f.sessionsRSS, r.rssMiB)
	}
	tb.Logf("aegis sessions: %.2f s (median), peak RSS %.1f MiB", benchjson.Median(f.sessions).Seconds(), f.sessionsRSS)
	if f.export, err = big.checkExport(); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("aegis export: %.2f s, peak RSS %.1f MiB (%d lines, %.0f MiB)", f.export.wall.Seconds(), f.export.rssMiB, f.recordLines, float64(f.recordBytes)/(1<<20))
	if f.verify, err = big.checkVerify(); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("aegis verify: %.2f s, peak RSS %.1f MiB", f.verify.wall.Seconds(), f.verify.rssMiB)

	small := newScaleStore(tb, bin)
	if _, err := small.record(scaleSmallCalls, 1, false); err != nil {
		tb.Fatal(err)
	}
	starts := 0
	series := []struct {
		name string
		s    *scaleStore
		cont bool
		d    *[]time.Duration
		rss  *float64
	}{
		{"new record, big store", big, false, &f.newBig, &f.newBigRSS},
		{"new record, small store", small, false, &f.newSmall, nil},
		{"continuing the record, big store", big, true, &f.contBig, &f.contBigRSS},
		{"continuing the record, small store", small, true, &f.contSmall, nil},
	}
	// One untimed round first (page cache), then reps rounds, each in a
	// fresh order seeded by its number, so that noise hits the series
	// alike and runs repeat the order.
	for round := range reps + 1 {
		for _, k := range rand.New(rand.NewPCG(uint64(round), 0)).Perm(len(series)) {
			x := series[k]
			audit := x.s.audit
			if !x.cont {
				starts++
				audit = filepath.Join(x.s.dir, fmt.Sprintf("new-%d.aarl", starts))
			}
			d, rss, err := x.s.timedStart(audit)
			if err != nil {
				tb.Fatalf("start, %s: %v", x.name, err)
			}
			if round == 0 {
				continue
			}
			*x.d = append(*x.d, d)
			if x.rss != nil {
				*x.rss = max(*x.rss, rss)
			}
		}
	}
	for _, x := range series {
		tb.Logf("start to initialize answer, %s: median %.1f ms of %d", x.name, ms(benchjson.Median(*x.d)), len(*x.d))
	}
	tb.Logf("peak RSS of the starts continuing the big store's record (catch-up): %.1f MiB; on a new record: %.1f MiB", f.contBigRSS, f.newBigRSS)
	// The starts added sessions without calls; the listing still counts
	// every call.
	if _, err := big.checkSessions(); err != nil {
		tb.Fatal(err)
	}

	// Retention: a rotation seals the big store's record and rolls its
	// stream over; a session killed after it leaves a stream that holds
	// only what came since, and the next start recovers only that.
	if f.rotate, err = big.run("rotate", "--state-dir", big.state, "--signing-key", big.key); err != nil {
		tb.Fatal(err)
	}
	seg := projector.SegmentName(big.audit, 1)
	if f.rotate.code != 0 || !strings.Contains(f.rotate.stdout, "sealed "+big.audit) {
		tb.Fatalf("aegis rotate: exit %d\n%s%s", f.rotate.code, f.rotate.stdout, f.rotate.stderr)
	}
	tb.Logf("aegis rotate: %.2f s, peak RSS %.1f MiB", f.rotate.wall.Seconds(), f.rotate.rssMiB)
	if r, err := big.run("verify", "--key", big.pub, seg); err != nil || r.code != 0 {
		tb.Fatalf("aegis verify of the sealed segment: %v\n%s%s", err, r.stdout, r.stderr)
	}
	// The archive answers from the index that went with the stream, on
	// the first call as on any other, and replays its last session by
	// reading that session alone.
	archives, _ := filepath.Glob(filepath.Join(big.state, "archive", "stream-1-*"))
	if len(archives) != 1 {
		tb.Fatalf("archives after the rotation: %v", archives)
	}
	if f.archiveSessions, err = big.checkSessionsIn(archives[0]); err != nil {
		tb.Fatalf("the archive: %v", err)
	}
	if f.archiveReplay, err = big.run("replay", "--state-dir", archives[0], "last"); err != nil || f.archiveReplay.code != 0 || !strings.Contains(f.archiveReplay.stdout, "initialize") {
		tb.Fatalf("aegis replay last of the archive: %v, exit %d\n%s", err, f.archiveReplay.code, f.archiveReplay.stderr)
	}
	tb.Logf("the archive: aegis sessions (first call) %.3f s, aegis replay last %.3f s", f.archiveSessions.wall.Seconds(), f.archiveReplay.wall.Seconds())
	if _, err := big.record(scaleSmallCalls, 1, true); err != nil {
		tb.Fatal(err)
	}
	if f.afterRotateKill, _, err = big.timedStart(big.audit); err != nil {
		tb.Fatalf("first start after the unclean stop on the rotated store: %v", err)
	}
	tb.Logf("first start after an unclean stop on the rotated store: initialize answered after %.1f ms", ms(f.afterRotateKill))
	f.selfPeak = selfPeakMiB()
	tb.Logf("peak RSS of this test process, which bounds every peak RSS above from below: %.1f MiB", f.selfPeak)
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestScaleStoreStaysWithinMemoryAndAnswers builds a store of
// scaleTestCalls calls over sessions of which the last was killed, and
// holds catch-up (the next wraps on the same record), aegis export, aegis
// verify and aegis sessions to the memory goal, with right answers: the
// export equals the record, verify finds it Verified, sessions counts
// every call. Speed is BenchmarkScale's to measure, not this test's.
func TestScaleStoreStaysWithinMemoryAndAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("records many calls through aegis wrap")
	}
	t.Parallel() // it measures in a test process of its own: beside the others
	// A child's peak RSS counts this process's resident memory at the
	// fork, and under -race this process grows with every test it has
	// run: the measurements run in a fresh test process of their own.
	if os.Getenv("AEGIS_SCALE_CHILD") == "" {
		c := exec.Command(os.Args[0], "-test.run=^TestScaleStoreStaysWithinMemoryAndAnswers$", "-test.v", "-test.count=1")
		c.Env = append(os.Environ(), "AEGIS_SCALE_CHILD=1")
		out, err := c.CombinedOutput()
		t.Logf("the measuring test process:\n%s", out)
		if err != nil {
			t.Fatalf("the measuring test process failed: %v", err)
		}
		return
	}
	f := scaleMeasure(t, scaleTestCalls, 1, 1)
	for _, c := range []struct {
		what string
		rss  float64
	}{
		{"the first start after the clean sessions (catch-up)", f.afterCleanRSS},
		{"the first start after an unclean stop (catch-up)", f.afterKillRSS},
		{"a start continuing the record (catch-up)", f.contBigRSS},
		{"aegis export", f.export.rssMiB},
		{"aegis verify", f.verify.rssMiB},
		{"aegis sessions", f.sessionsRSS},
		{"aegis rotate", f.rotate.rssMiB},
	} {
		if c.rss > scaleMaxRSSMiB || c.rss <= 0 {
			t.Errorf("peak RSS of %s on a store of %d calls: %.1f MiB, want at most %d MiB", c.what, f.calls, c.rss, scaleMaxRSSMiB)
		}
	}
}

// BenchmarkScale builds a store of scaleBenchCalls recorded calls
// (AEGIS_SCALE_CALLS overrides it) and reports, against the goals:
//
//   - S1: start to the first initialize answer of aegis wrap on a new
//     record file, on the big store − on a small one (medians);
//   - S2: the same continuing the store's record (which catches it up),
//     and for the first start after the clean sessions and the first
//     after the unclean stop, each of which reads a whole session back,
//     against the small store's median;
//   - S3: the peak RSS of catch-up (the starts continuing the record),
//     aegis export, aegis verify and aegis sessions;
//   - S4: the wall time of aegis sessions (median);
//   - S5: aegis rotate of the big store (time, peak RSS), and the first
//     start after an unclean stop on the rotated store against the small
//     store's median.
//
// It runs once per b.Loop iteration; make bench runs it with -benchtime
// 1x, and merges the figures into AEGIS_BENCH_JSON.
func BenchmarkScale(b *testing.B) {
	calls := scaleBenchCalls
	if v := os.Getenv(scaleCallsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < scaleSessions {
			b.Fatalf("%s=%q: want a number of calls of at least %d", scaleCallsEnv, v, scaleSessions)
		}
		calls = n
	}
	var f *scaleFigures
	for b.Loop() {
		f = scaleMeasure(b, calls, scaleStartReps, scaleSessionsReps)
	}
	newSmall, contSmall := ms(benchjson.Median(f.newSmall)), ms(benchjson.Median(f.contSmall))
	fig := map[string]float64{
		"calls":                             float64(f.calls),
		"record-lines":                      float64(f.recordLines),
		"record-MiB":                        float64(f.recordBytes) / (1 << 20),
		"state-MiB":                         float64(f.stateBytes) / (1 << 20),
		"fill-calls/s":                      float64(f.calls) / f.fill.Seconds(),
		"fill-wrap-rss-MiB":                 f.fillRSS,
		"startup-new-big-ms":                ms(benchjson.Median(f.newBig)),
		"startup-new-small-ms":              newSmall,
		"startup-new-diff-ms":               ms(benchjson.Median(f.newBig)) - newSmall,
		"startup-cont-big-ms":               ms(benchjson.Median(f.contBig)),
		"startup-cont-small-ms":             contSmall,
		"startup-cont-diff-ms":              ms(benchjson.Median(f.contBig)) - contSmall,
		"startup-after-kill-ms":             ms(f.afterKill),
		"startup-after-kill-diff-ms":        ms(f.afterKill) - contSmall,
		"startup-after-clean-ms":            ms(f.afterClean),
		"startup-after-clean-diff-ms":       ms(f.afterClean) - contSmall,
		"startup-new-rss-MiB":               f.newBigRSS,
		"catchup-rss-MiB":                   max(f.afterCleanRSS, f.afterKillRSS, f.contBigRSS),
		"catchup-after-clean-rss-MiB":       f.afterCleanRSS,
		"catchup-after-kill-rss-MiB":        f.afterKillRSS,
		"export-rss-MiB":                    f.export.rssMiB,
		"verify-rss-MiB":                    f.verify.rssMiB,
		"sessions-rss-MiB":                  f.sessionsRSS,
		"max-rss-MiB":                       max(f.afterCleanRSS, f.afterKillRSS, f.contBigRSS, f.export.rssMiB, f.verify.rssMiB, f.sessionsRSS),
		"export-s":                          f.export.wall.Seconds(),
		"verify-s":                          f.verify.wall.Seconds(),
		"sessions-s":                        benchjson.Median(f.sessions).Seconds(),
		"rss-floor-MiB":                     f.selfPeak,
		"rotate-s":                          f.rotate.wall.Seconds(),
		"rotate-rss-MiB":                    f.rotate.rssMiB,
		"startup-after-rotate-kill-ms":      ms(f.afterRotateKill),
		"startup-after-rotate-kill-diff-ms": ms(f.afterRotateKill) - contSmall,
	}
	keys := make([]string, 0, len(fig))
	for k := range fig {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.ReportMetric(fig[k], k)
	}
	if path := os.Getenv("AEGIS_BENCH_JSON"); path != "" {
		// The proxy benchmarks, which make bench runs first, describe the
		// machine in the same file.
		if err := benchjson.Merge(path, b.Name(), fig, nil); err != nil {
			b.Errorf("AEGIS_BENCH_JSON: %v", err)
		}
	}
}
