package verifier

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// The tests in this file hold leafTree and the parts of tlog that the
// checkpoint code leans on to the published RFC 6962 test vectors in
// testdata/rfc6962/vectors.txt. Those vectors were copied from
// github.com/transparency-dev/merkle (testonly/constants.go and
// proof/verify_test.go), which shares its leaves, roots and proofs with
// github.com/google/certificate-transparency-go
// (merkletree/merkle_verifier_test.go); the file's header names the commits.
// Nothing in the file was computed here, so a hashing or proof bug on our
// side makes these tests fail rather than agree with itself.

// rfc6962VectorsPath is the golden file of published vectors.
var rfc6962VectorsPath = filepath.Join("testdata", "rfc6962", "vectors.txt")

// rfc6962Vectors is the parsed golden file.
type rfc6962Vectors struct {
	leaves      [][]byte
	roots       map[int64]tlog.Hash // by tree size, 0 included
	inclusion   []rfc6962Inclusion
	consistency []rfc6962Consistency
}

// rfc6962Inclusion is one published inclusion proof (audit path).
type rfc6962Inclusion struct {
	leaf int64 // 1-based as in the source; 0 means no leaf
	size int64
	path []tlog.Hash
}

// rfc6962Consistency is one published consistency proof.
type rfc6962Consistency struct {
	size1, size2 int64
	proof        []tlog.Hash
}

// parseRFC6962Vectors parses the golden file's line format, which its
// header describes.
func parseRFC6962Vectors(b []byte) (*rfc6962Vectors, error) {
	v := &rfc6962Vectors{roots: map[int64]tlog.Hash{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := v.parseLine(f); err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *rfc6962Vectors) parseLine(f []string) error {
	switch f[0] {
	case "leaf":
		if len(f) != 2 {
			return fmt.Errorf("leaf wants 1 field, has %d", len(f)-1)
		}
		if f[1] == `""` {
			v.leaves = append(v.leaves, []byte{})
			return nil
		}
		b, err := hex.DecodeString(f[1])
		if err != nil {
			return fmt.Errorf("leaf: %w", err)
		}
		v.leaves = append(v.leaves, b)
	case "root":
		if len(f) != 3 {
			return fmt.Errorf("root wants 2 fields, has %d", len(f)-1)
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("root size: %w", err)
		}
		if _, dup := v.roots[size]; dup {
			return fmt.Errorf("second root for size %d", size)
		}
		h, err := parseRFC6962Hashes(f[2:])
		if err != nil {
			return fmt.Errorf("root: %w", err)
		}
		v.roots[size] = h[0]
	case "inclusion", "consistency":
		if len(f) < 3 {
			return fmt.Errorf("%s wants at least 2 fields, has %d", f[0], len(f)-1)
		}
		a, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", f[0], err)
		}
		b, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", f[0], err)
		}
		hs, err := parseRFC6962Hashes(f[3:])
		if err != nil {
			return fmt.Errorf("%s: %w", f[0], err)
		}
		if f[0] == "inclusion" {
			v.inclusion = append(v.inclusion, rfc6962Inclusion{leaf: a, size: b, path: hs})
		} else {
			v.consistency = append(v.consistency, rfc6962Consistency{size1: a, size2: b, proof: hs})
		}
	default:
		return fmt.Errorf("unknown record %q", f[0])
	}
	return nil
}

// parseRFC6962Hashes decodes hex SHA-256 hashes, refusing any other length.
func parseRFC6962Hashes(fields []string) ([]tlog.Hash, error) {
	var hs []tlog.Hash
	for _, s := range fields {
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, err
		}
		var h tlog.Hash
		if len(b) != len(h) {
			return nil, fmt.Errorf("hash %s is %d bytes, want %d", s, len(b), len(h))
		}
		copy(h[:], b)
		hs = append(hs, h)
	}
	return hs, nil
}

