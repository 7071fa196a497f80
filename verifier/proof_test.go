package verifier

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// proofFixture is a record's lines, their stored hashes, and signed
// checkpoints of its first 5 and of all its lines.
type proofFixture struct {
	lines     [][]byte
	r         tlog.HashReader
	old, full []byte // signed notes
}

func newProofFixture(t testing.TB) *proofFixture {
	f := &proofFixture{lines: splitLines(rotatedFiles(t)[0])}
	var all []tlog.Hash
	f.r = tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = all[x]
		}
		return out, nil
	})
	for i, l := range f.lines {
		h, err := tlog.StoredHashes(int64(i), l, f.r)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, h...)
	}
	sign := func(n int) []byte {
		return signCheckpoint(t, devKey(), schemas.Checkpoint{Origin: "aegis/x/calls.aarl", Size: int64(n), Root: tlogRoot(t, f.lines[:n]), Tail: schemas.HashHex(f.lines[n-1])})
	}
	f.old, f.full = sign(5), sign(len(f.lines))
	return f
}

func (f *proofFixture) inclusion(t testing.TB, line int) schemas.Proof {
	n := int64(len(f.lines))
	p, err := tlog.ProveRecord(n, int64(line-1), f.r)
	if err != nil {
		t.Fatal(err)
	}
	idx := int64(line - 1)
	return schemas.Proof{Kind: schemas.ProofInclusion, Checkpoint: string(f.full), TreeSize: n, Root: schemas.ProofHash(tlogRoot(t, f.lines)),
		LineNumber: int64(line), LeafIndex: &idx, Line: string(f.lines[line-1]), LeafHash: schemas.ProofHash(tlog.RecordHash(f.lines[line-1])), Path: hashStrings(p)}
}

func (f *proofFixture) consistency(t testing.TB) schemas.Proof {
	n := int64(len(f.lines))
	p, err := tlog.ProveTree(n, 5, f.r)
	if err != nil {
		t.Fatal(err)
	}
	return schemas.Proof{Kind: schemas.ProofConsistency, Checkpoint: string(f.full), TreeSize: n, Root: schemas.ProofHash(tlogRoot(t, f.lines)),
		OldCheckpoint: string(f.old), OldSize: 5, OldRoot: schemas.ProofHash(tlogRoot(t, f.lines[:5])), Path: hashStrings(p)}
}

func hashStrings(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = schemas.ProofHash(h)
	}
	return out
}

// A proof holds only for the line, sizes and roots its signed checkpoints
// give; every way of bending one is refused and named.
func TestCheckProofAttacks(t *testing.T) {
	f := newProofFixture(t)
	keys := []ed25519.PublicKey{pubOf(devKey())}
	for line := 1; line <= len(f.lines); line++ {
		if _, r := CheckProof(f.inclusion(t, line), keys); r != nil {
			t.Fatalf("line %d: %s", line, r.Message)
		}
	}
	if res, r := CheckProof(f.consistency(t), keys); r != nil || res.Old.Size != 5 {
		t.Fatalf("consistency: %v %+v", r, res)
	}
	flip := func(h string) string {
		b, _ := schemas.DecodeProofHash(h)
		b[0] ^= 1
		return schemas.ProofHash(b)
	}
	other := signCheckpoint(t, otherKey(), schemas.Checkpoint{Origin: "aegis/x/calls.aarl", Size: int64(len(f.lines)), Root: tlogRoot(t, f.lines), Tail: schemas.HashHex(f.lines[len(f.lines)-1])})
	for _, tc := range []struct {
		name string
		p    func() schemas.Proof
		want Code
	}{
		{"another line in the proven one's place", func() schemas.Proof {
			p := f.inclusion(t, 3)
			p.Line, p.LeafHash = string(f.lines[4]), schemas.ProofHash(tlog.RecordHash(f.lines[4]))
			return p
		}, BadProof},
		{"a line edited, its leaf hash kept", func() schemas.Proof {
			p := f.inclusion(t, 3)
			p.Line = strings.Replace(p.Line, `"seq"`, `"seq" `, 1)
			return p
		}, BadProof},
		{"a flipped path hash", func() schemas.Proof {
			p := f.inclusion(t, 3)
			p.Path[0] = flip(p.Path[0])
			return p
		}, BadProof},
		{"a root that is not the checkpoint's", func() schemas.Proof {
			p := f.inclusion(t, 3)
			p.Root = flip(p.Root)
			return p
		}, BadProof},
		{"a tree size that is not the checkpoint's", func() schemas.Proof {
			p := f.inclusion(t, 3)
			p.TreeSize--
			return p
		}, BadProof},
		{"a checkpoint signed by another key", func() schemas.Proof {
			p := f.inclusion(t, 3)
			p.Checkpoint = string(other)
			return p
		}, BadCheckpoint},
		{"a consistency proof with a flipped hash", func() schemas.Proof {
			p := f.consistency(t)
			p.Path[len(p.Path)-1] = flip(p.Path[len(p.Path)-1])
			return p
		}, BadProof},
		{"an old checkpoint of other lines", func() schemas.Proof {
			p := f.consistency(t)
			forged := append([][]byte{[]byte("x")}, f.lines[1:5]...)
			p.OldCheckpoint = string(signCheckpoint(t, devKey(), schemas.Checkpoint{Origin: "aegis/x/calls.aarl", Size: 5, Root: tlogRoot(t, forged), Tail: schemas.HashHex(f.lines[4])}))
			p.OldRoot = schemas.ProofHash(tlogRoot(t, forged))
			return p
		}, BadProof},
		{"an old checkpoint of another record", func() schemas.Proof {
			p := f.consistency(t)
			p.OldCheckpoint = string(signCheckpoint(t, devKey(), schemas.Checkpoint{Origin: "aegis/x/other.aarl", Size: 5, Root: tlogRoot(t, f.lines[:5]), Tail: schemas.HashHex(f.lines[4])}))
			return p
		}, BadProof},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, r := CheckProof(tc.p(), keys); r == nil || r.Code != tc.want {
				t.Fatalf("reason %+v, want %s", r, tc.want)
			}
		})
	}
}

// FuzzCheckProof: no document makes the parser or the checker panic, and
// one they accept proves a line of the record, or its first lines, under
// the key that signed its checkpoints.
func FuzzCheckProof(f *testing.F) {
	fx := newProofFixture(f)
	for _, p := range []schemas.Proof{fx.inclusion(f, 1), fx.inclusion(f, 7), fx.consistency(f)} {
		b, _ := json.Marshal(p)
		f.Add(b)
	}
	f.Add([]byte(`{"proof":"rfc6962-inclusion","leaf_index":0}`))
	keys := []ed25519.PublicKey{pubOf(devKey())}
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := schemas.ParseProof(bytes.NewReader(doc))
		if err != nil {
			return
		}
		res, r := CheckProof(p, keys)
		if r != nil {
			if r.Code != BadProof && r.Code != BadCheckpoint {
				t.Fatalf("reason %+v", r)
			}
			return
		}
		if res.Checkpoint.Size != p.TreeSize || res.Checkpoint.Root != tlogRoot(t, fx.lines[:p.TreeSize]) {
			t.Fatalf("accepted a proof in a tree that was not signed: %+v", res.Checkpoint)
		}
		if p.Kind == schemas.ProofInclusion && p.Line != string(fx.lines[*p.LeafIndex]) {
			t.Fatalf("accepted line %d as %q", p.LineNumber, p.Line)
		}
	})
}
