package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/projector"
)

// A host enrolled with aegis hub enroll and wrapped with --hub has its
// events mirrored on a real three-node hub, every one, once; enrolling
// again is refused only for a stream that is not the mirror.
func TestFleetMirrorsAWrap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub and aegis wrap")
	}
	t.Parallel()                  // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.NewSecured(t, 3) // no host may link yet
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	l := newLive(t, "")
	hubURLs := strings.Join(h.ClientURLs(), ",")
	keyFile := filepath.Join(l.dir, "laptop-1.nkey")
	out, code := l.aegis("hub", "enroll", "laptop-1", "--hub", hubURLs, "--key-out", keyFile)
	if code != 0 || !strings.Contains(out, "enrolled laptop-1: the hub mirrors its stream as AEGIS_laptop-1 (3 replicas") || !strings.Contains(out, keyFile+" (new)") {
		t.Fatalf("enroll: exit %d\n%s", code, out)
	}
	// The admin adds the user enroll printed to the hub, and reloads it.
	_, block, _ := strings.Cut(out, "then reload them (nats-server --signal reload):\n")
	block, _, _ = strings.Cut(block, "\n\n")
	h.SetLeafUsers(block)
	if again, code := l.aegis("hub", "enroll", "laptop-1", "--hub", hubURLs, "--key-out", keyFile); code != 0 || !strings.Contains(again, keyFile+" (kept: it was there)") || !strings.Contains(again, block) {
		t.Fatalf("enroll again: exit %d\n%s", code, again)
	}
	if out, code := l.aegis("hub", "enroll", "laptop-1", "--hub", hubURLs, "--key-out", keyFile, "--replicas", "1"); code != 1 || !strings.Contains(out, "is not this mirror") {
		t.Fatalf("enroll with other settings: exit %d\n%s", code, out)
	}

	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--hub", strings.Join(h.LeafURLs(), ","), "--host", "laptop-1", "--hub-nkey", keyFile, "--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	for i := range 5 {
		if a := w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"fleet"}}`); !strings.Contains(a, "fleet") {
			t.Fatalf("echo: %s", a)
		}
	}
	// The hub pulls while the host's aegis runs, as a host's does for
	// hours; what a run leaves behind waits for the next. The mirror holds
	// every message of the calls, the first call's intent included.
	mirror, err := js.Stream(ctx, events.MirrorName("laptop-1"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		info, err := mirror.Info(ctx)
		if err == nil && info.State.Msgs >= 10 && info.State.Msgs == info.State.LastSeq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror holds %+v (%v)", info.State, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.finish()
	// A second, short session: its lines reach the hub with the next run.
	w = l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--hub", strings.Join(h.LeafURLs(), ","), "--host", "laptop-1", "--hub-nkey", keyFile, "--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"second"}}`)
	w.finish()

	// The next run on the host lets the hub take what the last one left.
	linkUntilMirrored(t, l.state, "laptop-1", keyFile, h)

	// The hub's copy exports byte for byte what the host recorded.
	fromHub, fromHost := filepath.Join(l.dir, "hub.aarl"), filepath.Join(l.dir, "host.aarl")
	if out, code := l.aegis("export", "--hub", hubURLs, "--host", "laptop-1", "--out", fromHub); code != 0 {
		t.Fatalf("export --hub: exit %d\n%s", code, out)
	}
	l.mustAegis("export", "--state-dir", l.state, "--out", fromHost)
	if a, b, c := readFile(t, fromHub), readFile(t, fromHost), readFile(t, l.audit); !bytes.Equal(a, b) || !bytes.Equal(b, c) {
		t.Fatalf("the hub's export (%d bytes), the host's (%d) and the record (%d) differ", len(a), len(b), len(c))
	}
	// The hub's copy replays as the host's does.
	hostReplay := l.mustAegis("replay", "--state-dir", l.state, "last")
	hubReplay, code := l.aegis("replay", "--hub", hubURLs, "--host", "laptop-1", "last")
	if code != 0 || hubReplay != hostReplay {
		t.Fatalf("replay --hub: exit %d\n%s\nthe host's:\n%s", code, hubReplay, hostReplay)
	}
	pub := l.publicKey()
	if out, code := l.aegis("verify", "--key", pub, "--hub", hubURLs, "--host", "laptop-1", l.audit); code != 0 || !strings.Contains(out, "checkpoints hub:AEGIS_laptop-1: 1, the last of ") {
		t.Fatalf("verify --hub: exit %d\n%s", code, out)
	}

	// The last session cut from the record, and its sidecar with it: the
	// machine's copies agree, the hub's checkpoint does not.
	truncateLines(t, l.audit, 4)
	os.Remove(l.audit + projector.CheckpointsSuffix)
	if out, code := l.aegis("verify", "--key", pub, l.audit); code != 0 {
		t.Fatalf("the cut record alone: exit %d\n%s", code, out)
	}
	if out, code := l.aegis("verify", "--key", pub, "--hub", hubURLs, "--host", "laptop-1", l.audit); code != 1 || !strings.Contains(out, "Tampered: ") || !strings.Contains(out, "lines were cut from its end") {
		t.Fatalf("the cut record against the hub: exit %d\n%s", code, out)
	}
}

// enroll against a hub whose JetStream cannot answer yet (two of its three
// nodes are down: no leader) says that it waits for it and then that the
// hub's JetStream did not answer, not that the URLs are wrong; with the
// nodes back it enrolls. --reset then sets the mirror aside and makes a
// new one.
func TestHubEnrollWaitsForTheHubsJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub")
	}
	t.Parallel() // it mostly waits (on processes): beside the others
	h := hubtest.New(t, 3)
	h.Kill(h.Nodes[1])
	h.Kill(h.Nodes[2])
	l := newLive(t, "")
	url := h.ClientURLs()[0]
	keyFile := filepath.Join(l.dir, "laptop-1.nkey")
	out, code := l.aegis("hub", "enroll", "laptop-1", "--hub", url, "--key-out", keyFile, "--wait", "3s")
	if code != 1 || !strings.Contains(out, "waiting up to 3s for the hub and its JetStream to answer") ||
		!strings.Contains(out, "the hub's JetStream did not answer") || strings.Contains(out, "client URLs") {
		t.Fatalf("enroll against a hub without its JetStream: exit %d\n%s", code, out)
	}
	h.Start(h.Nodes[1])
	h.Start(h.Nodes[2])
	if out, code := l.aegis("hub", "enroll", "laptop-1", "--hub", url, "--key-out", keyFile, "--wait", "1m"); code != 0 || !strings.Contains(out, "enrolled laptop-1") {
		t.Fatalf("enroll once the hub is whole: exit %d\n%s", code, out)
	}
	out, code = l.aegis("hub", "enroll", "laptop-1", "--hub", url, "--key-out", keyFile, "--reset")
	if code != 0 || !strings.Contains(out, "the old mirror's messages are kept in the stream AEGIS-ASIDE_laptop-1_") || !strings.Contains(out, "enrolled laptop-1") {
		t.Fatalf("enroll --reset: exit %d\n%s", code, out)
	}
}
