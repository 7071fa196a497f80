package schemas

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

func testCosigner(t *testing.T, seed byte, name string) (ed25519.PrivateKey, string) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(append(make([]byte, 31), seed))
	pub := priv.Public().(ed25519.PublicKey)
	h := sha256.Sum256(append([]byte(name+"\n\x04"), pub...))
	return priv, fmt.Sprintf("%s+%x+%s", name, h[:4], base64.StdEncoding.EncodeToString(append([]byte{4}, pub...)))
}

// A policy that cannot say who must cosign, or that would count one
// witness twice, is refused.
func TestWitnessPolicyRefuses(t *testing.T) {
	_, k1 := testCosigner(t, 1, "w1.example/w")
	_, k2 := testCosigner(t, 2, "w2.example/w")
	parts := strings.SplitN(k1, "+", 3)
	badHash := parts[0] + "+00000000+" + parts[2]
	for _, tc := range []struct{ name, policy, want string }{
		{"NoQuorumRequiresNothing", "witness a " + k1 + "\n", "no quorum line"},
		{"ThresholdAboveItsMembers", "witness a " + k1 + "\nwitness b " + k2 + "\ngroup g 3 a b\nquorum g\n", "threshold"},
		{"MemberNotDefined", "witness a " + k1 + "\ngroup g any a c\nquorum g\n", "not a witness or group"},
		{"OneWitnessCountedTwice", "witness a " + k1 + "\ngroup g 2 a a\nquorum g\n", "named twice"},
		{"OneKeyUnderTwoNames", "witness a " + k1 + "\nwitness b " + k1 + "\ngroup g 2 a b\nquorum g\n", "has the key of"},
		{"VkeyHashDoesNotMatch", "witness a " + badHash + "\nquorum a\n", "key hash"},
		{"UnknownLine", "witnes a " + k1 + "\nquorum a\n", "unknown line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWitnessPolicy([]byte(tc.policy))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// k of n: a quorum is met by k distinct witnesses, groups nest, and a
// 64-hex key (Sigsum) names its cosigner by the policy's name.
func TestWitnessPolicyQuorum(t *testing.T) {
	_, k1 := testCosigner(t, 1, "w1.example/w")
	_, k2 := testCosigner(t, 2, "w2.example/w")
	priv3, _ := testCosigner(t, 3, "w3")
	p, err := ParseWitnessPolicy([]byte("# comment\nlog ignored\nwitness a " + k1 + " https://a.example/\nwitness b " + k2 +
		"\nwitness w3 " + hex.EncodeToString(priv3.Public().(ed25519.PublicKey)) + "\ngroup two 2 a b w3\ngroup top all two\nquorum top\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Witnesses[0].URL != "https://a.example/" || p.Witnesses[2].Verifier.Name() != "w3" {
		t.Fatalf("witnesses %+v", p.Witnesses)
	}
	for _, tc := range []struct {
		by   []string
		want bool
	}{{nil, false}, {[]string{"a"}, false}, {[]string{"a", "w3"}, true}, {[]string{"a", "b", "w3"}, true}} {
		m := map[string]bool{}
		for _, w := range tc.by {
			m[w] = true
		}
		if got := p.Satisfied(m); got != tc.want {
			t.Errorf("cosigned by %v: satisfied %v, want %v", tc.by, got, tc.want)
		}
	}
}

// A cosignature is an Ed25519 signature over "cosignature/v1", its time
// and the checkpoint: one moved to another checkpoint or another time
// does not verify.
func TestCosignatureVerifier(t *testing.T) {
	priv, vkey := testCosigner(t, 1, "w1.example/w")
	v, err := ParseCosignerKey("alias", vkey)
	if err != nil {
		t.Fatal(err)
	}
	body := "aegis/anchor/x\n3\nAAAA\n"
	sign := func(ts uint64, text string) []byte {
		sig := binary.BigEndian.AppendUint64(nil, ts)
		return append(sig, ed25519.Sign(priv, fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", ts, text))...)
	}
	if !v.Verify([]byte(body), sign(1700000000, body)) {
		t.Fatal("a good cosignature does not verify")
	}
	for name, sig := range map[string][]byte{
		"AnotherCheckpoint": sign(1700000000, "aegis/anchor/x\n4\nAAAA\n"),
		"TimeChanged":       append(binary.BigEndian.AppendUint64(nil, 1700000001), sign(1700000000, body)[8:]...),
		"TimeAbove2^63":     sign(1<<63, body),
		"Short":             sign(1700000000, body)[:40],
	} {
		if v.Verify([]byte(body), sig) {
			t.Errorf("%s: verifies", name)
		}
	}
}
