package schemas

import (
	"encoding/json"
	"strings"
	"testing"
)

// A proof document parses only in the one shape of its kind.
func TestParseProofRefuses(t *testing.T) {
	h := ProofHash([32]byte{1})
	zero := int64(0)
	inclusion := Proof{Kind: ProofInclusion, Checkpoint: "n", TreeSize: 2, Root: h, LineNumber: 1, LeafIndex: &zero, Line: "l", LeafHash: h, Path: []string{h}}
	good, _ := json.Marshal(inclusion)
	if _, err := ParseProof(strings.NewReader(string(good))); err != nil {
		t.Fatalf("%v\n%s", err, good)
	}
	for _, tc := range []struct{ name, doc string }{
		{"an unknown member", strings.Replace(string(good), `{`, `{"extra":1,`, 1)},
		{"a second value after it", string(good) + "{}"},
		{"a leaf outside the tree", strings.Replace(string(good), `"tree_size":2`, `"tree_size":0`, 1)},
		{"a line number that is not the leaf's", strings.Replace(string(good), `"line_number":1`, `"line_number":2`, 1)},
		{"no leaf index", strings.Replace(string(good), `"leaf_index":0,`, ``, 1)},
		{"a hash that is not 32 bytes", strings.Replace(string(good), h, "AAAA", 1)},
		{"a hash in unpadded base64", strings.Replace(string(good), h, strings.TrimRight(h, "="), 1)},
		{"an unknown kind", strings.Replace(string(good), ProofInclusion, "rfc6962-other", 1)},
		{"an inclusion proof with an old tree", strings.Replace(string(good), `{`, `{"old_size":1,`, 1)},
		{"a consistency proof without its old checkpoint", `{"proof":"rfc6962-consistency","checkpoint":"n","tree_size":2,"root":"` + h + `","old_size":1,"old_root":"` + h + `","path":[]}`},
		{"no checkpoint", strings.Replace(string(good), `"checkpoint":"n"`, `"checkpoint":""`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseProof(strings.NewReader(tc.doc)); err == nil {
				t.Fatalf("parsed %s", tc.doc)
			}
		})
	}
}
