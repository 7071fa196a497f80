package schemas_test

import (
	"fmt"

	"github.com/aegis-dev/aegis/schemas"
)

func ExampleCanonicalize() {
	out, err := schemas.Canonicalize([]byte(`{ "seq": 7, "tool_id": "caf\u00e9", "line_type": "intent" }`))
	fmt.Println(string(out), err)
	_, err = schemas.Canonicalize([]byte(`{"seq":7.0}`))
	fmt.Println(err)
	// Output:
	// {"line_type":"intent","seq":7,"tool_id":"café"} <nil>
	// number 7.0 is not a non-negative integer at byte 6
}

func ExampleWrapCall_Answered() {
	call := schemas.WrapCall{
		CallID:        schemas.CallID(1),
		ToolID:        "echo",
		RequestDigest: schemas.HashHex([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)),
		PolicySetHash: schemas.WrapPassthroughPolicySetHash,
	}
	line, err := call.Answered(schemas.HashHex([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)), 4).Line()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(line.Type(), schemas.Signed(line.Type()))
	grantID, _ := line.Str("grant_id")
	fmt.Println(grantID)
	// Output:
	// outcome true
	// wrap-passthrough-call-1
}
