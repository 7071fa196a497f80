package events

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// The test binary doubles as the child process of the crash and lock tests.
func TestMain(m *testing.M) {
	switch os.Getenv("AEGIS_EVENTS_CHILD") {
	case "append":
		os.Exit(childAppend(os.Getenv("AEGIS_EVENTS_DIR"), os.Getenv("AEGIS_EVENTS_APPENDERS")))
	case "open":
		os.Exit(childOpen(os.Getenv("AEGIS_EVENTS_DIR")))
	}
	os.Exit(m.Run())
}

// childAppend appends from several goroutines forever and prints
// "ack <appender> <i> <seq> <index> <id>" after each Append returns.
func childAppend(dir, appenders string) int {
	n, _ := strconv.Atoi(appenders)
	s, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sess, _ := s.NewSession()
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, "ready")
	w.Flush()
	var wg sync.WaitGroup
	for a := 0; a < n; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			for i := 0; ; i++ {
				e, err := s.NewEvent(sess, schemas.KindNote, map[string]int{"a": a, "i": i})
				if err != nil {
					return
				}
				pos, err := s.Append(context.Background(), e)
				if err != nil {
					return
				}
				mu.Lock()
				fmt.Fprintf(w, "ack %d %d %d %d %s\n", a, i, pos.Seq, pos.Index, e.ID)
				w.Flush()
				mu.Unlock()
			}
		}(a)
	}
	wg.Wait()
	return 0
}

// childOpen tries to open dir and prints the error it gets.
func childOpen(dir string) int {
	s, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		var le *LockedError
		if errors.As(err, &le) {
			fmt.Printf("locked %d %s\n", le.PID, err)
			return 3
		}
		fmt.Println(err)
		return 1
	}
	s.Close(context.Background())
	fmt.Println("opened")
	return 0
}

func child(t *testing.T, mode, dir string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AEGIS_EVENTS_CHILD="+mode, "AEGIS_EVENTS_DIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

type ack struct {
	a, i int
	pos  Position
	id   string
}

// Every event whose Append returned before a SIGKILL is on disk after it:
// exactly once, at the position Append reported, in each appender's order.
// The kill lands at a random point under load from 64 appenders.
func TestSIGKILLLosesNoAcknowledgedEvent(t *testing.T) {
	dir := stateDir(t)
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	var acked []ack
	for round := 0; round < 3; round++ {
		appenders := []int{1, 8, 64}[round]
		cmd := child(t, "append", dir, "AEGIS_EVENTS_APPENDERS="+strconv.Itoa(appenders))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child did not start: %q", round, sc.Text())
		}
		killAfter := 50 + rnd.Intn(400)
		n := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 6 || f[0] != "ack" {
				t.Fatalf("child said %q", sc.Text())
			}
			a, _ := strconv.Atoi(f[1])
			i, _ := strconv.Atoi(f[2])
			seq, _ := strconv.ParseUint(f[3], 10, 64)
			idx, _ := strconv.Atoi(f[4])
			acked = append(acked, ack{a: a + 100*round, i: i, pos: Position{seq, idx}, id: f[5]})
			n++
			if n == killAfter {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		cmd.Wait()
		t.Logf("round %d: %d appenders, killed after %d acks", round, appenders, n)
	}

	s, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	first := replayAll(t, s)
	s.Close(context.Background())
	byID := map[string]Record{}
	for _, r := range first {
		if _, dup := byID[r.Event.ID]; dup {
			t.Fatalf("event %s present twice", r.Event.ID)
		}
		byID[r.Event.ID] = r
	}
	last := map[int]Position{}
	for _, a := range acked {
		r, ok := byID[a.id]
		if !ok {
			t.Fatalf("acknowledged event %s (appender %d, #%d at %v) lost", a.id, a.a, a.i, a.pos)
		}
		if r.Pos != a.pos {
			t.Fatalf("event %s replayed at %v, acknowledged at %v", a.id, r.Pos, a.pos)
		}
		if p, ok := last[a.a]; ok && !p.Less(r.Pos) {
			t.Fatalf("appender %d: #%d at %v is not after %v", a.a, a.i, r.Pos, p)
		}
		last[a.a] = r.Pos
	}
	// Reopening again (after the clean close) replays the same content.
	s2 := openStore(t, dir)
	if second := replayAll(t, s2); !sameRecords(first, second) {
		t.Fatalf("replay after clean reopen differs from replay after kill")
	}
	t.Logf("%d acknowledged events all present among %d replayed", len(acked), len(first))
}

// A second aegis process on the same state directory fails at once and
// names the holder; the first goes on appending.
func TestSecondProcessGetsClearLockError(t *testing.T) {
	dir := stateDir(t)
	s := openStore(t, dir)
	sess, _ := s.NewSession()
	cmd := child(t, "open", dir)
	start := time.Now()
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("second process: %v, output %q; want exit 3 (locked)", err, out)
	}
	want := fmt.Sprintf("locked %d state directory %s is in use by aegis process %d", os.Getpid(), dir, os.Getpid())
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("second process said %q, want %q", got, want)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("second process took %v to fail", d)
	}
	if _, err := s.Append(context.Background(), newEvent(t, s, sess, schemas.KindNote, map[string]int{})); err != nil {
		t.Fatalf("first process Append after the refused open = %v", err)
	}
	// Once the holder closes, the directory can be opened again.
	s.Close(context.Background())
	if out, err := child(t, "open", dir).Output(); err != nil || strings.TrimSpace(string(out)) != "opened" {
		t.Fatalf("open after holder closed: %v %q", err, out)
	}
}
