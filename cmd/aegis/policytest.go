package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"go.yaml.in/yaml/v3"
)

const policyUsage = `Usage:
  aegis policy test [--json] FILE CASES

Runs a table of calls against a policy and prints what it decides for
each, so that rules can be tried before they are deployed. It runs
nothing and reads no state directory.

FILE is a policy file (aegis wrap --policy) or a gateway configuration
(aegis gateway --config: a file with servers:). CASES is a YAML file:

  cases:
    - name: a write inside the repo      # required, unique
      tool: write_file                   # required: the tool as called
      args: {path: /repo/a.go}           # params.arguments (optional)
      want: allow                        # allow | deny | rate_limited |
                                         # pending_approval (optional)
    - name: the same write through the gateway
      server: fs                         # a gateway file's server; tool
      tool: write_file                   # is then the server's own name
      profile: dev                       # default: the default profile
      session: s1                        # default: policy-test
      at: 2026-12-03T10:00:00Z           # the call's time (default fixed)

The calls are decided in order by one engine, as one session's calls are,
so rate limits count across them. Through a gateway file a call is
decided as the gateway decides it: the profile's allow list first, then
the file's rules. Conditions (when:) see args, tool, server, profile and
session exactly as live.

Each line shows the case, the verdict, the deciding rule (or allow
pattern) and the reason, and "ok" or "FAIL" where the case names the
verdict it wants. --json prints one JSON object per case.

The policy file's reference (rules, conditions, on_tool_change): aegis
help policy --full.

Exit status: 0 every case got the verdict it wants; 1 some did not; 2 a
file could not be read or parsed (or a usage error).

Example:
  $ aegis policy test policy.yaml cases.yaml
`

func (m *Main) runPolicy(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		if len(args) == 0 {
			return usagef("aegis policy test FILE CASES", "policy: missing subcommand")
		}
		fmt.Fprint(m.Stdout, policyUsage)
		return nil
	}
	if args[0] != "test" {
		return usagef("aegis policy test FILE CASES", "policy: unknown subcommand %q", args[0])
	}
	fs := m.newFlagSet("policy test")
	asJSON := fs.Bool("json", false, "one JSON object per case")
	pos, err := m.parseInterspersed(fs, policyUsage, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("aegis policy test FILE CASES", "policy test: want a policy FILE and a CASES file, got %d argument(s)", len(pos))
	}
	file, casesPath := pos[0], pos[1]
	data, err := os.ReadFile(file)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("could not read %s: %w", file, err)}
	}
	cdata, err := os.ReadFile(casesPath)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("could not read %s: %w", casesPath, err)}
	}
	cases, err := policy.ParseCases(casesPath, cdata)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("could not load the cases: %w", err), hint: "aegis help policy shows the cases file's keys"}
	}
	var results []policy.CaseResult
	if isGatewayFile(data) {
		g, err := policy.ParseGateway(file, data)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("could not load the gateway configuration: %w", err), hint: "fix the file; nothing was tried"}
		}
		for _, c := range cases {
			if c.Server == "" {
				return &exitError{code: 2, err: fmt.Errorf("%s:%d: case %q names no server; through a gateway file every case does", casesPath, c.Line, c.Name)}
			}
		}
		results = policy.RunGatewayCases(g, cases)
	} else {
		set, err := policy.Parse(file, data)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("could not load the policy: %w", err), hint: "fix the policy file; nothing was tried"}
		}
		for _, c := range cases {
			if c.Server != "" || c.Profile != "" {
				return &exitError{code: 2, err: fmt.Errorf("%s:%d: case %q names a server or a profile, which only a gateway file has", casesPath, c.Line, c.Name)}
			}
		}
		results = policy.RunCases(set, cases)
	}
	failed := 0
	for _, r := range results {
		if !r.OK {
			failed++
		}
	}
	if *asJSON {
		enc := json.NewEncoder(m.Stdout)
		for _, r := range results {
			enc.Encode(map[string]any{
				"name": r.Case.Name, "tool": r.Case.Tool, "server": r.Case.Server, "verdict": r.Decision.Verdict.String(),
				"rule": r.Decision.MatchedRule, "allow_pattern": r.Pattern, "reason": r.Decision.Reason, "want": r.Case.Want, "ok": r.OK,
			})
		}
	} else {
		tw := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CASE\tVERDICT\tBY\tREASON\t")
		for _, r := range results {
			by := r.Decision.MatchedRule
			if by == "" && r.Pattern != "" {
				by = "allow " + r.Pattern
			}
			if by == "" {
				by = "-"
			}
			mark := ""
			switch {
			case r.Case.Want == "":
			case r.OK:
				mark = "ok"
			default:
				mark = "FAIL: want " + r.Case.Want
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", projector.Printable(r.Case.Name), r.Decision.Verdict, projector.Printable(by), projector.Printable(r.Decision.Reason), mark)
		}
		tw.Flush()
		fmt.Fprintf(m.Stdout, "%d case(s), %d not as wanted\n", len(results), failed)
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// isGatewayFile reports whether data is a gateway configuration: a YAML
// mapping with a servers key.
func isGatewayFile(data []byte) bool {
	var top map[string]yaml.Node
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&top) != nil {
		return false
	}
	_, ok := top["servers"]
	return ok
}
