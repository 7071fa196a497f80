package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Landlock access sets granted by this package. Write grants carry no
// make_char/make_block (a root child could mknod the disk holding the key
// and read it raw), no refer (cross-directory rename/link fails with EXDEV)
// and no ioctl_dev.
const (
	accessReadFile  = ll.AccessFSExecute | ll.AccessFSReadFile
	accessReadDir   = accessReadFile | ll.AccessFSReadDir
	accessWriteFile = accessReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
	accessWriteDir  = accessReadDir | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym
	accessDevNull = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
)

// requiredABI is the landlock ABI a profile is enforced at without
// BestEffort; udpABI is needed to restrict UDP ports.
const (
	requiredABI = 7
	udpABI      = 10
	// maxNarrowRules bounds the rules a grant may be narrowed into.
	maxNarrowRules = 4096
)

// execSupportDirs returns the loader set of --allow-exec-support. /dev is
// granted only as its harmless character devices: a read grant on all of
// /dev would hand a root child the raw block devices.
func execSupportDirs() []string {
	return []string{"/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc",
		"/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
}

// grant is one path rule before it becomes a landlock rule.
type grant struct {
	path   string // as named, cleaned
	real   string // symlinks resolved; what landlock attaches the rule to
	dir    bool
	write  bool
	origin string // read, write, exec_support, implicit, narrowed
}

func (g grant) access() uint64 {
	switch {
	case g.origin == "implicit":
		return accessDevNull
	case g.dir && g.write:
		return accessWriteDir
	case g.dir:
		return accessReadDir
	case g.write:
		return accessWriteFile
	}
	return accessReadFile
}

// plan is a profile resolved against this kernel and filesystem: the rules
// the helper will enforce, and every problem it cannot honour.
type plan struct {
	p         Profile
	kernelABI int
	wantABI   int // requiredABI, or udpABI when UDP ports can be restricted
	abi       int // ABI the ruleset is built for; 0 = no landlock
	grants    []grant
	ports     []uint16
	protect   []protected
	problems  []string // cannot honour: refusals, or degradations under BestEffort
	partial   bool     // a grant was dropped or narrowed
}

type protected struct {
	path, real string
}

// newPlan resolves p. It fails only for structural problems; everything
// else is collected in plan.problems.
func newPlan(p Profile) (*plan, error) {
	if probs := p.structural(); len(probs) > 0 {
		return nil, &RefusalError{Problems: probs}
	}
	pl := &plan{p: p, wantABI: requiredABI}
	if v, err := ll.LandlockGetABIVersion(); err == nil {
		pl.kernelABI = v
	}
	pl.checkKernel()
	for _, path := range p.Protect {
		c := filepath.Clean(path)
		pl.protect = append(pl.protect, protected{path: c, real: resolve(c)})
	}
	pl.checkHardLinks()
	pl.collectGrants()
	pl.collectPorts()
	return pl, nil
}

func (pl *plan) problem(format string, args ...any) {
	pl.problems = append(pl.problems, fmt.Sprintf(format, args...))
}

// refusal returns the problems as a refusal unless BestEffort excuses them.
func (pl *plan) refusal() error {
	if len(pl.problems) == 0 || pl.p.BestEffort {
		return nil
	}
	return &RefusalError{Problems: slices.Clone(pl.problems)}
}

func (pl *plan) checkKernel() {
	p := pl.p
	if p.AllowUDP && pl.kernelABI >= udpABI {
		pl.wantABI = udpABI
	}
	pl.abi = min(pl.kernelABI, pl.wantABI)
	switch {
	case pl.kernelABI == 0:
		pl.problem("landlock is not available: no filesystem or TCP port confinement")
	case pl.kernelABI < requiredABI:
		lost := []string{}
		if pl.kernelABI < 4 {
			lost = append(lost, "TCP bind/connect ports not restricted")
		}
		if pl.kernelABI < 3 {
			lost = append(lost, "truncate not restricted")
		}
		if pl.kernelABI < 5 {
			lost = append(lost, "device ioctl not restricted")
		}
		if pl.kernelABI < 6 {
			lost = append(lost, "abstract unix sockets and signals not scoped")
		}
		lost = append(lost, "denials after exec not logged")
		pl.problem("landlock ABI %d < %d: %s", pl.kernelABI, requiredABI, strings.Join(lost, ", "))
	}
	if !seccompSupported() {
		pl.problem("seccomp is not available: network system calls, io_uring and foreign syscall ABIs are not filtered")
	}
	if p.AllowUDP && pl.kernelABI < udpABI {
		pl.problem("UDP allowed but landlock ABI %d < %d cannot restrict UDP ports: UDP reaches every host and port", pl.kernelABI, udpABI)
	}
	if p.AllowMPTCP {
		pl.problem("MPTCP allowed but landlock does not restrict MPTCP: MPTCP sockets reach every host and port")
	}
}

// checkHardLinks refuses a protected file that has other names: a link
// elsewhere could be granted without naming the protected path.
func (pl *plan) checkHardLinks() {
	for _, pr := range pl.protect {
		fi, err := os.Stat(pr.real)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if n, ok := nlink(fi); ok && n > 1 {
			pl.problem("protected file %q has %d hard links: another name for it may lie inside a grant", pr.path, n)
		}
	}
}

func (pl *plan) collectGrants() {
	type req struct {
		path   string
		write  bool
		origin string
	}
	var reqs []req
	for _, path := range pl.p.WritePaths {
		reqs = append(reqs, req{filepath.Clean(path), true, "write"})
	}
	for _, path := range pl.p.ReadPaths {
		reqs = append(reqs, req{filepath.Clean(path), false, "read"})
	}
	if pl.p.ExecSupport {
		for _, path := range execSupportDirs() {
			reqs = append(reqs, req{path, false, "exec_support"})
		}
	}
	reqs = append(reqs, req{"/dev/null", false, "implicit"})

	seen := map[string]bool{}
	for _, r := range reqs {
		if seen[r.path] {
			continue // write grants come first and win
		}
		seen[r.path] = true
		fi, err := os.Stat(r.path)
		if err != nil {
			if r.origin == "read" || r.origin == "write" {
				pl.problem("granted path %q cannot be used: %v", r.path, pathErr(err))
				pl.partial = true
			}
			continue // exec support and /dev/null: only what exists
		}
		g := grant{path: r.path, real: resolve(r.path), dir: fi.IsDir(), write: r.write, origin: r.origin}
		pl.addGrant(g)
	}
}

// addGrant applies g unless it reaches a protected path. A grant covering a
// protected path is narrowed around it; one inside a protected path is
// dropped. Both are problems (applied only under BestEffort).
func (pl *plan) addGrant(g grant) {
	var covers []protected
	for _, pr := range pl.protect {
		switch {
		case within(pr.path, g.path) || within(pr.real, g.real) || within(pr.real, g.path) || within(pr.path, g.real):
			covers = append(covers, pr)
		case within(g.path, pr.path) || within(g.real, pr.real) || within(g.real, pr.path) || within(g.path, pr.real):
			pl.problem("grant %q lies inside protected path %q", g.path, pr.path)
			pl.partial = true
			return
		}
	}
	if len(covers) == 0 {
		pl.grants = append(pl.grants, g)
		return
	}
	for _, pr := range covers {
		pl.problem("grant %q covers protected path %q", g.path, pr.path)
	}
	pl.partial = true
	if !pl.p.BestEffort {
		return // refused anyway; do not walk the tree
	}
	var reals []string
	for _, pr := range covers {
		reals = append(reals, pr.real)
	}
	budget := maxNarrowRules
	narrowed, err := narrow(g, reals, &budget)
	if err != nil {
		pl.problem("grant %q dropped: cannot narrow it around protected paths: %v", g.path, err)
		return
	}
	pl.problem("grant %q narrowed to %d rules around protected paths: the directories leading to them cannot be listed and entries created after start are not granted", g.path, len(narrowed))
	pl.grants = append(pl.grants, narrowed...)
}

// narrow returns rules granting what g grants, except the protected paths
// and the directories leading to them. It works on resolved paths: rules
// attach to inodes.
func narrow(g grant, prot []string, budget *int) ([]grant, error) {
	if !g.dir {
		return nil, nil // a file grant covering a protected path is the path
	}
	entries, err := os.ReadDir(g.real)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", g.real, err)
	}
	var out []grant
	for _, e := range entries {
		p := filepath.Join(g.real, e.Name())
		onPath, exact := false, false
		for _, pr := range prot {
			exact = exact || pr == p
			onPath = onPath || within(pr, p)
		}
		switch {
		case exact:
			continue
		case onPath && e.IsDir():
			sub, err := narrow(grant{path: p, real: p, dir: true, write: g.write, origin: "narrowed"}, prot, budget)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		case onPath:
			continue // a symlink on the way to a protected path: leave it out
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue // dangling: nothing to grant
		}
		if slices.ContainsFunc(prot, func(pr string) bool { return within(pr, real) || within(real, pr) }) {
			continue // a symlink into or above a protected path
		}
		fi, err := os.Stat(real)
		if err != nil {
			continue
		}
		if *budget--; *budget < 0 {
			return nil, fmt.Errorf("more than %d rules", maxNarrowRules)
		}
		out = append(out, grant{path: p, real: real, dir: fi.IsDir(), write: g.write, origin: "narrowed"})
	}
	return out, nil
}

