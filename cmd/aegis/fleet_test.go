package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/projector"
)

// fleetHost is one machine of a fleet test: its own state directory,
// record and key, and its aegis wrap linked to the hub.
type fleetHost struct {
	name string
	l    *live
	key  string // the host's link key
	w    *wrapProc

	mu    sync.Mutex
	done  []time.Time // when each load call was answered
	err   error
	next  int
	stop  chan struct{}
	ended chan struct{}
}

// load sends echo calls one after another until stop, as a host's agent
// would, noting when each is answered.
func (h *fleetHost) load() {
	defer close(h.ended)
	for {
		select {
		case <-h.stop:
			return
		default:
		}
		// A steady load, not the most the machine can do: the test waits
		// minutes on the hub's retries, and calls at full speed all that
		// while would take the CPU from every test beside it.
		time.Sleep(100 * time.Millisecond)
		h.next++
		id := 1000 + h.next
		line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"load %d"}}}`+"\n", id, id)
		if _, err := h.w.in.Write([]byte(line)); err != nil {
			h.fail(err)
			return
		}
		want := []byte(fmt.Sprintf(`"id":%d,`, id))
		for {
			got, err := h.w.out.ReadBytes('\n')
			if err != nil {
				h.fail(fmt.Errorf("answer to call %d: %w", id, err))
				return
			}
			if bytes.Contains(got, want) {
				if !bytes.Contains(got, []byte("load")) {
					h.fail(fmt.Errorf("answer to call %d: %s", id, got))
					return
				}
				break
			}
		}
		h.mu.Lock()
		h.done = append(h.done, time.Now())
		h.mu.Unlock()
	}
}

// stacks ends the host's aegis wrap with SIGQUIT and returns what it
// printed: every goroutine's stack (it runs with GOTRACEBACK=all), to see
// what a call waited for.
func (h *fleetHost) stacks() string {
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for line := range h.w.prompts {
			if b.Len() < 1<<20 {
				b.WriteString(line + "\n")
			}
		}
	}()
	h.w.c.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return b.String()
}

func (h *fleetHost) fail(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

// answered counts the calls answered between from and to.
func (h *fleetHost) answered(from, to time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, t := range h.done {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// Three aegis wraps, each on its own state directory as on its own
// machine, linked to a real three-node hub under a steady load of calls.
// A hub node killed with SIGKILL, and then the whole hub stopped for five
// seconds, hold up no call; the mirrors converge, each exports byte for
// byte what its host recorded, a record cut on its machine after its
// checkpoint reached the hub is caught, and an approver's approval over
// the hub lets exactly one call through on exactly the host that held it.
func TestFleetOfThreeWrapsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub and three aegis wraps")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.NewSecured(t, 3)
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	clientURLs := strings.Join(h.ClientURLs(), ",")
	const policy = "version: 1\ndefault: allow\nrules:\n  - {id: gate-add, action: pending_approval, tool: add}\n"

	var hosts []*fleetHost
	var users []string
	userBlock := func(out string) string {
		_, block, _ := strings.Cut(out, "then reload them (nats-server --signal reload):\n")
		block, _, _ = strings.Cut(block, "\n\n")
		return block
	}
	for i := range 3 {
		fh := &fleetHost{name: fmt.Sprintf("host-%d", i+1), l: newLive(t, policy), stop: make(chan struct{}), ended: make(chan struct{})}
		fh.key = filepath.Join(fh.l.dir, fh.name+".nkey")
		out, code := fh.l.aegis("hub", "enroll", fh.name, "--hub", clientURLs, "--key-out", fh.key)
		if code != 0 {
			t.Fatalf("enroll %s: exit %d\n%s", fh.name, code, out)
		}
		users = append(users, userBlock(out))
		hosts = append(hosts, fh)
	}
	approverKey := filepath.Join(hosts[0].l.dir, "alice.nkey")
	out, code := hosts[0].l.aegis("hub", "approver", "alice", "--key-out", approverKey)
	if code != 0 || !strings.Contains(out, "approver alice: its key is "+approverKey+" (new)") {
		t.Fatalf("hub approver: exit %d\n%s", code, out)
	}
	users = append(users, userBlock(out))
	h.SetLeafUsers(users...)

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, nd := range h.Nodes {
			log := nd.Log()
			t.Logf("hub node log, its end:\n%s", log[max(0, len(log)-4096):])
		}
		for _, fh := range hosts {
			if fh.w == nil {
				continue
			}
			for {
				select {
				case p, ok := <-fh.w.prompts:
					if ok {
						t.Logf("%s: %s", fh.name, p)
						continue
					}
				default:
				}
				break
			}
		}
	})
	for _, fh := range hosts {
		fh.l.env = append(fh.l.env, "GOTRACEBACK=all")
		fh.w = fh.l.start(exec.Command(filepath.Join(fh.l.bin, "aegis"), "wrap", "--audit", fh.l.audit, "--signing-key", fh.l.key, "--state-dir", fh.l.state,
			"--policy", fh.l.policy, "--hub", strings.Join(h.LeafURLs(), ","), "--host", fh.name, "--hub-nkey", fh.key,
			"--", filepath.Join(fh.l.bin, "aegis-example-server")))
		fh.w.initialize()
		go fh.load()
	}
	mirrored := func(host string) jetstream.StreamState {
		s, err := js.Stream(ctx, events.MirrorName(host))
		if err != nil {
			return jetstream.StreamState{}
		}
		info, err := s.Info(ctx)
		if err != nil {
			return jetstream.StreamState{}
		}
		return info.State
	}
	// The mirrors start pulling (the hub retries a mirror it made before
	// its host linked on a backoff of its own).
	waitFor(t, 150*time.Second, "every mirror pulls", func() bool {
		for _, fh := range hosts {
			if mirrored(fh.name).Msgs < 20 {
				return false
			}
		}
		return true
	})

	// A hub node dies mid-load and comes back.
	// (A few seconds each, not more: every second of this test is three
	// wraps under load beside the other tests.)
	h.Kill(h.Nodes[0])
	time.Sleep(3 * time.Second)
	h.Start(h.Nodes[0])
	time.Sleep(3 * time.Second)

	// The whole hub is down for five seconds: the calls go on.
	for _, nd := range h.Nodes {
		h.Kill(nd)
	}
	down := time.Now()
	time.Sleep(5 * time.Second)
	up := time.Now()
	for _, nd := range h.Nodes {
		h.Start(nd)
	}
	for _, fh := range hosts {
		n := fh.answered(down, up)
		t.Logf("%s: %d calls answered while the hub was down", fh.name, n)
		if n < 5 {
			t.Fatalf("%s: %d calls answered in the 5 s the hub was down; its goroutines:\n%s", fh.name, n, fh.stacks())
		}
	}
	time.Sleep(3 * time.Second)
	for _, fh := range hosts {
		close(fh.stop)
		<-fh.ended
		if fh.err != nil {
			t.Fatalf("%s: %v", fh.name, fh.err)
		}
	}
	nc.Close()
	nc, js = h.JetStream(ctx)
	defer nc.Close()

	// host-2 and host-3 each hold a call that waits for a human; the
	// approver, over the hub, sees both and approves host-2's.
	add := `{"name":"add","arguments":{"a":2,"b":3}}`
	var ids []string
	for _, fh := range hosts[1:] {
		if a := fh.w.call(1, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
			t.Fatalf("%s: add: %s", fh.name, a)
		}
		ids = append(ids, fh.w.approvalID())
	}
	hub := []string{"--hub", clientURLs, "--hub-nkey", approverKey}
	// Reader URLs carry the admin's password; the approver's are bare.
	for i := range hub {
		hub[i] = strings.ReplaceAll(hub[i], "admin:admin@", "")
	}
	var rows []approvalRow
	var last string
	waitFor(t, 60*time.Second, "the approver sees both pending calls", func() bool {
		out, errs, code := hosts[0].l.aegisStdout(append([]string{"approvals", "--json"}, hub...)...)
		rows, last = nil, fmt.Sprintf("exit %d\n%s\n%s", code, out, errs)
		return code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 2
	}, func() string { return last })
	for i, r := range rows {
		if want := hosts[1+i].name; r.Host != want || r.ApprovalID != ids[i] || r.ToolID != "add" {
			t.Fatalf("pending %d: %+v, want %s on %s", i, r, ids[i], want)
		}
	}
	target := []string{"approve", ids[0]}
	if ids[0] == ids[1] {
		// One id on two hosts: the approver must say which.
		if out, code := hosts[0].l.aegis(append(target, hub...)...); code != 1 || !strings.Contains(out, "pending on 2 hosts or sessions") {
			t.Fatalf("ambiguous approve: exit %d\n%s", code, out)
		}
		target = append(target, "--host", "host-2")
	}
	if out, code := hosts[0].l.aegis(append(target, hub...)...); code != 0 || !strings.Contains(out, "(host host-2)") {
		t.Fatalf("approve over the hub: exit %d\n%s", code, out)
	}
	if a := hosts[1].w.call(2, "tools/call", add); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("host-2's approved call: %s", a)
	}
	if a := hosts[1].w.call(3, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("host-2's second call got through on one approval: %s", a)
	}
	if a := hosts[2].w.call(2, "tools/call", add); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("host-3's call got through on host-2's approval: %s", a)
	}
	for _, fh := range hosts {
		fh.w.finish()
	}
	if out := hosts[1].l.mustAegis("replay", "--state-dir", hosts[1].l.state, "last"); !strings.Contains(out, "over the hub") {
		t.Errorf("host-2's replay does not say the approval came over the hub:\n%s", out[max(0, len(out)-3000):])
	}

	// Every mirror converges on its host's stream, and exports byte for
	// byte what the host recorded.
	for _, fh := range hosts {
		linkUntilMirrored(t, fh.l.state, fh.name, fh.key, h)
		fromHub, fromHost := filepath.Join(fh.l.dir, "hub.aarl"), filepath.Join(fh.l.dir, "host.aarl")
		if out, code := fh.l.aegis("export", "--hub", clientURLs, "--host", fh.name, "--out", fromHub); code != 0 {
			t.Fatalf("%s: export --hub: exit %d\n%s", fh.name, code, out)
		}
		fh.l.mustAegis("export", "--state-dir", fh.l.state, "--out", fromHost)
		if a, b, c := fileDigest(t, fromHub), fileDigest(t, fromHost), fileDigest(t, fh.l.audit); a != b || b != c {
			t.Fatalf("%s: the hub's export (%s), the host's (%s) and the record (%s) differ", fh.name, a, b, c)
		}
		t.Logf("%s: %d calls under load", fh.name, len(fh.done))
	}

	// host-3's record cut on its machine, sidecar and all: the hub's
	// checkpoint catches it.
	fh := hosts[2]
	truncateLines(t, fh.l.audit, 2)
	os.Remove(fh.l.audit + projector.CheckpointsSuffix)
	pub := fh.l.publicKey()
	if out, code := fh.l.aegis("verify", "--key", pub, "--hub", clientURLs, "--host", fh.name, fh.l.audit); code != 1 || !strings.Contains(out, "Tampered: ") {
		t.Fatalf("the cut record against the hub: exit %d\n%s", code, out)
	}
}

// linkUntilMirrored opens a host's store linked to the hub, as the next
// run on the host would, until the hub's mirror holds every message of
// it: what the host's last run left unpulled. It runs in a child process
// (TestLinkUntilMirroredHelper): the store serving the mirror's catch-up
// takes memory that must not count as this test process's peak, which
// the scale tests measure against.
func linkUntilMirrored(t *testing.T, state, host, keyFile string, h *hubtest.Hub) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^TestLinkUntilMirroredHelper$", "-test.v")
	c.Env = append(os.Environ(), "AEGIS_TEST_LINK_STATE="+state, "AEGIS_TEST_LINK_HOST="+host, "AEGIS_TEST_LINK_KEY="+keyFile,
		"AEGIS_TEST_LINK_LEAF="+strings.Join(h.LeafURLs(), ","), "AEGIS_TEST_LINK_HUB="+strings.Join(h.ClientURLs(), ","))
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s's mirror: %v\n%s", host, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// TestLinkUntilMirroredHelper is the child process of linkUntilMirrored;
// it runs only as such.
func TestLinkUntilMirroredHelper(t *testing.T) {
	state := os.Getenv("AEGIS_TEST_LINK_STATE")
	if state == "" {
		t.Skip("a helper of the fleet tests")
	}
	host := os.Getenv("AEGIS_TEST_LINK_HOST")
	seed, err := os.ReadFile(os.Getenv("AEGIS_TEST_LINK_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := events.Open(ctx, events.Config{Dir: state, Hub: &events.HubConfig{URLs: strings.Split(os.Getenv("AEGIS_TEST_LINK_LEAF"), ","),
		Host: host, NkeySeed: strings.TrimSpace(string(seed))}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	local, err := st.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(os.Getenv("AEGIS_TEST_LINK_HUB"), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var got jetstream.StreamState
	deadline := time.Now().Add(150 * time.Second)
	for {
		if s, err := js.Stream(ctx, events.MirrorName(host)); err == nil {
			if info, err := s.Info(ctx); err == nil {
				got = info.State
			}
		}
		if got.LastSeq == local && got.Msgs == local {
			fmt.Printf("%s: the mirror holds all %d messages of the host's stream\n", host, local)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the mirror holds %+v, the host %d messages", host, got, local)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fileDigest is the SHA-256 of a file and its size, read as a stream: the
// records of a load are tens of megabytes, and this test process's peak
// memory is what the scale tests measure against.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d bytes, sha256 %x", n, h.Sum(nil))
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range state {
				t.Log(s())
			}
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
