package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"

	"github.com/aegis-dev/aegis/verifier"
)

const verifyUsage = `Usage:
  aegis verify [--key HEX]… [--trust-store PATH] [--allow-gaps] RECORD

Checks an audit record offline (no state directory, no network) and prints:

  Verified (unpinned) | Verified (pinned to <key_id>) | Verified (pinned)
  | Tampered: <reason> | Indeterminate: <reason>
  key_id <hex>                 each key the record's sessions publish
  coverage session <i> seq <n> the last line that passed every check
  in_flight <call_id>          calls cut off by an unfinished session

--key takes a 64-hex Ed25519 public key (as 'aegis keygen' prints it), not a
key_id; --trust-store names a file of such keys, one per line (# comments
allowed). Either one pins: every session must publish a trusted key.
Without them the walk is unpinned and only proves internal consistency.

A line of a type this verifier does not know (written by a newer version)
makes the record Indeterminate, signed or not: a signature says who wrote
the line, not what it means. A bad signature on it is Tampered.

A gap line ("line_type":"gap"), which 'aegis export --salvage' writes where
a damaged state directory lost audit lines, is Tampered: lines were dropped
there, and whoever drops lines can write one. --allow-gaps says the record
is a salvage: gap lines then make it Indeterminate (record_gap), and every
line around them is still checked.

Exit codes: 0 Verified, 1 Tampered (or a usage error), 2 the record or
trust store could not be read, 3 Indeterminate.

Example:
  $ aegis verify --key 3de537a0…4e2c calls.aarl
`

type keysFlag []ed25519.PublicKey

func (f *keysFlag) String() string { return fmt.Sprint(len(*f)) }
func (f *keysFlag) Set(v string) error {
	k, err := verifier.ParseKey(v)
	if err != nil {
		return fmt.Errorf("not a 64-hex Ed25519 public key: %w", err)
	}
	*f = append(*f, k)
	return nil
}

// verify exits 1 on a usage error, not 2: 2 means "unreadable" here.
func (m *Main) runVerify(_ context.Context, args []string) error {
	fs := m.newFlagSet("verify")
	var keys keysFlag
	fs.Var(&keys, "key", "trusted public key (repeatable)")
	trust := fs.String("trust-store", "", "file of trusted public keys")
	allowGaps := fs.Bool("allow-gaps", false, "the record is a salvage: read gap lines as lost lines, not dropped ones")
	if err := m.parseFlags(fs, verifyUsage, args); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return &exitError{code: 1, err: errors.New(ue.msg), hint: "--key takes the public_key that 'aegis keygen' printed, not the key_id"}
		}
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{code: 1, err: fmt.Errorf("verify takes exactly one RECORD path, got %d", fs.NArg()), hint: "aegis verify [--key HEX]… [--trust-store PATH] [--allow-gaps] RECORD"}
	}
	opts := verifier.Options{Keys: keys, AllowGaps: *allowGaps}
	if *trust != "" {
		f, err := os.Open(*trust)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("read trust store: %w", err)}
		}
		ts, err := verifier.ParseTrustStore(f)
		f.Close()
		if err != nil {
			var te *verifier.TrustStoreError
			if errors.As(err, &te) {
				return &exitError{code: 1, err: fmt.Errorf("trust store %s: %w", *trust, err), hint: "one 64-hex public key per line; blank lines and whole-line # comments are allowed"}
			}
			return &exitError{code: 2, err: fmt.Errorf("read trust store: %w", err)}
		}
		opts.TrustStore = ts
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("read record: %w", err)}
	}
	defer f.Close()
	res := verifier.Verify(f, opts)
	if res.Err != nil {
		return &exitError{code: 2, err: fmt.Errorf("read record: %w", res.Err)}
	}
	fmt.Fprint(m.Stdout, verifier.Render(res))
	if code := verifier.ExitCode(res); code != 0 {
		return &exitError{code: code}
	}
	return nil
}
