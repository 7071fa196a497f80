//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// killTimeout bounds how long [Tree.Kill] keeps killing processes that
// reappear (a fork racing the sweep) before it reports them.
const killTimeout = 5 * time.Second

// leaders are the leaders of every tree this process started and has not
// yet waited for, by pid, with their start times (so a reused pid is never
// taken for a leader). Like the child subreaper attribute it mirrors, the
// set belongs to the whole process: a sweep of one tree must know the
// leaders of the others to leave them alone. Starts hold the lock, so no
// sweep sees a leader before it is registered.
var leaders = struct {
	sync.Mutex
	m map[int]uint64
}{m: map[int]uint64{}}

// Tree is a process started as the leader of its own process group, with
// every process it starts: the members of its group, their descendants
// wherever they moved, and the orphans reparented to this process, which
// [StartTree] made a child subreaper. The methods are safe for concurrent
// use.
type Tree struct {
	cmd   *exec.Cmd
	pid   int    // the leader, and the process group id
	start uint64 // the leader's start time, in clock ticks since boot
	self  int
	sid   int // this process's session: the group lives in it
}

// spawner is the thread every tree's leader is started from. The leader
// gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG
// follows the thread, not the process), so that thread must live as long
// as this process: a goroutine locked to it for good, which never
// returns. Like leaders, it belongs to the whole process.
var spawner struct {
	once sync.Once
	run  chan func()
}

// onSpawner runs f on the spawner thread and returns once it has.
func onSpawner(f func()) {
	spawner.once.Do(func() {
		spawner.run = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the process
			for f := range spawner.run {
				f()
			}
		}()
	})
	done := make(chan struct{})
	spawner.run <- func() {
		defer close(done)
		f()
	}
	<-done
}

// StartTree makes this process a child subreaper (orphans of the tree are
// reparented to it rather than to init) and starts cmd as the leader of a
// new process group, which gets SIGKILL if this process dies without
// ending it (killed itself with SIGKILL, say: its host's last resort).
// It overrides cmd.SysProcAttr's Setpgid, Pgid and Pdeathsig.
//
// Every child this process starts while it runs trees should be started
// through StartTree: an orphan reparented here cannot be told from a child
// started some other way, and a sweep ends every child that is not a
// registered leader.
func StartTree(cmd *exec.Cmd) (*Tree, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become the child subreaper of the server tree: %w", err)
	}
	sid, err := unix.Getsid(0)
	if err != nil {
		return nil, fmt.Errorf("read session id: %w", err)
	}
	leaders.Lock()
	defer leaders.Unlock()
	onSpawner(func() { err = cmd.Start() })
	if err != nil {
		return nil, err
	}
	t := &Tree{cmd: cmd, pid: cmd.Process.Pid, self: os.Getpid(), sid: sid}
	st, err := readStat(t.pid)
	if err != nil {
		// Unregistered, the leader would look like an orphan to every
		// sweep: refuse rather than guess.
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("read the server's process status: %w", err)
	}
	t.start = st.start
	leaders.m[t.pid] = t.start
	return t, nil
}

// Pid returns the leader's pid, which is also the process group id.
func (t *Tree) Pid() int { return t.pid }

// Wait waits for the leader (cmd.Wait) and then forgets it as a leader.
// The rest of the tree may still run: end it with [Tree.Stop] or
// [Tree.Kill].
func (t *Tree) Wait() error {
	err := t.cmd.Wait()
	leaders.Lock()
	if leaders.m[t.pid] == t.start {
		delete(leaders.m, t.pid)
	}
	leaders.Unlock()
	return err
}

// Signal sends sig to every live process of the tree: the group at once,
// then each member outside it.
func (t *Tree) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v is not a unix signal", sig)
	}
	ps, err := t.snapshot()
	if err != nil {
		return err
	}
	t.signal(ps, s)
	return nil
}

// Stop ends the tree: SIGTERM (and SIGCONT, so a stopped process sees it)
// to every process, then, for whatever still runs after grace, [Tree.Kill].
// It returns once no process of the tree is left, zombies included (the
// orphans are reaped; the leader is left for [Tree.Wait]).
func (t *Tree) Stop(grace time.Duration) error {
	deadline := time.Now().Add(grace)
	ps, err := t.settle()
	if err != nil || len(ps) == 0 {
		return err
	}
	t.signal(ps, syscall.SIGTERM)
	t.signal(ps, syscall.SIGCONT)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if ps, err = t.settle(); err != nil || len(ps) == 0 {
			return err
		}
	}
	return t.Kill()
}

