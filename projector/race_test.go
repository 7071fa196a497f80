//go:build race

package projector_test

// raceDetector says that this test binary runs under the race detector,
// which makes the data-heavy sweeps (SWEEPS in the Makefile) several times
// slower: under it they test a sample, and make test runs them whole in a
// go test without it.
const raceDetector = true
