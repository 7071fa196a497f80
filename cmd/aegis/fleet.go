package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// addApproverFlags are the hub flags of approvals, approve and deny: the
// hub's client URLs and an approver's credentials (aegis hub approver).
func addApproverFlags(fs *flag.FlagSet) *hubFlags {
	return &hubFlags{
		urls:  fs.String("hub", "", "ask the hosts of a fleet over this NATS hub (client URLs, comma-separated)"),
		creds: fs.String("hub-creds", "", "NATS credentials file of a fleet approver"),
		nkey:  fs.String("hub-nkey", "", "a fleet approver's key, as aegis hub approver wrote it"),
		ca:    fs.String("hub-ca", "", "CA bundle (PEM) the hub's certificate must chain to"),
		host:  fs.String("host", "", "ask only this host"),
	}
}

// approver connects to the hub as the fleet approver the flags name.
func (h *hubFlags) approver(ctx context.Context) (*events.FleetApprover, error) {
	admin := events.HubAdmin{URLs: splitURLs(*h.urls), Credentials: *h.creds, CAFile: *h.ca}
	if *h.nkey != "" {
		seed, err := readSeed(*h.nkey)
		if err != nil {
			return nil, withHint(fmt.Errorf("--hub-nkey: %w", err), "give the file aegis hub approver wrote (mode 0600)")
		}
		if _, err := events.LeafKeyPublic(seed); err != nil {
			return nil, withHint(fmt.Errorf("--hub-nkey %s: %w", *h.nkey, err), "give the file aegis hub approver wrote")
		}
		admin.NkeySeed = string(seed)
	}
	if *h.host != "" && !events.ValidHost(*h.host) {
		return nil, usagef("a host name is what aegis hub enroll was given: letters, digits, - and _", "--host %q", *h.host)
	}
	f, err := events.DialFleet(ctx, admin)
	if err != nil {
		return nil, withHint(err, "--hub takes the hub's client URLs (the port clients use, not the leaf node port), with an approver's --hub-nkey or --hub-creds")
	}
	return f, nil
}

// fleetApprovals lists the pending approvals of the hosts the flags name.
// It also returns how many sessions answered.
func (m *Main) fleetApprovals(ctx context.Context, h *hubFlags) ([]approvalRow, int, error) {
	f, err := h.approver(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	answers, err := f.List(ctx, *h.host, m.requester())
	if err != nil {
		return nil, 0, withHint(fmt.Errorf("ask the fleet: %w", err), fleetHint)
	}
	var rows []approvalRow
	for _, a := range answers {
		if !a.OK {
			m.warnf("host %s, session %s refused to list its approvals: %s", projector.Printable(a.Host), projector.Printable(a.Session), projector.Printable(a.Error))
			continue
		}
		for _, p := range a.Pending {
			rows = append(rows, approvalRow{Host: a.Host, Session: a.Session, PID: a.PID, PendingApproval: p})
		}
	}
	if len(answers) == 0 {
		where := "the fleet"
		if *h.host != "" {
			where = "host " + *h.host
		}
		m.warnf("no aegis process of %s answered: none is running with an approval channel and a link to this hub", where)
	}
	return rows, len(answers), nil
}

const fleetHint = "a host answers while its aegis runs with --policy and --hub; the hub must carry the users aegis hub enroll and aegis hub approver printed"

// fleetDecide sends an approve or deny over the hub to the host and
// session that hold the approval: the ones given, or the one host and
// session that list it as pending.
func (m *Main) fleetDecide(ctx context.Context, h *hubFlags, session string, req events.ApprovalRequest, key *approverKeyFile) error {
	f, err := h.approver(ctx)
	if err != nil {
		return err
	}
	defer f.Close()
	host, id := *h.host, req.ApprovalID
	if host == "" || session == "" {
		answers, err := f.List(ctx, host, req.By)
		if err != nil {
			return withHint(fmt.Errorf("ask the fleet: %w", err), fleetHint)
		}
		var holders []events.FleetAnswer
		for _, a := range answers {
			if session != "" && a.Session != session {
				continue
			}
			for _, p := range a.Pending {
				if p.ApprovalID == id {
					holders = append(holders, a)
					break
				}
			}
		}
		switch {
		case len(holders) == 1:
			host, session = holders[0].Host, holders[0].Session
		case len(holders) > 1:
			var ss []string
			for _, a := range holders {
				ss = append(ss, a.Host+" "+a.Session)
			}
			return withHint(fmt.Errorf("approval %s is pending on %d hosts or sessions: %s", id, len(holders), projector.Printable(strings.Join(ss, ", "))),
				"choose one with --host HOST --session ID")
		case host != "" && len(answers) == 1:
			// One host, and the id is not pending there: ask it anyway,
			// so that its answer says why.
			session = answers[0].Session
		default:
			return withHint(fmt.Errorf("approval %s is not pending on any host that answered over the hub (%d answered)", id, len(answers)),
				"run 'aegis approvals --hub …' to see what is pending; an approval is used once and expires")
		}
	}
	if !schemas.ValidID(session) {
		return usagef("a session id is 26 characters of Crockford base32, as printed by 'aegis approvals'", "%s: bad --session %q", req.Op, session)
	}
	if key != nil {
		// Sign what the host itself lists as pending in that session.
		p, err := fleetPending(ctx, f, host, session, req)
		if err != nil {
			return err
		}
		if req.Approver, err = m.sign(key, host, session, p); err != nil {
			return err
		}
	}
	rep, err := f.Do(ctx, host, session, req)
	if err != nil {
		if errors.Is(err, events.ErrNotServing) {
			return withHint(fmt.Errorf("host %s: %w", host, err), "the session's aegis has exited, or its link to the hub is down; "+fleetHint)
		}
		return withHint(fmt.Errorf("host %s: %w", host, err), fleetHint)
	}
	if !rep.OK {
		hint := "run 'aegis approvals --hub …' to see what is pending; an approval is used once, before it expires"
		if strings.Contains(rep.Error, "approver") {
			hint = refusedHint(rep.Error)
		}
		return &exitError{code: 1, err: fmt.Errorf("host %s, session %s refused to %s %s: %s", host, session, req.Op, id, projector.Printable(rep.Error)),
			hint: hint}
	}
	msg := rep.Message
	if msg == "" {
		msg = fmt.Sprintf("%s %s in session %s", map[string]string{events.OpApprove: "approved", events.OpDeny: "denied"}[req.Op], id, session)
	}
	fmt.Fprintf(m.Stdout, "%s (host %s)\n", projector.Printable(msg), host)
	fmt.Fprint(m.Stdout, decidedLines(rep, session))
	m.unchecked(key, msg)
	return nil
}

// fleetPending asks host over the hub for the pending approval that req
// names in session.
func fleetPending(ctx context.Context, f *events.FleetApprover, host, session string, req events.ApprovalRequest) (events.PendingApproval, error) {
	answers, err := f.List(ctx, host, req.By)
	if err != nil {
		return events.PendingApproval{}, withHint(fmt.Errorf("ask the fleet: %w", err), fleetHint)
	}
	for _, a := range answers {
		if a.Host != host || a.Session != session {
			continue
		}
		for _, p := range a.Pending {
			if p.ApprovalID == req.ApprovalID {
				return p, nil
			}
		}
	}
	return events.PendingApproval{}, withHint(fmt.Errorf("approval %s is not pending in session %s on host %s, so there is nothing to sign", req.ApprovalID, session, host),
		"run 'aegis approvals --hub …' to see what is pending; an approval is used once and expires")
}
