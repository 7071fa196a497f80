//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd

package projector

import "os"

// StampOf gives no stamp here: a record file is read whole again when a
// session opens it, never taken for unchanged on a guess.
func StampOf(os.FileInfo) (FileStamp, bool) { return FileStamp{}, false }
