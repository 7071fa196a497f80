package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// The parser reads what this kernel writes, and CPU time only grows.
func TestProcCPUOfThisProcess(t *testing.T) {
	c0, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin for 50 ms of CPU as getrusage counts it, not of wall time: on a
	// loaded machine 50 ms of wall time can hold less than the one tick
	// that /proc counts in.
	r0 := rusageCPU(t)
	for deadline := time.Now().Add(30 * time.Second); rusageCPU(t)-r0 < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("this process got less than 50 ms of CPU in 30 s")
		}
	}
	c1, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if c1-c0 < 20*time.Millisecond {
		t.Errorf("CPU time %v after 50 ms of CPU spent spinning, %v before", c1, c0)
	}
	if kb, err := procRSS(os.Getpid()); err != nil || kb <= 0 {
		t.Errorf("procRSS = %d, %v", kb, err)
	}
}

// rusageCPU is the user and system CPU time of this process by getrusage.
func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
