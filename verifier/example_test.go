package verifier_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/aegis-dev/aegis/verifier"
)

func ExampleVerify() {
	f, err := os.Open("testdata/upstream-golden-session.aarl")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	ts, err := verifier.ParseTrustStore(strings.NewReader("# upstream development key\n3de537a06e04b2ffe1fb0558ea16d3c0f042ed99f7e392698aa5120f568d4e2c\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	res := verifier.Verify(f, verifier.Options{TrustStore: ts})
	fmt.Print(verifier.Render(res))
	fmt.Println("exit", verifier.ExitCode(res))
	// Output:
	// Verified (pinned to 77a2c2f5952039243c043b69e7e812a2deb69e3271adb3013b8f24d3b8ea40f6)
	// key_id 77a2c2f5952039243c043b69e7e812a2deb69e3271adb3013b8f24d3b8ea40f6
	// coverage session 0 seq 11
	// exit 0
}
