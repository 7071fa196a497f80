package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/aegis-dev/aegis/events"
)

// minStateSize is the smallest --max-state-size accepted: a cap that would
// stop a session at its first few calls is a mistake, not a limit.
const minStateSize = 1 << 20

// sizeFlag is a byte size such as 10GiB, 500M or 1.5TiB: a number and an
// optional unit, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB,
// GB, TB (powers of 1000), case-insensitive. Zero means unset.
type sizeFlag int64

func (s *sizeFlag) String() string {
	if s == nil || *s == 0 {
		return ""
	}
	return events.FormatBytes(int64(*s))
}

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	f, err := strconv.ParseFloat(num, 64)
	mult, ok := sizeUnits[unit]
	if err != nil || !ok || f < 0 {
		return 0, fmt.Errorf("%q is not a size: give a number and a unit, such as 10GiB or 500MiB", v)
	}
	b := math.Floor(f * mult)
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", v)
	}
	return int64(b), nil
}

// stateSizeCap checks --max-state-size and returns it in bytes (0: no cap).
func stateSizeCap(s sizeFlag) (int64, error) {
	if s != 0 && s < minStateSize {
		return 0, usagef("give at least 1MiB, for example --max-state-size 10GiB", "--max-state-size %s is too small to record a session", events.FormatBytes(int64(s)))
	}
	return int64(s), nil
}

// fullHint says what to do when the state directory reached its cap.
func fullHint(stateDir string) string {
	dir := stateDir
	if dir == "" {
		dir = "DIR"
	}
	return "raise --max-state-size (each start sets the cap anew), or keep this directory as it is, export its record with 'aegis export --state-dir " + dir + " --out FILE', and start with a new --state-dir"
}

// diskFullHint says what to do when the disk under the state directory
// filled up.
func diskFullHint(stateDir string) string {
	return "free space on the disk that holds " + stateDir + ", or move the state directory to a bigger disk and pass it with --state-dir; then start aegis again. Read commands (sessions, export, replay) still work meanwhile"
}
