package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite policy/testdata/*/decisions.golden")

// goldenRequest is one line of requests.jsonl: a request and when it is
// asked, in milliseconds after t0; preview asks without committing.
type goldenRequest struct {
	AtMS       int64  `json:"at_ms"`
	Tool       string `json:"tool"`
	Capability string `json:"capability"`
	Role       string `json:"role"`
	Session    string `json:"session"`
	Preview    bool   `json:"preview"`
}

// TestGolden replays every policy/testdata/<case>: policy.yaml is parsed,
// each line of requests.jsonl is decided by one Engine in order, and the
// policy_set_hash, the canonical projection and one line per decision must
// equal decisions.golden.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "*", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no testdata/*/policy.yaml")
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := goldenRun(t, dir)
			path := filepath.Join(dir, "decisions.golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("decisions for %s differ from %s (run with -update after checking):\n%s", dir, path, lineDiff(string(want), string(got)))
			}
		})
	}
}

func goldenRun(t *testing.T, dir string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Parse("policy.yaml", src)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	canon, err := set.Projection().Canonical()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "policy_set_hash %s\n", set.Hash())
	fmt.Fprintf(&out, "projection %s\n", canon)

	reqs, err := os.ReadFile(filepath.Join(dir, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(set)
	for n, line := range strings.Split(strings.TrimSpace(string(reqs)), "\n") {
		var r goldenRequest
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("requests.jsonl:%d: %v", n+1, err)
		}
		req := Request{Tool: r.Tool, Capability: r.Capability, Role: r.Role, Session: r.Session}
		at := t0.Add(time.Duration(r.AtMS) * time.Millisecond)
		var d Decision
		call := "evaluate"
		if r.Preview {
			call = "preview"
			d = e.Preview(req, at)
		} else {
			d = e.Evaluate(req, at)
		}
		fmt.Fprintf(&out, "%s %s => %s\n", call, formatRequest(r), formatDecision(d))
	}
	return out.Bytes()
}

func formatRequest(r goldenRequest) string {
	s := fmt.Sprintf("at=%dms tool=%q", r.AtMS, r.Tool)
	for _, f := range []struct{ k, v string }{{"capability", r.Capability}, {"role", r.Role}, {"session", r.Session}} {
		if f.v != "" {
			s += fmt.Sprintf(" %s=%q", f.k, f.v)
		}
	}
	return s
}

func formatDecision(d Decision) string {
	s := d.Verdict.String()
	if d.MatchedRule != "" {
		s += fmt.Sprintf(" rule=%q", d.MatchedRule)
	}
	if d.Reason != "" {
		s += fmt.Sprintf(" reason=%q", d.Reason)
	}
	if d.ApprovalID != "" {
		s += fmt.Sprintf(" approval=%q", d.ApprovalID)
	}
	if d.Limits != (Limits{}) {
		s += fmt.Sprintf(" limits=mem:%d,wall_ms:%d,out:%d", d.Limits.MaxMemoryBytes, d.Limits.MaxWallMS, d.Limits.MaxOutputBytes)
	}
	if d.Park {
		s += fmt.Sprintf(" park=%v", d.Timeout)
	}
	return s + " code=" + RefusalCode(d)
}

// lineDiff shows the first differing lines of two golden texts.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n-%s\n+%s\n", i+1, wl, gl)
		}
	}
	return b.String()
}
