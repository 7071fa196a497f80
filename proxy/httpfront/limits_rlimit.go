//go:build linux || darwin

package httpfront

import "golang.org/x/sys/unix"

// raiseFileLimit raises the soft open file limit to the hard one (Go
// does so at start on most systems; this is for those where it did not)
// and returns the soft limit then.
func raiseFileLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		up := rl
		up.Cur = up.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &up) == nil {
			rl = up
		} else if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0, err
		}
	}
	if rl.Cur == unix.RLIM_INFINITY {
		return 0, nil
	}
	return rl.Cur, nil
}
