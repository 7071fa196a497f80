// Command aegis-example-server is a small, deterministic MCP server used to
// exercise aegis end to end. It speaks MCP over stdio (newline-delimited
// JSON-RPC on stdin and stdout) and offers:
//
//   - tools: echo {message}, add {a, b} (with structured output {sum}),
//     fail {reason} (always a tool error) and slow {ms} (sleeps, at most
//     10000 ms, and stops early when the request is cancelled);
//   - one text resource, example://readme;
//   - one prompt, greet {name}.
//
// Stdout carries only MCP frames; diagnostics go to stderr. The server exits
// with status 0 when stdin is closed or when it receives SIGINT or SIGTERM.
//
// Usage:
//
//	aegis-example-server [-v]
//
// The -v flag logs SDK session events to stderr.
package main
