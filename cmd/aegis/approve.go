package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

const approvalsUsage = `Usage:
  aegis approvals [--json] [--state-dir DIR | --name NAME]
  aegis approvals --hub URL [--host HOST] [--hub-nkey FILE | --hub-creds FILE] [--hub-ca FILE] [--json]

Lists the tools/calls that wait for a human decision in every running
aegis process of this user, oldest first:
  APPROVAL  TOOL  SESSION  PID  REQUESTED  EXPIRES  ARGUMENTS
ARGUMENTS is what an approval would let through: the canonical JSON of
the call's arguments (RFC 8785, keys sorted), cut after 512 bytes with
"…", then its whole length and the start of its SHA-256 (args_digest).
An approval covers exactly those arguments. Characters that could act on
a terminal (control characters, bidi overrides and the like) are shown
escaped as \uXXXX, in every column.

With --json it prints one JSON array of objects with session, pid,
approval_id, tool_id, request_digest, args_digest, requested_at,
expires_at, arguments (the same preview, unescaped), arguments_bytes,
matched_rule (the policy rule that asked) and, in a gateway, profile (the
active profile when it asked).

Running processes are found through their credentials files in the
runtime directory: $XDG_RUNTIME_DIR/aegis when XDG_RUNTIME_DIR is set
(it must be a directory of yours that only you can write), else run/ in
the state directory (--state-dir; by default $XDG_STATE_HOME/aegis or
~/.local/state/aegis and every state directory aegis init made under it,
one per server). Either is a private 0700 directory. --name NAME asks only
the processes of the server NAME (its state directory of aegis init's). Each is asked over a loopback connection whose identity may
carry approval requests and nothing else. Files of processes that have
exited are removed.

With --hub (a fleet hub's client URLs) it asks the hosts of the fleet
instead, over the hub, as a fleet approver (--hub-nkey, the key aegis hub
approver wrote, or --hub-creds): every host whose aegis runs linked to
the hub with an approval channel, or only --host. It waits two seconds to
learn which hosts are there, then asks each on a subject only that host
can answer on; the table gets a HOST column, and --json a host field.

Example:
  $ aegis approvals
  APPROVAL            TOOL   SESSION                     PID   REQUESTED            EXPIRES   ARGUMENTS
  apr-gate-dream-7.1  dream  01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM  4242  2026-09-01 10:02:03  in 4m12s  {"sleep":3} (11 bytes, sha256 9a1f0c2b7d3e5a64…)
`