func loadRFC6962Vectors(tb testing.TB) *rfc6962Vectors {
	tb.Helper()
	b, err := os.ReadFile(rfc6962VectorsPath)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := parseRFC6962Vectors(b)
	if err != nil {
		tb.Fatalf("%s: %v", rfc6962VectorsPath, err)
	}
	return v
}

// rfc6962Log is an in-memory tlog: the stored hashes of its records in
// tlog's storage order, read back through a tlog.HashReaderFunc.
type rfc6962Log struct {
	stored []tlog.Hash
	n      int64
}

func (l *rfc6962Log) reader() tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			if x < 0 || x >= int64(len(l.stored)) {
				return nil, fmt.Errorf("hash %d is not stored (have %d)", x, len(l.stored))
			}
			out[i] = l.stored[x]
		}
		return out, nil
	})
}

// add appends the next record, storing the hashes tlog asks for.
func (l *rfc6962Log) add(record []byte) error {
	if want := tlog.StoredHashIndex(0, l.n); int64(len(l.stored)) != want {
		return fmt.Errorf("record %d would be stored at %d, want %d", l.n, len(l.stored), want)
	}
	hs, err := tlog.StoredHashes(l.n, record, l.reader())
	if err != nil {
		return err
	}
	l.stored = append(l.stored, hs...)
	l.n++
	return nil
}

func newRFC6962Log(tb testing.TB, records [][]byte) *rfc6962Log {
	tb.Helper()
	l := &rfc6962Log{}
	for _, r := range records {
		if err := l.add(r); err != nil {
			tb.Fatalf("storing record %d: %v", l.n, err)
		}
	}
	return l
}

// flipRFC6962Bit returns h with bit i (counted from the first byte's low
// bit) inverted.
func flipRFC6962Bit(h tlog.Hash, i int) tlog.Hash {
	h[i/8%len(h)] ^= 1 << (i % 8)
	return h
}

// flipRFC6962ProofBit returns a copy of p with one bit inverted; bit
// counts across the whole proof and wraps around.
func flipRFC6962ProofBit(p []tlog.Hash, bit int) []tlog.Hash {
	q := append([]tlog.Hash(nil), p...)
	bit %= len(q) * 8 * len(tlog.Hash{})
	q[bit/(8*len(tlog.Hash{}))] = flipRFC6962Bit(q[bit/(8*len(tlog.Hash{}))], bit)
	return q
}

// hexRFC6962 spells hashes in hex, as the golden file does; tlog.Hash's
// own String is base64.
func hexRFC6962(hs []tlog.Hash) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = hex.EncodeToString(h[:])
	}
	return "[" + strings.Join(s, " ") + "]"
}

func equalRFC6962Hashes(a, b []tlog.Hash) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRFC6962VectorsFile keeps the golden file whole: a truncated or
// emptied file would otherwise let the other tests pass by checking nothing.
func TestRFC6962VectorsFile(t *testing.T) {
	v := loadRFC6962Vectors(t)
	want := [][]byte{
		[]byte(""),
		[]byte("\x00"),
		[]byte("\x10"),
		[]byte("\x20\x21"),
		[]byte("\x30\x31"),
		[]byte("\x40\x41\x42\x43"),
		[]byte("\x50\x51\x52\x53\x54\x55\x56\x57"),
		[]byte("\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f"),
	}
	if len(v.leaves) != len(want) {
		t.Fatalf("%d leaves, want %d", len(v.leaves), len(want))
	}
	for i := range want {
		if !bytes.Equal(v.leaves[i], want[i]) {
			t.Errorf("leaf %d is %x, want %x", i, v.leaves[i], want[i])
		}
	}
	for size := int64(0); size <= int64(len(want)); size++ {
		if _, ok := v.roots[size]; !ok {
			t.Errorf("no root for size %d", size)
		}
	}
	if len(v.roots) != len(want)+1 {
		t.Errorf("%d roots, want %d", len(v.roots), len(want)+1)
	}
	if len(v.inclusion) != 6 {
		t.Errorf("%d inclusion proofs, want the 6 published", len(v.inclusion))
	}
	if len(v.consistency) != 5 {
		t.Errorf("%d consistency proofs, want the 5 published", len(v.consistency))
	}
	for _, p := range v.inclusion {
		if p.size > int64(len(v.leaves)) || p.leaf > p.size || p.leaf < 0 {
			t.Errorf("inclusion proof of leaf %d in size %d is outside the leaves", p.leaf, p.size)
		}
	}
	for _, p := range v.consistency {
		if p.size2 > int64(len(v.leaves)) || p.size1 > p.size2 || p.size1 < 0 {
			t.Errorf("consistency proof from %d to %d is outside the leaves", p.size1, p.size2)
		}
	}
}

