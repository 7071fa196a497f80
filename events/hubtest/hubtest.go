// Package hubtest runs a real NATS hub for tests: a JetStream cluster of
// separate nats-server processes on loopback, built from the nats-server
// module that go.mod names, with a leaf node listener on every node. It
// holds no state outside the Hub it returns; every process dies with the
// test.
package hubtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events/platform"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	natsServerOnce sync.Once
	natsServerBin  string
	natsServerErr  error
)

// natsServer builds the nats-server of go.mod, the stock server a hub
// runs, once per test binary, into a folder named after this process; the
// folders of processes that are gone are removed first. Under make test it
// is the one built for every package (AEGIS_TEST_BINDIR).
func natsServer(t testing.TB) string {
	t.Helper()
	natsServerOnce.Do(func() {
		if d := os.Getenv("AEGIS_TEST_BINDIR"); d != "" {
			// Built by make test for every package's tests (TESTBINS).
			natsServerBin = filepath.Join(d, "nats-server")
			if _, err := os.Stat(natsServerBin); err != nil {
				natsServerErr = fmt.Errorf("nats-server is not among the binaries of AEGIS_TEST_BINDIR: add its package to TESTBINS in the Makefile (%v)", err)
			}
			return
		}
		const prefix = "aegis-nats-server-"
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
		for _, d := range old {
			if pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), prefix)); err == nil && !platform.Alive(pid) {
				os.RemoveAll(d)
			}
		}
		dir := filepath.Join(os.TempDir(), prefix+strconv.Itoa(os.Getpid()))
		if natsServerErr = os.MkdirAll(dir, 0o755); natsServerErr != nil {
			return
		}
		natsServerBin = filepath.Join(dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", natsServerBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsServerErr = fmt.Errorf("build nats-server: %v\n%s", err, out)
		}
	})
	if natsServerErr != nil {
		t.Fatal(natsServerErr)
	}
	return natsServerBin
}

// Node is one node of a hub, a nats-server process.
type Node struct {
	name         string
	conf, dir    string
	base         string // the configuration without accounts
	client, leaf int
	cmd          *exec.Cmd
	exited       chan struct{} // closed when cmd has ended
}

// Hub is a real JetStream cluster (domain "hub") of separate nats-server
// processes on loopback, with a leaf node listener on each node.
type Hub struct {
	t       testing.TB
	bin     string
	admin   string // userinfo of the admin, for a secured hub
	secured bool
	// unadvertised: the nodes do not tell a leaf the other nodes' leaf
	// URLs, so a leaf links only through the URLs it was given.
	unadvertised bool
	Nodes        []*Node
}

// accounts is the accounts block of a secured hub with these leaf users.
func (h *Hub) accounts(leafUsers []string) string {
	if !h.secured {
		return ""
	}
	users := append([]string{"{user: admin, password: admin}"}, leafUsers...)
	return fmt.Sprintf(`accounts {
  FLEET: { jetstream: enabled, users: [ %s ] }
  SYS: { users: [ {user: sys, password: sys} ] }
}
system_account: SYS
feature_flags { js_api_reply_v2: true }
`, strings.Join(users, ", "))
}

// SetLeafUsers rewrites a secured hub's leaf users and has every running
// node reload its configuration, as an admin does after enrolling a host.
func (h *Hub) SetLeafUsers(leafUsers ...string) {
	h.t.Helper()
	for _, nd := range h.Nodes {
		if err := os.WriteFile(nd.conf, []byte(nd.base+h.accounts(leafUsers)), 0o600); err != nil {
			h.t.Fatal(err)
		}
		if nd.cmd != nil {
			nd.cmd.Process.Signal(syscall.SIGHUP)
		}
	}
	time.Sleep(500 * time.Millisecond) // a reload is asynchronous
}

// handedOut holds every port freePort gave in this process: hubs of tests
// that run side by side (t.Parallel) are set up at once, and a port one
// of them was given is free until its node listens, so a second hub could
// otherwise be given it too. Two nodes of different hubs on one route
// port would join the two clusters (each is named hub). A port is never
// given back: a node killed and started again listens on it again.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// freePort returns a port that is free now, taken at random below the
// kernel's ephemeral range (32768 and up on Linux), from a band of 2000
// ports chosen by this process's PID. A node that is killed and started
// again must get its port back: a port the kernel hands out for outgoing
// connections could be gone by then, and so could one that another test
// process (go test runs packages side by side) took for a hub of its
// own, which the band makes unlikely. Within the process, no port is
// given twice (handedOut).
func freePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	base := 10000 + os.Getpid()%11*2000
	for range 1000 {
		port := base + rand.IntN(2000)
		if handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatalf("no free port in %d-%d", base, base+1999)
	return 0
}

// New starts a hub of n nodes that takes any client and any leaf node
// into one account; they are killed when the test ends.
func New(t testing.TB, n int) *Hub { return start(&Hub{t: t}, n, nil) }

// NewUnadvertised is New, but the nodes do not tell their leaves the
// other nodes' leaf URLs: a leaf links only through the URLs it was
// given, so a test can cut its link by cutting those.
func NewUnadvertised(t testing.TB, n int) *Hub { return start(&Hub{t: t, unadvertised: true}, n, nil) }

