package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// tsParity is what a host built on the TypeScript SDK's 2.x client saw of
// the parity session (testdata/tsparity.mjs): the protocol it was served
// at, and each step's observation.
type tsParity struct {
	Version string                     `json:"version"`
	Steps   map[string]json.RawMessage `json:"steps"`
}

// tsParityConfig is a gateway file that serves server-everything whole:
// its tools, prompts and resources.
func tsParityConfig(t *testing.T, l *live, every []string) string {
	t.Helper()
	args, _ := json.Marshal(every[1:])
	path := filepath.Join(l.dir, "aegis.yaml")
	yaml := fmt.Sprintf(`version: 1
servers:
  everything:
    command: %q
    args: %s
profiles:
  all:
    allow: ["everything.*"]
    prompts: ["everything.*"]
    resources: ["demo://resource/**"]
activation:
  default_profile: all
`, every[0], args)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tsHost is a run of the parity session: over argv (or, with env naming
// URL and TOKEN, over streamable HTTP) as a host of protocol version (""
// for the client's default, the session protocol), its tools named with
// prefix.
type tsHost struct {
	env             []string
	argv            []string
	version, prefix string
}

// run runs the host's session with the TypeScript client node and dir
// and the host's root. It may run beside others: it only waits on node.
func (h tsHost) run(node, dir, script, root string) (tsParity, error) {
	a, _ := json.Marshal(h.argv)
	cmd := exec.Command(node, script)
	cmd.Env = append(h.env, "MCP_CLIENT_DIR="+dir, "ARGV="+string(a), "VERSION="+h.version, "PREFIX="+h.prefix, "ROOT="+root)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return tsParity{}, fmt.Errorf("the TypeScript host (%q): %v\n%s", h.version, err, stderr.String())
	}
	var p tsParity
	if err := json.Unmarshal(out, &p); err != nil {
		return tsParity{}, fmt.Errorf("the TypeScript host (%q) printed %q: %v", h.version, out, err)
	}
	return p, nil
}

var (
	timeOfDay = regexp.MustCompile(`\d{1,2}:\d{2}:\d{2}( [AP]M)?`)
	rawResult = regexp.MustCompile(`(?s)(Raw result: )(\{.*\})$`)
)

// tsSeen is one step's observation with what may differ without the host
// seeing a different answer taken out:
//   - the gateway's names mapped back (server__name, the origin tag);
//   - times of day;
//   - members the gateway's go-sdk server adds to results: the cache
//     hints ttlMs and cacheScope (whatever the protocol) and, at
//     2026-07-28, _meta's io.modelcontextprotocol/serverInfo;
//   - the order of members of an object the server prints back (the
//     host's answer to an elicitation reaches the server through the
//     go-sdk, as a map: its members in sorted order, their values the
//     same);
//   - the last progress notification of a call, which the TypeScript
//     client drops when it reads it after the call's answer (directly the
//     server writes the two together; through the gateway the answer
//     follows after its outcome is on disk);
//   - compared with a 2026-07-28 host, the elicitationId of url-mode
//     elicitations: that revision has none, and this client drops the
//     member.
func tsSeen(t *testing.T, raw json.RawMessage, server string, modern bool) string {
	t.Helper()
	s := strings.ReplaceAll(string(raw), server+"__", "")
	s = strings.ReplaceAll(s, ` [origin: `+server+`]`, "")
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("an observation that is not JSON: %s", raw)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			delete(x, "cacheScope")
			delete(x, "ttlMs")
			if m, ok := x["_meta"].(map[string]any); ok {
				delete(m, "io.modelcontextprotocol/serverInfo")
				if len(m) == 0 {
					delete(x, "_meta")
				}
			}
			if modern && x["mode"] == "url" {
				delete(x, "elicitationId")
			}
			if seen, ok := x["host saw"].([]any); ok {
				var kept []any
				for _, e := range seen {
					if p, ok := e.(map[string]any); ok && p["total"] != nil && p["progress"] == p["total"] {
						continue
					}
					kept = append(kept, e)
				}
				x["host saw"] = kept
			}
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case string:
			x = timeOfDay.ReplaceAllString(x, "TIME")
			if m := rawResult.FindStringSubmatchIndex(x); m != nil {
				var obj any
				if json.Unmarshal([]byte(x[m[4]:m[5]]), &obj) == nil {
					b, _ := json.Marshal(obj)
					x = x[:m[4]] + string(b)
				}
			}
			return x
		}
		return v
	}
	b, _ := json.Marshal(walk(v))
	return string(b)
}

