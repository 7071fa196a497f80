package schemas

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The anchor log. Each state directory keeps one append-only RFC 6962 log
// whose origin never changes, "aegis/anchor/<key_id>" for the key that
// signs it, and whose leaves are the record checkpoints as they are made
// and the checkpoints a rotation seals segments with: a leaf is the text
// of that signed note (origin, size, root and aegis-tail lines), so its
// hash is SHA-256(0x00 ‖ text). A checkpoint of the anchor log is a C2SP
// tlog-checkpoint with no extension line:
//
//	aegis/anchor/<key_id>
//	<size, decimal>
//	<root, base64>
//
// in a C2SP signed note whose key name is the origin itself (a witness
// is configured with the log's verifier key, whose name is the origin).
// Witnesses cosign it (C2SP tlog-cosignature, Ed25519 "cosignature/v1"),
// and a verifier accepts it when a quorum of a witness policy did.

// AnchorOriginPrefix starts the origin of every anchor log.
const AnchorOriginPrefix = "aegis/anchor/"

// AnchorOrigin returns the origin of the anchor log signed by keyID.
func AnchorOrigin(keyID string) string { return AnchorOriginPrefix + keyID }

// AnchorCheckpoint is the body of a checkpoint of an anchor log.
type AnchorCheckpoint struct {
	Origin string
	Size   int64
	Root   [32]byte
}

// Body returns the note text of c.
func (c AnchorCheckpoint) Body() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// KeyID returns the key_id the origin names, "" when it is not an anchor
// origin.
func (c AnchorCheckpoint) KeyID() string {
	id, ok := strings.CutPrefix(c.Origin, AnchorOriginPrefix)
	if !ok || !IsDigest(id) {
		return ""
	}
	return id
}

// ParseAnchorCheckpoint parses an anchor checkpoint body strictly: an
// anchor origin, a size and a root, each line ending in '\n', nothing
// else. Errors wrap [ErrCheckpoint].
func ParseAnchorCheckpoint(body []byte) (AnchorCheckpoint, error) {
	fail := func(format string, args ...any) (AnchorCheckpoint, error) {
		return AnchorCheckpoint{}, fmt.Errorf("%w: anchor checkpoint: "+format, append([]any{ErrCheckpoint}, args...)...)
	}
	if len(body) > MaxCheckpointBody || len(body) == 0 || body[len(body)-1] != '\n' {
		return fail("not a body of at most %d bytes ending in a newline", MaxCheckpointBody)
	}
	lines := strings.Split(string(body[:len(body)-1]), "\n")
	if len(lines) != 3 {
		return fail("%d lines, want origin, size and root", len(lines))
	}
	c := AnchorCheckpoint{Origin: lines[0]}
	if c.KeyID() == "" {
		return fail("origin %q is not %q and a key_id", c.Origin, AnchorOriginPrefix)
	}
	size, ok := parseSize(lines[1])
	if !ok {
		return fail("size %q is not a decimal count", lines[1])
	}
	c.Size = size
	root, err := DecodeProofHash(lines[2])
	if err != nil {
		return fail("root: %v", err)
	}
	c.Root = root
	return c, nil
}

// Cosignatures (C2SP tlog-cosignature, the Ed25519 type).

// cosignatureAlg is the signature type byte of an Ed25519 cosignature.
const cosignatureAlg = 0x04

// CosignatureVerifier checks a witness's Ed25519 cosignatures: it is a
// golang.org/x/mod/sumdb/note Verifier (Name, KeyHash, Verify), so
// note.Open checks cosignature lines beside ordinary ones.
type CosignatureVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

// NewCosignatureVerifier returns the verifier of the witness called name
// with the Ed25519 public key pub.
func NewCosignatureVerifier(name string, pub ed25519.PublicKey) (*CosignatureVerifier, error) {
	if !validKeyName(name) || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("witness key %q: not a key name and an Ed25519 public key", name)
	}
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write([]byte{cosignatureAlg})
	h.Write(pub)
	return &CosignatureVerifier{name: name, hash: binary.BigEndian.Uint32(h.Sum(nil)), pub: pub}, nil
}

