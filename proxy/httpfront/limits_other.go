//go:build !linux && !darwin

package httpfront

// raiseFileLimit: this system has no open file limit to tell (Windows
// bounds handles per process far above any connection cap).
func raiseFileLimit() (uint64, error) { return 0, nil }
