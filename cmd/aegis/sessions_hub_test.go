package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/projector"
)

// aegis sessions --hub lists a host's sessions from its mirror on the hub
// as aegis sessions lists them on the host (a session that did not close
// there is unclosed: the hub cannot tell whether it still runs), and keeps
// the mirror's index in a private cache, so that the next run reads only
// the messages that reached the mirror since.
func TestSessionsFromTheHubReadOnlyWhatIsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub and aegis wrap")
	}
	t.Parallel() // it mostly waits (on processes, a hub's retries): beside the others
	h := hubtest.New(t, 3)
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	l := newLive(t, "")
	hubURLs := strings.Join(h.ClientURLs(), ",")
	if out, code := l.aegis("hub", "enroll", "laptop-1", "--hub", hubURLs, "--replicas", "1", "--key-out", filepath.Join(l.dir, "laptop-1.nkey")); code != 0 {
		t.Fatalf("enroll: exit %d\n%s", code, out)
	}
	wrap := func() *wrapProc {
		return l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
			"--hub", strings.Join(h.LeafURLs(), ","), "--host", "laptop-1", "--", filepath.Join(l.bin, "aegis-example-server")))
	}
	// catchUp links the host's stream once more, until the mirror holds
	// all of it, and returns its last sequence.
	catchUp := func() uint64 {
		t.Helper()
		st, err := events.Open(ctx, events.Config{Dir: l.state, Hub: &events.HubConfig{URLs: h.LeafURLs(), Host: "laptop-1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		var last uint64
		if err := st.Replay(ctx, events.Position{}, func(r events.Record) error { last = r.Pos.Seq; return nil }); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(90 * time.Second)
		for {
			s, err := js.Stream(ctx, events.MirrorName("laptop-1"))
			var info *jetstream.StreamInfo
			if err == nil {
				info, err = s.Info(ctx)
			}
			if err == nil && info.State.LastSeq == last && info.State.Msgs == last {
				return last
			}
			if time.Now().After(deadline) {
				t.Fatalf("the mirror holds %+v, the host %d messages (%v)", info, last, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// eventsAfter counts the host's events after message seq.
	eventsAfter := func(seq uint64) int {
		t.Helper()
		st, err := events.Open(ctx, events.Config{Dir: l.state})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		n := 0
		if err := st.Replay(ctx, events.Position{Seq: seq + 1}, func(events.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cacheHome := filepath.Join(l.dir, "cache")
	folded := regexp.MustCompile(`msg="folded the hub's mirror" host=laptop-1 events=(\d+) at=(\d+)`)
	// fromHub lists the host's sessions from the hub, and returns them
	// with how many events the run read of the mirror.
	fromHub := func() ([]projector.SessionSummary, int) {
		t.Helper()
		env := l.env
		l.env = append(append([]string(nil), env...), "XDG_CACHE_HOME="+cacheHome, "AEGIS_DEBUG=1")
		defer func() { l.env = env }()
		out, stderr, code := l.aegisStdout("sessions", "--hub", hubURLs, "--host", "laptop-1", "--json")
		if code != 0 {
			t.Fatalf("sessions --hub: exit %d\n%s", code, stderr)
		}
		m := folded.FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("sessions --hub says nothing of what it folded:\n%s", stderr)
		}
		n, _ := strconv.Atoi(m[1])
		var list []projector.SessionSummary
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("sessions --hub --json: %v\n%s", err, out)
		}
		return list, n
	}
	fromHost := func() []projector.SessionSummary {
		t.Helper()
		out, stderr, code := l.aegisStdout("sessions", "--state-dir", l.state, "--json")
		if code != 0 {
			t.Fatalf("sessions: exit %d\n%s", code, stderr)
		}
		var list []projector.SessionSummary
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("sessions --json: %v\n%s", err, out)
		}
		return list
	}
	same := func(hub, host []projector.SessionSummary) {
		t.Helper()
		if len(hub) != len(host) {
			t.Fatalf("the hub lists %d sessions, the host %d", len(hub), len(host))
		}
		for i := range hub {
			a, b := hub[i], host[i]
			want := projector.StateUnclosed
			if b.State == projector.StateClosed {
				want = projector.StateClosed
			}
			if a.State != want {
				t.Errorf("session %s is %s on the host and %s on the hub, want %s", b.ID, b.State, a.State, want)
			}
			a.State, b.State = "", ""
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Errorf("the hub's session:\n%s\nthe host's:\n%s", ja, jb)
			}
		}
	}

	// A session that closes, and one killed mid-call.
	w := wrap()
	w.initialize()
	for i := range 3 {
		if a := w.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"hub"}}`); !strings.Contains(a, "hub") {
			t.Fatalf("echo: %s", a)
		}
	}
	w.finish()
	w = wrap()
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"killed"}}`)
	w.kill()
	last := catchUp()

	hub, n := fromHub()
	host := fromHost()
	same(hub, host)
	if len(host) != 2 || host[0].State != projector.StateClosed || host[1].State != projector.StateKilled {
		t.Fatalf("the host lists %+v", host)
	}
	if all := eventsAfter(0); n != all {
		t.Errorf("the first run read %d events of the mirror, which holds %d", n, all)
	}
	sum := cacheName(h.ClientURLs())
	cache := filepath.Join(cacheHome, "aegis", "hub", "laptop-1-"+sum)
	if _, err := os.Stat(filepath.Join(cache, events.IndexDir, "index.v1.head")); err != nil {
		t.Fatalf("no cache: %v", err)
	}
	for _, d := range []string{cache, filepath.Join(cache, events.IndexDir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("the cache folder %s: %v (%v), want mode 0700", d, fi, err)
		}
	}

	// Nothing new: nothing read.
	if hub, n := fromHub(); n != 0 {
		t.Errorf("nothing reached the mirror, yet the second run read %d events", n)
	} else {
		same(hub, host)
	}

	// One more session: only its events are read.
	w = wrap()
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"third"}}`)
	w.finish()
	catchUp()
	hub, n = fromHub()
	host = fromHost()
	same(hub, host)
	if want := eventsAfter(last); n != want || len(hub) != 3 {
		t.Errorf("after a session of %d events the run read %d, and lists %d sessions", want, n, len(hub))
	}

	// A cache that does not match the mirror is thrown away.
	if _, err := events.WriteIndex(cache, "index.v1.chunk.0", []byte("[]")); err != nil {
		t.Fatal(err)
	}
	hub, n = fromHub()
	same(hub, host)
	if all := eventsAfter(0); n != all {
		t.Errorf("a damaged cache was used: the run read %d of %d events", n, all)
	}
}

// cacheName is the hub's part of a cache's name: 8 hex digits of the
// SHA-256 of its URLs, sorted.
func cacheName(urls []string) string {
	dir, err := hubCacheDir(func(k string) string { return map[string]string{"XDG_CACHE_HOME": "/c"}[k] }, urls, "h")
	if err != nil {
		panic(err)
	}
	return strings.TrimPrefix(filepath.Base(dir), "h-")
}

// The cache of a hub's mirror lies under XDG_CACHE_HOME, else ~/.cache,
// named after the host and the hub, whatever the order of its URLs.
func TestSessionsHubCacheDir(t *testing.T) {
	a := []string{"nats://hub-1:4222", "nats://hub-2:4222"}
	b := []string{"nats://hub-2:4222", "nats://hub-1:4222"}
	other := []string{"nats://elsewhere:4222"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		urls []string
		want string
	}{
		{"the XDG cache home", map[string]string{"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/u"}, a, "/x/cache/aegis/hub/laptop-7-" + cacheName(a)},
		{"home without XDG", map[string]string{"HOME": "/home/u"}, a, "/home/u/.cache/aegis/hub/laptop-7-" + cacheName(a)},
		{"a relative XDG path, which the spec says to ignore", map[string]string{"XDG_CACHE_HOME": "cache", "HOME": "/home/u"}, a, "/home/u/.cache/aegis/hub/laptop-7-" + cacheName(a)},
		{"the URLs in another order", map[string]string{"HOME": "/home/u"}, b, "/home/u/.cache/aegis/hub/laptop-7-" + cacheName(a)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hubCacheDir(func(k string) string { return tc.env[k] }, tc.urls, "laptop-7")
			if err != nil || got != tc.want {
				t.Errorf("hubCacheDir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if cacheName(a) == cacheName(other) || len(cacheName(a)) != 8 {
		t.Errorf("two hubs share the cache name %q, or it is not 8 hex digits", cacheName(a))
	}
	if _, err := hubCacheDir(func(string) string { return "" }, a, "laptop-7"); err == nil {
		t.Error("no HOME and no XDG_CACHE_HOME: a cache directory anyway")
	}
}

// sessions --hub reads the hub's mirror: a state directory with it, or
// the hub's other flags without it, are usage errors, refused before
// anything is read.
func TestSessionsHubFlagsThatDoNotGoTogether(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"--state-dir with --hub", []string{"--hub", "nats://127.0.0.1:1", "--host", "laptop-1", "--state-dir", "/nonexistent"}, "no --state-dir"},
		{"--host without --hub", []string{"--host", "laptop-1"}, "need --hub"},
		{"--hub without --host", []string{"--hub", "nats://127.0.0.1:1"}, "--hub needs --host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := cmd(t, map[string]string{"HOME": t.TempDir()}, append([]string{"sessions"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want 2 saying %q:\n%s", code, tc.want, stderr)
			}
		})
	}
}
