package platform

import (
	"fmt"
	"io/fs"
	"runtime"
)

// ModeWords says what perm, the mode bits of a file that others may
// access, means: "has mode 0755" where they are the file's own, what its
// DACL grants on Windows, where they stand for it.
func ModeWords(perm fs.FileMode) string { return modeWords(runtime.GOOS, perm) }

func modeWords(goos string, perm fs.FileMode) string {
	if goos == "windows" {
		return fmt.Sprintf("grants access to users other than you, SYSTEM and Administrators (read as mode %#o)", perm)
	}
	return fmt.Sprintf("has mode %#o", perm)
}

// FixCommand is the command that makes path private to the user: chmod
// 700 or 600, or on Windows icacls (the user, SYSTEM and Administrators
// alone, nothing inherited).
func FixCommand(path string, dir bool) string { return fixCommand(runtime.GOOS, path, dir) }

func fixCommand(goos, path string, dir bool) string {
	if goos == "windows" {
		inherit := ""
		if dir {
			inherit = "(OI)(CI)"
		}
		return fmt.Sprintf(`icacls "%s" /inheritance:r /grant:r "%%USERNAME%%:%sF" "SYSTEM:%sF" "Administrators:%sF"`, path, inherit, inherit, inherit)
	}
	if dir {
		return "chmod 700 " + path
	}
	return "chmod 600 " + path
}
