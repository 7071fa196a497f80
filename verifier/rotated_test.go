package verifier

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/schemas"
)

// testNoteSigner signs checkpoints in tests the way the writer does (key
// name aegis-<key_id>, note's key hash), without importing the writer.
type testNoteSigner struct {
	key  ed25519.PrivateKey
	name string
	hash uint32
}

func newTestNoteSigner(t testing.TB, key ed25519.PrivateKey) *testNoteSigner {
	t.Helper()
	name := "aegis-" + schemas.KeyID(pubOf(key))
	vkey, err := note.NewEd25519VerifierKey(name, pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return &testNoteSigner{key: key, name: name, hash: v.KeyHash()}
}

func (s *testNoteSigner) Name() string                    { return s.name }
func (s *testNoteSigner) KeyHash() uint32                 { return s.hash }
func (s *testNoteSigner) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.key, msg), nil }

// tlogRoot computes the tree root with tlog's stored-hash API over every
// hash of the tree, independently of leafTree.
func tlogRoot(t testing.TB, lines [][]byte) [32]byte {
	t.Helper()
	var all []tlog.Hash
	r := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = all[x]
		}
		return out, nil
	})
	for i, l := range lines {
		h, err := tlog.StoredHashes(int64(i), l, r)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, h...)
	}
	root, err := tlog.TreeHash(int64(len(lines)), r)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// splitLines returns the lines of a record file without their '\n'; a
// final fragment without one counts as a line.
func splitLines(file []byte) [][]byte {
	if len(file) == 0 {
		return nil
	}
	lines := bytes.Split(bytes.TrimSuffix(file, []byte("\n")), []byte("\n"))
	return lines
}

// checkpointBody is the checkpoint a writer seals file with.
func checkpointBody(t testing.TB, name string, file []byte) schemas.Checkpoint {
	lines := splitLines(file)
	cp := schemas.Checkpoint{
		Origin: "aegis/" + schemas.KeyID(pubOf(devKey())) + "/" + name,
		Size:   int64(len(lines)),
		Root:   tlogRoot(t, lines),
	}
	if len(lines) > 0 {
		cp.Tail = schemas.HashHex(lines[len(lines)-1])
	}
	return cp
}