const approveUsage = `Usage:
  aegis approve APPROVAL_ID [--approver-key FILE] [--session ID] [--state-dir DIR | --name NAME]
  aegis approve APPROVAL_ID [--approver-key FILE] --hub URL [--host HOST] [--session ID] [--hub-nkey FILE | --hub-creds FILE] [--hub-ca FILE]

Approves one pending tools/call: the aegis process that holds it checks the
request (known id, still pending, not expired, its own session), records a
signed decision and lets the call through. Its answer is printed, then
what it approved, as that process says: the session, the tool, the
SHA-256 of the arguments' canonical JSON (args_digest, as 'aegis
approvals --json' shows it) and their preview.

An approval id is printed in the refusal the host gets and in the prompt
on the aegis process's stderr: apr-RULE-TOOL-SESSION.N (apr-pin-… for a
changed tool's re-pin, esc-SESSION.N for a gateway escalation). SESSION
is the session's number in its state directory and N its count of
approvals, so an id is never reused within a state directory: an id that
an ended session or an earlier run printed names no other call. Ids hold
only A-Z a-z 0-9 . _ - (any other character of a rule or tool name is
written _), so they can be pasted into a shell as printed; the match is
exact.

An approval lets exactly one call through: the same tool with the same
arguments (as 'aegis approvals' shows them), sent again by the host before
the approval expires (--approval-ttl of the aegis process, 10 minutes by
default, counted from the request). Identical calls beyond the first are
pending again, each with its own approval id. A batch is refused whole
while any call in it is refused; an approval a refused batch would have
used is kept for the next try. An approval not used before it expires
lapses, and the call is pending again under a new id.

Without --session, every running aegis process of this user is asked which
one holds APPROVAL_ID as pending, and only that one gets the approval. Pass
--session when the same id is pending in several sessions, or to get the
process's own reason for refusing an id it no longer holds. Processes are
found as for 'aegis approvals' (--state-dir and --name choose among them).

With --hub (a fleet hub's client URLs) the approval goes over the hub to
the host that holds it, as a fleet approver (see 'aegis approvals'): the
hosts are asked which one holds APPROVAL_ID as pending (--host and
--session narrow it down, and are needed when several do), and that
host's aegis decides exactly as for a local approval; its signed decision
line says the request came over the hub.

Approvers. An aegis wrap or gateway run without --approvers takes an
approval from any process of this user that can reach it: an agent that
can run a shell tool can approve its own call. Run with --approvers FILE,
it takes only approvals signed by a key that FILE lists; anything else is
refused and recorded (approval.refused, with what was wrong), and the call
stays pending. --approver-key KEY (made by 'aegis keygen --approver') signs:
aegis approve first asks the process for the pending call, shows its tool
and arguments, then asks for the key's passphrase on the terminal
(/dev/tty; never from arguments, the environment or stdin, so it fails
without a terminal) and sends an Ed25519 signature of
  "aegis approval signature v1\n" + canonical JSON of
  {approval_id, args_digest, session, target}
where target is the tool as 'aegis approvals' lists it (for an escalation
"aegis.set_profile FROM -> TO", with no args_digest). The process checks it
against its own pending approval and its approvers file, and its signed
decision line names the approver's key id (approver_key_id). A signature
is good for that one approval only: not another id, session, tool or
arguments. A deny needs no signature: it can only keep a call from
running.

Exit status: 0 approved; 1 refused (unknown, expired, already used, or
not signed by an approver) or no process could be asked; 2 usage error.

Example:
  $ aegis approve apr-gate-dream-7.1
  $ aegis approve apr-gate-dream-7.1 --approver-key ~/.config/aegis/approver.age
  $ aegis approve apr-gate-dream-7.1 --hub nats://hub-1:4222 --hub-nkey alice.nkey
`

const denyUsage = `Usage:
  aegis deny APPROVAL_ID [--reason TEXT] [--session ID] [--state-dir DIR | --name NAME]
  aegis deny APPROVAL_ID [--reason TEXT] --hub URL [--host HOST] [--session ID] [--hub-nkey FILE | --hub-creds FILE] [--hub-ca FILE]

Denies one pending tools/call: the aegis process that holds it records a
signed decision with the reason and answers the call with an error. Its
answer is printed, then what it denied (session, tool, args_digest). The process is found as for 'aegis approve', over a
fleet's hub with --hub. A deny is never signed, even when the process runs
with --approvers: it can only keep a call from running (fail closed).

Exit status: 0 denied; 1 refused (unknown, expired or already used) or no
process could be asked; 2 usage error.

Example:
  $ aegis deny apr-gate-dream-7.1 --reason "not on production"
`

// approvalTimeout bounds asking one process.
const approvalTimeout = 10 * time.Second

func (m *Main) runApprove(ctx context.Context, args []string) error {
	return m.decide(ctx, events.OpApprove, approveUsage, args)
}

func (m *Main) runDeny(ctx context.Context, args []string) error {
	return m.decide(ctx, events.OpDeny, denyUsage, args)
}

// approvalRow is one pending approval of one process, as --json prints it.
type approvalRow struct {
	Host    string `json:"host,omitempty"`
	Session string `json:"session"`
	PID     int    `json:"pid"`
	events.PendingApproval
}

