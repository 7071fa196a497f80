// Command aegis-demo-client runs the scripted MCP conversation of
// [github.com/aegis-dev/aegis/proxy/mcptest.Script] against a stdio MCP server
// and prints one line per step, such as
//
//	tools/call echo -> "hello"
//
// It is meant for the example server (cmd/aegis-example-server), directly or
// behind aegis, so that the two outputs can be compared by eye or with diff.
//
// Usage:
//
//	aegis-demo-client [-timeout 30s] -- CMD [ARG...]
//
// The server's stderr is passed through. The exit status is 0 when every step
// succeeded, 1 when the server could not be started or a step failed, and 2 on
// a usage error.
package main
