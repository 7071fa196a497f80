// Package sandbox will confine MCP server processes with Landlock and
// seccomp through a re-exec helper of the aegis binary, and report the
// enforcement fact that is recorded before the server runs.
//
// # Invariants (to hold once built)
//
//   - The helper applies the whole profile, sets no_new_privs and only then
//     execs the server; a kernel that cannot honour the profile refuses the
//     exec unless best effort was asked for, and the fact says what was
//     degraded.
//   - This package imports nothing from the rest of aegis.
package sandbox
