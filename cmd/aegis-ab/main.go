package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "aegis-ab: error: %v\n", err)
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "hint: aegis-ab [flags] A_AEGIS B_AEGIS SERVER; aegis-ab -h lists the flags")
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command-line mistake; it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// report is what -json writes.
type report struct {
	A     sideReport `json:"a"`
	B     sideReport `json:"b"`
	Order [][]string `json:"order"` // per round, per step: "step FIRST SECOND"

	Server  string  `json:"server"`
	Machine machine `json:"machine"`
}

type sideReport struct {
	Name   string    `json:"name"`
	Binary string    `json:"binary"`
	Rounds []Figures `json:"rounds"`
}

// machine is what the figures were measured on.
type machine struct {
	NumCPU      int    `json:"num_cpu"`
	CPUsAllowed string `json:"cpus_allowed"`
	LoadBefore  string `json:"loadavg_before"`
	LoadAfter   string `json:"loadavg_after"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aegis-ab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rounds := fs.Int("rounds", 3, "rounds, each measuring A and B once")
	var cfg config
	fs.IntVar(&cfg.calls, "calls", 2000, "calls in each measured CPU window")
	fs.IntVar(&cfg.warmup, "warmup", 200, "calls before each measured window")
	fs.IntVar(&cfg.starts, "starts", 15, "starts of each kind per startup figure")
	fs.IntVar(&cfg.gwCalls, "gwcalls", 1000, "sequential calls each through gateway and wrap")
	fs.DurationVar(&cfg.idle, "idle", 2*time.Second, "wait before reading the idle RSS")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "give up on a round after this long")
	nameA := fs.String("a", "A", "the baseline's column name")
	nameB := fs.String("b", "B", "the candidate's column name")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file too")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() != 3 {
		return &usageError{fmt.Sprintf("want 3 arguments (A_AEGIS B_AEGIS SERVER), got %d", fs.NArg())}
	}
	if *rounds < 1 || cfg.calls < 1 || cfg.warmup < 0 || cfg.starts < 1 || cfg.gwCalls < 1 || cfg.idle < 0 || cfg.timeout <= 0 {
		return &usageError{"-rounds, -calls, -starts and -gwcalls must be at least 1, -warmup and -idle not negative, -timeout positive"}
	}
	bins := [2]string{fs.Arg(0), fs.Arg(1)}
	cfg.server = fs.Arg(2)
	for _, b := range []string{bins[0], bins[1], cfg.server} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("binary: %w", err)
		}
	}
	tmp, err := os.MkdirTemp("", "aegis-ab-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)

	rep := report{
		A:       sideReport{Name: *nameA, Binary: bins[SideA]},
		B:       sideReport{Name: *nameB, Binary: bins[SideB]},
		Server:  cfg.server,
		Machine: machine{NumCPU: runtime.NumCPU(), CPUsAllowed: cpusAllowed(), LoadBefore: loadavg()},
	}
	for r := range *rounds {
		figs, order, err := measureRound(ctx, cfg, bins, tmp, r, stderr)
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		rep.A.Rounds = append(rep.A.Rounds, figs[SideA])
		rep.B.Rounds = append(rep.B.Rounds, figs[SideB])
		rep.Order = append(rep.Order, order)
	}
	rep.Machine.LoadAfter = loadavg()

	fmt.Fprintf(stdout, "A = %s (%s), B = %s (%s), server %s\n", *nameA, bins[SideA], *nameB, bins[SideB], cfg.server)
	fmt.Fprintf(stdout, "%d CPUs, allowed %s; load average before %s, after %s\n", rep.Machine.NumCPU,
		rep.Machine.CPUsAllowed, rep.Machine.LoadBefore, rep.Machine.LoadAfter)
	for r, order := range rep.Order {
		fmt.Fprintf(stdout, "round %d: %s\n", r+1, strings.Join(order, ", "))
	}
	fmt.Fprintln(stdout)
	if err := writeTable(stdout, *nameA, *nameB, rep.A.Rounds, rep.B.Rounds); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nEach cell: the median over the rounds (min to max).")
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write -json: %w", err)
		}
	}
	return nil
}

// cpusAllowed is the CPU list this process may run on (taskset's pinning
// shows here), or "?" when /proc does not say.
func cpusAllowed() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// loadavg is the first three fields of /proc/loadavg, or "?".
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
