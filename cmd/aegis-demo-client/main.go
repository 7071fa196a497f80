package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

const usage = `usage: aegis-demo-client [-timeout 30s] -- CMD [ARG...]

Runs the scripted MCP conversation against the stdio MCP server CMD and
prints one line per step.

Example:

	aegis-demo-client -- aegis-example-server

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a command-line mistake; it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// run runs the demo and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := demo(ctx, args, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "aegis-demo-client: error: %v\n", err)
		fmt.Fprintf(stderr, "aegis-demo-client: hint: run with -h for usage\n")
		return 2
	default:
		fmt.Fprintf(stderr, "aegis-demo-client: error: %v\n", err)
		return 1
	}
}

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aegis-demo-client", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by run
	timeout := fs.Duration("timeout", 30*time.Second, "time limit for the whole conversation")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, usage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return err
		}
		return &usageError{err.Error()}
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return &usageError{"no server command given after --"}
	}
	if *timeout <= 0 {
		return &usageError{fmt.Sprintf("-timeout must be positive, got %v", *timeout)}
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cs, err := mcptest.Connect(ctx, argv, stderr)
	if err != nil {
		return err
	}
	tr, err := mcptest.Script(ctx, cs)
	for _, step := range tr {
		fmt.Fprintln(stdout, step)
	}
	if cerr := cs.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close session with %q: %w", argv[0], cerr)
	}
	return err
}
