//go:build !windows

package sandbox

import (
	"os"
	"syscall"
)

// nlink is the number of names fi's file has, false where the system
// does not say.
func nlink(fi os.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}
