package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeRun writes a JSON file shaped like make bench's, with the given
// P1 value (so runs differ) and a two-point sweep.
func writeRun(t *testing.T, dir, name string, p1 float64) string {
	t.Helper()
	run := map[string]any{
		"env": map[string]any{"nproc": 2, "cpu": "Test CPU", "go": "go1.26", "commit": "abc"},
		"benchmarks": map[string]any{
			"BenchmarkWrap":           map[string]float64{"call-overhead-minus-2fsync-µs": p1, "frame-overhead-µs": 30, "wrap-call-p50-µs": 1500, "wrap-ping-p50-µs": 200},
			"BenchmarkWrapConcurrent": map[string]float64{"inflight64/inflight1": 4.5},
			"BenchmarkWrapStartup":    map[string]float64{"startup-overhead-ms": 20},
			"BenchmarkWrapIdleRSS":    map[string]float64{"idle-rss-MiB": 20},
			"BenchmarkExportVerify":   map[string]float64{"export-lines/s": 60000, "verify-lines/s": 10000},
			"BenchmarkWrapInflight": map[string]any{"points": []map[string]any{
				{"config": "wrap", "procs": 1, "per_proc": 1, "in_flight": 1, "calls_per_s": 500, "p50_us": 1500, "p99_us": 5000},
				{"config": "wrap", "procs": 1, "per_proc": 64, "in_flight": 64, "calls_per_s": 2000, "p50_us": 25000, "p99_us": 60000},
			}},
		},
	}
	data, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	runs := []string{writeRun(t, dir, "1.json", 150), writeRun(t, dir, "2.json", 250), writeRun(t, dir, "3.json", 190)}

	var out bytes.Buffer
	if err := run(runs, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"P1   recorded tools/call", "150 µs", "190 µs", "250 µs", "met (2/3 runs)",
		"P2", "not met (0/3 runs met)", "P3", "4.50×", "P6", "60 000 lines/s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := run(append([]string{"-json"}, runs...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if g := rep.Goals[0]; g.ID != "P1" || g.Median != 190 || g.Min != 150 || g.Max != 250 || !*g.Met || g.MetRuns != 2 {
		t.Errorf("P1 = %+v", g)
	}
	if len(rep.Sweep) != 2 || rep.Sweep[1].P50 != 25000 {
		t.Errorf("sweep = %+v", rep.Sweep)
	}

	doc := filepath.Join(dir, "doc.md")
	os.WriteFile(doc, []byte("# T\n\nbefore\n"+beginMarker+"\nold table\n"+endMarker+"\nafter\n"), 0o644)
	svg := filepath.Join(dir, "plot.svg")
	if err := run(append([]string{"-update", doc, "-svg", svg}, runs...), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(doc)
	if strings.Contains(string(md), "old table") || !strings.Contains(string(md), "| P1 |") ||
		!strings.HasPrefix(string(md), "# T\n\nbefore\n") || !strings.HasSuffix(string(md), endMarker+"\nafter\n") {
		t.Errorf("updated doc:\n%s", md)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
	}
	if !bytes.Contains(data, []byte("<polyline")) {
		t.Error("plot has no lines")
	}
}

func TestUsage(t *testing.T) {
	var ue usageError
	for _, args := range [][]string{nil, {"-json", "-md", "x.json"}, {"-bogus"}} {
		err := run(args, io.Discard, io.Discard)
		if !errors.As(err, &ue) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	if err := run([]string{filepath.Join(t.TempDir(), "missing.json")}, io.Discard, io.Discard); err == nil {
		t.Error("a missing file is not an error")
	}
}

// The scale goals are read from BenchmarkScale's figures and judged like
// the others: a scale run that misses one is never reported as met.
func TestReportJudgesScaleGoals(t *testing.T) {
	dir := t.TempDir()
	data, err := json.Marshal(map[string]any{"benchmarks": map[string]any{"BenchmarkScale": map[string]float64{
		"startup-new-diff-ms": 20, "startup-cont-diff-ms": 60, "startup-after-clean-diff-ms": 50, "startup-after-kill-diff-ms": 400,
		"catchup-rss-MiB": 100, "export-rss-MiB": 900, "verify-rss-MiB": 30, "sessions-rss-MiB": 200, "sessions-s": 1.5,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "scale.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"-json", path}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"startup-new-diff-ms": true, "startup-cont-diff-ms": false, "startup-after-clean-diff-ms": true, "startup-after-kill-diff-ms": false,
		"catchup-rss-MiB": true, "export-rss-MiB": false, "verify-rss-MiB": true, "sessions-rss-MiB": true, "sessions-s": false,
	}
	seen := 0
	for _, g := range rep.Goals {
		met, ok := want[g.Key]
		if !ok {
			continue
		}
		seen++
		if g.Bench != "BenchmarkScale" || !strings.HasPrefix(g.ID, "S") || g.Met == nil || *g.Met != met {
			t.Errorf("%s %s: %+v, want met=%v", g.ID, g.Key, g, met)
		}
	}
	if seen != len(want) {
		t.Errorf("%d scale goals in the report, want %d", seen, len(want))
	}
}
