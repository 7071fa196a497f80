package verifier

import (
	"bufio"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aegis-dev/aegis/schemas"
)

// TrustStore is a list of trusted Ed25519 public keys. Duplicates are kept.
type TrustStore struct {
	Keys []ed25519.PublicKey
}

// TrustStoreError reports a malformed trust store line; aegis verify treats
// it as a usage error (exit 1), unlike a read error (exit 2).
type TrustStoreError struct {
	Line int
	Msg  string
}

func (e *TrustStoreError) Error() string {
	return fmt.Sprintf("trust store line %d: %s", e.Line, e.Msg)
}

// ParseTrustStore reads a trust store: one public key per line as 64
// lowercase hex characters (the key, not its key_id). Lines that are empty or
// hold only spaces and tabs are skipped, and so are lines whose first
// non-blank character is '#'. Anything else, including a note after a key or
// blanks around it, is a *[TrustStoreError] naming the line. A trailing '\r'
// is ignored. Read errors are returned wrapped as they are.
func ParseTrustStore(r io.Reader) (*TrustStore, error) {
	ts := &TrustStore{}
	br := bufio.NewReader(r)
	for no := 1; ; no++ {
		line, err := br.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read trust store: %w", err)
		}
		if line == "" && err != nil {
			return ts, nil
		}
		text := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		trimmed := strings.TrimLeft(text, " \t")
		switch {
		case trimmed == "", strings.HasPrefix(trimmed, "#"):
		default:
			pub, perr := schemas.ParsePublicKey(text)
			if perr != nil {
				return nil, &TrustStoreError{Line: no, Msg: fmt.Sprintf("expected a public key as 64 lowercase hex characters, found %s", quoteShort(text))}
			}
			ts.Keys = append(ts.Keys, pub)
		}
		if err != nil {
			return ts, nil
		}
	}
}

func quoteShort(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