// TestRFC6962LeafTreeRoots checks leafTree's root after every published
// size, and the empty tree's root, against the published roots.
func TestRFC6962LeafTreeRoots(t *testing.T) {
	v := loadRFC6962Vectors(t)
	var lt leafTree
	if got, want := lt.root(), sha256.Sum256(nil); got != want {
		t.Errorf("empty leafTree root %x, want SHA-256 of nothing %x", got, want)
	}
	if got, want := lt.root(), v.roots[0]; got != want {
		t.Errorf("empty leafTree root %x, want published %x", got, want[:])
	}
	for i, leaf := range v.leaves {
		lt.add(leaf)
		size := int64(i + 1)
		if got, want := lt.root(), v.roots[size]; got != want {
			t.Errorf("leafTree root after %d leaves %x, want published %x", size, got, want[:])
		}
	}
}

// TestRFC6962TlogTreeHash checks tlog.TreeHash, over hashes stored with
// tlog.StoredHashes, against the published roots.
func TestRFC6962TlogTreeHash(t *testing.T) {
	v := loadRFC6962Vectors(t)
	l := newRFC6962Log(t, v.leaves)
	for size := int64(0); size <= int64(len(v.leaves)); size++ {
		got, err := tlog.TreeHash(size, l.reader())
		if err != nil {
			t.Errorf("TreeHash(%d): %v", size, err)
			continue
		}
		if want := v.roots[size]; got != want {
			t.Errorf("TreeHash(%d) = %x, want published %x", size, got[:], want[:])
		}
	}
}

