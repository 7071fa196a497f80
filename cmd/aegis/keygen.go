package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const keygenUsage = `Usage:
  aegis keygen --out PATH [--force]
  aegis keygen --approver --out PATH [--name NAME] [--force]

Generates an Ed25519 signing key for audit records and writes its 32-byte
seed to PATH as one line of 64 lowercase hex characters, mode 0600. An
existing file is kept unless --force is given.

stdout is exactly two lines:
  public_key <64 hex>   pin records with: aegis verify --key <public_key> RECORD
  key_id <64 hex>       SHA-256 of the public key, as records carry it

With --approver it makes an approver's key instead: the Ed25519 key with
which a human signs approvals for 'aegis wrap --approvers' and 'aegis
gateway --approvers' (see 'aegis help approve'). It asks twice for a
passphrase (at least 8 characters) on the terminal, /dev/tty, never from
arguments, the environment or stdin, and writes the key to PATH (0600)
encrypted with it: an age file (age-encryption.org) with a scrypt
recipient, ASCII-armored; 'age -d PATH' shows the seed as one line of
hex. stdout is exactly two lines:
  aegis-approver <64 hex> NAME   the line to add to an approvers file
  key_id <64 hex>                SHA-256 of the public key, as the signed
                                 decision line of an approval names it
NAME (default: $USER) is shown in prompts and records; it proves nothing.

Examples:
  $ aegis keygen --out ~/.config/aegis/signing.key
  $ aegis keygen --approver --out ~/.config/aegis/approver.age --name alice >> ~/.config/aegis/approvers
`

func (m *Main) runKeygen(_ context.Context, args []string) error {
	fs := m.newFlagSet("keygen")
	out := fs.String("out", "", "where to write the key")
	force := fs.Bool("force", false, "overwrite an existing key file")
	approver := fs.Bool("approver", false, "make an approver's key, encrypted with a passphrase")
	name := fs.String("name", "", "the approver's name in the approvers line (default $USER)")
	if err := m.parseFlags(fs, keygenUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'aegis help keygen'", "keygen: unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return usagef("aegis keygen --out PATH", "keygen: --out is required")
	}
	if *approver {
		return m.keygenApprover(*out, *name, *force)
	}
	if *name != "" {
		return usagef("aegis keygen --approver --out PATH --name NAME", "keygen: --name names an approver; it needs --approver")
	}
	k, err := projector.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	if err := projector.WriteKeyFile(*out, k, *force); err != nil {
		if errors.Is(err, projector.ErrKeyFileExists) {
			return withHint(fmt.Errorf("key file %s already exists; not overwriting it", *out), "records signed with it would no longer be pinnable to a new key; pass --force only if you mean to replace it")
		}
		return fmt.Errorf("write key file: %w", err)
	}
	pub := schemas.PublicKeyHex(k.PublicKey())
	fmt.Fprintf(m.Stdout, "public_key %s\nkey_id %s\n", pub, k.KeyID())
	fmt.Fprintf(m.Stderr, "aegis: signing key written to %s\n", *out)
	fmt.Fprintf(m.Stderr, "aegis: hint: pin records from this key with: aegis verify --key %s RECORD\n", pub)
	return nil
}

// keygenApprover writes an approver key encrypted with a passphrase asked
// twice on the terminal, and prints its approvers line and key id.
func (m *Main) keygenApprover(out, name string, force bool) error {
	if name == "" {
		name = m.Getenv("USER")
	}
	name = strings.TrimSpace(name)
	if err := schemas.CheckApproverName(name); err != nil {
		return usagef("a name is letters, digits, spaces and punctuation", "keygen: --name: %v", err)
	}
	if !force {
		if _, err := os.Lstat(out); err == nil {
			return withHint(fmt.Errorf("key file %s already exists; not overwriting it", out), "approvers files that list its public key would no longer match; pass --force only if you mean to replace it")
		}
	}
	k, err := projector.GenerateApproverKey(rand.Reader)
	if err != nil {
		return err
	}
	pass, err := m.askPassphrase("passphrase for the new approver key "+out+": ", true)
	if err != nil {
		return err
	}
	if n := utf8.RuneCount(pass); n < projector.MinPassphraseChars {
		return withHint(fmt.Errorf("the passphrase has %d characters; an approver key needs at least %d", n, projector.MinPassphraseChars),
			"whoever holds the key file and guesses the passphrase can approve: choose a long one")
	}
	workFactor := projector.ApproverWorkFactor
	if m.approverWorkFactor > 0 {
		workFactor = m.approverWorkFactor
	}
	if err := projector.WriteApproverKeyFile(out, k, pass, workFactor, force); err != nil {
		if errors.Is(err, projector.ErrKeyFileExists) {
			return withHint(fmt.Errorf("key file %s already exists; not overwriting it", out), "pass --force only if you mean to replace it")
		}
		return fmt.Errorf("write approver key: %w", err)
	}
	fmt.Fprintf(m.Stdout, "%s\nkey_id %s\n", schemas.ApproverLine(k.PublicKey(), name), k.KeyID())
	fmt.Fprintf(m.Stderr, "aegis: approver key written to %s, encrypted with the passphrase\n", out)
	fmt.Fprintf(m.Stderr, "aegis: hint: add the aegis-approver line to an approvers file, give it to aegis wrap or gateway with --approvers FILE, then approve with: aegis approve --approver-key %s ID\n", out)
	return nil
}
