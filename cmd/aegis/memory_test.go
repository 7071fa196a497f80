package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// gogc reads the garbage collector's percent without setting it.
func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// A relaying aegis starts with GOGC at firstGCPercent, so that its start
// is not interrupted by a collection, and is back at Go's default once the
// first collection has come: a process that stayed at 400 would let every
// later heap grow to five times what it keeps.
func TestRelayGOGCIsBackToTheDefaultAfterTheFirstCollection(t *testing.T) {
	prev := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prev)
		debug.SetMemoryLimit(limit)
	})
	limitMemory([]string{"wrap"}, func(string) string { return "" })
	if got := gogc(); got != firstGCPercent {
		t.Fatalf("GOGC after limitMemory = %d, want %d", got, firstGCPercent)
	}
	runtime.GC()
	for deadline := time.Now().Add(10 * time.Second); gogc() != 100; {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC after the first collection = %d, want 100", gogc())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got != relayMemoryLimit {
		t.Errorf("memory limit = %d, want %d", got, relayMemoryLimit)
	}
}

// A GOGC or GOMEMLIMIT of the user's is left as it is, and commands that
// do not relay keep Go's defaults.
func TestRelayGCSettingsLeaveTheUsersAndOtherCommandsAlone(t *testing.T) {
	prev := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prev)
		debug.SetMemoryLimit(limit)
	})
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"GOGC and GOMEMLIMIT set", []string{"wrap"}, map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}},
		{"a command that does not relay", []string{"verify"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unlimited := debug.SetMemoryLimit(-1)
			limitMemory(tc.args, func(k string) string { return tc.env[k] })
			if got := gogc(); got != 100 {
				t.Errorf("GOGC = %d, want 100", got)
			}
			if got := debug.SetMemoryLimit(-1); got != unlimited {
				t.Errorf("memory limit = %d, want %d", got, unlimited)
			}
		})
	}
}

// aegis gateway --listen goes back to listenGCPercent after its first
// collection: its many small HTTP requests made the collector a third of
// its CPU at the default.
func TestListenGatewayGOGCAfterTheFirstCollection(t *testing.T) {
	prev := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prev)
		debug.SetMemoryLimit(limit)
	})
	limitMemory([]string{"gateway", "--config", "aegis.yaml", "--listen=127.0.0.1:8787"}, func(string) string { return "" })
	if got := gogc(); got != firstGCPercent {
		t.Fatalf("GOGC after limitMemory = %d, want %d", got, firstGCPercent)
	}
	runtime.GC()
	for deadline := time.Now().Add(10 * time.Second); gogc() != listenGCPercent; {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC after the first collection = %d, want %d", gogc(), listenGCPercent)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
