//go:build !windows

package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// mkfifo makes a named pipe at path.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
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
