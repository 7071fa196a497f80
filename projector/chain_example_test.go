package projector_test

import (
	"bytes"
	"fmt"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

func ExampleChain_AppendFunc() {
	key, _ := projector.NewPrivateKey(bytes.Repeat([]byte{9}, 32)) // use LoadKeyFile in production
	chain, _ := projector.NewChain(key)
	var store bytes.Buffer // stands in for a durable, fsynced store
	commit := func(e projector.Entry) error {
		store.Write(e.Bytes)
		store.WriteByte('\n')
		return nil
	}
	if _, err := chain.OpenFunc("", commit); err != nil {
		fmt.Println(err)
		return
	}
	call := schemas.WrapCall{CallID: "call-1", ToolID: "echo", RequestDigest: schemas.HashHex([]byte("req")), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
	intent, _ := call.Intent().Line()
	e, err := chain.AppendFunc(intent, commit)
	fmt.Println(e.Seq, e.Type, err)
	outcome, _ := call.ChildExited().Line()
	e, err = chain.AppendFunc(outcome, commit)
	fmt.Println(e.Seq, e.Type, err)
	e, err = chain.AppendFunc(schemas.CloseLine(), commit)
	fmt.Println(e.Seq, e.Type, err, bytes.Count(store.Bytes(), []byte("\n")))
	// Output:
	// 1 intent <nil>
	// 2 outcome <nil>
	// 3 close <nil> 4
}