func signCheckpoint(t testing.TB, key ed25519.PrivateKey, cp schemas.Checkpoint) []byte {
	t.Helper()
	msg, err := note.Sign(&note.Note{Text: string(cp.Body())}, newTestNoteSigner(t, key))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// rotatedFiles writes three record files as rotation leaves them: two
// sealed segments of two sessions each and a live file of one, the chain
// running on across them.
func rotatedFiles(t testing.TB) [][]byte {
	w := newTestWriter(t, devKey())
	var files [][]byte
	for _, sessions := range []int{2, 2, 1} {
		for range sessions {
			goodSession(w)
		}
		files = append(files, w.bytes())
		w.lines = nil
	}
	return files
}

var rotatedNames = []string{"audit.000001.jsonl", "audit.000002.jsonl", "audit.jsonl"}

type rotatedSet struct {
	names []string
	files [][]byte
	cps   [][]byte // nil: no checkpoint
}

// sealed is the set as rotation leaves it: both segments with a
// checkpoint by the dev key, the live file without.
func sealed(t testing.TB) *rotatedSet {
	files := rotatedFiles(t)
	s := &rotatedSet{names: append([]string(nil), rotatedNames...), files: files, cps: make([][]byte, len(files))}
	for i := range 2 {
		s.cps[i] = signCheckpoint(t, devKey(), checkpointBody(t, s.names[i], files[i]))
	}
	return s
}

func (s *rotatedSet) segments() []Segment {
	segs := make([]Segment, len(s.files))
	for i := range s.files {
		segs[i] = Segment{Name: s.names[i], Record: bytes.NewReader(s.files[i])}
		if s.cps[i] != nil {
			segs[i].Checkpoint, segs[i].CheckpointName = s.cps[i], s.names[i]+".checkpoint"
		}
	}
	return segs
}

// without returns the set with file i left out.
func (s *rotatedSet) without(i int) *rotatedSet {
	return &rotatedSet{
		names: append(s.names[:i:i], s.names[i+1:]...),
		files: append(s.files[:i:i], s.files[i+1:]...),
		cps:   append(s.cps[:i:i], s.cps[i+1:]...),
	}
}

// dropLines removes the last n lines of file i.
func (s *rotatedSet) dropLines(i, n int) *rotatedSet {
	lines := splitLines(s.files[i])
	s.files[i] = append(bytes.Join(lines[:len(lines)-n], []byte("\n")), '\n')
	return s
}

func TestRotatedSetVerifies(t *testing.T) {
	s := sealed(t)
	for _, cfg := range testConfigs() {
		for _, opts := range []Options{{}, {Keys: []ed25519.PublicKey{pubOf(devKey())}}} {
			res := verifySet(s.segments(), opts, cfg)
			if res.Verdict != Verified {
				t.Fatalf("VerifySet = %s", Render(res))
			}
			if len(res.Checkpoints) != 2 {
				t.Fatalf("Checkpoints = %+v", res.Checkpoints)
			}
			out := Render(res)
			for i, c := range res.Checkpoints {
				n := len(splitLines(s.files[i]))
				if !c.Matches || c.File != s.names[i] || c.Checkpoint.Size != int64(n) || c.Signer != schemas.KeyID(pubOf(devKey())) {
					t.Fatalf("checkpoint %d = %+v", i, c)
				}
				want := "checkpoint " + s.names[i] + ".checkpoint: " + strconv.Itoa(n) + " lines, root " +
					base64.StdEncoding.EncodeToString(c.Checkpoint.Root[:]) + ", matches\n"
				if !strings.Contains(out, want) {
					t.Fatalf("Render lacks %q:\n%s", want, out)
				}
			}
			if res.Coverage == nil || res.Coverage.Session != 4 {
				t.Fatalf("coverage %v, want session 4", res.Coverage)
			}
		}
	}
}

// TestRotatedSetAttacks: each way of bending a rotated record that the
// chain and the checkpoints must catch.
func TestRotatedSetAttacks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(t *testing.T) *rotatedSet
		opts  Options
		want  Code
		file  string // Reason.File
		parts []string
	}{
		{
			name: "segment truncated at a session boundary after its checkpoint",
			set:  func(t *testing.T) *rotatedSet { return sealed(t).dropLines(0, 7) },
			want: CheckpointMismatch, file: "audit.000001.jsonl",
			parts: []string{"audit.000001.jsonl holds 7 lines, fewer than the 14 that its signed checkpoint audit.000001.jsonl.checkpoint seals: lines were cut from its end"},
		},
		{
			name: "segment truncated mid-session after its checkpoint",
			set:  func(t *testing.T) *rotatedSet { return sealed(t).dropLines(1, 3) },
			want: CheckpointMismatch, file: "audit.000002.jsonl",
			parts: []string{"audit.000002.jsonl holds 11 lines, fewer than the 14"},
		},
		{
			name: "lines appended to a sealed segment",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				w := newTestWriter(t, devKey())
				w.tail = schemas.HashHex(splitLines(s.files[0])[13])
				s.files[0] = append(s.files[0], goodSession(w).bytes()...)
				return s
			},
			want: CheckpointMismatch, file: "audit.000001.jsonl",
			parts: []string{"holds 21 lines, more than the 14", "added after it was sealed"},
		},
		{
			name: "line edited in a sealed segment",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				w := &testWriter{t: t, lines: splitLines(s.files[1])}
				w.edit(3, set("tool_id", "rm"))
				s.files[1] = w.bytes()
				return s
			},
			want: ChainBroken, file: "audit.000002.jsonl",
			parts: []string{"(audit.000002.jsonl line 5)"},
		},
		{
			name: "sealed segment rewritten under another key, checkpoint kept",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				w := newTestWriter(t, otherKey())
				w.tail = splitTail(s.files[0])
				s.files[1] = goodSession(goodSession(w)).bytes()
				return s
			},
			want: BadCheckpoint, file: "audit.000002.jsonl",
			parts: []string{"checkpoint audit.000002.jsonl.checkpoint is signed by aegis-" + schemas.KeyID(pubOf(devKey())) + ", not by a key of this record"},
		},
		{
			name: "empty line slipped into a sealed segment",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.files[0] = bytes.Replace(s.files[0], []byte("\n"), []byte("\n\n"), 1)
				return s
			},
			want: CheckpointMismatch, file: "audit.000001.jsonl",
			parts: []string{"holds 15 lines, more than the 14"},
		},
		{
			name: "segment left out of the set",
			set:  func(t *testing.T) *rotatedSet { return sealed(t).without(1) },
			want: SessionBoundaryBroken, file: "audit.jsonl",
			parts: []string{"open at session 2 seq 0 links to previous tail", "(audit.jsonl line 1)"},
		},
		{
			name: "segments in the wrong order",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.names[0], s.names[1] = s.names[1], s.names[0]
				s.files[0], s.files[1] = s.files[1], s.files[0]
				s.cps[0], s.cps[1] = s.cps[1], s.cps[0]
				return s
			},
			want: SessionBoundaryBroken, file: "audit.000002.jsonl",
			parts: []string{"no earlier session is in this record", "(audit.000002.jsonl line 1)"},
		},
		{
			name: "forged checkpoint for a truncated segment (other key)",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t).dropLines(0, 7)
				s.cps[0] = signCheckpoint(t, otherKey(), checkpointBody(t, s.names[0], s.files[0]))
				return s
			},
			want: BadCheckpoint, file: "audit.000001.jsonl",
			parts: []string{"is signed by aegis-" + schemas.KeyID(pubOf(otherKey())) + ", not by a key of this record"},
		},
		{
			name: "forged checkpoint under a key pinned nowhere but claiming the record's key name",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				body := checkpointBody(t, s.names[0], s.files[0])
				body.Size--
				signer := newTestNoteSigner(t, devKey())
				signer.key = otherKey()
				msg, err := note.Sign(&note.Note{Text: string(body.Body())}, signer)
				if err != nil {
					t.Fatal(err)
				}
				s.cps[0] = msg
				return s
			},
			want: BadCheckpoint, file: "audit.000001.jsonl",
			parts: []string{"carries a signature by aegis-" + schemas.KeyID(pubOf(devKey())) + " that does not verify"},
		},
		{
			name: "checkpoint with a bumped size, signature kept",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.cps[0] = bytes.Replace(s.cps[0], []byte("\n14\n"), []byte("\n15\n"), 1)
				return s
			},
			want: BadCheckpoint, file: "audit.000001.jsonl",
			parts: []string{"does not verify"},
		},
		{
			name: "checkpoint with a bumped size, signed by the record's key",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				body := checkpointBody(t, s.names[0], s.files[0])
				body.Size++
				s.cps[0] = signCheckpoint(t, devKey(), body)
				return s
			},
			want: CheckpointMismatch, file: "audit.000001.jsonl",
			parts: []string{"holds 14 lines, fewer than the 15"},
		},
		{
			name: "checkpoint of another segment swapped in",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.cps[0], s.cps[1] = s.cps[1], s.cps[0]
				return s
			},
			want: CheckpointMismatch, file: "audit.000001.jsonl",
			parts: []string{"hash to root", "a sealed line was changed"},
		},
		{
			name: "checkpoint that is not a signed note",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.cps[0] = checkpointBody(t, s.names[0], s.files[0]).Body()
				return s
			},
			want: BadCheckpoint, file: "audit.000001.jsonl",
			parts: []string{"is not a signed note"},
		},
		{
			name: "signed checkpoint with a body that does not parse",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				msg, err := note.Sign(&note.Note{Text: "aegis/x\n14\n"}, newTestNoteSigner(t, devKey()))
				if err != nil {
					t.Fatal(err)
				}
				s.cps[0] = msg
				return s
			},
			want: BadCheckpoint, file: "audit.000001.jsonl",
			parts: []string{"does not parse"},
		},
		{
			name: "torn last line in a non-final segment",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.files[0] = bytes.TrimSuffix(s.files[0], []byte("\n"))
				return s
			},
			want: MalformedLine, file: "audit.000001.jsonl",
			parts: []string{"audit.000001.jsonl does not end in a newline: its last line (audit.000001.jsonl line 14) is torn"},
		},
		{
			name: "torn half line in a non-final segment, not joined to the next file",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.files[1] = s.files[1][:len(s.files[1])-20]
				s.cps[1] = nil
				return s
			},
			want: MalformedLine, file: "audit.000002.jsonl",
			parts: []string{"audit.000002.jsonl line 14:"},
		},
		{
			name: "torn last line of a segment without checkpoint",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				s.files[0] = bytes.TrimSuffix(s.files[0], []byte("\n"))
				s.cps[0] = nil
				return s
			},
			want: MalformedLine, file: "audit.000001.jsonl",
			parts: []string{"does not end in a newline"},
		},
		{
			name: "segment with an open under an untrusted key, pinned",
			set: func(t *testing.T) *rotatedSet {
				s := sealed(t)
				w := newTestWriter(t, otherKey())
				w.tail = splitTail(s.files[1])
				s.files[2] = goodSession(w).bytes()
				return s
			},
			opts: Options{Keys: []ed25519.PublicKey{pubOf(devKey())}},
			want: UntrustedKey, file: "audit.jsonl",
			parts: []string{"(audit.jsonl line 1)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.set(t)
			for _, cfg := range testConfigs() {
				res := verifySet(s.segments(), tc.opts, cfg)
				if res.Reason == nil || res.Reason.Code != tc.want || res.Verdict != tc.want.Verdict() {
					t.Fatalf("VerifySet = %s, want %s", Render(res), tc.want)
				}
				if res.Reason.File != tc.file {
					t.Fatalf("Reason.File = %q, want %q", res.Reason.File, tc.file)
				}
				for _, p := range tc.parts {
					if !strings.Contains(res.Reason.Message, p) {
						t.Fatalf("message lacks %q:\n%s", p, res.Reason.Message)
					}
				}
				if ExitCode(res) != 1 {
					t.Fatalf("ExitCode = %d", ExitCode(res))
				}
			}
		})
	}
}

