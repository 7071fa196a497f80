package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Tree is the server process and every process it starts, held in a job
// object: ending the tree ends the job, and closing aegis's handle to it
// (aegis exiting, however it exits) ends whatever is left
// (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE). The process is put in the job
// just after it starts, so a process it starts in that first instant is
// not in it. Windows has no SIGTERM: [Tree.Signal] passes on only a kill.
type Tree struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	job windows.Handle // 0 once closed
}

// StartTree starts cmd and puts it in a new job object that ends every
// process in it when it is closed.
func StartTree(cmd *exec.Cmd) (*Tree, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("create the server's job object: %w", err)
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("set up the server's job object: %w", err)
	}
	if err := cmd.Start(); err != nil {
		windows.CloseHandle(job)
		return nil, err
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(cmd.Process.Pid))
	if err == nil {
		err = windows.AssignProcessToJobObject(job, h)
		windows.CloseHandle(h)
	}
	if err != nil {
		// A server outside the job could leave processes running that
		// nothing ends: refuse rather than run it so.
		cmd.Process.Kill()
		cmd.Wait()
		windows.CloseHandle(job)
		return nil, fmt.Errorf("put the server in its job object: %w", err)
	}
	return &Tree{cmd: cmd, job: job}, nil
}

// Pid returns the server's pid.
func (t *Tree) Pid() int { return t.cmd.Process.Pid }

// Wait waits for the server process. The rest of the tree may still run:
// end it with [Tree.Stop] or [Tree.Kill].
func (t *Tree) Wait() error { return t.cmd.Wait() }

// Signal passes on a kill (os.Kill) as [Tree.Kill]; Windows cannot send
// any other signal to a process.
func (t *Tree) Signal(sig os.Signal) error {
	if sig == os.Kill {
		return t.Kill()
	}
	return fmt.Errorf("signal %v cannot be sent to a process on Windows", sig)
}

// Stop ends every process left in the tree and closes the job. Windows
// has no signal to ask them to exit, so grace is not waited.
func (t *Tree) Stop(grace time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.job == 0 {
		return nil
	}
	err := windows.TerminateJobObject(t.job, 1)
	if cerr := windows.CloseHandle(t.job); err == nil {
		err = cerr
	}
	t.job = 0
	return err
}

// Kill ends every process of the tree at once.
func (t *Tree) Kill() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.job == 0 {
		err := t.cmd.Process.Kill()
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		return err
	}
	return windows.TerminateJobObject(t.job, 1)
}
