// Command aegis-ab measures what two aegis binaries cost, side by side, as
// a host sees them: a baseline (A, usually an older commit) and a candidate
// (B, usually the working tree), both fronting the same MCP server over
// stdio. It knows aegis only from the outside (its command line and the
// JSON-RPC lines it relays), so the same driver measures any commit, old or
// new: it uses only flags that aegis has had since its first release of
// wrap and gateway (wrap --audit --signing-key --state-dir, gateway
// --config --audit --signing-key --state-dir, keygen --out).
//
// Usage:
//
//	aegis-ab [flags] A_AEGIS B_AEGIS SERVER
//
// SERVER is an MCP server with a tool named echo taking {message} (the
// bundled aegis-example-server). Each of -rounds rounds measures every
// figure of A and of B in three steps (startup, wrap, gateway); each step
// runs for A and for B back to back, in an order that alternates from one
// step to the next (round 1: startup A B, wrap B A, gateway A B; round 2:
// startup B A, …), so that neither side always goes first and what the
// machine does meanwhile falls on both alike. Each side has a new
// temporary directory and a new key from its own 'aegis keygen' per round,
// and every aegis process a new state directory:
//
//   - cpu1, cpu64: the CPU time (utime+stime of /proc/PID/stat) of the
//     aegis wrap process alone, not its server, over -calls recorded echo
//     calls after a warm-up, per call, with 1 and with 64 calls in flight;
//   - rate64: recorded calls per second with 64 in flight;
//   - rss: VmRSS of the aegis wrap process after initialize and 10 calls,
//     -idle later, and its two parts, RssAnon (the process's own heap and
//     stacks) and RssFile (mapped files: mostly the aegis binary, shared by
//     every process that runs it);
//   - startup: spawn to the initialize answer through aegis wrap (a new
//     state directory each time) minus the same for the bare server, the
//     medians of -starts starts each, interleaved;
//   - gateway: the median of a sequential recorded echo call through aegis
//     gateway (one server, one profile allowing it) minus the same through
//     aegis wrap, the two processes called in alternating batches.
//
// It prints a markdown table: for A and B the median of each figure over
// the rounds with its min and max, and B/A of the medians. -json FILE also
// writes every round's figures (and the medians behind the differences),
// the order of every step and the machine as JSON.
// Pinning is left to the caller: run it under taskset and every process it
// starts inherits the CPU set (make bench-ab does, where taskset exists);
// the output says which CPUs it ran on.
//
//	-rounds N    rounds, each measuring A and B once (default 3)
//	-calls N     calls in each measured CPU window (default 2000)
//	-warmup N    calls before each measured window (default 200)
//	-starts N    starts of each kind per startup figure (default 15)
//	-gwcalls N   sequential calls each through gateway and wrap (default 1000)
//	-idle D      wait before reading the idle RSS (default 2s)
//	-timeout D   give up on a round after D (default 10m)
//	-a NAME, -b NAME   the columns' names (default A, B)
//	-json FILE   write the figures as JSON too
//
// Exit status: 0 when every measurement ran, 1 when one failed (a process
// that would not start, a call answered with an error), 2 on a usage error.
package main
