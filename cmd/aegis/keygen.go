package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const keygenUsage = `Usage:
  aegis keygen --out PATH [--force]

Generates an Ed25519 signing key for audit records and writes its 32-byte
seed to PATH as one line of 64 lowercase hex characters, mode 0600. An
existing file is kept unless --force is given.

stdout is exactly two lines:
  public_key <64 hex>   pin records with: aegis verify --key <public_key> RECORD
  key_id <64 hex>       SHA-256 of the public key, as records carry it

Example:
  $ aegis keygen --out ~/.config/aegis/signing.key
`

func (m *Main) runKeygen(_ context.Context, args []string) error {
	fs := m.newFlagSet("keygen")
	out := fs.String("out", "", "where to write the key")
	force := fs.Bool("force", false, "overwrite an existing key file")
	if err := m.parseFlags(fs, keygenUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'aegis help keygen'", "keygen: unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return usagef("aegis keygen --out PATH", "keygen: --out is required")
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
