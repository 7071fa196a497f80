package verifier

import (
	"crypto/ed25519"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
)

// TestSmallOrderKeysRefused lists encodings of points of small order (from
// libsodium's blocklist, with the sign bit both ways): with such a public key
// one signature verifies for many messages.
func TestSmallOrderKeysRefused(t *testing.T) {
	for _, h := range []string{
		"0000000000000000000000000000000000000000000000000000000000000000", // order 4
		"0100000000000000000000000000000000000000000000000000000000000000", // identity
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 2
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", // order 8
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", // order 8
	} {
		b, _ := hex.DecodeString(h)
		if validPublicKey(b) {
			t.Errorf("validPublicKey(%s) = true, want false", h)
		}
	}
}

// TestNonCanonicalKeysRefused: y >= p is a second encoding of a point.
func TestNonCanonicalKeysRefused(t *testing.T) {
	for _, h := range []string{
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p+1
		"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	} {
		b, _ := hex.DecodeString(h)
		if validPublicKey(b) {
			t.Errorf("validPublicKey(%s) = true, want false", h)
		}
	}
	// y = 2 is not on the curve.
	if validPublicKey(append([]byte{2}, make([]byte, 31)...)) {
		t.Error("validPublicKey(y=2) = true, want false")
	}
}

func TestRealKeysAccepted(t *testing.T) {
	for _, k := range []ed25519.PrivateKey{devKey(), otherKey()} {
		if !validPublicKey(pubOf(k)) {
			t.Errorf("validPublicKey(%x) = false", pubOf(k))
		}
	}
}

// TestMalleatedSignatureRefused: S + L is the same signature to a lax
// verifier.
func TestMalleatedSignatureRefused(t *testing.T) {
	k := devKey()
	msg := []byte("line")
	sig := ed25519.Sign(k, msg)
	if !verifyStrict(pubOf(k), msg, sig) {
		t.Fatal("honest signature refused")
	}
	l, _ := new(big.Int).SetString("1000000000000000000000000000000014def9dea2f79cd65812631a5cf5d3ed", 16)
	s := make([]byte, 32)
	for i := range 32 {
		s[31-i] = sig[32+i]
	}
	sum := new(big.Int).Add(new(big.Int).SetBytes(s), l).Bytes()
	mal := append([]byte(nil), sig...)
	for i := range 32 {
		mal[32+i] = 0
		if j := len(sum) - 1 - i; j >= 0 {
			mal[32+i] = sum[j]
		}
	}
	if verifyStrict(pubOf(k), msg, mal) {
		t.Fatal("S+L signature accepted")
	}
}

// TestSmallOrderRRefused: a signature whose R is a small-order point.
func TestSmallOrderRRefused(t *testing.T) {
	sig := make([]byte, 64)
	sig[0] = 1 // R = identity, S = 0
	if verifyStrict(pubOf(devKey()), []byte("x"), sig) {
		t.Fatal("identity R accepted")
	}
	if validPublicKey([]byte(strings.Repeat("\x00", 31))) {
		t.Fatal("short key accepted")
	}
}

// TestSmallOrderTableMatchesCurve checks the byte table used per signature
// against the curve arithmetic, with both sign bits.
func TestSmallOrderTableMatchesCurve(t *testing.T) {
	c := newEdwards()
	for _, y := range smallOrderY() {
		for _, sign := range []byte{0, 0x80} {
			enc := y
			enc[31] |= sign
			x, yy, ok := c.decode(enc[:])
			if !ok {
				// Non-canonical aliases and x = 0 with the sign bit set
				// do not decode; they still must be refused.
				if !hasSmallOrderEncoding(enc[:]) {
					t.Errorf("%x not refused", enc)
				}
				continue
			}
			if !c.smallOrder(x, yy) {
				t.Errorf("%x is in the table but not of small order", enc)
			}
		}
	}
	// And a real key is not in it.
	if hasSmallOrderEncoding(pubOf(devKey())) {
		t.Error("dev key is in the small-order table")
	}
}
