//go:build !unix

package telemetry

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
