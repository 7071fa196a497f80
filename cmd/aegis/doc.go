// Command aegis is a security proxy for the Model Context Protocol. An AI
// host launches it as its MCP server over stdio; aegis relays to the real
// servers, decides, confines and records every tool call as signed,
// hash-chained evidence.
//
// This package holds only the command line: flag parsing, the messages a
// user reads, and exit codes. Every message goes to stderr as
// "aegis: error: …", optionally followed by "aegis: hint: …"; stdout is
// reserved for MCP (in wrap) or for a command's result. Exit codes: 0
// success, 1 failure, 2 usage error; verify and wrap document their own.
package main