// TestRFC6962InclusionProofs checks tlog.ProveRecord and tlog.CheckRecord
// against every published inclusion proof, and that CheckRecord turns the
// published proof down once any one thing about it is wrong.
func TestRFC6962InclusionProofs(t *testing.T) {
	v := loadRFC6962Vectors(t)
	l := newRFC6962Log(t, v.leaves)
	for _, vec := range v.inclusion {
		if vec.leaf < 1 || vec.leaf > vec.size {
			// The source's {0, 0} vector names no leaf; RFC 6962 has no
			// inclusion proof for it and tlog refuses the inputs.
			t.Logf("skipping the published inclusion vector for leaf %d of size %d: no such leaf", vec.leaf, vec.size)
			continue
		}
		index, size := vec.leaf-1, vec.size
		t.Run(fmt.Sprintf("leaf %d of %d", index, size), func(t *testing.T) {
			root := v.roots[size]
			leafHash := tlog.RecordHash(v.leaves[index])

			got, err := tlog.ProveRecord(size, index, l.reader())
			if err != nil {
				t.Fatalf("ProveRecord: %v", err)
			}
			if !equalRFC6962Hashes(got, vec.path) {
				t.Errorf("ProveRecord = %s, want published %s", hexRFC6962(got), hexRFC6962(vec.path))
			}
			if err := tlog.CheckRecord(vec.path, size, root, index, leafHash); err != nil {
				t.Fatalf("CheckRecord refused the published proof: %v", err)
			}

			type attack struct {
				name     string
				proof    []tlog.Hash
				size     int64
				root     tlog.Hash
				index    int64
				leafHash tlog.Hash
			}
			honest := attack{proof: vec.path, size: size, root: root, index: index, leafHash: leafHash}
			var attacks []attack
			add := func(name string, change func(a *attack)) {
				a := honest
				a.name = name
				change(&a)
				attacks = append(attacks, a)
			}
			for i := range vec.path {
				add(fmt.Sprintf("a flipped path hash (%d of %d)", i+1, len(vec.path)), func(a *attack) {
					a.proof = flipRFC6962ProofBit(vec.path, i*256+3)
				})
			}
			if size > 1 {
				add("another leaf's index", func(a *attack) { a.index = (index + 1) % size })
			}
			add("another leaf's hash", func(a *attack) {
				a.leafHash = tlog.RecordHash(v.leaves[(index+1)%int64(len(v.leaves))])
			})
			add("a forged leaf hash", func(a *attack) { a.leafHash = flipRFC6962Bit(leafHash, 0) })
			// A wrong size that keeps the path's shape (7 for 8, for leaf 0)
			// rebuilds the same root, so only the root, signed alongside
			// the size in a checkpoint, can tell those apart; sizes that
			// change the tree's height must fail on the path alone.
			add("a doubled tree size", func(a *attack) { a.size = size * 2 })
			add("a halved tree size", func(a *attack) { a.size = size / 2 })
			add("another tree's root", func(a *attack) { a.root = v.roots[size-1] })
			if len(vec.path) > 0 {
				add("a truncated path", func(a *attack) { a.proof = vec.path[:len(vec.path)-1] })
				add("a path missing its first hash", func(a *attack) { a.proof = vec.path[1:] })
			}
			add("an extra path hash", func(a *attack) {
				a.proof = append(append([]tlog.Hash(nil), vec.path...), root)
			})
			add("a path with a hash put in front", func(a *attack) {
				a.proof = append([]tlog.Hash{leafHash}, vec.path...)
			})
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					if err := tlog.CheckRecord(a.proof, a.size, a.root, a.index, a.leafHash); err == nil {
						t.Errorf("CheckRecord(%s, size %d, root %x, index %d, leaf %x) accepted it",
							hexRFC6962(a.proof), a.size, a.root[:], a.index, a.leafHash[:])
					}
				})
			}
		})
	}
}

