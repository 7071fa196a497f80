package proxy_test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"
)

const (
	floodFor   = 60 * time.Second // how long the server floods
	floodFrame = 16 << 20         // bytes per frame: MaxFrame
)

// BenchmarkWrapFloodRSS (M1) floods aegis wrap with 16 MiB notifications
// for 60 s, from a server that writes them as fast as aegis reads, to a
// host that reads them as fast as aegis writes, and reports the peak
// resident memory (VmHWM) of the aegis process: backpressure keeps it
// bounded, and the flood goes at the pace of the disk.
func BenchmarkWrapFloodRSS(b *testing.B) {
	aegis, server := benchBinaries(b)
	flood := floodServer(b)
	fig := map[string]float64{}
	for b.Loop() {
		argv := wrapArgv(b, aegis, server, b.TempDir())
		argv = append(argv[:len(argv)-1], flood, "-size", fmt.Sprint(floodFrame), "-duration", floodFor.String())
		cmd := exec.Command(argv[0], argv[1:]...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		var stderr syncBuffer
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		peak := peakRSS(cmd.Process.Pid, stop)
		bytes, frames := drainLines(stdout)
		elapsed := time.Since(start)
		close(stop)
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("aegis wrap: %v\n%s", err, stderr.String())
		}
		fig = map[string]float64{
			"flood-peak-rss-MiB": <-peak,
			"flood-frames":       float64(frames),
			"flood-MiB/s":        float64(bytes) / (1 << 20) / elapsed.Seconds(),
		}
	}
	b.Logf("a %v flood of %d MiB frames through aegis wrap: %.0f frames, %.0f MiB/s, peak VmRSS of aegis %.0f MiB",
		floodFor, floodFrame>>20, fig["flood-frames"], fig["flood-MiB/s"], fig["flood-peak-rss-MiB"])
	b.ReportMetric(fig["flood-peak-rss-MiB"], "peak-rss-MiB")
	b.ReportMetric(fig["flood-MiB/s"], "MiB/s")
	recordBench(b, fig)
}
