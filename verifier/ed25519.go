package verifier

import (
	"crypto/ed25519"
	"math/big"
)

// Strict Ed25519, as upstream's verify_strict: crypto/ed25519.Verify already
// refuses a non-canonical S (S >= L) and, because it compares the encoding of
// the recomputed R with the signature's bytes, a non-canonical R. It does not
// refuse small-order points, which let one signature verify for several
// messages or keys; this file adds that check, with math/big because the
// standard library exposes no point arithmetic. The arithmetic runs once per
// public key; per signature a byte comparison against the few small-order
// encodings is enough.

// edwards holds the curve constants; it is built per verification and never
// shared, so the package keeps no mutable state.
type edwards struct {
	p, d, sqrtM1 *big.Int
}

func newEdwards() *edwards {
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	// d = -121665 / 121666 mod p
	d := new(big.Int).ModInverse(big.NewInt(121666), p)
	d.Mul(d, big.NewInt(-121665))
	d.Mod(d, p)
	// sqrt(-1) = 2^((p-1)/4) mod p
	e := new(big.Int).Sub(p, big.NewInt(1))
	e.Rsh(e, 2)
	sqrtM1 := new(big.Int).Exp(big.NewInt(2), e, p)
	return &edwards{p: p, d: d, sqrtM1: sqrtM1}
}

// decode returns the affine point of a 32-byte encoding, refusing encodings
// whose y is not reduced (y >= p), that are not on the curve, or that encode
// x = 0 with the sign bit set.
func (c *edwards) decode(enc []byte) (x, y *big.Int, ok bool) {
	if len(enc) != 32 {
		return nil, nil, false
	}
	le := make([]byte, 32)
	for i := range 32 {
		le[31-i] = enc[i]
	}
	sign := le[0] >> 7
	le[0] &= 0x7f
	y = new(big.Int).SetBytes(le)
	if y.Cmp(c.p) >= 0 {
		return nil, nil, false
	}
	p := c.p
	y2 := new(big.Int).Mul(y, y)
	y2.Mod(y2, p)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	u.Mod(u, p)
	v := new(big.Int).Mul(c.d, y2)
	v.Add(v, big.NewInt(1))
	v.Mod(v, p)
	vInv := new(big.Int).ModInverse(v, p)
	if vInv == nil {
		return nil, nil, false
	}
	x2 := new(big.Int).Mul(u, vInv)
	x2.Mod(x2, p)
	// x = x2^((p+3)/8), fixed up by sqrt(-1) when needed.
	e := new(big.Int).Add(p, big.NewInt(3))
	e.Rsh(e, 3)
	x = new(big.Int).Exp(x2, e, p)
	if check := new(big.Int).Mod(new(big.Int).Mul(x, x), p); check.Cmp(x2) != 0 {
		x.Mul(x, c.sqrtM1)
		x.Mod(x, p)
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

// add returns P+Q with the complete twisted Edwards addition law (a = -1).
func (c *edwards) add(x1, y1, x2, y2 *big.Int) (*big.Int, *big.Int) {
	p := c.p
	x1y2 := new(big.Int).Mul(x1, y2)
	y1x2 := new(big.Int).Mul(y1, x2)
	y1y2 := new(big.Int).Mul(y1, y2)
	x1x2 := new(big.Int).Mul(x1, x2)
	t := new(big.Int).Mul(c.d, x1x2)
	t.Mul(t, y1y2)
	t.Mod(t, p)
	one := big.NewInt(1)
	dx := new(big.Int).Add(one, t)
	dx.ModInverse(dx.Mod(dx, p), p)
	dy := new(big.Int).Sub(one, t)
	dy.ModInverse(dy.Mod(dy, p), p)
	x3 := new(big.Int).Add(x1y2, y1x2)
	x3.Mul(x3, dx)
	x3.Mod(x3, p)
	y3 := new(big.Int).Add(y1y2, x1x2)
	y3.Mul(y3, dy)
	y3.Mod(y3, p)
	return x3, y3
}

// smallOrder reports whether the point has order dividing 8, i.e. [8]P is the
// identity (0, 1).
func (c *edwards) smallOrder(x, y *big.Int) bool {
	for range 3 {
		x, y = c.add(x, y, x, y)
	}
	return x.Sign() == 0 && y.Cmp(big.NewInt(1)) == 0
}

// validPublicKey reports whether pub is a canonical encoding of a curve point
// that is not of small order.
func validPublicKey(pub []byte) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	if hasSmallOrderEncoding(pub) {
		return false
	}
	c := newEdwards()
	x, y, ok := c.decode(pub)
	return ok && !c.smallOrder(x, y)
}

// smallOrderY lists the y coordinates, as little-endian encodings with the
// sign bit clear, of the eight points of small order: 0 (order 4), 1 (the
// identity), p-1 (order 2) and the two y values of the order-8 points. The
// encodings y+p of 0 and 1 (p and p+1, both < 2^255) are the non-canonical
// aliases. A test checks every entry against the curve arithmetic above.
func smallOrderY() [7][32]byte {
	return [7][32]byte{
		{},
		{0x01},
		{0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		{0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
		{0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a},
		{0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		{0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
}

// hasSmallOrderEncoding reports whether enc encodes a point of small order
// (either sign, canonical or not), without curve arithmetic.
func hasSmallOrderEncoding(enc []byte) bool {
	if len(enc) != 32 {
		return false
	}
	var y [32]byte
	copy(y[:], enc)
	y[31] &= 0x7f
	for _, s := range smallOrderY() {
		if y == s {
			return true
		}
	}
	return false
}

// verifyStrict verifies an Ed25519 signature the way verify_strict does: the
// key must pass validPublicKey (checked by the caller, once per key), S must
// be canonical (crypto/ed25519 checks) and R must not be a small-order point.
// An R that is not a canonical point encoding cannot match the recomputed R,
// so crypto/ed25519 already refuses it.
func verifyStrict(pub ed25519.PublicKey, msg, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	return !hasSmallOrderEncoding(sig[:32]) && ed25519.Verify(pub, msg, sig)
}