// TestRFC6962ConsistencyProofs checks tlog.ProveTree and tlog.CheckTree
// against every published consistency proof, and that CheckTree turns the
// published proof down once any one thing about it is wrong.
func TestRFC6962ConsistencyProofs(t *testing.T) {
	v := loadRFC6962Vectors(t)
	l := newRFC6962Log(t, v.leaves)
	for _, vec := range v.consistency {
		if vec.size1 < 1 || vec.size1 > vec.size2 {
			// tlog defines consistency only from a non-empty older tree.
			t.Logf("skipping the published consistency vector from %d to %d: tlog does not define it", vec.size1, vec.size2)
			continue
		}
		size1, size2 := vec.size1, vec.size2
		t.Run(fmt.Sprintf("size %d to %d", size1, size2), func(t *testing.T) {
			root1, root2 := v.roots[size1], v.roots[size2]

			got, err := tlog.ProveTree(size2, size1, l.reader())
			if err != nil {
				t.Fatalf("ProveTree: %v", err)
			}
			if !equalRFC6962Hashes(got, vec.proof) {
				t.Errorf("ProveTree = %s, want published %s", hexRFC6962(got), hexRFC6962(vec.proof))
			}
			if err := tlog.CheckTree(vec.proof, size2, root2, size1, root1); err != nil {
				t.Fatalf("CheckTree refused the published proof: %v", err)
			}

			type attack struct {
				name         string
				proof        []tlog.Hash
				size1, size2 int64
				root1, root2 tlog.Hash
			}
			honest := attack{proof: vec.proof, size1: size1, size2: size2, root1: root1, root2: root2}
			var attacks []attack
			add := func(name string, change func(a *attack)) {
				a := honest
				a.name = name
				change(&a)
				attacks = append(attacks, a)
			}
			for i := range vec.proof {
				add(fmt.Sprintf("a flipped proof hash (%d of %d)", i+1, len(vec.proof)), func(a *attack) {
					a.proof = flipRFC6962ProofBit(vec.proof, i*256+4)
				})
			}
			add("a forged old root", func(a *attack) { a.root1 = flipRFC6962Bit(root1, 0) })
			add("another size's old root", func(a *attack) { a.root1 = v.roots[size1-1] })
			add("a forged new root", func(a *attack) { a.root2 = flipRFC6962Bit(root2, 0) })
			if size1 < size2 {
				add("the old root as the new one", func(a *attack) { a.root2 = root1 })
				add("a larger old size", func(a *attack) { a.size1 = size1 + 1 })
			}
			if size1 > 1 {
				add("a smaller old size", func(a *attack) { a.size1 = size1 - 1 })
			}
			// As with inclusion proofs, only a new size that changes the
			// tree's height is wrong on the proof alone.
			add("a doubled new size", func(a *attack) { a.size2 = size2 * 2 })
			if len(vec.proof) > 0 {
				add("a truncated proof", func(a *attack) { a.proof = vec.proof[:len(vec.proof)-1] })
				add("an empty proof", func(a *attack) { a.proof = nil })
			}
			add("an extra proof hash", func(a *attack) {
				a.proof = append(append([]tlog.Hash(nil), vec.proof...), root2)
			})
			add("a proof with a hash put in front", func(a *attack) {
				a.proof = append([]tlog.Hash{root1}, vec.proof...)
			})
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					if err := tlog.CheckTree(a.proof, a.size2, a.root2, a.size1, a.root1); err == nil {
						t.Errorf("CheckTree(%s, size %d root %x, size %d root %x) accepted it",
							hexRFC6962(a.proof), a.size2, a.root2[:], a.size1, a.root1[:])
					}
				})
			}
		})
	}
}

// rfc6962MaxFuzzLeaves bounds the trees FuzzMerkleProofs builds, so every
// input stays quick to check exhaustively.
const rfc6962MaxFuzzLeaves = 300

// rfc6962FuzzLeaves reads leaves from fuzz input: each is a length byte
// and then that many bytes (fewer if the input runs out). The encoding can
// spell any leaf up to 255 bytes, the published ones included.
func rfc6962FuzzLeaves(data []byte) [][]byte {
	var leaves [][]byte
	for len(data) > 0 && len(leaves) < rfc6962MaxFuzzLeaves {
		n := min(int(data[0]), len(data)-1)
		leaves = append(leaves, data[1:1+n])
		data = data[1+n:]
	}
	return leaves
}