// NewSecured starts a hub of n nodes with accounts: FLEET, whose
// JetStream holds the mirrors, with the user admin (password admin,
// [Hub.ClientURLs] carry it) and the leaf users given (LeafUser blocks),
// and a system account. A connection without credentials is refused.
func NewSecured(t testing.TB, n int, leafUsers ...string) *Hub {
	return start(&Hub{t: t, secured: true}, n, leafUsers)
}

func start(h *Hub, n int, leafUsers []string) *Hub {
	t := h.t
	h.bin = natsServer(t)
	if h.secured {
		h.admin = "admin:admin@"
	}
	accounts := h.accounts(leafUsers)
	dir := t.TempDir()
	routes := make([]int, n)
	for i := range n {
		routes[i] = freePort(t)
	}
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := range n {
		nd := &Node{name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), client: freePort(t), leaf: freePort(t)}
		nd.conf = filepath.Join(dir, nd.name+".conf")
		nd.base = fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, domain: hub }
cluster { name: hub, listen: 127.0.0.1:%d, routes: [%s] }
leafnodes { listen: 127.0.0.1:%d, no_advertise: %t }
`, nd.name, nd.client, nd.dir, routes[i], strings.Join(routeURLs, ", "), nd.leaf, h.unadvertised)
		if err := os.WriteFile(nd.conf, []byte(nd.base+accounts), 0o600); err != nil {
			t.Fatal(err)
		}
		h.Nodes = append(h.Nodes, nd)
		h.Start(nd)
	}
	t.Cleanup(func() {
		for _, nd := range h.Nodes {
			h.Kill(nd)
		}
	})
	return h
}

// Start starts a node (again, with its store as it was).
func (h *Hub) Start(nd *Node) {
	h.t.Helper()
	nd.cmd = exec.Command(h.bin, "-c", nd.conf, "-l", nd.conf+".log")
	if err := nd.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	cmd, exited := nd.cmd, make(chan struct{})
	nd.exited = exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
}

// Name is the node's server name, as JetStream names a stream's leader.
func (nd *Node) Name() string { return nd.name }

// state says whether a node runs, and how it ended if not.
func (nd *Node) state() string {
	if nd.cmd == nil {
		return "stopped"
	}
	select {
	case <-nd.exited:
		return "exited: " + nd.cmd.ProcessState.String()
	default:
		return "running"
	}
}

// CPU returns the CPU time the hub's running nodes have used (on Linux,
// from /proc; 0 elsewhere).
func (h *Hub) CPU() time.Duration {
	var total time.Duration
	for _, nd := range h.Nodes {
		if nd.cmd == nil || nd.cmd.Process == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", nd.cmd.Process.Pid))
		if err != nil {
			continue
		}
		// After the command name in parentheses: state is field 3,
		// utime and stime fields 14 and 15, in clock ticks (100 a second
		// on Linux).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+st) * 10 * time.Millisecond
	}
	return total
}

// Log returns what the node has logged so far.
func (nd *Node) Log() string {
	b, _ := os.ReadFile(nd.conf + ".log")
	return string(b)
}

// Kill kills a node with SIGKILL, as a crash would.
func (h *Hub) Kill(nd *Node) {
	if nd.cmd != nil && nd.cmd.Process != nil {
		nd.cmd.Process.Signal(syscall.SIGKILL)
		<-nd.exited
		nd.cmd = nil
	}
}

// LeafURLs are the nodes' leaf node URLs, for aegis --hub.
func (h *Hub) LeafURLs() []string {
	var out []string
	for _, nd := range h.Nodes {
		out = append(out, fmt.Sprintf("nats://127.0.0.1:%d", nd.leaf))
	}
	return out
}

// ClientURLs are the nodes' client URLs, for an admin or a reader.
func (h *Hub) ClientURLs() []string {
	var out []string
	for _, nd := range h.Nodes {
		out = append(out, fmt.Sprintf("nats://%s127.0.0.1:%d", h.admin, nd.client))
	}
	return out
}

// JetStream connects to the hub's JetStream, waiting until the cluster
// is up: a minute at most, which a loaded machine running -race tests of
// several packages side by side may need to elect the cluster's leader.
// If it is not up by then, the test fails with each node's state and the
// end of its log.
func (h *Hub) JetStream(ctx context.Context) (*nats.Conn, jetstream.JetStream) {
	h.t.Helper()
	urls := h.ClientURLs()
	deadline := time.Now().Add(time.Minute)
	for {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1))
		if err == nil {
			js, _ := jetstream.New(nc)
			if _, err = js.AccountInfo(ctx); err == nil {
				return nc, js
			}
			nc.Close()
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, nd := range h.Nodes {
				log := nd.Log()
				if len(log) > 3000 {
					log = log[len(log)-3000:]
				}
				fmt.Fprintf(&b, "\n--- node %s (%s), end of its log:\n%s", nd.name, nd.state(), log)
			}
			h.t.Fatalf("hub not ready: %v%s", err, b.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