func splitTail(file []byte) string {
	lines := splitLines(file)
	return schemas.HashHex(lines[len(lines)-1])
}

// TestRotatedSetLiveFile: the live file keeps the single record's rules
// for its end: a torn final line or an unfinished session is
// Indeterminate, and a later segment verified alone is Continued.
func TestRotatedSetLiveFile(t *testing.T) {
	s := sealed(t)
	s.files[2] = s.files[2][:len(s.files[2])-10]
	res := VerifySet(s.segments(), Options{})
	if res.Reason == nil || res.Reason.Code != TornFinalLine || !strings.Contains(res.Reason.Message, "final audit.jsonl line 7 does not parse") {
		t.Fatalf("VerifySet = %s", Render(res))
	}

	s = sealed(t)
	res = Verify(bytes.NewReader(s.files[1]), Options{})
	if !res.Continued || res.Reason == nil || res.Reason.Code != SessionBoundaryBroken {
		t.Fatalf("a later segment alone: %+v", res)
	}
	if res := Verify(bytes.NewReader(s.files[0]), Options{}); res.Continued || res.Verdict != Verified {
		t.Fatalf("the first segment alone: %+v", res)
	}
}

// TestVerifySetOfOneIsVerify: a set of one file without checkpoint gives
// the verdict and reason code that Verify gives, on every corpus record.
func TestVerifySetOfOneIsVerify(t *testing.T) {
	for name, rec := range diffRecords(t) {
		for _, opts := range testOptions() {
			want := Verify(bytes.NewReader(rec), opts)
			got := VerifySet([]Segment{{Name: "r", Record: bytes.NewReader(rec)}}, opts)
			if got.Verdict != want.Verdict || (want.Reason == nil) != (got.Reason == nil) ||
				want.Reason != nil && (want.Reason.Code != got.Reason.Code || want.Reason.Line != got.Reason.Line) {
				t.Fatalf("%s: VerifySet = %s, Verify = %s", name, Render(got), Render(want))
			}
		}
	}
}

