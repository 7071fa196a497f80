// Package benchjson writes the file of benchmark figures that make bench
// collects and cmd/aegis-benchreport reads:
//
//	{"env": {…the machine…}, "benchmarks": {"<benchmark name>": {…figures…}}}
//
// Benchmarks run one at a time (go test serializes them, also across
// packages), so [Merge]'s read-modify-rename needs no lock.
package benchjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// SweepPoint is one configuration and number of calls in flight of
// BenchmarkWrapInflight, one element of its "points" figure, which
// aegis-benchreport plots.
type SweepPoint struct {
	Config    string  `json:"config"`    // direct, wrap or wrap×N
	Procs     int     `json:"procs"`     // server (or aegis wrap) processes
	PerProc   int     `json:"per_proc"`  // calls in flight on each connection
	InFlight  int     `json:"in_flight"` // calls in flight in all
	Calls     int     `json:"calls"`
	Seconds   float64 `json:"seconds"`
	CallsPerS float64 `json:"calls_per_s"`
	P50       float64 `json:"p50_us"`
	P90       float64 `json:"p90_us"`
	P99       float64 `json:"p99_us"`
	Max       float64 `json:"max_us"`
}

// Merge sets benchmarks[name] = v in the JSON file at path (created if
// missing), and env = env() when the file has no env yet and env is not
// nil. The file is replaced by a rename, never left half written.
func Merge(path, name string, v any, env func() map[string]any) error {
	top := map[string]json.RawMessage{}
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &top); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	benches := map[string]json.RawMessage{}
	if raw, ok := top["benchmarks"]; ok {
		if err := json.Unmarshal(raw, &benches); err != nil {
			return fmt.Errorf("%s: benchmarks: %w", path, err)
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	benches[name] = raw
	if top["benchmarks"], err = json.Marshal(benches); err != nil {
		return err
	}
	if _, ok := top["env"]; !ok && env != nil {
		if top["env"], err = json.Marshal(env()); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Median returns the median of v, the mean of the middle two for an even
// count, and 0 for none. v is not changed.
func Median[T ~int64 | ~float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
