package main

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"10GiB", 10 << 30}, {"10G", 10 << 30}, {"10gib", 10 << 30}, {"500MiB", 500 << 20}, {"500M", 500 << 20},
		{"1.5TiB", 3 << 39}, {"2KiB", 2048}, {"1GB", 1e9}, {"4096", 4096}, {"4096B", 4096}, {" 1 MiB ", 1 << 20}, {"0", 0},
	} {
		got, err := parseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "GiB", "10 parsecs", "-1GiB", "1e3", "1.2.3M", "99999999999TiB"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
}

// A cap that could not hold a session, or that is not a size, is a usage
// error that says what to give instead, before anything starts.
func TestMaxStateSizeUsageErrors(t *testing.T) {
	base := []string{"wrap", "--audit", "a", "--signing-key", "k", "--state-dir", t.TempDir()}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{append(append([]string{}, base...), "--max-state-size", "100KiB", "--", "true"), nil, "--max-state-size 100 KiB is too small"},
		{append(append([]string{}, base...), "--max-state-size", "lots", "--", "true"), nil, `"lots" is not a size`},
		{[]string{"gateway", "--config", "c", "--audit", "a", "--signing-key", "k", "--max-state-size", "1KiB"}, nil, "--max-state-size 1 KiB is too small"},
	} {
		code, _, stderr := run(t, tc.env, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "aegis: hint: ") {
			t.Errorf("aegis %v: exit %d, stderr %q; want 2 and %q with a hint", tc.args, code, stderr, tc.want)
		}
	}
}
