package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const recheckUsage = `Usage:
  aegis recheck --policy FILE [--state-dir DIR | --name NAME] [--json] [SESSION…]

Re-evaluates every recorded tools/call under another policy and lists the
calls whose verdict would change: newly blocked (allowed or pending before,
denied or rate limited now), newly allowed, newly pending (would wait for a
human), or reclassified (blocked before and now, for another reason). It
executes nothing: it reads the event stream and asks the policy.

Each call is evaluated at the time its intent was recorded, in the order
the proxy saw the calls, with one policy engine per session as each aegis
process had, so rate-limit windows replay as they would have run. It is
asked what the proxy asked: aegis wrap asks about the tool; aegis gateway
asks its rules about "<server>__<tool>" with the capability
"<server>.<tool>" and the active profile as role. The rules' conditions
(when:) see the call's arguments as the host sent them, read from the
recorded frame, and the session, as they did live. A call that went
through on an approval counts as pending_approval before, so under the
same policy it is unchanged. Calls without a tool name, and a gateway's
meta-tools (aegis.*), were never evaluated by a rule and are skipped;
calls still in flight (no outcome) have no recorded verdict and are only
counted. To recheck a gateway session under its own rules, copy the
gateway file's rules into a policy file ("version: 1" and "rules:").

SESSION (an id, a unique prefix, or "last"; repeatable) limits the check
to those sessions; without it, every session is checked. --json prints one
JSON object: policy, policy_set_hash, changes, in_flight, summary.

Exit status: 0 no verdict would change; 1 some would; 2 the policy or the
stream could not be read (or a usage error).

Example:
  $ aegis recheck --policy stricter.yaml
  $ aegis recheck --policy looser.yaml --json last
`

func (m *Main) runRecheck(ctx context.Context, args []string) error {
	fs := m.newFlagSet("recheck")
	sc := addStateChoice(fs)
	dir := sc.dir
	policyPath := fs.String("policy", "", "the policy to check the record against")
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, err := m.parseInterspersed(fs, recheckUsage, args)
	if err != nil {
		return err
	}
	if *policyPath == "" {
		return usagef("aegis recheck --policy FILE [SESSION…]", "recheck: --policy is required")
	}
	for _, a := range pos {
		if !validSessionArg(a) {
			return usagef("a session id is 26 characters of Crockford base32 (or a prefix of one, or last), as 'aegis sessions' prints it", "recheck: bad SESSION %q", a)
		}
	}
	data, err := os.ReadFile(*policyPath)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("could not read policy %s: %w", *policyPath, err), hint: "--policy takes a YAML policy file, as aegis wrap --policy does"}
	}
	set, err := policy.Parse(*policyPath, data)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("could not load policy: %w", err), hint: "fix the policy file; nothing was checked"}
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	rd, err := m.openStream(ctx, *dir)
	if err != nil {
		return unreadable(err)
	}
	defer rd.Close()
	var ids []string
	if len(pos) > 0 {
		allFull := true
		for _, a := range pos {
			allFull = allFull && schemas.ValidID(a)
		}
		var list []projector.SessionSummary
		if !allFull {
			ix, err := sessionIndex(ctx, rd.store, m.newProgress("sessions"), m.logger())
			if err != nil {
				return unreadable(err)
			}
			list = ix.Sessions(0)
		}
		for _, a := range pos {
			if allFull {
				ids = append(ids, a)
				continue
			}
			s, err := resolveSession(list, a)
			if err != nil {
				return unreadable(err)
			}
			ids = append(ids, s.ID)
		}
	}

	rc := projector.NewRecheck(projector.PolicyEvaluator(set), ids...)
	var changes []projector.CallCheck
	seen := map[string]bool{}
	prog := m.newProgress("recheck")
	err = rd.store.Replay(ctx, events.Position{}, func(r events.Record) error {
		prog.add()
		if r.Event.Kind == schemas.KindSessionOpened {
			seen[r.Event.Session] = true
		}
		if c, ok := rc.Fold(r); ok && c.Change != projector.Unchanged {
			changes = append(changes, c)
		}
		return nil
	})
	prog.done()
	if err != nil {
		return unreadable(fmt.Errorf("read the event stream: %w", err))
	}
	for _, id := range ids {
		if !seen[id] {
			return unreadable(withHint(fmt.Errorf("no session %s in the stream", id), "list them with: aegis sessions"))
		}
	}
	inflight, sum := rc.Finish()

	w := bufio.NewWriter(m.Stdout)
	defer w.Flush()
	if *asJSON {
		out := struct {
			Policy        string                   `json:"policy"`
			PolicySetHash string                   `json:"policy_set_hash"`
			Changes       []projector.CallCheck    `json:"changes"`
			InFlight      []projector.CallCheck    `json:"in_flight"`
			Summary       projector.RecheckSummary `json:"summary"`
		}{*policyPath, set.Hash(), changes, inflight, sum}
		if out.Changes == nil {
			out.Changes = []projector.CallCheck{}
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	} else {
		fmt.Fprintf(w, "recheck against %s (policy_set_hash %s)\n", *policyPath, set.Hash())
		if len(changes) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tCALL\tTOOL\tTIME\tRECORDED\tNOW\tCHANGE")
			for _, c := range changes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Session, projector.Printable(c.CallID), projector.Printable(c.Tool), c.Time.UTC().Format(time.RFC3339),
					projector.Printable(verdictText(c.Recorded)), projector.Printable(verdictText(c.Now)), strings.ReplaceAll(c.Change, "_", " "))
			}
			tw.Flush()
		}
		fmt.Fprintln(w, summaryText(sum))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if sum.Changed() > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// unreadable makes a failure to read the stream exit 2, keeping its hint.
func unreadable(err error) error {
	var he *hintError
	if errors.As(err, &he) {
		return &exitError{code: 2, err: he.err, hint: he.hint}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: 2, err: err}
}

func verdictText(v projector.Verdict) string {
	s := v.Status
	if s == "" {
		return "in flight"
	}
	if v.Reason != "" && (s == schemas.StatusDenied || s == schemas.StatusRateLimited) {
		s += " " + strconv.Quote(v.Reason)
	}
	if v.Rule != "" {
		s += " (rule " + v.Rule + ")"
	}
	if v.ApprovalRef != "" {
		s += " by approval " + v.ApprovalRef
	}
	return s
}

func summaryText(s projector.RecheckSummary) string {
	head := fmt.Sprintf("%d call(s) in %d session(s): ", s.Calls, s.Sessions)
	tail := fmt.Sprintf("%d unchanged, %d in flight, %d not evaluated", s.Unchanged, s.InFlight, s.NotEvaluated)
	if s.Changed() == 0 {
		return head + "no verdict would change (" + tail + ")"
	}
	return head + fmt.Sprintf("%d would change (%d newly blocked, %d newly allowed, %d newly pending, %d reclassified), ",
		s.Changed(), s.NewlyBlocked, s.NewlyAllowed, s.NewlyPending, s.Reclassified) + tail
}