func (pl *plan) collectPorts() {
	for _, g := range pl.p.Net {
		if !slices.Contains(pl.ports, g.Port) {
			pl.ports = append(pl.ports, g.Port)
		}
	}
	slices.Sort(pl.ports)
}

// config is the landlock configuration the helper enforces.
func (pl *plan) config() landlock.Config {
	cfg := landlock.V7
	if pl.wantABI == udpABI {
		cfg = landlock.V10
	}
	cfg = cfg.EnableLoggingForSubprocesses()
	if pl.p.BestEffort {
		cfg = cfg.BestEffort()
	}
	return cfg
}

// rules are the landlock rules of the plan.
func (pl *plan) rules() []landlock.Rule {
	var rs []landlock.Rule
	for _, g := range pl.grants {
		rs = append(rs, landlock.PathAccess(landlock.AccessFSSet(g.access()), g.real))
	}
	for _, port := range pl.ports {
		rs = append(rs, landlock.ConnectTCP(port))
		if pl.wantABI == udpABI {
			rs = append(rs, landlock.ConnectSendUDP(port))
		}
	}
	if pl.wantABI == udpABI && len(pl.ports) > 0 {
		rs = append(rs, landlock.BindUDP(0)) // the autobind of an unbound UDP socket
	}
	return rs
}

