// Command openkey opens the approver key file named by its argument with
// the passphrase on its stdin and prints the key's id. The command line's
// tests run it, built without the race detector, to check a key that
// aegis keygen made at the real scrypt work factor: under the race
// detector, opening it takes the better part of a minute.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/aegis-dev/aegis/projector"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: openkey KEYFILE < PASSPHRASE")
		os.Exit(2)
	}
	data, err := projector.ReadApproverKeyFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pass, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	k, err := projector.OpenApproverKey(data, []byte(strings.TrimSuffix(pass, "\n")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("key_id %s\n", k.KeyID())
}
