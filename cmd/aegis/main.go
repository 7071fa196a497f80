package main

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

func main() {
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
