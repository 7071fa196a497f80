package schemas

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

func approverKey(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return ed25519.NewKeyFromSeed(s)
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func TestParseApprovers(t *testing.T) {
	alice, bob := approverKey(1), approverKey(2)
	aliceLine := ApproverLine(pubOf(alice), "Alice Example")
	good := "# approvers of the deploy host\n\n" + aliceLine + "\r\n   " + ApproverLine(pubOf(bob), "") + "  \n"
	a, err := ParseApprovers([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != 2 {
		t.Fatalf("%d approvers", a.Len())
	}
	got, ok := a.Lookup(KeyID(pubOf(alice)))
	if !ok || got.Name != "Alice Example" || got.Label() != "Alice Example (key "+KeyID(pubOf(alice))[:16]+")" {
		t.Fatalf("alice: %+v %v", got, ok)
	}
	if b, _ := a.Lookup(KeyID(pubOf(bob))); b.Name != "" {
		t.Fatalf("bob: %+v", b)
	}

	hexKey := PublicKeyHex(pubOf(alice))
	for _, c := range []struct{ name, file, want string }{
		{"an empty file lets nobody approve, so it is refused", "# nobody\n", "lists no approver"},
		{"a line of another format", "ssh-ed25519 AAAA alice\n", "line 1: want"},
		{"an uppercase key is not the printed form", "aegis-approver " + strings.ToUpper(hexKey) + " a\n", "line 1: the public key"},
		{"a short key", "aegis-approver " + hexKey[:62] + " a\n", "line 1: the public key"},
		{"a key that is not hex", "aegis-approver " + strings.Repeat("zz", 32) + "\n", "line 1: the public key"},
		{"the same key twice", aliceLine + "\n" + ApproverLine(pubOf(alice), "again") + "\n", "line 2: key"},
		{"a name that could act on a terminal", "aegis-approver " + hexKey + " al\x1b[2Jice\n", "line 1: approver name"},
		{"a bidi override in a name", "aegis-approver " + hexKey + " al\u202eice\n", "line 1: approver name"},
		{"not UTF-8", "aegis-approver " + hexKey + " \xff\n", "not UTF-8"},
		{"too large", strings.Repeat("#", MaxApproversFileBytes+1), "larger than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseApprovers([]byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// FuzzParseApprovers: the parser never panics, everything it accepts has
// at least one approver with a 64-hex key id and a printable name, and
// the lines it would write for them parse back to the same approvers.
func FuzzParseApprovers(f *testing.F) {
	f.Add([]byte(ApproverLine(pubOf(approverKey(1)), "alice") + "\n# c\n\n" + ApproverLine(pubOf(approverKey(2)), "b o b")))
	f.Add([]byte("aegis-approver  " + PublicKeyHex(pubOf(approverKey(3))) + "\t\tname\r\n"))
	f.Add([]byte("aegis-approver"))
	f.Add([]byte("aegis-approver \n"))
	f.Add([]byte("\t# x\naegis-approver " + strings.Repeat("0", 64)))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseApprovers(data)
		if err != nil {
			if a != nil {
				t.Fatal("approvers with an error")
			}
			return
		}
		if a.Len() == 0 {
			t.Fatal("accepted a file with no approver")
		}
		var lines []string
		for _, ap := range a.List() {
			if len(ap.KeyID) != 64 || ap.KeyID != KeyID(ap.PublicKey) {
				t.Fatalf("key id %q", ap.KeyID)
			}
			if err := CheckApproverName(ap.Name); err != nil || strings.TrimSpace(ap.Name) != ap.Name {
				t.Fatalf("name %q: %v", ap.Name, err)
			}
			lines = append(lines, ApproverLine(ap.PublicKey, ap.Name))
		}
		b, err := ParseApprovers([]byte(strings.Join(lines, "\n")))
		if err != nil || !a.Equal(b) {
			t.Fatalf("written back: %v", err)
		}
	})
}

func TestApprovalMessageIsDomainSeparated(t *testing.T) {
	c := ApprovalClaim{ApprovalID: "apr-gate-add-1", Session: "01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM", Target: "add", ArgsDigest: strings.Repeat("ab", 32)}
	m, err := c.Message()
	if err != nil {
		t.Fatal(err)
	}
	want := ApprovalDomain + "\n" + `{"approval_id":"apr-gate-add-1","args_digest":"` + strings.Repeat("ab", 32) + `","session":"01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM","target":"add"}`
	if string(m) != want {
		t.Fatalf("message\n got %s\nwant %s", m, want)
	}
	// A target with a newline cannot pass for another field.
	c2 := c
	c2.Target = "add\"}\n{\"x"
	m2, _ := c2.Message()
	if strings.Count(string(m2), "\n") != 1 {
		t.Fatalf("message has a raw newline in a value: %q", m2)
	}
}

// TestApproverSignatureCheck: each way of reusing or forging an approver
// signature is refused with a reason that says what was wrong.
func TestApproverSignatureCheck(t *testing.T) {
	alice, mallory := approverKey(1), approverKey(9)
	approvers, err := ParseApprovers([]byte(ApproverLine(pubOf(alice), "alice")))
	if err != nil {
		t.Fatal(err)
	}
	want := ApprovalClaim{ApprovalID: "apr-gate-add-2", Session: "01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM", Target: "add", ArgsDigest: strings.Repeat("ab", 32)}
	sign := func(k ed25519.PrivateKey, edit func(*ApprovalClaim)) *ApproverSignature {
		c := want
		if edit != nil {
			edit(&c)
		}
		s, err := SignApproval(k, c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := sign(alice, nil)
	if ap, err := approvers.Check(want, good); err != nil || ap.Name != "alice" {
		t.Fatalf("good signature: %v %+v", err, ap)
	}
	escalation := ApprovalClaim{ApprovalID: "esc-1", Session: want.Session, Target: "aegis.set_profile developer -> deploy"}
	if s, _ := SignApproval(alice, escalation); s == nil {
		t.Fatal("no escalation signature")
	} else if _, err := approvers.Check(escalation, s); err != nil {
		t.Fatalf("escalation signature: %v", err)
	}

	for _, c := range []struct {
		name string
		sig  *ApproverSignature
		want string
	}{
		{"the agent's own approval carries no signature", nil, "carries no approver signature"},
		{"an empty signature", &ApproverSignature{}, "carries no approver signature"},
		{"a key not in the approvers file", sign(mallory, nil), "not in the approvers file"},
		{"a signature for another approval id", sign(alice, func(c *ApprovalClaim) { c.ApprovalID = "apr-gate-add-1" }), `for approval "apr-gate-add-1", not "apr-gate-add-2"`},
		{"a signature for other arguments", sign(alice, func(c *ApprovalClaim) { c.ArgsDigest = strings.Repeat("cd", 32) }), "for other arguments"},
		{"a signature for another session", sign(alice, func(c *ApprovalClaim) { c.Session = "01KAQ3T5PS0C6ZJ5X1JQZ4Q1RN" }), "for session"},
		{"a signature for another tool", sign(alice, func(c *ApprovalClaim) { c.Target = "delete" }), `for "delete", not "add"`},
		{"a claim edited after signing", func() *ApproverSignature {
			s := sign(alice, func(c *ApprovalClaim) { c.ApprovalID = "apr-gate-add-1" })
			s.ApprovalID = want.ApprovalID
			return s
		}(), "does not verify"},
		{"mallory's signature under alice's key id", func() *ApproverSignature {
			s := sign(mallory, nil)
			s.KeyID = good.KeyID
			return s
		}(), "does not verify"},
		{"a truncated signature", func() *ApproverSignature {
			s := *good
			s.Signature = base64.StdEncoding.EncodeToString([]byte("short"))
			return &s
		}(), "not 64 bytes"},
		{"a signature that is not base64", func() *ApproverSignature { s := *good; s.Signature = "!!"; return &s }(), "not 64 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := approvers.Check(want, c.sig)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestDecisionLineNamesTheApprover: the key id is a member of the signed
// line when set, and absent (the line as before) when not.
func TestDecisionLineNamesTheApprover(t *testing.T) {
	d := Decision{ApprovalID: "apr-1", Verdict: Approved(ApprovalScope{ToolID: "add"})}
	l, err := d.Line()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Canonical()
	if strings.Contains(string(b), "approver_key_id") {
		t.Fatalf("unsigned approval names an approver: %s", b)
	}
	d.ApproverKeyID = strings.Repeat("ab", 32)
	l, _ = d.Line()
	b, _ = l.Canonical()
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["approver_key_id"] != d.ApproverKeyID {
		t.Fatalf("line: %s", b)
	}
}