// Name is the witness's key name.
func (v *CosignatureVerifier) Name() string { return v.name }

// KeyHash is SHA-256(name ‖ "\n" ‖ 0x04 ‖ key)[:4].
func (v *CosignatureVerifier) KeyHash() uint32 { return v.hash }

// PublicKey is the witness's key.
func (v *CosignatureVerifier) PublicKey() ed25519.PublicKey { return v.pub }

// Verify checks a timestamped_signature (8-byte big-endian time, then
// 64 bytes of Ed25519) over "cosignature/v1\ntime <t>\n" and the note
// text msg.
func (v *CosignatureVerifier) Verify(msg, sig []byte) bool {
	t, ok := CosignatureTime(sig)
	if !ok {
		return false
	}
	m := fmt.Appendf(nil, "cosignature/v1\ntime %d\n", t)
	m = append(m, msg...)
	return ed25519.Verify(v.pub, m, sig[8:])
}

// CosignatureTime returns the time (POSIX seconds) of a cosignature's
// signature bytes.
func CosignatureTime(sig []byte) (int64, bool) {
	if len(sig) != 8+ed25519.SignatureSize {
		return 0, false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > 1<<63-1 {
		return 0, false
	}
	return int64(t), true
}

// ParseCosignerKey parses a witness's public key: a C2SP vkey of an
// Ed25519 cosigner (name+hash+base64(0x04 ‖ key)), or, as a Sigsum policy
// writes it, 64 hex of the key, named name.
func ParseCosignerKey(name, key string) (*CosignatureVerifier, error) {
	if b, err := hex.DecodeString(key); err == nil && len(b) == ed25519.PublicKeySize {
		return NewCosignatureVerifier(name, b)
	}
	kname, rest, ok1 := strings.Cut(key, "+")
	hashHex, b64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("witness key %q is neither a vkey nor 64 hex", key)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != cosignatureAlg {
		return nil, fmt.Errorf("witness key %q is not an Ed25519 cosignature key (type 0x04)", key)
	}
	v, err := NewCosignatureVerifier(kname, raw[1:])
	if err != nil {
		return nil, err
	}
	if h, err := strconv.ParseUint(hashHex, 16, 32); err != nil || len(hashHex) != 8 || uint32(h) != v.hash {
		return nil, fmt.Errorf("witness key %q: its key hash %s is not the one its name and key give (%08x)", key, hashHex, v.hash)
	}
	return v, nil
}

// validKeyName: non-empty, no whitespace, no '+' (C2SP signed-note).
func validKeyName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "+ \t\n\r") && strings.IndexFunc(s, func(r rune) bool { return r < 0x21 || r == 0x7f }) < 0
}

// Witness policies: the Sigsum policy format, as the witness network uses
// it.
//
//	witness NAME KEY [URL]       KEY: a vkey, or 64 hex (Sigsum)
//	group NAME THRESHOLD MEMBER… THRESHOLD: all, any, or a number k
//	quorum NAME                  a witness or a group
//
// '#' starts a comment; `log` lines (a Sigsum log) are read and ignored.
// Names are unique across witnesses and groups, a group's members are
// defined before it, and there is exactly one quorum line: the policy is
// satisfied by a set of witnesses when the quorum is.

// ErrWitnessPolicy is wrapped by every error of [ParseWitnessPolicy].
var ErrWitnessPolicy = errors.New("witness policy")

// PolicyWitness is one witness of a policy.
type PolicyWitness struct {
	Name     string
	URL      string
	Verifier *CosignatureVerifier
}

type policyGroup struct {
	threshold int
	members   []string
}

// WitnessPolicy is a parsed witness policy.
type WitnessPolicy struct {
	Witnesses []PolicyWitness
	groups    map[string]policyGroup
	quorum    string
}

