package verifier

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha512"
	"hash"

	"filippo.io/edwards25519"
)

// Strict Ed25519, as upstream's verify_strict, on filippo.io/edwards25519
// (the arithmetic Go's own crypto/ed25519 runs on):
//
//   - A public key is decoded and checked once (parseKey): a canonical
//     encoding (its y below p, no x = 0 with the sign bit set) of a curve
//     point that is not of small order. A small-order key lets one
//     signature verify for several messages.
//   - Per signature (strictKey.verify): S canonical (below L), R not one of
//     the small-order encodings (a byte comparison), and [S]B - [k]A
//     encoding to exactly R's bytes, k = SHA-512(R || A || M) mod L. That is
//     crypto/ed25519.Verify's equation; comparing encodings also refuses a
//     non-canonical R.

// strictKey is a public key that passed parseKey, with -A ready for the
// verification equation.
type strictKey struct {
	enc  [32]byte
	negA *edwards25519.Point
}

// parseKey decodes pub and checks it as the comment above says.
func parseKey(pub []byte) (*strictKey, bool) {
	if len(pub) != ed25519.PublicKeySize || hasSmallOrderEncoding(pub) {
		return nil, false
	}
	a, err := new(edwards25519.Point).SetBytes(pub)
	if err != nil || !bytes.Equal(a.Bytes(), pub) {
		// Not on the curve, or a non-canonical encoding of a point.
		return nil, false
	}
	if smallOrder(a) {
		return nil, false
	}
	k := &strictKey{negA: new(edwards25519.Point).Negate(a)}
	copy(k.enc[:], pub)
	return k, true
}

// smallOrder reports whether [8]P is the identity.
func smallOrder(p *edwards25519.Point) bool {
	return new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) == 1
}

// verify reports whether sig is k's strict signature of msg.
func (k *strictKey) verify(msg, sig []byte) bool { return k.verifyWith(sha512.New(), msg, sig) }

// verifyWith is verify with h, a SHA-512 to reset and reuse.
func (k *strictKey) verifyWith(h hash.Hash, msg, sig []byte) bool {
	if len(sig) != ed25519.SignatureSize || hasSmallOrderEncoding(sig[:32]) {
		return false
	}
	s, err := edwards25519.NewScalar().SetCanonicalBytes(sig[32:])
	if err != nil {
		return false
	}
	h.Reset()
	h.Write(sig[:32])
	h.Write(k.enc[:])
	h.Write(msg)
	var digest [64]byte
	kk, err := edwards25519.NewScalar().SetUniformBytes(h.Sum(digest[:0]))
	if err != nil {
		return false
	}
	r := new(edwards25519.Point).VarTimeDoubleScalarBaseMult(kk, k.negA, s)
	return bytes.Equal(r.Bytes(), sig[:32])
}

// validPublicKey reports whether pub passes parseKey.
func validPublicKey(pub []byte) bool {
	_, ok := parseKey(pub)
	return ok
}

// keyCache holds the last key parsed: the lines of a session share their
// key, so a walk over a record parses each session's key once. Its zero
// value is ready; it is not safe for concurrent use (each worker has one).
type keyCache struct {
	enc [32]byte
	key *strictKey
	ok  bool
	set bool
	h   hash.Hash // SHA-512, reused by every check through the cache
}

// get returns pub parsed, from the cache when it is the last key asked for.
func (c *keyCache) get(pub []byte) (*strictKey, bool) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, false
	}
	if c.set && bytes.Equal(c.enc[:], pub) {
		return c.key, c.ok
	}
	c.key, c.ok = parseKey(pub)
	copy(c.enc[:], pub)
	c.set = true
	return c.key, c.ok
}

// verifyStrict verifies an Ed25519 signature the way verify_strict does,
// parsing pub through cache (nil: parsed for this call alone). A key that
// fails parseKey verifies nothing.
func verifyStrict(cache *keyCache, pub ed25519.PublicKey, msg, sig []byte) bool {
	if cache == nil {
		k, ok := parseKey(pub)
		return ok && k.verify(msg, sig)
	}
	k, ok := cache.get(pub)
	if !ok {
		return false
	}
	if cache.h == nil {
		cache.h = sha512.New()
	}
	return k.verifyWith(cache.h, msg, sig)
}

// smallOrderY lists the y coordinates, as little-endian encodings with the
// sign bit clear, of the eight points of small order: 0 (order 4), 1 (the
// identity), p-1 (order 2) and the two y values of the order-8 points. The
// encodings y+p of 0 and 1 (p and p+1, both < 2^255) are the non-canonical
// aliases. A test checks every entry against the curve arithmetic.
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
