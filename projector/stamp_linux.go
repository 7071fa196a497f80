package projector

import (
	"os"
	"syscall"
)

// StampOf is the identity and change time of a file (a record file: they
// say it is unchanged since a session checked it whole); false where the
// system gives none (then a record file is read whole again).
func StampOf(fi os.FileInfo) (FileStamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileStamp{}, false
	}
	return FileStamp{Dev: uint64(st.Dev), Ino: st.Ino, Size: fi.Size(), Ctime: st.Ctim.Nano()}, true
}
