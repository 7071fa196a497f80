//go:build !race

package projector_test

// raceDetector: see race_test.go.
const raceDetector = false
