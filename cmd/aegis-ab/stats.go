package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Side names one of the two binaries: A, the baseline, or B, the candidate.
type Side int

const (
	SideA Side = iota
	SideB
)

func (s Side) String() string {
	if s == SideA {
		return "A"
	}
	return "B"
}

// rotation returns the order in which the sides are measured over rounds
// rounds: A B, B A, A B, … so that neither always goes first, and a drift
// of the machine over the run falls on both alike.
func rotation(rounds int) []Side {
	order := make([]Side, 0, 2*rounds)
	for r := range rounds {
		if r%2 == 0 {
			order = append(order, SideA, SideB)
		} else {
			order = append(order, SideB, SideA)
		}
	}
	return order
}

// A figure is one measured quantity of the table.
type figure struct {
	key    string // the key in a round's figures and in the JSON
	label  string // its row in the table
	unit   string
	digits int // decimals printed
}

// figures are the rows of the table, in order.
var figures = []figure{
	{"cpu1-µs", "CPU of aegis per recorded call, 1 in flight", "µs", 0},
	{"cpu64-µs", "same, 64 in flight", "µs", 0},
	{"rate64-calls/s", "recorded calls/s at 64 in flight", "calls/s", 0},
	{"idle-rss-MiB", "idle RSS after initialize and 10 calls", "MiB", 1},
	{"idle-rss-anon-MiB", "of which anonymous (RssAnon: heap, stacks)", "MiB", 1},
	{"idle-rss-file-MiB", "of which mapped files (RssFile: the binary, shared)", "MiB", 1},
	{"startup-ms", "spawn to initialize answer, beyond the server alone", "ms", 1},
	{"gateway-minus-wrap-µs", "gateway call − wrap call (p50s)", "µs", 0},
}

// Figures are one side's measurements in one round, by figure key.
type Figures map[string]float64

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux platform Go supports.
const clockTick = 10 * time.Millisecond

// parseProcStat returns the user plus system CPU time in the contents of
// /proc/PID/stat: fields 14 and 15, counted after the command name (field
// 2), which is in parentheses and may hold spaces and parentheses itself.
func parseProcStat(data []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 63)
	s, err2 := strconv.ParseUint(f[12], 10, 63)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("stat: utime or stime: %w", err)
	}
	return time.Duration(u+s) * clockTick, nil
}

// parseStatusKB returns the value in kB of the line "Key: N kB" of the
// contents of /proc/PID/status.
func parseStatusKB(data []byte, key string) (int64, error) {
	for line := range strings.SplitSeq(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != key {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: %s: %q is not \"N kB\"", key, strings.TrimSpace(rest))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: %s: %w", key, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("status: no %s line", key)
}

// median returns the median of v (the mean of the middle two for an even
// count), NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianDuration is median for durations.
func medianDuration(d []time.Duration) time.Duration {
	v := make([]float64, len(d))
	for i, x := range d {
		v[i] = float64(x)
	}
	return time.Duration(median(v))
}

// spread is the min, median and max of one figure over the rounds.
type spread struct{ Min, Median, Max float64 }

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	return spread{slices.Min(v), median(v), slices.Max(v)}
}

// column returns the values of figure key over runs, in order, leaving out
// the runs that lack it.
func column(runs []Figures, key string) []float64 {
	var v []float64
	for _, r := range runs {
		if x, ok := r[key]; ok {
			v = append(v, x)
		}
	}
	return v
}

// formatValue prints x with the given decimals, thousands apart by a
// space, so that long columns stay readable.
func formatValue(x float64, digits int) string {
	if math.IsNaN(x) {
		return "–"
	}
	s := strconv.FormatFloat(x, 'f', digits, 64)
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "−", s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return sign + b.String()
}

// ratio returns b/a as text with two decimals, or – when it means nothing
// (a is zero or either is missing).
func ratio(a, b float64) string {
	if a == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	return strconv.FormatFloat(b/a, 'f', 2, 64)
}

// writeTable writes the markdown table of the figures of A and B over the
// rounds: per side the median with the min–max beside it, then B/A of the
// medians.
func writeTable(w io.Writer, nameA, nameB string, a, b []Figures) error {
	var t strings.Builder
	fmt.Fprintf(&t, "| figure | %s | %s | B/A |\n", escapeCell(nameA), escapeCell(nameB))
	t.WriteString("|---|---:|---:|---:|\n")
	cell := func(s spread, f figure) string {
		if math.IsNaN(s.Median) {
			return "–"
		}
		c := formatValue(s.Median, f.digits) + " " + f.unit
		if s.Min != s.Max {
			c += " (" + formatValue(s.Min, f.digits) + " to " + formatValue(s.Max, f.digits) + ")"
		}
		return c
	}
	for _, f := range figures {
		sa, sb := spreadOf(column(a, f.key)), spreadOf(column(b, f.key))
		fmt.Fprintf(&t, "| %s | %s | %s | %s |\n", f.label, cell(sa, f), cell(sb, f), ratio(sa.Median, sb.Median))
	}
	_, err := io.WriteString(w, t.String())
	return err
}

// escapeCell keeps a name from breaking the table.
func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