// ParseWitnessPolicy parses a witness policy file.
func ParseWitnessPolicy(b []byte) (*WitnessPolicy, error) {
	p := &WitnessPolicy{groups: map[string]policyGroup{}}
	defined := map[string]bool{}
	for i, raw := range strings.Split(string(b), "\n") {
		line, _, _ := strings.Cut(raw, "#")
		f := strings.Fields(line)
		fail := func(format string, args ...any) (*WitnessPolicy, error) {
			return nil, fmt.Errorf("%w: line %d: "+format, append([]any{ErrWitnessPolicy, i + 1}, args...)...)
		}
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "log":
		case "witness":
			if len(f) < 3 || len(f) > 4 {
				return fail("want: witness NAME KEY [URL]")
			}
			if defined[f[1]] {
				return fail("%q is defined twice", f[1])
			}
			v, err := ParseCosignerKey(f[1], f[2])
			if err != nil {
				return fail("%v", err)
			}
			w := PolicyWitness{Name: f[1], Verifier: v}
			if len(f) == 4 {
				if !strings.HasPrefix(f[3], "http://") && !strings.HasPrefix(f[3], "https://") {
					return fail("URL %q is not http(s)", f[3])
				}
				w.URL = f[3]
			}
			for _, o := range p.Witnesses {
				if bytes.Equal(o.Verifier.pub, v.pub) {
					return fail("witness %q has the key of witness %q", f[1], o.Name)
				}
			}
			p.Witnesses = append(p.Witnesses, w)
			defined[f[1]] = true
		case "group":
			if len(f) < 4 {
				return fail("want: group NAME THRESHOLD MEMBER…")
			}
			if defined[f[1]] {
				return fail("%q is defined twice", f[1])
			}
			g := policyGroup{members: f[3:]}
			seen := map[string]bool{}
			for _, m := range g.members {
				if !defined[m] {
					return fail("member %q is not a witness or group defined above", m)
				}
				if seen[m] {
					return fail("member %q is named twice", m)
				}
				seen[m] = true
			}
			switch f[2] {
			case "all":
				g.threshold = len(g.members)
			case "any":
				g.threshold = 1
			default:
				k, err := strconv.Atoi(f[2])
				if err != nil || k < 1 || k > len(g.members) {
					return fail("threshold %q is not all, any or 1 to %d", f[2], len(g.members))
				}
				g.threshold = k
			}
			p.groups[f[1]] = g
			defined[f[1]] = true
		case "quorum":
			if len(f) != 2 {
				return fail("want: quorum NAME")
			}
			if p.quorum != "" {
				return fail("a second quorum line")
			}
			if !defined[f[1]] {
				return fail("quorum %q is not a witness or group defined above", f[1])
			}
			p.quorum = f[1]
		default:
			return fail("unknown line %q", f[0])
		}
	}
	if p.quorum == "" {
		return nil, fmt.Errorf("%w: no quorum line", ErrWitnessPolicy)
	}
	return p, nil
}

// Satisfied reports whether the witnesses named in cosigned (policy
// names) meet the quorum.
func (p *WitnessPolicy) Satisfied(cosigned map[string]bool) bool { return p.meets(p.quorum, cosigned) }

func (p *WitnessPolicy) meets(name string, cosigned map[string]bool) bool {
	g, ok := p.groups[name]
	if !ok {
		return cosigned[name]
	}
	n := 0
	for _, m := range g.members {
		if p.meets(m, cosigned) {
			n++
		}
	}
	return n >= g.threshold
}

// Quorum describes the quorum, for messages: "2 of w1, w2, w3".
func (p *WitnessPolicy) Quorum() string {
	g, ok := p.groups[p.quorum]
	if !ok {
		return p.quorum
	}
	return fmt.Sprintf("%s: %d of %s", p.quorum, g.threshold, strings.Join(g.members, ", "))
}