// rfc6962FuzzInput is the inverse of rfc6962FuzzLeaves for seeding.
func rfc6962FuzzInput(leaves [][]byte) []byte {
	var b []byte
	for _, l := range leaves {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return b
}

// FuzzMerkleProofs builds a tree from the fuzz input's leaves and checks
// that leafTree and tlog agree on every root, that every inclusion proof
// into the whole tree and into a chosen smaller tree verifies, that every
// consistency proof into both verifies, and that one flipped bit in any
// of those proofs makes it fail.
func FuzzMerkleProofs(f *testing.F) {
	v := loadRFC6962Vectors(f)
	all := rfc6962FuzzInput(v.leaves)
	for k := 1; k <= len(v.leaves); k++ {
		f.Add(rfc6962FuzzInput(v.leaves[:k]), uint16(0), uint16(k-1), uint16(0))
	}
	for _, vec := range v.inclusion {
		f.Add(all, uint16(max(vec.leaf-1, 0)), uint16(max(vec.size-1, 0)), uint16(3))
	}
	for _, vec := range v.consistency {
		f.Add(all, uint16(vec.size1), uint16(max(vec.size2-1, 0)), uint16(4))
	}
	f.Add(bytes.Repeat([]byte{0}, rfc6962MaxFuzzLeaves+10), uint16(17), uint16(200), uint16(255))
	f.Fuzz(func(t *testing.T, data []byte, index, size, bit uint16) {
		leaves := rfc6962FuzzLeaves(data)
		if len(leaves) == 0 {
			return
		}
		l := newRFC6962Log(t, nil)
		var lt leafTree
		n := int64(len(leaves))
		roots := make([]tlog.Hash, n+1)
		for i := int64(0); i <= n; i++ {
			if i > 0 {
				lt.add(leaves[i-1])
				if err := l.add(leaves[i-1]); err != nil {
					t.Fatalf("storing record %d: %v", i-1, err)
				}
			}
			th, err := tlog.TreeHash(i, l.reader())
			if err != nil {
				t.Fatalf("TreeHash(%d): %v", i, err)
			}
			if got := lt.root(); got != th {
				t.Fatalf("leafTree root %x after %d leaves, tlog.TreeHash %x", got, i, th[:])
			}
			roots[i] = th
		}

		chosen := int64(size)%n + 1
		sizes := []int64{n}
		if chosen != n {
			sizes = append(sizes, chosen)
		}
		for _, t2 := range sizes {
			for i := int64(0); i < t2; i++ {
				p, err := tlog.ProveRecord(t2, i, l.reader())
				if err != nil {
					t.Fatalf("ProveRecord(%d, %d): %v", t2, i, err)
				}
				h := tlog.RecordHash(leaves[i])
				if err := tlog.CheckRecord(p, t2, roots[t2], i, h); err != nil {
					t.Fatalf("CheckRecord of leaf %d in size %d refused ProveRecord's proof: %v", i, t2, err)
				}
				flip := int(bit) + int(i)
				if len(p) > 0 {
					if tlog.CheckRecord(flipRFC6962ProofBit(p, flip), t2, roots[t2], i, h) == nil {
						t.Fatalf("CheckRecord of leaf %d in size %d accepted a proof with bit %d flipped", i, t2, flip)
					}
				} else if tlog.CheckRecord(p, t2, flipRFC6962Bit(roots[t2], flip), i, h) == nil {
					t.Fatalf("CheckRecord of leaf %d in size %d accepted a root with bit %d flipped", i, t2, flip)
				}
			}
			for t1 := int64(1); t1 <= t2; t1++ {
				p, err := tlog.ProveTree(t2, t1, l.reader())
				if err != nil {
					t.Fatalf("ProveTree(%d, %d): %v", t2, t1, err)
				}
				if err := tlog.CheckTree(p, t2, roots[t2], t1, roots[t1]); err != nil {
					t.Fatalf("CheckTree from %d to %d refused ProveTree's proof: %v", t1, t2, err)
				}
				flip := int(bit) + int(t1)
				if len(p) > 0 {
					if tlog.CheckTree(flipRFC6962ProofBit(p, flip), t2, roots[t2], t1, roots[t1]) == nil {
						t.Fatalf("CheckTree from %d to %d accepted a proof with bit %d flipped", t1, t2, flip)
					}
				} else if tlog.CheckTree(p, t2, roots[t2], t1, flipRFC6962Bit(roots[t1], flip)) == nil {
					t.Fatalf("CheckTree from %d to %d accepted an old root with bit %d flipped", t1, t2, flip)
				}
			}
		}

		// The chosen leaf's proof must not vouch for different content.
		i := int64(index) % chosen
		j := (i + 1) % chosen
		if !bytes.Equal(leaves[i], leaves[j]) {
			p, err := tlog.ProveRecord(chosen, i, l.reader())
			if err != nil {
				t.Fatalf("ProveRecord(%d, %d): %v", chosen, i, err)
			}
			if tlog.CheckRecord(p, chosen, roots[chosen], i, tlog.RecordHash(leaves[j])) == nil {
				t.Fatalf("CheckRecord of leaf %d in size %d accepted leaf %d's content", i, chosen, j)
			}
		}
	})
}
