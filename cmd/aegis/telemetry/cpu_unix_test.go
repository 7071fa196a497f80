//go:build unix

package telemetry

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
