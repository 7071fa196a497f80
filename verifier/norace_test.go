//go:build !race

package verifier

// raceDetector: see race_test.go.
const raceDetector = false
