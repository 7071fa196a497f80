//go:build !windows

package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a named pipe at path.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fifoReader waits, up to d, until a process has opened the named pipe at
// path for reading, and opens it for writing so that the reader's open
// returns and its read blocks. It returns the write end, for the caller
// to close.
func fifoReader(t *testing.T, path string, d time.Duration) *os.File {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		// Without a reader, a non-blocking open for writing fails with
		// ENXIO.
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), path)
		}
		if err != syscall.ENXIO || time.Now().After(deadline) {
			t.Fatalf("no reader opened %s within %v: %v", path, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onTerminal starts c in a new session whose controlling terminal is its
// file descriptor fd.
func onTerminal(c *exec.Cmd, fd int) {
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: fd}
}

// noTerminal starts c in a new session, with no controlling terminal.
func noTerminal(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }

// maxRSSKiB is the peak resident set of a process and the children it
// waited for, as the system reports it (in KiB on Linux), or 0.
func maxRSSKiB(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss)
	}
	return 0
}
