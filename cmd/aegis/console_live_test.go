package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sse reads the server-sent events of path, sending each as "event data"
// on the channel returned, until ctx ends.
func (c *consoleClient) sse(t *testing.T, ctx context.Context, path string) <-chan [2]string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	req.AddCookie(&http.Cookie{Name: c.cookie.Name, Value: c.cookie.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	out := make(chan [2]string, 256)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				select {
				case out <- [2]string{event, strings.TrimPrefix(line, "data: ")}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// The console follows a running session from its process's stream: the
// sessions list counts a call as soon as it is stored, and the transcript
// shows each call while the session runs and ends with it, with no copy
// of the stream's files made.
func TestConsoleFollowsTheStreamLive(t *testing.T) {
	l := newLive(t, "")
	w := l.wrap(false)
	w.initialize()
	con := l.console()
	c := loginClient(t, con)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	states := c.sse(t, ctx, "/api/events")
	type row struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Calls int    `json:"calls"`
	}
	waitState := func(what string, ok func(notes []string, rows []row) bool) []row {
		t.Helper()
		for {
			select {
			case ev, open := <-states:
				if !open {
					t.Fatalf("the state stream ended before %s", what)
				}
				var msg struct {
					State struct {
						Sessions []row    `json:"sessions"`
						Notes    []string `json:"notes"`
					} `json:"state"`
				}
				if err := json.Unmarshal([]byte(ev[1]), &msg); err != nil {
					t.Fatal(err)
				}
				if ok(msg.State.Notes, msg.State.Sessions) {
					return msg.State.Sessions
				}
			case <-ctx.Done():
				t.Fatalf("no state with %s", what)
			}
		}
	}
	rows := waitState("the session, live from the stream", func(notes []string, rows []row) bool {
		return len(rows) == 1 && rows[0].State == "running" && strings.Contains(strings.Join(notes, "\n"), "sessions live from the stream of aegis process")
	})
	id := rows[0].ID
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"one"}}`)
	waitState("one call counted", func(_ []string, rows []row) bool { return len(rows) == 1 && rows[0].Calls == 1 })

	lines := c.sse(t, ctx, "/api/transcript?session="+id)
	var got strings.Builder
	waitLine := func(what string) string {
		t.Helper()
		for {
			select {
			case ev, open := <-lines:
				if !open {
					t.Fatalf("the transcript ended before %q:\n%s", what, got.String())
				}
				var s string
				json.Unmarshal([]byte(ev[1]), &s)
				if ev[0] == "line" {
					got.WriteString(s + "\n")
				}
				if strings.Contains(s, what) || ev[0] == what {
					return ev[0]
				}
			case <-ctx.Done():
				t.Fatalf("the transcript never showed %q:\n%s", what, got.String())
			}
		}
	}
	waitLine("echo id=1")
	w.call(2, "tools/call", `{"name":"echo","arguments":{"message":"two"}}`)
	waitLine("echo id=2") // while the session runs
	if snaps, _ := filepath.Glob(filepath.Join(l.state, "readers", "*")); len(snaps) != 0 {
		t.Errorf("the console made snapshot copies of a stream it could follow: %v", snaps)
	}
	w.finish()
	waitLine("end")
	_, whole, _ := l.in("replay", id)
	if got.String() != whole {
		t.Errorf("--- the console's transcript\n%s\n--- replay\n%s", got.String(), whole)
	}
}
