package reading

import (
	"bytes"
	"strconv"
	"testing"
)

// An object of very many members is read in time proportional to its
// size: a server that lists a tool with hundreds of thousands of members
// must not stall the relay while the duplicate check compares each with
// every other. On the quadratic check this test runs for minutes.
func TestReadObjectOfManyMembersFindsTheLateDuplicate(t *testing.T) {
	const n = 300_000
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i < n; i++ {
		b.WriteString(`"m` + strconv.Itoa(i) + `":1,`)
	}
	b.WriteString(`"m17":2}`) // the duplicate, after the set is built
	v, ok := Read(b.Bytes()).One()
	if !ok || len(v.Members) != n+1 {
		t.Fatalf("read %v, %d members", ok, len(v.Members))
	}
	if v.Ambiguous == "" {
		t.Fatal("a member given twice, far apart, is not marked")
	}
	b.Reset()
	b.WriteByte('{')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"m` + strconv.Itoa(i) + `":1`)
	}
	b.WriteByte('}')
	if v, _ := Read(b.Bytes()).One(); v.Ambiguous != "" {
		t.Fatalf("distinct members marked: %s", v.Ambiguous)
	}
}

func TestDuplicateCheckAroundTheScanLimit(t *testing.T) {
	for n := namesScan - 2; n <= namesScan+2; n++ {
		for dup := 0; dup < n; dup++ {
			var b bytes.Buffer
			b.WriteByte('{')
			for i := 0; i < n; i++ {
				b.WriteString(`"m` + strconv.Itoa(i) + `":1,`)
			}
			b.WriteString(`"m` + strconv.Itoa(dup) + `":2,"z":3}`)
			v, ok := Read(b.Bytes()).One()
			if !ok || v.Ambiguous == "" {
				t.Fatalf("%d members, m%d again: not marked", n, dup)
			}
		}
	}
}

func TestCaseCollisionAtAnyDepth(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{`{"path":"/tmp","Path":"/etc"}`, true},
		{`{"a":[{"x":1},{"k":1,"\u212a":2}]}`, true}, // the Kelvin sign folds to k
		{`{"a":{"ſ":1,"s":2}}`, true},                // long s folds to s
		{`{"path":"/tmp","paths":["/etc"]}`, false},
		{`[{"a":1},{"A":1}]`, false}, // different objects
	} {
		v, ok := Read([]byte(tc.text)).One()
		if !ok {
			t.Fatalf("%s: not read", tc.text)
		}
		if got := v.CaseCollision() != ""; got != tc.want {
			t.Errorf("%s: collision %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestEndIsPastTheLastCompleteValue(t *testing.T) {
	for _, tc := range []struct {
		text string
		end  int
	}{
		{`{"a":1}`, 7},
		{`{"a":1} {"b":`, 7},
		{`{"a":1}{"b":2} x`, 14},
		{`x`, 0},
	} {
		if got := Read([]byte(tc.text)).End; got != tc.end {
			t.Errorf("%q: End %d, want %d", tc.text, got, tc.end)
		}
	}
}
