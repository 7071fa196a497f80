// Package mcptest drives real MCP servers from tests and demos: it launches a
// server command over stdio, runs a fixed script of requests against it, and
// records the results in a normalized, comparable [Transcript].
//
// The script ([Script]) targets the aegis example server
// (cmd/aegis-example-server): it lists and calls its tools echo, add, fail and
// slow, reads its resource example://readme and gets its prompt greet. A test
// runs it once directly against the server and once through a proxy, and
// compares the two transcripts with reflect.DeepEqual.
//
// # Invariants
//
//   - A [Transcript] holds only data derived from the server's results, never
//     timings, request ids, session ids or protocol metadata (_meta,
//     resultType, cache hints), so two runs against the same server produce
//     equal transcripts however the bytes travelled.
//   - [Step.Result] is canonical JSON: object keys sorted, no insignificant
//     whitespace, list items sorted by name or URI.
//
// # Fixture servers
//
// [ExampleServer] builds cmd/aegis-example-server into the test's temporary
// directory. [EverythingServer] and [FilesystemServer] run the official Node
// reference servers installed under .cache/node at the module root by
// `make interop-deps`; they fail the test when those are missing unless
// AEGIS_SKIP_INTEROP=1 is set, in which case they skip it.
//
// The package starts processes and talks MCP; it holds no global state and
// never exits the process.
package mcptest
