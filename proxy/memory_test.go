package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

var (
	floodOnce sync.Once
	floodPath string
	floodErr  error
)

// floodServer builds proxy/testdata/floodserver once per test binary run;
// under make test it is the one built for every package.
func floodServer(t testing.TB) string {
	t.Helper()
	if p := mcptest.Prebuilt(t, "floodserver"); p != "" {
		return p
	}
	floodOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aegis-floodserver-")
		if err != nil {
			floodErr = err
			return
		}
		floodPath = filepath.Join(dir, "floodserver")
		cmd := exec.Command("go", "build", "-o", floodPath, "./testdata/floodserver") // in this package's folder
		if out, err := cmd.CombinedOutput(); err != nil {
			floodErr = fmt.Errorf("go build floodserver: %v\n%s", err, out)
		}
	})
	if floodErr != nil {
		t.Fatal(floodErr)
	}
	return floodPath
}

// peakRSS samples the VmHWM (peak resident memory) of process pid until
// stop is closed, and returns the last value read, in MiB. The peak only
// grows, so the last read holds every peak before it.
func peakRSS(pid int, stop <-chan struct{}) <-chan float64 {
	res := make(chan float64, 1)
	go func() {
		var last int64
		for {
			if kb, err := procKB(pid, "VmHWM"); err == nil {
				last = kb
			}
			select {
			case <-stop:
				res <- float64(last) / 1024
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return res
}

// eventKinds counts the events of each kind in a state directory, as
// aegis events list prints them.
func eventKinds(t *testing.T, c *cli) map[string]int {
	t.Helper()
	out, stderr, code := c.aegis("events", "list", "--state-dir", c.state)
	if code != 0 {
		t.Fatalf("aegis events list: exit %d: %s", code, stderr)
	}
	kinds := map[string]int{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 3 {
			kinds[f[3]]++
		}
	}
	return kinds
}

// startMeasured starts argv with pipes to its stdin and from its stdout,
// its stderr kept, and samples its peak resident memory until stop is
// closed; peak then yields it, in MiB.
func startMeasured(t *testing.T, argv []string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout io.ReadCloser, stderr *syncBuffer, stop chan struct{}, peak <-chan float64) {
	t.Helper()
	cmd = exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	stderr = new(syncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = make(chan struct{})
	return cmd, stdin, stdout, stderr, stop, peakRSS(cmd.Process.Pid, stop)
}

// The memory a relay may hold, in MiB: far below what the floods below
// drove aegis to before it applied backpressure (well over a GiB), and
// well above what it needs (about 250 MiB, see BenchmarkWrapFloodRSS).
const floodRSSLimit = 400

// A server that writes 16 MiB notifications in a loop cannot make aegis
// hold them in memory faster than the disk takes them: aegis stops reading
// the server while what it read is not yet committed, so its resident
// memory stays bounded, and every frame still reaches the host and the
// record.
func TestWrapServerFloodOfLargeFramesKeepsMemoryBounded(t *testing.T) {
	// Not parallel: its 16 MiB commits must not wait on the CPU of the
	// tests beside it past the store's acknowledgement timeout.
	c := newCLI(t)
	const frames, size = 24, 16 << 20
	argv := c.wrapArgv(floodServer(t), "-size", fmt.Sprint(size), "-count", fmt.Sprint(frames))
	cmd, stdin, stdout, stderr, stop, peak := startMeasured(t, argv)
	defer stdin.Close()
	got, lines := drainLines(stdout)
	close(stop)
	werr := cmd.Wait()
	rss := <-peak
	t.Logf("peak RSS of aegis wrap over %d frames of %d MiB: %.0f MiB", frames, size>>20, rss)
	if werr != nil {
		t.Fatalf("aegis wrap: %v\n%s", werr, stderr.String())
	}
	if lines != frames || got != frames*(size+1) {
		t.Fatalf("the host got %d lines, %d bytes; want %d, %d", lines, got, frames, frames*(size+1))
	}
	if rss > floodRSSLimit {
		t.Errorf("aegis wrap peaked at %.0f MiB of resident memory relaying %d frames of %d MiB; want at most %d MiB", rss, frames, size>>20, floodRSSLimit)
	}
	if n := eventKinds(t, c)["frame.s2c"]; n != frames {
		t.Errorf("the stream holds %d frame.s2c events, want %d", n, frames)
	}
}

// A server that answers each of a host's calls with 16 MiB, to a host that
// reads late, cannot make aegis queue the answers in memory: each answer
// waits for its outcome to be durable and for the host, and aegis stops
// reading the server while too many bytes wait. Every answer still reaches
// the host after its outcome. (Before the backpressure this pattern peaked
// near 300 MiB, not in the GiBs: the writer blocked on the host held the
// path's lock, which stopped the reader; the test guards the answer path.)
func TestWrapSlowHostOfLargeAnswersKeepsMemoryBounded(t *testing.T) {
	// Not parallel: its 16 MiB commits must not wait on the CPU of the
	// tests beside it past the store's acknowledgement timeout.
	c := newCLI(t)
	const calls, size = 24, 16 << 20
	argv := c.wrapArgv(floodServer(t), "-answers", "-size", fmt.Sprint(size))
	cmd, stdin, stdout, stderr, stop, peak := startMeasured(t, argv)
	var reqs bytes.Buffer
	for i := range calls {
		fmt.Fprintf(&reqs, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"big","arguments":{}}}`+"\n", i+1)
	}
	go io.Copy(stdin, &reqs)
	// A slow host: it reads nothing for a while, then everything.
	time.Sleep(2 * time.Second)
	br := bufio.NewReaderSize(stdout, 1<<20)
	var answers int
	for answers < calls {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d answers: %v\n%s", answers, err, stderr.String())
		}
		if len(line) != size+1 || !bytes.Contains(line[:64], fmt.Appendf(nil, `"id":%d,`, answers+1)) {
			t.Fatalf("answer %d: %d bytes %q…", answers+1, len(line), line[:min(len(line), 64)])
		}
		answers++
	}
	stdin.Close()
	close(stop)
	werr := cmd.Wait()
	rss := <-peak
	t.Logf("peak RSS of aegis wrap over %d answers of %d MiB to a slow host: %.0f MiB", calls, size>>20, rss)
	if werr != nil {
		t.Fatalf("aegis wrap: %v\n%s", werr, stderr.String())
	}
	if rss > floodRSSLimit {
		t.Errorf("aegis wrap peaked at %.0f MiB of resident memory holding answers for a slow host; want at most %d MiB", rss, floodRSSLimit)
	}
	k := eventKinds(t, c)
	if k["call.outcome"] != calls || k["frame.s2c"] != calls {
		t.Errorf("the stream holds %d outcomes and %d server frames, want %d each", k["call.outcome"], k["frame.s2c"], calls)
	}
}

// A state directory capped with --max-state-size fails closed at the cap:
// the server that floods it is stopped, aegis exits 1 saying the directory
// reached its cap and what to do, and nothing is deleted to make room. A
// start under the same cap is refused the same way; without it the stream
// reads back whole.
func TestWrapAtStateSizeCapFailsClosed(t *testing.T) {
	c := newCLI(t)
	argv := c.wrapArgv(floodServer(t), "-size", fmt.Sprint(256<<10))
	argv = append(argv[:len(argv)-4:len(argv)-4], append([]string{"--max-state-size", "8MiB", "--"}, argv[len(argv)-3:]...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cmd.Stdout = io.Discard
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait() // the server floods without end: only the cap ends this
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("aegis wrap at the cap: %v, want exit 1\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"aegis: error: recording failed; the server was stopped: ",
		"the state directory " + c.state + " reached its size cap of 8 MiB",
		"every acknowledged event is kept, nothing was dropped or deleted",
		"aegis: hint: raise --max-state-size",
		"aegis export --state-dir " + c.state,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}

	_, again, code := c.aegis(argv[1:]...)
	if code != 1 || !strings.Contains(again, "aegis: error: will not start: the state directory "+c.state+" reached its size cap of 8 MiB") ||
		!strings.Contains(again, "aegis: hint: raise --max-state-size") {
		t.Errorf("a start on the full directory under the same cap: exit %d\n%s", code, again)
	}

	k := eventKinds(t, c)
	if k["session.opened"] != 1 || k["child.started"] != 1 || k["frame.s2c"] < 16 {
		t.Errorf("the stream read back %v; want the session's open, its start and the frames before the cap", k)
	}
}

// drainLines reads r to its end, however long its lines, without holding
// them, and returns how many bytes and whole lines it read.
func drainLines(r io.Reader) (bytes, lines int64) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadSlice('\n')
		bytes += int64(len(line))
		if err == nil {
			lines++
		} else if err != bufio.ErrBufferFull {
			return bytes, lines
		}
	}
}
