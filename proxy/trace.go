package proxy

import "github.com/aegis-dev/aegis/schemas"

// IntentOf returns the intent of call wc, with the host's trace context
// (params._meta.traceparent, MCP SEP-414) when tp is a well-formed one:
// the record's intent line then names the host's trace, so that a trace
// and the signed record can be joined. A malformed one is not recorded;
// the frame itself, and so the trace context, reaches the server as sent.
func IntentOf(wc schemas.WrapCall, tp string) schemas.Intent {
	in := wc.Intent()
	if tp != "" {
		if _, ok := schemas.ParseTraceParent(tp); ok {
			in.TraceParent = tp
		}
	}
	return in
}