// A host built on the TypeScript SDK's 2.x client
// (@modelcontextprotocol/client 2.4.0, the first TypeScript client that
// speaks MCP 2026-07-28) runs the parity session (testdata/tsparity.mjs:
// tools, sampling, form and url elicitation, url elicitation by error
// -32042, roots, progress, cancellation, subscriptions, a tool that runs
// as a task, prompts, resources) directly against server-everything, and
// through aegis gateway three times: over stdio at the client's default,
// the session protocol (2025-11-25), and pinned to 2026-07-28
// (server/discover, no initialize; the server's requests come back as
// input_required results, which the client answers with the same
// handlers), and over streamable HTTP (gateway --listen) pinned to
// 2026-07-28 (no HTTP session; subscriptions/listen and each call's
// progress on the POSTs' streams). Every step must show the host the same
// thing all four ways, and the calls must be recorded with the version
// they were made at.
func TestGatewayParityTypeScriptHostAtBothProtocols(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis gateway with server-everything and a TypeScript host")
	}
	t.Parallel() // it mostly waits on node and the processes it starts
	every := mcptest.EverythingServer(t)
	root := t.TempDir()
	node, dir := mcptest.TypeScriptClient(t)
	script, err := filepath.Abs(filepath.Join("testdata", "tsparity.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// The gateways are started here; the four hosts then run side by side
	// (not as parallel subtests, which would wait for the package's other
	// parallel tests and end it late).
	type run struct {
		host   tsHost
		l      *live
		http   *httpGW
		seen   tsParity
		err    error
		record string
	}
	runs := map[string]*run{"direct": {host: tsHost{env: os.Environ(), argv: every}}}
	for _, name := range []string{"2025-11-25", "2026-07-28", "2026-07-28 over HTTP"} {
		l := newLive(t, "")
		config := tsParityConfig(t, l, every)
		version, _, overHTTP := strings.Cut(name, " over HTTP")
		if version == "2025-11-25" {
			version = "" // the client's default
		}
		r := &run{l: l, host: tsHost{env: l.env, version: version, prefix: "everything__"}}
		if overHTTP {
			r.http = l.httpGateway(string(readFile(t, config)))
			r.host.env = append(l.env, "URL="+r.http.url, "TOKEN="+r.http.token)
		} else {
			r.host.argv = []string{filepath.Join(l.bin, "aegis"), "gateway", "--config", config,
				"--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state}
		}
		runs[name] = r
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.seen, r.err = r.host.run(node, dir, script, root)
		}()
	}
	wg.Wait()
	for name, r := range runs {
		if r.err != nil {
			t.Errorf("%s: %v", name, r.err)
		}
		if r.http != nil {
			r.http.stop()
		}
		if r.l != nil {
			r.record = string(readFile(t, r.l.audit))
			if out, code := r.l.aegis("verify", "--key", r.l.publicKey(), r.l.audit); code != 0 {
				t.Errorf("%s: verify the record: exit %d\n%s", name, code, out)
			}
		}
	}
	if t.Failed() {
		return
	}
	direct := runs["direct"].seen
	if direct.Version != "2025-11-25" || runs["2025-11-25"].seen.Version != "2025-11-25" || runs["2026-07-28"].seen.Version != "2026-07-28" ||
		runs["2026-07-28 over HTTP"].seen.Version != "2026-07-28" {
		t.Fatalf("served at %q directly, %q, %q and %q (over HTTP) through the gateway; want 2025-11-25, 2025-11-25 (the client's default) and 2026-07-28 (pinned)",
			direct.Version, runs["2025-11-25"].seen.Version, runs["2026-07-28"].seen.Version, runs["2026-07-28 over HTTP"].seen.Version)
	}
	var steps []string
	for s := range direct.Steps {
		steps = append(steps, s)
	}
	sort.Strings(steps)
	for _, step := range steps {
		var failed struct{ Error *string }
		json.Unmarshal(direct.Steps[step], &failed)
		if failed.Error != nil {
			t.Errorf("%s fails directly: %s", step, direct.Steps[step])
		}
		t.Logf("%s: %.200s", step, direct.Steps[step])
		for _, version := range []string{"2025-11-25", "2026-07-28", "2026-07-28 over HTTP"} {
			g, ok := runs[version].seen.Steps[step]
			if !ok {
				t.Errorf("%s: not run through the gateway at %s", step, version)
				continue
			}
			modern := strings.HasPrefix(version, "2026-07-28")
			if d, got := tsSeen(t, direct.Steps[step], "everything", modern), tsSeen(t, g, "everything", modern); got != d {
				t.Errorf("%s differs at %s:\n  direct:  %s\n  gateway: %s", step, version, d, got)
			}
		}
	}
	for _, name := range []string{"2026-07-28", "2026-07-28 over HTTP"} {
		if rec := runs[name].record; !strings.Contains(rec, `"protocol_version":"2026-07-28"`) {
			t.Errorf("the %s host's calls are not recorded with its version:\n%.2000s", name, rec)
		}
	}
	if rec := runs["2025-11-25"].record; strings.Contains(rec, `"protocol_version":"2026-07-28"`) {
		t.Errorf("the session host's calls are recorded as 2026-07-28:\n%.2000s", rec)
	}
}