// handled returns the access rights the enforced ruleset handles.
func (pl *plan) handled() (fsSet, netSet uint64) {
	cfg, ok := abiConfig(pl.abi)
	if !ok {
		return 0, 0
	}
	want, _ := abiConfig(pl.wantABI)
	return uint64(cfg.HandledAccessFS & want.HandledAccessFS), uint64(cfg.HandledAccessNet & want.HandledAccessNet)
}

func abiConfig(abi int) (landlock.Config, bool) {
	cfgs := []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
		landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}
	if abi < 1 || abi > len(cfgs) {
		return landlock.Config{}, false
	}
	return cfgs[abi-1], true
}

// executable reports whether a rule lets the child execute real.
func (pl *plan) executable(real string) bool {
	for _, g := range pl.grants {
		if g.access()&ll.AccessFSExecute != 0 && within(real, g.real) {
			return true
		}
	}
	return false
}

// landlockFacts fills the landlock part of f for an enforced ruleset.
func (pl *plan) landlockFacts(f *Fact) {
	fsSet, netSet := pl.handled()
	f.LandlockABI = pl.abi
	f.LandlockFullyEnforced = pl.abi == pl.wantABI && !pl.partial
	f.LandlockTCPRestricted = netSet&ll.AccessNetConnectTCP != 0
	for _, g := range pl.grants {
		rf := FSRuleFact{Path: g.path, Kind: "file", Access: fsAccessNames(g.access() & fsSet), Origin: g.origin}
		if g.dir {
			rf.Kind = "dir"
		}
		if g.real != g.path {
			rf.Resolved = g.real
		}
		f.FSRules = append(f.FSRules, rf)
	}
	for _, port := range pl.ports {
		var acc uint64 = ll.AccessNetConnectTCP
		if pl.wantABI == udpABI {
			acc |= ll.AccessNetConnectSendUDP
		}
		if names := netAccessNames(acc & netSet); len(names) > 0 {
			f.NetRules = append(f.NetRules, NetRuleFact{Port: port, Access: names})
		}
	}
	if pl.wantABI == udpABI && len(pl.ports) > 0 && netSet&ll.AccessNetBindUDP != 0 {
		f.NetRules = append(f.NetRules, NetRuleFact{Port: 0, Access: []string{"bind_udp"}})
	}
}

func fsAccessNames(set uint64) []string {
	names := []string{"execute", "write_file", "read_file", "read_dir", "remove_dir", "remove_file",
		"make_char", "make_dir", "make_reg", "make_sock", "make_fifo", "make_block", "make_sym",
		"refer", "truncate", "ioctl_dev", "resolve_unix"}
	return bitNames(set, names)
}

func netAccessNames(set uint64) []string {
	return bitNames(set, []string{"bind_tcp", "connect_tcp", "bind_udp", "connect_send_udp"})
}

func bitNames(set uint64, names []string) []string {
	out := []string{}
	for i, n := range names {
		if set&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// within reports whether path is base or lies beneath it. Both are clean
// absolute paths.
func within(path, base string) bool {
	if base == "/" {
		return true
	}
	return path == base || strings.HasPrefix(path, base+"/")
}

// resolve resolves the symlinks of path, including a path that does not
// exist yet (its longest existing prefix is resolved).
func resolve(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	dir := filepath.Dir(path)
	if dir == path {
		return path
	}
	return filepath.Join(resolve(dir), filepath.Base(path))
}

func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