// TestLeafTreeMatchesTlog: the verifier's tree gives tlog.TreeHash's root
// for every size up to 300 and keeps one hash per set bit of the size.
func TestLeafTreeMatchesTlog(t *testing.T) {
	var (
		lines [][]byte
		tree  leafTree
	)
	for n := 0; n <= 300; n++ {
		if got, want := tree.root(), tlogRoot(t, lines); got != want {
			t.Fatalf("size %d: root %x, want %x", n, got, want)
		}
		if len(tree.stack) != popcount(uint64(n)) {
			t.Fatalf("size %d: %d hashes kept", n, len(tree.stack))
		}
		l := []byte(strings.Repeat("y", n%5) + strconv.Itoa(n))
		lines = append(lines, l)
		tree.add(l)
	}
}

func popcount(n uint64) int {
	c := 0
	for ; n != 0; n &= n - 1 {
		c++
	}
	return c
}

// TestCheckCheckpoint: the exported check on its own, as a tool that keeps
// its own tree would call it.
func TestCheckCheckpoint(t *testing.T) {
	file := rotatedFiles(t)[0]
	lines := splitLines(file)
	cp := checkpointBody(t, "audit.000001.jsonl", file)
	msg := signCheckpoint(t, devKey(), cp)
	keys := []ed25519.PublicKey{pubOf(otherKey()), pubOf(devKey()), pubOf(devKey())}
	got, signer, err := CheckCheckpoint(msg, keys, int64(len(lines)), tlogRoot(t, lines), schemas.HashHex(lines[len(lines)-1]))
	if err != nil || got != cp || signer != schemas.KeyID(pubOf(devKey())) {
		t.Fatalf("CheckCheckpoint = %+v, %q, %v", got, signer, err)
	}
	for _, tc := range []struct {
		name string
		keys []ed25519.PublicKey
		size int64
		tail string
		want Code
	}{
		{"no key of the record", []ed25519.PublicKey{pubOf(otherKey())}, cp.Size, cp.Tail, BadCheckpoint},
		{"no key at all", nil, cp.Size, cp.Tail, BadCheckpoint},
		{"small-order key offered", []ed25519.PublicKey{make(ed25519.PublicKey, 32)}, cp.Size, cp.Tail, BadCheckpoint},
		{"record shorter", keys, cp.Size - 1, cp.Tail, CheckpointMismatch},
		{"another last line", keys, cp.Size, schemas.HashHex([]byte("x")), CheckpointMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := CheckCheckpoint(msg, tc.keys, tc.size, cp.Root, tc.tail)
			r, ok := err.(*Reason)
			if !ok || r.Code != tc.want {
				t.Fatalf("CheckCheckpoint = %v, want %s", err, tc.want)
			}
		})
	}
}

// FuzzCheckCheckpoint: no note makes the check panic, and one it accepts
// seals exactly the size, root and tail given, under a given key.
func FuzzCheckCheckpoint(f *testing.F) {
	file := rotatedFiles(f)[0]
	lines := splitLines(file)
	cp := checkpointBody(f, "audit.000001.jsonl", file)
	f.Add(signCheckpoint(f, devKey(), cp))
	f.Add(signCheckpoint(f, otherKey(), cp))
	f.Add(cp.Body())
	f.Add([]byte("\n\n— aegis-x AAAAAAA=\n"))
	size, root, tail := int64(len(lines)), cp.Root, cp.Tail
	keys := []ed25519.PublicKey{pubOf(devKey())}
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, signer, err := CheckCheckpoint(msg, keys, size, root, tail)
		if err != nil {
			if r, ok := err.(*Reason); !ok || (r.Code != BadCheckpoint && r.Code != CheckpointMismatch) {
				t.Fatalf("error %#v", err)
			}
			return
		}
		if got.Size != size || got.Root != root || got.Tail != tail || signer != schemas.KeyID(pubOf(devKey())) {
			t.Fatalf("accepted %+v signed by %q", got, signer)
		}
	})
}
