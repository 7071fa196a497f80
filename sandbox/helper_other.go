//go:build !linux

package sandbox

import (
	"os"
	"runtime"
)

// HelperMain refuses: confinement is only implemented on Linux. It reports
// a refusal fact on report and returns [ExitRefused] without exec.
func HelperMain(args []string, control, report *os.File) int {
	_ = writeLine(report, refusedFact("confinement is only implemented on Linux, not "+runtime.GOOS, 0))
	return ExitRefused
}

func seccompSupported() bool { return false }
