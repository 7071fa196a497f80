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
	if !verifyStrict(nil, pubOf(k), msg, sig) {
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
	if verifyStrict(nil, pubOf(k), msg, mal) {
		t.Fatal("S+L signature accepted")
	}
}

// TestSmallOrderRRefused: a signature whose R is a small-order point.
func TestSmallOrderRRefused(t *testing.T) {
	sig := make([]byte, 64)
	sig[0] = 1 // R = identity, S = 0
	if verifyStrict(nil, pubOf(devKey()), []byte("x"), sig) {
		t.Fatal("identity R accepted")
	}
	if validPublicKey([]byte(strings.Repeat("\x00", 31))) {
		t.Fatal("short key accepted")
	}
}

// TestSmallOrderTableMatchesCurve checks the byte table used per signature
// against curve arithmetic of its own (math/big, independent of the
// library the verifier uses), with both sign bits.
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

// The test's own curve arithmetic, with math/big: slow, and independent of
// filippo.io/edwards25519, so that the table is checked against more than
// the code it stands in for.
type edwards struct {
	p, d, sqrtM1 *big.Int
}

func newEdwards() *edwards {
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	d := new(big.Int).ModInverse(big.NewInt(121666), p) // d = -121665 / 121666 mod p
	d.Mul(d, big.NewInt(-121665))
	d.Mod(d, p)
	e := new(big.Int).Sub(p, big.NewInt(1)) // sqrt(-1) = 2^((p-1)/4) mod p
	e.Rsh(e, 2)
	return &edwards{p: p, d: d, sqrtM1: new(big.Int).Exp(big.NewInt(2), e, p)}
}

// decode returns the affine point of a canonical 32-byte encoding.
func (c *edwards) decode(enc []byte) (x, y *big.Int, ok bool) {
	le := make([]byte, 32)
	for i := range 32 {
		le[31-i] = enc[i]
	}
	sign := le[0] >> 7
	le[0] &= 0x7f
	y = new(big.Int).SetBytes(le)
	p := c.p
	if y.Cmp(p) >= 0 {
		return nil, nil, false
	}
	y2 := new(big.Int).Mod(new(big.Int).Mul(y, y), p)
	u := new(big.Int).Mod(new(big.Int).Sub(y2, big.NewInt(1)), p)
	v := new(big.Int).Mod(new(big.Int).Add(new(big.Int).Mul(c.d, y2), big.NewInt(1)), p)
	vInv := new(big.Int).ModInverse(v, p)
	if vInv == nil {
		return nil, nil, false
	}
	x2 := new(big.Int).Mod(new(big.Int).Mul(u, vInv), p)
	e := new(big.Int).Rsh(new(big.Int).Add(p, big.NewInt(3)), 3)
	x = new(big.Int).Exp(x2, e, p)
	if check := new(big.Int).Mod(new(big.Int).Mul(x, x), p); check.Cmp(x2) != 0 {
		x.Mod(x.Mul(x, c.sqrtM1), p)
		if check.Mod(check.Mul(x, x), p); check.Cmp(x2) != 0 {
			return nil, nil, false
		}
	}
	if x.Sign() == 0 && sign == 1 {
		return nil, nil, false
	}
	if uint8(x.Bit(0)) != sign {
		x.Sub(p, x)
	}
	return x, y, true
}

// add is the complete twisted Edwards addition law (a = -1).
func (c *edwards) add(x1, y1, x2, y2 *big.Int) (*big.Int, *big.Int) {
	p := c.p
	x1y2, y1x2 := new(big.Int).Mul(x1, y2), new(big.Int).Mul(y1, x2)
	y1y2, x1x2 := new(big.Int).Mul(y1, y2), new(big.Int).Mul(x1, x2)
	t := new(big.Int).Mod(new(big.Int).Mul(new(big.Int).Mul(c.d, x1x2), y1y2), p)
	dx := new(big.Int).ModInverse(new(big.Int).Mod(new(big.Int).Add(big.NewInt(1), t), p), p)
	dy := new(big.Int).ModInverse(new(big.Int).Mod(new(big.Int).Sub(big.NewInt(1), t), p), p)
	x3 := new(big.Int).Mod(new(big.Int).Mul(new(big.Int).Add(x1y2, y1x2), dx), p)
	y3 := new(big.Int).Mod(new(big.Int).Mul(new(big.Int).Add(y1y2, x1x2), dy), p)
	return x3, y3
}

// smallOrder reports whether [8]P is the identity (0, 1).
func (c *edwards) smallOrder(x, y *big.Int) bool {
	for range 3 {
		x, y = c.add(x, y, x, y)
	}
	return x.Sign() == 0 && y.Cmp(big.NewInt(1)) == 0
}

// TestStrictAgreesWithTheStandardLibrary: on honest signatures, on
// signatures of other messages or keys, and on every single-bit flip of a
// signature, the strict check and crypto/ed25519.Verify agree (the strict
// check refuses only what the standard library also refuses, or what it
// lists above: small-order R and keys); the key cache gives what a fresh
// parse gives.
func TestStrictAgreesWithTheStandardLibrary(t *testing.T) {
	keys := []ed25519.PrivateKey{devKey(), otherKey()}
	var cache keyCache
	for ki, k := range keys {
		pub := pubOf(k)
		for i := range 8 {
			msg := []byte(strings.Repeat("m", i*37))
			sig := ed25519.Sign(k, msg)
			if !verifyStrict(&cache, pub, msg, sig) || !verifyStrict(nil, pub, msg, sig) {
				t.Fatalf("honest signature %d of key %d refused", i, ki)
			}
			other := pubOf(keys[1-ki])
			if verifyStrict(&cache, other, msg, sig) || verifyStrict(&cache, pub, append(msg, 'x'), sig) {
				t.Fatalf("signature %d verified for another key or message", i)
			}
			if i%4 != 0 {
				continue // every bit of the shortest and a longer message's signature
			}
			for bit := range 512 {
				bad := append([]byte(nil), sig...)
				bad[bit/8] ^= 1 << (bit % 8)
				if got, std := verifyStrict(&cache, pub, msg, bad), ed25519.Verify(pub, msg, bad); got && !std {
					t.Fatalf("flipped bit %d accepted by the strict check, refused by crypto/ed25519", bit)
				} else if got {
					t.Fatalf("flipped bit %d still verifies", bit)
				}
			}
		}
	}
}
