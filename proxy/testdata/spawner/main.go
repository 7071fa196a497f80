// Command spawner is a test fixture: a server that leaves a process
// behind. It starts a background grandchild, then execs the real server:
//
//	spawner -out FILE [-setsid] [-orphan] [-join-pgid] -- CMD [ARGS...]
//
// The grandchild ignores SIGTERM, SIGINT and SIGHUP, writes its pid as the
// first line of FILE and then appends a byte to FILE every 10 ms, for
// ever. With -setsid it first leaves the server's process group and
// session; with -join-pgid it moves into the process group of the
// spawner's parent (aegis) instead, to hide among aegis's own processes;
// with -orphan it is started through an intermediate process that exits at
// once, so it is orphaned before the server runs. The server starts only
// once the grandchild has written its pid. What fails in the grandchild or
// the spawner is also written to FILE.err, for the test to show: the
// grandchild's stderr goes nowhere.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "__grandchild" {
		grandchild(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "__intermediate" {
		cmd := exec.Command(self(), append([]string{"__grandchild"}, os.Args[2:]...)...)
		cmd.Stdout = os.Stdout
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		os.Exit(0) // the grandchild is an orphan now
	}
	out := flag.String("out", "", "file the grandchild writes")
	setsid := flag.Bool("setsid", false, "the grandchild calls setsid")
	orphan := flag.Bool("orphan", false, "orphan the grandchild at once")
	joinPgid := flag.Bool("join-pgid", false, "the grandchild joins the parent's process group")
	flag.Parse()
	errFile = *out + ".err"
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: spawner -out FILE [-setsid] [-orphan] [-join-pgid] -- CMD [ARGS...]")
		os.Exit(2)
	}
	pgid := 0
	if *joinPgid {
		var err error
		if pgid, err = syscall.Getpgid(os.Getppid()); err != nil {
			fail(err)
		}
	}
	args := []string{*out, strconv.FormatBool(*setsid), strconv.Itoa(pgid)}
	mode := "__grandchild"
	if *orphan {
		mode = "__intermediate"
	}
	cmd := exec.Command(self(), append([]string{mode}, args...)...)
	// It holds the server's stdout open, as a forgotten background job
	// does; its stderr goes nowhere, so that a test reading aegis's stderr
	// into a buffer is not kept waiting by it.
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	if *orphan {
		cmd.Wait()
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(*out); bytes.IndexByte(b, '\n') > 0 {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("the grandchild did not start"))
		}
	}
	argv := flag.Args()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fail(err)
	}
	fail(syscall.Exec(path, argv, os.Environ()))
}

func grandchild(args []string) {
	errFile = args[0] + ".err"
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if args[1] == "true" {
		if _, err := syscall.Setsid(); err != nil {
			fail(err)
		}
	}
	if pgid, _ := strconv.Atoi(args[2]); pgid != 0 {
		if err := syscall.Setpgid(0, pgid); err != nil {
			fail(err)
		}
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	for {
		time.Sleep(10 * time.Millisecond)
		f.Write([]byte{'x'})
	}
}

func self() string {
	p, err := os.Executable()
	if err != nil {
		fail(err)
	}
	return p
}

// errFile is where fail writes too ("" until the flags are read).
var errFile string

func fail(err error) {
	fmt.Fprintln(os.Stderr, "spawner:", err)
	if errFile != "" {
		if f, ferr := os.OpenFile(errFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); ferr == nil {
			fmt.Fprintf(f, "spawner %d: %v\n", os.Getpid(), err)
			f.Close()
		}
	}
	os.Exit(4)
}
