package policy

import (
	"strings"
	"testing"
)

// witnesses: holds a witness policy; one that does not parse is refused
// at its key's line, like any other value.
func TestWitnessesKey(t *testing.T) {
	const vkey = "w1.example/w+b0d3ca5c+BDtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
	s, err := Parse("policy.yaml", []byte("version: 1\nwitnesses: |\n  witness w1 "+vkey+" https://w1.example/\n  quorum w1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Witnesses(); w == nil || len(w.Witnesses) != 1 || w.Witnesses[0].URL != "https://w1.example/" {
		t.Fatalf("witnesses %+v", s.Witnesses())
	}
	_, err = Parse("policy.yaml", []byte("version: 1\nwitnesses: |\n  witness w1 "+vkey+"\n"))
	if err == nil || !strings.Contains(err.Error(), "policy.yaml:2: witnesses:") || !strings.Contains(err.Error(), "no quorum line") {
		t.Fatalf("a witness policy without quorum: %v", err)
	}
}