func (m *Main) runApprovals(ctx context.Context, args []string) error {
	fs := m.newFlagSet("approvals")
	asJSON := fs.Bool("json", false, "print a JSON array")
	sc := stateChoice{
		dir:  fs.String("state-dir", "", "state directory of the wrap (used when XDG_RUNTIME_DIR is unset)"),
		name: fs.String("name", "", "only the processes of this server (its name given to aegis init)"),
	}
	hub := addApproverFlags(fs)
	if err := m.parseFlags(fs, approvalsUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run: aegis approvals [--json] [--state-dir DIR | --name NAME]", "approvals: unexpected argument %q", fs.Arg(0))
	}
	if err := hub.noneWithout(); err != nil {
		return err
	}
	if hub.set() {
		if sc.set() {
			return usagef("aegis approvals --hub URL [--host HOST]", "approvals --hub asks the hosts over the hub: no --state-dir")
		}
		rows, answered, err := m.fleetApprovals(ctx, hub)
		if err != nil {
			return err
		}
		if len(rows) == 0 && !*asJSON {
			fmt.Fprintf(m.Stdout, "no pending approvals (%d aegis %s asked over the hub)\n", answered, plural(answered, "process", "processes"))
			return nil
		}
		return m.printApprovals(rows, *asJSON, true)
	}
	procs, err := m.approvalProcessesOf(sc)
	if err != nil {
		return err
	}
	var rows []approvalRow
	failed := 0
	for _, r := range m.askAll(ctx, procs, events.ApprovalRequest{Op: events.OpList, By: m.requester()}) {
		if r.err != nil {
			m.warnf("%v", r.err)
			failed++
			continue
		}
		if !r.rep.OK {
			m.warnf("session %s (pid %d) refused to list its approvals: %s", r.creds.Session, r.creds.PID, projector.Printable(r.rep.Error))
			failed++
			continue
		}
		for _, p := range r.rep.Pending {
			rows = append(rows, approvalRow{Session: r.creds.Session, PID: r.creds.PID, PendingApproval: p})
		}
	}
	if len(rows) == 0 && !*asJSON {
		switch {
		case len(procs) == 0:
			fmt.Fprintln(m.Stdout, "no pending approvals: no aegis process of yours is running with an approval channel")
			switch {
			case m.Getenv("XDG_RUNTIME_DIR") != "":
			case sc.set():
				m.warnf("XDG_RUNTIME_DIR is unset, so only processes with this state directory were looked for")
			default:
				m.warnf("XDG_RUNTIME_DIR is unset, so only processes with the default state directory or one aegis init made under it were looked for; pass the --state-dir the wrap was given")
			}
		default:
			fmt.Fprintf(m.Stdout, "no pending approvals (%d aegis %s asked)\n", len(procs)-failed, plural(len(procs)-failed, "process", "processes"))
		}
	} else if err := m.printApprovals(rows, *asJSON, false); err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("could not list the approvals of %d of %d aegis %s", failed, len(procs), plural(len(procs), "process", "processes")),
			hint: "the warnings above say why; a process that has just exited is listed until its credentials file is gone"}
	}
	return nil
}

// printApprovals prints pending approvals oldest first, as a table (with
// a HOST column when they come from a fleet) or as a JSON array.
func (m *Main) printApprovals(rows []approvalRow, asJSON, fleet bool) error {
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if !a.RequestedAt.Equal(b.RequestedAt) {
			return a.RequestedAt.Before(b.RequestedAt)
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		return a.ApprovalID < b.ApprovalID
	})
	if asJSON {
		if rows == nil {
			rows = []approvalRow{}
		}
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "%s\n", escapeJSONText(b))
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)
	host := func(r approvalRow) string { return "" }
	if fleet {
		fmt.Fprintln(tw, "APPROVAL\tTOOL\tHOST\tSESSION\tPID\tREQUESTED\tEXPIRES\tARGUMENTS")
		host = func(r approvalRow) string { return projector.Printable(r.Host) + "\t" }
	} else {
		fmt.Fprintln(tw, "APPROVAL\tTOOL\tSESSION\tPID\tREQUESTED\tEXPIRES\tARGUMENTS")
	}
	for _, r := range rows {
		// Every field is escaped: ids and tools are chosen by the
		// host, and must not act on the terminal.
		args := "-"
		if r.ArgumentsBytes > 0 {
			args = proxy.ShowArgs(r.Arguments, r.ArgumentsBytes, r.ArgsDigest)
		}
		if d := r.PinDigest; d != "" {
			// A re-pin: what is approved is the tool's new definition.
			args = "re-pin to its new definition sha256:" + projector.Printable(d[:min(12, len(d))]) + "… (see aegis replay); call " + args
		}
		tool := projector.Printable(r.ToolID)
		if r.Principal != "" {
			tool += " by " + projector.Printable(r.Principal)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%d\t%s\t%s\t%s\n", projector.Printable(r.ApprovalID), tool, host(r), projector.Printable(r.Session), r.PID,
			r.RequestedAt.Local().Format("2006-01-02 15:04:05"), expiresIn(r.ExpiresAt, now), args)
	}
	return tw.Flush()
}

