package main

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
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
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: homeOnWindows(runtime.GOOS, os.Getenv), Exit: os.Exit}
	limitMemory(os.Args[1:], os.Getenv)
	// AEGIS_CPUPROFILE=FILE writes a CPU profile of this run, and
	// AEGIS_MEMPROFILE=FILE a profile of what it allocated (for make bench
	// investigations; %p becomes the PID); they are read once here.
	profile := func(name string) string {
		return strings.ReplaceAll(os.Getenv(name), "%p", strconv.Itoa(os.Getpid()))
	}
	run := func() int { return m.Run(context.Background(), os.Args[1:]) }
	if p := profile("AEGIS_MEMPROFILE"); p != "" {
		inner := run
		run = func() int {
			code := inner()
			if f, err := os.Create(p); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			return code
		}
	}
	if p := profile("AEGIS_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			inner := run
			run = func() int {
				pprof.StartCPUProfile(f)
				defer f.Close()
				defer pprof.StopCPUProfile()
				return inner()
			}
		}
	}
	os.Exit(run())
}

// homeOnWindows returns getenv, except that on Windows, where HOME is
// seldom set, an unset HOME reads as USERPROFILE (the user's profile
// folder, which only the user, SYSTEM and Administrators may open), so
// that the default state, config and cache folders are found there.
func homeOnWindows(goos string, getenv func(string) string) func(string) string {
	if goos != "windows" {
		return getenv
	}
	return func(k string) string {
		v := getenv(k)
		if k == "HOME" && v == "" {
			v = getenv("USERPROFILE")
		}
		return v
	}
}

// relayMemoryLimit is the soft memory limit of a relaying aegis (wrap,
// gateway) unless GOMEMLIMIT sets another. What a relay holds is bounded
// by backpressure (the events store's queue bound and the relay's own per
// direction, each at least one 16 MiB frame) and by the embedded server's
// copies of the one commit in flight: about 100 MiB in a flood of 16 MiB
// frames. Without a limit the garbage collector lets the heap grow to twice
// that before it collects; with it, it collects sooner. The limit is soft:
// a heap that needs more gets more.
const relayMemoryLimit = 192 << 20

// firstGCPercent is the GOGC of a relaying aegis until its first
// collection, unless GOGC is set. Start-up allocates about 4 MiB, most of
// it kept (package registries, the embedded server and its stream, the
// session): at the default of 100 the first collection came at 4 MiB, in
// the middle of the start, and cost it a few milliseconds of CPU to free
// little. At 400 it comes at 16 MiB, after the start unless a flood of
// frames brings it sooner; from then on the default applies.
const firstGCPercent = 400

// listenGCPercent is the GOGC of aegis gateway --listen after its first
// collection, unless GOGC is set. Its live heap is small (about 10 MiB
// with a few sessions) while every HTTP request allocates (headers, the
// SDK's decoding, SSE): at the default of 100 a collection came every few
// megabytes, and the collector took about a third of the process's CPU
// under load. At 200 the heap may grow to three times what it keeps,
// still under relayMemoryLimit; it cut the CPU per call by about 13 %
// (BenchmarkGatewayHTTPInflight's load, GOGC 100, 200 and 400 side by
// side: 770, 668 and 652 µs a call).
const listenGCPercent = 200

// limitMemory sets relayMemoryLimit and firstGCPercent for the commands
// that relay, and listenGCPercent for aegis gateway --listen.
func limitMemory(args []string, getenv func(string) string) {
	if len(args) != 0 && args[0] != "wrap" && args[0] != "gateway" {
		return
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(relayMemoryLimit)
	}
	if getenv("GOGC") == "" {
		if args[0] == "gateway" && slices.ContainsFunc(args[1:], isListenFlag) {
			debug.SetGCPercent(listenGCPercent) // what the first collection goes back to
		}
		relaxFirstGC(firstGCPercent)
	}
}

// isListenFlag reports whether arg is the --listen flag.
func isListenFlag(arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return strings.HasPrefix(arg, "-") && name == "listen"
}

// relaxFirstGC sets GOGC to percent until the first collection, and then
// back to what it was.
func relaxFirstGC(percent int) {
	prev := debug.SetGCPercent(percent)
	// Unreachable at once, so the first collection finds it, and its
	// cleanup runs right after. Larger than 16 bytes: the tiny allocator
	// could keep it beside a live object.
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, func(prev int) { debug.SetGCPercent(prev) }, prev)
}
