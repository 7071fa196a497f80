package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// utime 250 and stime 50 ticks, after a command name that holds
	// spaces and a ") " of its own, as a process can name itself.
	const tail = " S 1 2 3 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12345 1000000 500 18446744073709551615\n"
	for _, tc := range []struct {
		name string
		stat string
		want time.Duration
		err  bool
	}{
		{"plain name", "4242 (aegis)" + tail, 3 * time.Second, false},
		{"name with a paren and spaces", "4242 (evil) S 1 2 3 (x)" + tail, 3 * time.Second, false},
		{"no command name", "4242 aegis S 1 2 3", 0, true},
		{"cut short", "4242 (aegis) S 1 2 3 0 -1", 0, true},
		{"utime not a number", "4242 (aegis) S 1 2 3 0 -1 4194560 100 0 0 0 x 50 0", 0, true},
		{"negative stime", "4242 (aegis) S 1 2 3 0 -1 4194560 100 0 0 0 250 -50 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.stat))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\taegis\nVmPeak:\t  900000 kB\nVmRSS:\t   41472 kB\nThreads:\t9\n"
	if kb, err := parseStatusKB([]byte(status), "VmRSS"); err != nil || kb != 41472 {
		t.Errorf("VmRSS = %d, %v; want 41472", kb, err)
	}
	if _, err := parseStatusKB([]byte(status), "VmHWM"); err == nil {
		t.Error("a missing key gave no error")
	}
	if _, err := parseStatusKB([]byte(status), "Threads"); err == nil {
		t.Error("a value without kB gave no error")
	}
	// VmRSSx is another key, not VmRSS.
	if _, err := parseStatusKB([]byte("VmRSSx:\t1 kB\n"), "VmRSS"); err == nil {
		t.Error("a key that only starts with VmRSS was taken for it")
	}
}

func TestRotation(t *testing.T) {
	got := rotation(3)
	want := []Side{SideA, SideB, SideB, SideA, SideA, SideB}
	if !slices.Equal(got, want) {
		t.Fatalf("rotation(3) = %v, want %v", got, want)
	}
	for rounds := 1; rounds <= 7; rounds++ {
		order := rotation(rounds)
		var a, b, aFirst int
		for i, s := range order {
			if s == SideA {
				a++
				if i%2 == 0 {
					aFirst++
				}
			} else {
				b++
			}
		}
		if a != rounds || b != rounds {
			t.Errorf("rotation(%d): A %d times, B %d times", rounds, a, b)
		}
		// Neither side goes first more than one round more than the other.
		if bFirst := rounds - aFirst; aFirst-bFirst > 1 || bFirst-aFirst > 1 {
			t.Errorf("rotation(%d): A first %d times, B first %d", rounds, aFirst, bFirst)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
	} {
		if got := median(tc.v); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	v := []float64{3, 1, 2}
	median(v)
	if !slices.Equal(v, []float64{3, 1, 2}) {
		t.Errorf("median reordered its argument: %v", v)
	}
}

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		x      float64
		digits int
		want   string
	}{
		{721.4, 0, "721"},
		{1271, 0, "1 271"},
		{6812.5, 0, "6 812"},
		{1234567, 0, "1 234 567"},
		{25.43, 1, "25.4"},
		{-1520.2, 0, "−1 520"},
		{math.NaN(), 1, "–"},
	} {
		if got := formatValue(tc.x, tc.digits); got != tc.want {
			t.Errorf("formatValue(%v, %d) = %q, want %q", tc.x, tc.digits, got, tc.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	a := []Figures{
		{"cpu1-µs": 700, "cpu64-µs": 185, "rate64-calls/s": 6800, "idle-rss-MiB": 25.4, "idle-rss-anon-MiB": 4.2, "idle-rss-file-MiB": 21.2, "startup-ms": 52, "gateway-minus-wrap-µs": 412},
		{"cpu1-µs": 721, "cpu64-µs": 185, "rate64-calls/s": 6700, "idle-rss-MiB": 25.4, "idle-rss-anon-MiB": 4.2, "idle-rss-file-MiB": 21.2, "startup-ms": 50, "gateway-minus-wrap-µs": 400},
		{"cpu1-µs": 760, "cpu64-µs": 185, "rate64-calls/s": 6900, "idle-rss-MiB": 25.4, "idle-rss-anon-MiB": 4.2, "idle-rss-file-MiB": 21.2, "startup-ms": 55, "gateway-minus-wrap-µs": 420},
	}
	// B lacks the gateway figure in every round and has a negative
	// startup difference in one.
	b := []Figures{
		{"cpu1-µs": 1271, "cpu64-µs": 253, "rate64-calls/s": 5300, "idle-rss-MiB": 40.5, "startup-ms": -2},
		{"cpu1-µs": 1271, "cpu64-µs": 250, "rate64-calls/s": 5300, "idle-rss-MiB": 40.5, "startup-ms": 76},
		{"cpu1-µs": 1271, "cpu64-µs": 260, "rate64-calls/s": 5300, "idle-rss-MiB": 40.5, "startup-ms": 80},
	}
	var out bytes.Buffer
	if err := writeTable(&out, "8ff31f5", "main|x", a, b); err != nil {
		t.Fatal(err)
	}
	want := `| figure | 8ff31f5 | main\|x | B/A |
|---|---:|---:|---:|
| CPU of aegis per recorded call, 1 in flight | 721 µs (700 to 760) | 1 271 µs | 1.76 |
| same, 64 in flight | 185 µs | 253 µs (250 to 260) | 1.37 |
| recorded calls/s at 64 in flight | 6 800 calls/s (6 700 to 6 900) | 5 300 calls/s | 0.78 |
| idle RSS after initialize and 10 calls | 25.4 MiB | 40.5 MiB | 1.59 |
| of which anonymous (RssAnon: heap, stacks) | 4.2 MiB | – | – |
| of which mapped files (RssFile: the binary, shared) | 21.2 MiB | – | – |
| spawn to initialize answer, beyond the server alone | 52.0 ms (50.0 to 55.0) | 76.0 ms (−2.0 to 80.0) | 1.46 |
| gateway call − wrap call (p50s) | 412 µs (400 to 420) | – | – |
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
	if n := strings.Count(out.String(), "\n"); n != 2+len(figures) {
		t.Errorf("%d lines, want %d", n, 2+len(figures))
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"a", "b"},
		{"-rounds", "0", "a", "b", "c"},
		{"-calls", "-1", "a", "b", "c"},
		{"-nosuchflag", "a", "b", "c"},
	} {
		var ue *usageError
		if err := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); !errors.As(err, &ue) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

// buildBinaries builds aegis and the example server of this tree.
// Under make test they are the ones it built for every package
// (AEGIS_TEST_BINDIR), linked once.
func buildBinaries(t *testing.T) (aegis, server string) {
	t.Helper()
	if d := os.Getenv("AEGIS_TEST_BINDIR"); d != "" {
		return filepath.Join(d, "aegis"), filepath.Join(d, "aegis-example-server")
	}
	dir := t.TempDir()
	aegis, server = filepath.Join(dir, "aegis"), filepath.Join(dir, "aegis-example-server")
	for bin, pkg := range map[string]string{aegis: "../aegis", server: "../aegis-example-server"} {
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return aegis, server
}

// TestSmoke runs the real thing briefly with this tree's aegis as both A
// and B. A few seconds once the binaries are built; skipped with -short.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds aegis and starts real processes; skipped with -short")
	}
	aegis, server := buildBinaries(t)
	t.Run("one round measures every figure of both", func(t *testing.T) { smokeOneRound(t, aegis, server) })
	t.Run("a server that is not MCP fails the run", func(t *testing.T) { smokeServerDies(t, aegis) })
}

// One short round: every figure is measured and lands in the table and
// the JSON.
func smokeOneRound(t *testing.T, aegis, server string) {
	jsonPath := filepath.Join(t.TempDir(), "ab.json")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := run(t.Context(), []string{"-rounds", "1", "-calls", "64", "-warmup", "10", "-starts", "1",
		"-gwcalls", "20", "-idle", "100ms", "-a", "same", "-b", "again", "-json", jsonPath,
		aegis, aegis, server}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("one round in %v:\n%s", time.Since(start).Round(time.Millisecond), stdout.String())
	for _, f := range figures {
		if !strings.Contains(stdout.String(), "| "+f.label+" | ") {
			t.Errorf("no row %q in the table", f.label)
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"startup A B", "wrap B A", "gateway A B"}}
	if !slices.EqualFunc(rep.Order, want, slices.Equal) || len(rep.A.Rounds) != 1 || len(rep.B.Rounds) != 1 {
		t.Fatalf("order %q, rounds A %d B %d; want %q, 1 round each", rep.Order, len(rep.A.Rounds), len(rep.B.Rounds), want)
	}
	for _, side := range []Figures{rep.A.Rounds[0], rep.B.Rounds[0]} {
		for _, f := range figures {
			if _, ok := side[f.key]; !ok {
				t.Errorf("figure %s missing", f.key)
			}
		}
		for _, key := range []string{"rate64-calls/s", "idle-rss-MiB", "idle-rss-anon-MiB", "idle-rss-file-MiB", "startup-wrap-ms", "wrap-call-p50-µs", "gateway-call-p50-µs"} {
			if side[key] <= 0 {
				t.Errorf("%s = %v, want more than 0", key, side[key])
			}
		}
		// An aegis wrap with its embedded store is more than a few MiB.
		if side["idle-rss-MiB"] < 8 {
			t.Errorf("idle RSS %.1f MiB: not the aegis process's", side["idle-rss-MiB"])
		}
	}
}

// A server that exits at once fails the run: no table of figures
// measured on nothing.
func smokeServerDies(t *testing.T, aegis string) {
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1)")
	}
	var stdout bytes.Buffer
	err = run(t.Context(), []string{"-rounds", "1", "-calls", "1", "-starts", "1", "-gwcalls", "1", "-idle", "0s",
		aegis, aegis, falseBin}, &stdout, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "initialize") {
		t.Errorf("run = %v, want an initialize error", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("a failed run printed:\n%s", stdout.String())
	}
}
