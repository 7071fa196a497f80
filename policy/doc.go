// Package policy will hold the pure decision core: parsing and validating
// the policy file, evaluating rules and profiles, matching resource URIs,
// transitions, and the policy set hash.
//
// # Invariants (to hold once built)
//
//   - Pure: no network, no processes, no NATS or MCP SDK; time and
//     randomness come in as parameters.
//   - The policy set hash is SHA-256 over the canonical JSON of the parsed
//     rule set, never over the YAML text.
package policy
