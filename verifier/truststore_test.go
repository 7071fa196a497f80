package verifier

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTrustStore(t *testing.T) {
	in := "# ops keys\n\n" + devPubHex + "\n  # indented comment\n \t\n" + devPubHex + "\r\n"
	ts, err := ParseTrustStore(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseTrustStore: %v", err)
	}
	if got := len(ts.Keys); got != 2 {
		t.Fatalf("len(Keys) = %d, want 2 (duplicates kept)", got)
	}
	ts, err = ParseTrustStore(strings.NewReader(devPubHex))
	if err != nil || len(ts.Keys) != 1 {
		t.Fatalf("ParseTrustStore(no final newline) = %v, %v", ts, err)
	}
	ts, err = ParseTrustStore(strings.NewReader(""))
	if err != nil || ts == nil || len(ts.Keys) != 0 {
		t.Fatalf("ParseTrustStore(empty) = %v, %v; want an empty store that still pins", ts, err)
	}
}

// TestTrustStoreRefusesMalformedLines: a line that is almost a key must not be
// skipped, or a typo would silently drop a trusted key and a note could hide a
// different one.
func TestTrustStoreRefusesMalformedLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		line     int
	}{
		{"note after key", devPubHex + " # laptop\n", 1},
		{"uppercase", "\n" + strings.ToUpper(devPubHex) + "\n", 2},
		{"key_id length but not hex", strings.Repeat("z", 64), 1},
		{"short", devPubHex[:63], 1},
		{"leading blank", " " + devPubHex, 1},
		{"base64", "PeU3oG4Esv/h+wVY6hbTwPBC7Zn345JpiqUSD1aNTiw=", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrustStore(strings.NewReader(tc.in))
			var te *TrustStoreError
			if !errors.As(err, &te) {
				t.Fatalf("ParseTrustStore(%q) = %v, want *TrustStoreError", tc.in, err)
			}
			if te.Line != tc.line {
				t.Fatalf("error line = %d, want %d", te.Line, tc.line)
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("eio") }

func TestTrustStoreReadError(t *testing.T) {
	_, err := ParseTrustStore(errReader{})
	var te *TrustStoreError
	if err == nil || errors.As(err, &te) {
		t.Fatalf("ParseTrustStore(failing reader) = %v, want a read error", err)
	}
}
