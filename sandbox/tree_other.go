//go:build !linux && !windows

package sandbox

import (
	"os"
	"os/exec"
	"time"
)

// Tree is the server process. Outside Linux and Windows it is only the
// process aegis started: its descendants are neither tracked nor ended.
type Tree struct{ cmd *exec.Cmd }

// StartTree starts cmd.
func StartTree(cmd *exec.Cmd) (*Tree, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &Tree{cmd: cmd}, nil
}

// Pid returns the process's pid.
func (t *Tree) Pid() int { return t.cmd.Process.Pid }

// Wait waits for the process.
func (t *Tree) Wait() error { return t.cmd.Wait() }

// Signal sends sig to the process.
func (t *Tree) Signal(sig os.Signal) error { return t.cmd.Process.Signal(sig) }

// Stop does nothing more than the process's own end: nothing else is tracked.
func (t *Tree) Stop(grace time.Duration) error { return nil }

// Kill kills the process.
func (t *Tree) Kill() error { return t.cmd.Process.Kill() }
