package sandbox

import (
	"os/exec"
	"testing"
)

// BenchmarkStart measures the one-time cost of starting a server confined:
// helper start, profile, landlock, seccomp, fact, go-ahead and exec of
// /bin/true, against exec of /bin/true alone. Compare the two in one run.
func BenchmarkStart(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("confined", func(b *testing.B) {
		requireConfinement(b)
		p := Profile{ExecSupport: true}
		for b.Loop() {
			if r := runConfined(b, p, "/bin/true"); r.err != nil || r.exit != 0 {
				b.Fatalf("err %v exit %d", r.err, r.exit)
			}
		}
	})
}
