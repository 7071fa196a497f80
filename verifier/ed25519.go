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
// standard library exposes no point arithmetic. It runs once per public key
// and once per signature.

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
	c := newEdwards()
	x, y, ok := c.decode(pub)
	return ok && !c.smallOrder(x, y)
}

// verifyStrict verifies an Ed25519 signature the way verify_strict does: the
// key must pass validPublicKey (checked by the caller, once per key), S must
// be canonical and R must be a canonical, non-small-order point.
func verifyStrict(pub ed25519.PublicKey, msg, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	if !ed25519.Verify(pub, msg, sig) {
		return false
	}
	c := newEdwards()
	x, y, ok := c.decode(sig[:32])
	return ok && !c.smallOrder(x, y)
}
