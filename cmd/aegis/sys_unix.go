//go:build !windows

package main

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName is "SIGTERM" for SIGTERM, "" where the system has no name.
func signalName(s syscall.Signal) string { return unix.SignalName(s) }

// procLocksID is how /proc/locks names fi's file (major:minor:inode).
func procLocksID(fi os.FileInfo) (string, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino), true
}

// ttyName is the terminal aegis asks a passphrase on.
const ttyName = "/dev/tty"

// openConsole opens the controlling terminal, to read and write.
func openConsole() (in, out *os.File, err error) {
	f, err := os.OpenFile(ttyName, os.O_RDWR, 0)
	return f, f, err
}

func closeConsole(in, out *os.File) error { return in.Close() }
