package main

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/aegis-dev/aegis/sandbox"
)

func main() {
	// The confine helper: aegis re-executes itself to confine a server
	// before exec'ing it (see package sandbox). Handled before anything else.
	if len(os.Args) > 1 && os.Args[1] == sandbox.HelperArg {
		os.Exit(sandbox.HelperMain(os.Args[2:], os.NewFile(sandbox.ControlFD, "control"), os.NewFile(sandbox.ReportFD, "report")))
	}
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	// AEGIS_CPUPROFILE=FILE writes a CPU profile of this run (for make bench
	// investigations; %p becomes the PID); it is read once here.
	if p := strings.ReplaceAll(os.Getenv("AEGIS_CPUPROFILE"), "%p", strconv.Itoa(os.Getpid())); p != "" {
		if f, err := os.Create(p); err == nil {
			pprof.StartCPUProfile(f)
			code := m.Run(context.Background(), os.Args[1:])
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(code)
		}
	}
	os.Exit(m.Run(context.Background(), os.Args[1:]))
}