// escapeJSONText writes as \uXXXX escapes the characters of JSON text
// that projector.Printable would escape (encoding/json leaves C1 controls, DEL
// and format characters such as bidi overrides as they are), so that
// printing it cannot act on a terminal. The text means the same JSON.
func escapeJSONText(b []byte) []byte {
	s := string(b)
	if projector.Printable(s) == s {
		return b
	}
	var out bytes.Buffer
	for _, r := range s {
		switch {
		case r == ' ' || r == '\n' || unicode.IsPrint(r):
			out.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.Bytes()
}

func expiresIn(t, now time.Time) string {
	switch {
	case t.IsZero():
		return "-"
	case !t.After(now):
		return "expired"
	}
	return "in " + t.Sub(now).Round(time.Second).String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// decide sends an approve or deny request to the process that holds the
// approval.
func (m *Main) decide(ctx context.Context, op, help string, args []string) error {
	fs := m.newFlagSet(op)
	session := fs.String("session", "", "the session that holds the approval")
	sc := stateChoice{
		dir:  fs.String("state-dir", "", "state directory of the wrap (used when XDG_RUNTIME_DIR is unset)"),
		name: fs.String("name", "", "only the processes of this server (its name given to aegis init)"),
	}
	var reason, keyPath *string
	if op == events.OpDeny {
		reason = fs.String("reason", "", "why the call is denied")
	} else {
		keyPath = fs.String("approver-key", "", "sign the approval with this approver key (asks its passphrase on the terminal)")
	}
	hub := addApproverFlags(fs)
	pos, err := m.parseInterspersed(fs, help, args)
	if err != nil {
		return err
	}
	synopsis := "aegis " + op + " APPROVAL_ID"
	switch len(pos) {
	case 0:
		return usagef("run 'aegis approvals' to see the pending ids, then: "+synopsis, "%s: missing APPROVAL_ID", op)
	case 1:
	default:
		return usagef("approve or deny one id at a time: "+synopsis, "%s: want one APPROVAL_ID, got %d arguments", op, len(pos))
	}
	id := pos[0]
	if id == "" || len(id) > events.MaxApprovalIDBytes || strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return usagef("an approval id is printed by 'aegis approvals' and in the prompt on the wrapped process's stderr", "%s: bad APPROVAL_ID %q", op, id)
	}
	if *session != "" && !schemas.ValidID(*session) {
		return usagef("a session id is 26 characters of Crockford base32, as printed by 'aegis approvals'", "%s: bad --session %q", op, *session)
	}
	req := events.ApprovalRequest{Op: op, ApprovalID: id, By: m.requester()}
	if reason != nil {
		req.Reason = *reason
	}
	if err := hub.noneWithout(); err != nil {
		return err
	}
	var key *approverKeyFile
	if keyPath != nil && *keyPath != "" {
		if key, err = readApproverKey(*keyPath); err != nil {
			return err
		}
	}
	if hub.set() {
		if sc.set() {
			return usagef("aegis "+op+" --hub URL [--host HOST] [--session ID] APPROVAL_ID", "%s --hub asks the hosts over the hub: no --state-dir", op)
		}
		return m.fleetDecide(ctx, hub, *session, req, key)
	}

	procs, err := m.approvalProcessesOf(sc)
	if err != nil {
		return err
	}
	if len(procs) == 0 {
		return withHint(errors.New("no aegis process of yours is running with an approval channel"), noProcessHint(m.Getenv))
	}
	var target *events.Creds
	if *session != "" {
		for i := range procs {
			if procs[i].Session == *session {
				target = &procs[i]
			}
		}
		if target == nil {
			return withHint(fmt.Errorf("no running aegis process serves session %s", *session), "run 'aegis approvals' to see the running sessions and what they wait for")
		}
	} else {
		var holders []*events.Creds
		failed := 0
		results := m.askAll(ctx, procs, events.ApprovalRequest{Op: events.OpList, By: req.By})
		for i, r := range results {
			if r.err != nil || !r.rep.OK {
				failed++
				if r.err != nil {
					m.warnf("%v", r.err)
				} else {
					m.warnf("session %s (pid %d) refused to list its approvals: %s", r.creds.Session, r.creds.PID, projector.Printable(r.rep.Error))
				}
				continue
			}
			for _, p := range r.rep.Pending {
				if p.ApprovalID == id {
					holders = append(holders, &results[i].creds)
					break
				}
			}
		}
		switch {
		case len(holders) == 1:
			target = holders[0]
		case len(holders) > 1:
			var ss []string
			for _, h := range holders {
				ss = append(ss, h.Session)
			}
			return withHint(fmt.Errorf("approval %s is pending in %d sessions: %s", id, len(holders), strings.Join(ss, ", ")), "choose one with --session ID")
		case len(procs) == 1 && failed == 0:
			// One process, and the id is not pending there: ask it anyway,
			// so that its answer says why (unknown, expired, already used).
			// Ids are unique within a state directory (they carry the
			// session's number in it), so this cannot reach a call the
			// user has not seen.
			target = &procs[0]
		default:
			return withHint(fmt.Errorf("approval %s is not pending in any running aegis process (%d of %d asked)", id, len(procs)-failed, len(procs)),
				"run 'aegis approvals' to see what is pending; an approval is used once and expires. With --session ID the process says why it refuses")
		}
	}

	if key != nil {
		// The claim is what the process itself lists as pending: its
		// session, tool and arguments' digest.
		p, err := m.pendingIn(ctx, *target, id)
		if err != nil {
			return err
		}
		if req.Approver, err = m.sign(key, "", target.Session, p); err != nil {
			return err
		}
	}
	rep, err := m.ask(ctx, *target, req)
	if err != nil {
		return withHint(err, approverHint(err))
	}
	if !rep.OK {
		return &exitError{code: 1, err: fmt.Errorf("session %s refused to %s %s: %s", target.Session, op, id, projector.Printable(rep.Error)),
			hint: refusedHint(rep.Error)}
	}
	msg := rep.Message
	if msg == "" {
		msg = fmt.Sprintf("%s %s in session %s", map[string]string{events.OpApprove: "approved", events.OpDeny: "denied"}[op], id, target.Session)
	}
	fmt.Fprintln(m.Stdout, projector.Printable(msg))
	fmt.Fprint(m.Stdout, decidedLines(rep, target.Session))
	m.unchecked(key, msg)
	return nil
}

// decidedLines says what an approve or deny resolved, as the process that
// recorded it answered: the session, the tool and the digest of the
// arguments the approval covers (the escalation's switch, or the
// definition a re-pin pins). A process older than the reply's decided
// member names only its session.
func decidedLines(rep events.ApprovalReply, session string) string {
	if rep.Session != "" {
		session = rep.Session
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  session:     %s\n", projector.Printable(session))
	d := rep.Decided
	if d == nil {
		return b.String()
	}
	fmt.Fprintf(&b, "  tool:        %s\n", projector.Printable(d.ToolID))
	if d.Principal != "" {
		fmt.Fprintf(&b, "  caller:      %s\n", projector.Printable(d.Principal))
	}
	if d.ArgsDigest != "" {
		fmt.Fprintf(&b, "  args_digest: sha256:%s\n", projector.Printable(d.ArgsDigest))
		if d.ArgumentsBytes > 0 {
			fmt.Fprintf(&b, "  arguments:   %s\n", proxy.ShowArgs(d.Arguments, d.ArgumentsBytes, d.ArgsDigest))
		}
	}
	if d.PinDigest != "" {
		fmt.Fprintf(&b, "  pins:        sha256:%s\n", projector.Printable(d.PinDigest))
	}
	return b.String()
}

// unchecked warns when a signed approve was taken by a process that runs
// without --approvers: it did not check the signature, and its record
// does not name the approver.
func (m *Main) unchecked(key *approverKeyFile, msg string) {
	if key != nil && !strings.Contains(msg, "signed by") {
		m.warnf("that aegis process runs without --approvers: it took the approval without checking the signature, and its record does not name the approver")
	}
}

// refusedHint says what to do about a refused approve or deny.
func refusedHint(why string) string {
	if strings.Contains(why, "approver") {
		return "this aegis takes only approvals signed by a key in its --approvers file: run aegis approve --approver-key KEY ID, from a terminal, with the key 'aegis keygen --approver' made and its passphrase"
	}
	return "run 'aegis approvals' to see what is pending; an approval is used once, before it expires"
}

func approverHint(err error) string {
	switch {
	case errors.Is(err, events.ErrNotListening):
		return "run 'aegis approvals' to see the aegis processes that are still running"
	case errors.Is(err, events.ErrCredsRejected):
		return "its credentials file does not belong to the process now listening; restart that aegis process"
	case errors.Is(err, events.ErrNotServing):
		return "that process has not opened its approval channel yet, or is shutting down; try again"
	case errors.Is(err, events.ErrNoAnswer):
		return "the process may be stopped or overloaded; try again"
	}
	return "run 'aegis approvals' to see the running aegis processes"
}

// runtimeDirPath returns the runtime directory that aegis processes with
// this environment and --state-dir use for approval credentials (see
// events.RuntimeDirPath). It creates nothing.
func (m *Main) runtimeDirPath(stateDirFlag string) (string, error) {
	stateDir := ""
	if m.Getenv("XDG_RUNTIME_DIR") == "" {
		sd, err := m.stateDir(stateDirFlag)
		if err != nil {
			return "", err
		}
		if stateDir, err = filepath.Abs(sd); err != nil {
			return "", fmt.Errorf("state directory %q: %w", sd, err)
		}
	}
	dir, err := events.RuntimeDirPath(m.Getenv, stateDir)
	if err != nil {
		return "", withHint(fmt.Errorf("runtime directory: %w", err), runtimeDirHint(m.Getenv))
	}
	return dir, nil
}

// noProcessHint says where the credentials of running processes are looked
// for when none was found.
func noProcessHint(getenv func(string) string) string {
	if getenv("XDG_RUNTIME_DIR") != "" {
		return "approvals are served by a running 'aegis wrap' or 'aegis gateway'; it writes its credentials to $XDG_RUNTIME_DIR/aegis, so run this as the same user with the same XDG_RUNTIME_DIR"
	}
	return "approvals are served by a running 'aegis wrap' or 'aegis gateway'; with XDG_RUNTIME_DIR unset it writes its credentials into its state directory, so pass the same --state-dir (or set XDG_RUNTIME_DIR for both)"
}

// runtimeDirHint says what to do about a runtime directory that was
// refused.
func runtimeDirHint(getenv func(string) string) string {
	if getenv("XDG_RUNTIME_DIR") != "" {
		return "aegis keeps approval credentials in $XDG_RUNTIME_DIR/aegis; point XDG_RUNTIME_DIR at a private (0700) directory of yours, or unset it to keep them in the state directory"
	}
	return "without XDG_RUNTIME_DIR, aegis keeps approval credentials in the state directory's run/ (0700); fix the directory named, or set XDG_RUNTIME_DIR to a private directory of yours"
}

// approvalProcessesOf is approvalProcesses for --state-dir and --name.
// With --name, it is the processes of that server's state directory (the
// one aegis init made). With neither and XDG_RUNTIME_DIR unset (always so
// on macOS), where each process keeps its credentials in its own state
// directory, it is those of the default state directory and of each that
// aegis init made under it: one per server.
func (m *Main) approvalProcessesOf(c stateChoice) ([]events.Creds, error) {
	noRuntime := m.Getenv("XDG_RUNTIME_DIR") == ""
	switch {
	case *c.name != "" && *c.dir != "":
		return nil, usagef("--state-dir DIR or --name NAME", "--state-dir and --name both name a state directory; give one")
	case *c.name != "":
		sd, err := m.namedStateDir(*c.name)
		if err != nil {
			return nil, err
		}
		procs, err := m.approvalProcesses(sd)
		if err != nil || noRuntime {
			return procs, err
		}
		abs, err := filepath.Abs(sd)
		if err != nil {
			return nil, fmt.Errorf("state directory %q: %w", sd, err)
		}
		var mine []events.Creds
		for _, p := range procs {
			if filepath.Clean(p.StateDir) == abs {
				mine = append(mine, p)
			}
		}
		return mine, nil
	case *c.dir == "" && noRuntime:
		procs, err := m.approvalProcesses("")
		if err != nil {
			return nil, err
		}
		d, err := defaultStateDir(m.Getenv)
		if err != nil {
			return procs, nil
		}
		for _, n := range initStateDirs(d) {
			more, err := m.approvalProcesses(filepath.Join(d, n))
			if err != nil {
				return nil, err
			}
			procs = append(procs, more...)
		}
		return procs, nil
	}
	return m.approvalProcesses(*c.dir)
}

// approvalProcesses returns the credentials of the running aegis processes
// of this user that share this environment and state directory. Refused
// files are reported; files of exited processes are removed.
func (m *Main) approvalProcesses(stateDirFlag string) ([]events.Creds, error) {
	dir, err := m.runtimeDirPath(stateDirFlag)
	if err != nil {
		return nil, err
	}
	list, err := events.ReadApprovalCreds(dir)
	if err != nil {
		return nil, withHint(fmt.Errorf("read approval credentials: %w", err), runtimeDirHint(m.Getenv))
	}
	for _, r := range list.Refused {
		m.warnf("ignoring %v (only a 0600 file of yours is trusted)", r)
	}
	for _, c := range list.Stale {
		if err := events.RemoveApprovalCreds(c.Path); err != nil {
			m.warnf("session %s: %v", c.Session, err)
			continue
		}
		if c.PID == 0 {
			m.warnf("session %s: its credentials file was left empty by a crash; removed it", c.Session)
			continue
		}
		m.warnf("session %s: aegis process %d has exited; removed its credentials file", c.Session, c.PID)
	}
	return list.Live, nil
}

type askResult struct {
	creds events.Creds
	rep   events.ApprovalReply
	err   error
}

// askAll sends req to every process at once; results are in procs' order.
func (m *Main) askAll(ctx context.Context, procs []events.Creds, req events.ApprovalRequest) []askResult {
	out := make([]askResult, len(procs))
	var wg sync.WaitGroup
	for i, c := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := m.ask(ctx, c, req)
			out[i] = askResult{creds: c, rep: rep, err: err}
		}()
	}
	wg.Wait()
	return out
}

func (m *Main) ask(ctx context.Context, c events.Creds, req events.ApprovalRequest) (events.ApprovalReply, error) {
	ctx, cancel := context.WithTimeout(ctx, approvalTimeout)
	defer cancel()
	ap, err := events.DialApprover(ctx, c)
	if err != nil {
		return events.ApprovalReply{}, err
	}
	defer ap.Close()
	return ap.Do(ctx, req)
}

// requester names who asks, for the proxy's record: user@host, pid N.
func (m *Main) requester() string {
	user := m.Getenv("USER")
	if user == "" {
		user = m.Getenv("LOGNAME")
	}
	if user == "" {
		user = "uid " + strconv.Itoa(os.Geteuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s@%s, pid %d", user, host, os.Getpid())
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (aegis deny ID --reason TEXT) and returns the
// positional ones. Everything after "--" is positional.
func (m *Main) parseInterspersed(fs *flag.FlagSet, help string, args []string) ([]string, error) {
	var pos []string
	for {
		if err := m.parseFlags(fs, help, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
