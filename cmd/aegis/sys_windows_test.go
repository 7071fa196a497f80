package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// fifoReader is never reached: mkfifo skips on Windows.
func fifoReader(t *testing.T, path string, d time.Duration) *os.File {
	t.Skip("Windows has no named pipes in the file system")
	return nil
}

// mkfifo skips: Windows has no named pipes in the file system.
func mkfifo(t *testing.T, path string) {
	t.Skip("Windows has no named pipes in the file system")
}

// onTerminal leaves c as it is: Windows has no controlling terminals
// (the tests that need one skip in openPTY).
func onTerminal(c *exec.Cmd, fd int) {}

// noTerminal leaves c as it is: a process started without a console
// window of its own has no terminal to read.
func noTerminal(c *exec.Cmd) {}

// maxRSSKiB is 0: Windows reports no peak resident set here.
func maxRSSKiB(ps *os.ProcessState) int64 { return 0 }
