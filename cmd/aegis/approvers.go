package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/schemas"
)

// loadApprovers reads and parses --approvers FILE ("" is none). It fails
// closed: a file that cannot be read, that group or others may write (they
// could add themselves), or that does not parse refuses the start.
func (m *Main) loadApprovers(path string) (*schemas.Approvers, error) {
	if path == "" {
		return nil, nil
	}
	hint := "--approvers takes a file of 'aegis-approver <public key> NAME' lines, as 'aegis keygen --approver' prints them; nothing was started"
	f, err := os.Open(path)
	if err != nil {
		return nil, withHint(fmt.Errorf("approvers file: %w", err), hint)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, withHint(fmt.Errorf("approvers file: %w", err), hint)
	}
	if !fi.Mode().IsRegular() {
		return nil, withHint(fmt.Errorf("approvers file %s: not a regular file", path), hint)
	}
	acc, err := platform.FileAccess(f, fi)
	if err != nil {
		return nil, withHint(fmt.Errorf("approvers file: %w", err), hint)
	}
	if perm := acc.Perm; perm&0o022 != 0 {
		fix := "chmod go-w " + path
		if runtime.GOOS == "windows" {
			fix = platform.FixCommand(path, false)
		}
		return nil, withHint(fmt.Errorf("approvers file %s: group or others may write it (mode %#o), and so add an approver", path, perm),
			"run: "+fix+"; nothing was started")
	}
	data, err := io.ReadAll(io.LimitReader(f, schemas.MaxApproversFileBytes+1))
	if err != nil {
		return nil, withHint(fmt.Errorf("approvers file: %w", err), hint)
	}
	a, err := schemas.ParseApprovers(data)
	if err != nil {
		return nil, withHint(fmt.Errorf("approvers file %s: %w", path, err), hint)
	}
	fmt.Fprintf(m.Stderr, "aegis: approvals need the signature of one of the %d %s in %s\n", a.Len(), plural(a.Len(), "approver", "approvers"), path)
	return a, nil
}

// approverKeyFile is an approver key file read (still encrypted) by aegis
// approve --approver-key.
type approverKeyFile struct {
	path string
	data []byte
}

// readApproverKey reads --approver-key before anything is asked, so that a
// missing or unsafe file is said first.
func readApproverKey(path string) (*approverKeyFile, error) {
	data, err := projector.ReadApproverKeyFile(path)
	if err != nil {
		hint := "--approver-key takes the file 'aegis keygen --approver' wrote"
		if errors.Is(err, projector.ErrKeyFilePermissions) {
			hint = "run: chmod 600 " + path
		}
		return nil, withHint(err, hint)
	}
	return &approverKeyFile{path: path, data: data}, nil
}

// passphraseTries is how many times aegis approve asks for a passphrase
// that does not open the key.
const passphraseTries = 3

// sign shows the approver what they are about to approve, asks the key's
// passphrase on the terminal and signs the claim of pending approval p of
// session (on host, over a hub).
func (m *Main) sign(k *approverKeyFile, host, session string, p events.PendingApproval) (*schemas.ApproverSignature, error) {
	where := "session " + session
	if host != "" {
		where = "host " + projector.Printable(host) + ", " + where
	}
	args := "-"
	if p.ArgumentsBytes > 0 {
		args = proxy.ShowArgs(p.Arguments, p.ArgumentsBytes, p.ArgsDigest)
	}
	fmt.Fprintf(m.Stderr, "aegis: approving %s in %s: %s, arguments %s\n", projector.Printable(p.ApprovalID), where, projector.Printable(p.ToolID), args)
	for try := 1; ; try++ {
		pass, err := m.askPassphrase("passphrase of approver key "+k.path+": ", false)
		if err != nil {
			return nil, err
		}
		key, err := projector.OpenApproverKey(k.data, pass)
		switch {
		case errors.Is(err, projector.ErrWrongPassphrase) && try < passphraseTries:
			fmt.Fprintln(m.Stderr, "aegis: wrong passphrase; try again")
			continue
		case errors.Is(err, projector.ErrWrongPassphrase):
			return nil, withHint(fmt.Errorf("%s: %w (%d tries)", k.path, err, try), "nothing was sent; the approval is still pending")
		case err != nil:
			return nil, withHint(fmt.Errorf("%s: %w", k.path, err), "--approver-key takes the file 'aegis keygen --approver' wrote")
		}
		return key.Sign(claimOf(session, p))
	}
}

// claimOf is what an approver signs to approve p, pending in session: the
// fields the process checks, as it listed them.
func claimOf(session string, p events.PendingApproval) schemas.ApprovalClaim {
	return schemas.ApprovalClaim{ApprovalID: p.ApprovalID, Session: session, Target: p.ToolID, ArgsDigest: p.ArgsDigest}
}

// pendingIn asks the process of creds for its pending approval id.
func (m *Main) pendingIn(ctx context.Context, c events.Creds, id string) (events.PendingApproval, error) {
	rep, err := m.ask(ctx, c, events.ApprovalRequest{Op: events.OpList, By: m.requester()})
	if err != nil {
		return events.PendingApproval{}, withHint(err, approverHint(err))
	}
	if !rep.OK {
		return events.PendingApproval{}, fmt.Errorf("session %s refused to list its approvals: %s", c.Session, projector.Printable(rep.Error))
	}
	for _, p := range rep.Pending {
		if p.ApprovalID == id {
			return p, nil
		}
	}
	return events.PendingApproval{}, withHint(fmt.Errorf("approval %s is not pending in session %s, so there is nothing to sign", id, c.Session),
		"run 'aegis approvals' to see what is pending; an approval is used once and expires")
}
