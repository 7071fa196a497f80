package main

import (
	"os"
	"syscall"
)

// signalName is "" on Windows: the signal's own String names it.
func signalName(syscall.Signal) string { return "" }

// procLocksID: Windows has no /proc/locks; the lock file's PID is read.
func procLocksID(os.FileInfo) (string, bool) { return "", false }

// ttyName is the terminal aegis asks a passphrase on: the console of the
// process, which a process started with pipes and no console has not.
const ttyName = "the console (CONIN$)"

// openConsole opens the process's console, input and output.
func openConsole() (in, out *os.File, err error) {
	in, err = os.OpenFile("CONIN$", os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	out, err = os.OpenFile("CONOUT$", os.O_RDWR, 0)
	if err != nil {
		in.Close()
		return nil, nil, err
	}
	return in, out, nil
}

func closeConsole(in, out *os.File) error {
	err := in.Close()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// hostStdout is the stdout a host reads MCP from: os.Stdout itself on
// Windows.
func hostStdout() (f *os.File, restore func()) { return os.Stdout, func() {} }
