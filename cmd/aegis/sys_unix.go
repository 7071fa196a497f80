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

// hostStdout is the stdout a host reads MCP from, for the gateway: when
// it is a pipe or a socket, a duplicate of it made non-blocking, so that
// a write the host never reads (it left, the pipe is full) ends when the
// gateway closes it, instead of holding the process until SIGKILL.
// restore makes stdout blocking again; nothing else writes to it
// meanwhile.
func hostStdout() (f *os.File, restore func()) {
	var st unix.Stat_t
	if err := unix.Fstat(1, &st); err != nil || (st.Mode&unix.S_IFMT != unix.S_IFIFO && st.Mode&unix.S_IFMT != unix.S_IFSOCK) {
		return os.Stdout, func() {}
	}
	fd, err := unix.Dup(1)
	if err != nil {
		return os.Stdout, func() {}
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return os.Stdout, func() {}
	}
	return os.NewFile(uintptr(fd), "/dev/stdout"), func() { unix.SetNonblock(1, false) }
}
