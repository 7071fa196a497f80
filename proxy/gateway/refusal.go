package gateway

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Refusals of the gateway at the protocol level (docs/ERRORS.md).
//
// A request that the gateway refuses outright (a resources/read or
// prompts/get the active profile does not allow, a request it could not
// record) is answered with the JSON-RPC error that aegis wrap sends for a
// refused tools/call: code [RefusalCode] (-32042), and data.aegis holding
// layer ("gateway" here, "wrap" there) and code beside the members of the
// payload that code has always had (upstream aegiserr: uri, active_profile,
// hint, ...). The message is readable and names the code, for hosts that
// show nothing else: "aegis gateway refused this <method> (<code>): <why>". A refused tools/call is not such an error: as upstream,
// it is a tool result with isError set whose text is the payload (see
// capDenied), so an agent reads the refusal where it reads every tool's
// answer.
//
// No error reaches the host with code 0: an error of a downstream server
// is passed on with its own code, message and data, and any other error
// of the gateway becomes -32603 (internal error).

// codeAuditError is data.aegis.code when the gateway refuses a request
// because it could not record it (or its outcome): nothing unrecorded runs,
// and no unrecorded answer is shown.
const codeAuditError = "AUDIT_ERROR"

// gatewayRefusal returns the -32042 refusal of a request of method, with
// payload (the members of data.aegis other than layer; code among them)
// and why, the readable reason of the message.
func gatewayRefusal(method string, payload map[string]string, why string) *jsonrpc.Error {
	aegis := make(map[string]string, len(payload)+1)
	for k, v := range payload {
		aegis[k] = strings.ToValidUTF8(v, "\uFFFD")
	}
	aegis["layer"] = "gateway"
	data, err := json.Marshal(map[string]any{"aegis": aegis}) // keys sorted
	if err != nil {
		data = nil // only strings, made valid above: cannot happen
	}
	msg := "aegis gateway refused this " + method
	if aegis["code"] != "" {
		msg += " (" + aegis["code"] + ")"
	}
	if why != "" {
		msg += ": " + why
	}
	return &jsonrpc.Error{Code: proxy.RefusalCode, Message: msg, Data: data}
}

// auditRefusal refuses a request of method that could not be recorded.
func auditRefusal(method string, err error) *jsonrpc.Error {
	return gatewayRefusal(method, map[string]string{
		"code":   codeAuditError,
		"reason": err.Error(),
		"hint":   "aegis refuses what it cannot record; check the state directory and its disk, then retry",
	}, "it could not be recorded: "+err.Error())
}

// hostError returns err as the host should see it: a JSON-RPC error from a
// downstream server (however wrapped) as that server sent it, any other
// error as -32603 with err's text. It never returns an error of code 0.
func hostError(err error) error {
	if err == nil {
		return nil
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code != 0 {
		return we
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}
