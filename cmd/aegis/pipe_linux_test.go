package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// waitPipeFull waits, at most d, until the pipe whose read end is r holds
// at least n unread bytes (FIONREAD), and reports whether it did.
func waitPipeFull(r *os.File, n int, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ); err == nil && v >= n {
			return true
		}
	}
	return false
}