// Kill sends SIGKILL to every process of the tree, again until none is
// left, and reaps the orphans. It gives up after a few seconds, naming the
// processes that survived.
func (t *Tree) Kill() error {
	deadline := time.Now().Add(killTimeout)
	for {
		ps, err := t.settle()
		if err != nil || len(ps) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			var pids []int
			for _, p := range ps {
				pids = append(pids, p.pid)
			}
			return fmt.Errorf("processes %v of the server tree survived SIGKILL", pids)
		}
		t.signal(ps, syscall.SIGKILL)
		time.Sleep(2 * time.Millisecond)
	}
}

// settle reaps the tree's zombie orphans and returns the processes left:
// the live ones and the zombies not yet reaped, but not the zombie leader
// (its status belongs to [Tree.Wait]).
func (t *Tree) settle() ([]procStat, error) {
	ps, err := t.snapshot()
	if err != nil {
		return nil, err
	}
	var left []procStat
	for _, p := range ps {
		if !p.dead() {
			left = append(left, p)
			continue
		}
		if t.isLeader(p) {
			continue
		}
		if p.ppid == t.self {
			var ws unix.WaitStatus
			if pid, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); pid == p.pid || errors.Is(err, unix.ECHILD) {
				continue
			}
		}
		left = append(left, p) // a zombie whose parent lives, or one not yet reapable
	}
	return left, nil
}

// signal sends sig to the group when a process of ps holds it, and to each
// live process of ps outside the group.
func (t *Tree) signal(ps []procStat, sig syscall.Signal) {
	for _, p := range ps {
		if t.inGroup(p) {
			unix.Kill(-t.pid, sig)
			break
		}
	}
	for _, p := range ps {
		if !p.dead() && !t.inGroup(p) {
			unix.Kill(p.pid, sig)
		}
	}
}

func (t *Tree) isLeader(p procStat) bool { return p.pid == t.pid && p.start == t.start }

// inGroup reports whether p is in the tree's process group. The session
// check keeps a group id that outlived the group and was reused elsewhere
// from matching: a group can only be joined from inside its session.
func (t *Tree) inGroup(p procStat) bool { return p.pgrp == t.pid && p.sid == t.sid }

// snapshot returns every process of the tree: the leader, the members of
// its process group, this process's children that are no registered
// leader (orphans of some tree, since this process is a subreaper), and
// every descendant of those, wherever it moved (setsid, setpgid).
// Registered leaders of other trees and their descendants are left out.
//
// Between reading /proc and signalling, a process may end and its pid be
// reused; the window is a few microseconds.
func (t *Tree) snapshot() ([]procStat, error) {
	all, err := readProcs()
	if err != nil {
		return nil, err
	}
	leaders.Lock()
	defer leaders.Unlock()
	other := func(p procStat) bool {
		start, ok := leaders.m[p.pid]
		return ok && start == p.start && p.pid != t.pid
	}
	children := map[int][]procStat{}
	var queue []procStat
	in := map[int]bool{}
	add := func(p procStat) {
		if !in[p.pid] && p.pid != t.self && !other(p) {
			in[p.pid] = true
			queue = append(queue, p)
		}
	}
	for _, p := range all {
		children[p.ppid] = append(children[p.ppid], p)
		if t.isLeader(p) || t.inGroup(p) || p.ppid == t.self {
			add(p)
		}
	}
	for i := 0; i < len(queue); i++ {
		for _, c := range children[queue[i].pid] {
			add(c)
		}
	}
	return queue, nil
}

// procStat is what a sweep reads of a process from /proc/PID/stat.
type procStat struct {
	pid, ppid, pgrp, sid int
	state                byte
	start                uint64
}

// dead reports a zombie (or a process being torn down).
func (p procStat) dead() bool { return p.state == 'Z' || p.state == 'X' || p.state == 'x' }

// readProcs reads the status of every process; processes that end while it
// reads are skipped.
func readProcs() ([]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var ps []procStat
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, err := readStat(pid); err == nil {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// readStat parses /proc/PID/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+2:]) // f[0] is field 3 (state)
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	p := procStat{pid: pid, state: f[0][0]}
	nums := []*int{&p.ppid, &p.pgrp, &p.sid}
	for k, dst := range nums {
		if *dst, err = strconv.Atoi(string(f[1+k])); err != nil {
			return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
		}
	}
	if p.start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return p, nil
}
