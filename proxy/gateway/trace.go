package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// traceParentKey carries a tools/call's params._meta.traceparent (MCP
// SEP-414) from the request to decideCall, which records it in the call's
// intent. The _meta itself is passed on to the server as the host sent it.
type traceParentKey struct{}

// withTraceParent returns ctx with meta's traceparent, when it is a string.
func withTraceParent(ctx context.Context, meta mcp.Meta) context.Context {
	if s, ok := meta["traceparent"].(string); ok && s != "" {
		return context.WithValue(ctx, traceParentKey{}, s)
	}
	return ctx
}

// traceParentOf returns the traceparent withTraceParent put in ctx.
func traceParentOf(ctx context.Context) string {
	s, _ := ctx.Value(traceParentKey{}).(string)
	return s
}
