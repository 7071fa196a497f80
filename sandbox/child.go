package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// Child is a server started through the confinement helper. Its methods
// are not safe for concurrent use. The life cycle is [Command], then
// [Child.Start] (the fact, before the server runs), then either
// [Child.Go] (the server runs) or [Child.Abort] (it never does).
type Child struct {
	// Cmd runs the helper. Set Stdin, Stdout, Stderr, Env and Dir before
	// Start; they pass through to the server. Do not set ExtraFiles:
	// descriptors 3 and 4 belong to the helper protocol, and the server
	// inherits neither. The helper, and then the server, leads its own
	// process group ([StartTree]); after Go, wait for the server with
	// [Child.Tree]'s Wait and end what it left running with Stop or Kill.
	Cmd *exec.Cmd

	tree *Tree

	profile []byte
	control *os.File // write end of the helper's ControlFD
	report  *os.File // read end of the helper's ReportFD
	in      *bufio.Reader
	state   int
}

const (
	stateNew = iota
	stateStarted
	stateDone
)

// Command prepares argv to run confined by profile. self is the path of
// the binary that runs [HelperMain] for the argument [HelperArg], usually
// "/proc/self/exe". ctx bounds the helper and the server: when it is done
// the process is killed, which also unblocks Start.
//
// The profile travels over a pipe, never in argv or the environment (both
// are readable by other processes); argv is "self __confine-exec --
// argv...". Command returns a *[RefusalError] when profile.Validate does.
func Command(ctx context.Context, self string, profile Profile, argv []string) (*Child, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("command: empty server argv")
	}
	if err := profile.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(profile)
	if err != nil {
		return nil, fmt.Errorf("command: encode profile: %w", err)
	}
	args := append([]string{HelperArg, "--"}, argv...)
	return &Child{Cmd: exec.CommandContext(ctx, self, args...), profile: b}, nil
}

// Start starts the helper, sends it the profile and returns the fact it
// reports, without letting the server run: the helper waits for [Child.Go].
// Record the fact durably, then call Go, or Abort if recording failed.
//
// A refusal returns the refusal fact and a *[RefusalError] (matching
// [ErrRefused]); the helper has then exited and been waited for, so do not
// call Cmd.Wait. Any other error also leaves the helper waited for.
func (c *Child) Start() (Fact, error) {
	if c.state != stateNew {
		return Fact{}, errors.New("start: already started")
	}
	c.state = stateDone
	if len(c.Cmd.ExtraFiles) > 0 {
		return Fact{}, errors.New("start: Cmd.ExtraFiles is reserved for the helper protocol")
	}
	cr, cw, err := os.Pipe()
	if err != nil {
		return Fact{}, fmt.Errorf("start: control pipe: %w", err)
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		cr.Close()
		cw.Close()
		return Fact{}, fmt.Errorf("start: report pipe: %w", err)
	}
	c.Cmd.ExtraFiles = []*os.File{cr, rw} // ControlFD, ReportFD
	c.tree, err = StartTree(c.Cmd)
	cr.Close()
	rw.Close()
	if err != nil {
		cw.Close()
		rr.Close()
		return Fact{}, fmt.Errorf("start helper: %w", err)
	}
	c.control, c.report, c.in = cw, rr, bufio.NewReader(rr)

	// A helper that already refused may have closed its end: the write
	// fails with EPIPE and the report below says why.
	_, werr := cw.Write(append(c.profile, '\n'))
	line, err := readLine(c.in)
	if err != nil {
		return Fact{}, c.fail(fmt.Errorf("read fact: %w (profile write: %v)", err, werr))
	}
	var f Fact
	if err := decodeStrict(line, &f); err != nil {
		return Fact{}, c.fail(fmt.Errorf("decode fact: %w", err))
	}
	if f.Refused != "" {
		c.fail(nil)
		return f, &RefusalError{Problems: []string{f.Refused}, Fact: f}
	}
	c.state = stateStarted
	return f, nil
}

// fail closes the pipes, waits for the helper and returns err annotated
// with how the helper ended.
func (c *Child) fail(err error) error {
	c.control.Close()
	c.report.Close()
	werr := c.tree.Wait()
	c.state = stateDone
	if err != nil && werr != nil {
		return fmt.Errorf("%w (helper: %v)", err, werr)
	}
	return err
}

// Tree returns the process tree of the helper and then the server; nil
// before [Child.Start] started the helper.
func (c *Child) Tree() *Tree { return c.tree }

// Go sends the go-ahead: the helper execs the server. It returns once the
// exec happened (the report pipe closed on exec) or failed (the helper
// reported why and exits with [ExitExecFailed]; wait for it with
// Cmd.Wait).
func (c *Child) Go() error {
	if c.state != stateStarted {
		return errors.New("go: not started, or already gone ahead or aborted")
	}
	c.state = stateDone
	defer c.report.Close()
	_, err := c.control.Write([]byte{goAhead})
	c.control.Close()
	if err != nil {
		return fmt.Errorf("go-ahead: %w", err)
	}
	line, err := readLine(c.in)
	switch {
	case errors.Is(err, io.EOF):
		return nil // close-on-exec closed the report pipe: the server runs
	case err != nil:
		return fmt.Errorf("after go-ahead: %w", err)
	}
	var r execReport
	if err := decodeStrict(line, &r); err != nil {
		return fmt.Errorf("after go-ahead: decode report: %w", err)
	}
	return fmt.Errorf("%s", r.ExecError)
}

// Abort tells the helper not to exec (it exits with [ExitRefused]) and
// waits for it. The server never runs.
func (c *Child) Abort() error {
	if c.state != stateStarted {
		return errors.New("abort: not started, or already gone ahead or aborted")
	}
	c.fail(nil)
	return nil
}
