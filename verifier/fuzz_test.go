package verifier

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzVerify: no input makes Verify panic, every result renders to a
// label line that starts with a verdict, and the exit code matches it.
func FuzzVerify(f *testing.F) {
	for _, b := range seedRecords(f) {
		f.Add(b)
		if len(b) > 0 {
			f.Add(b[:len(b)-1])           // no final newline
			f.Add(b[:len(b)/2])           // cut mid-line
			f.Add(bytes.Repeat(b[:1], 3)) // "{{{"
		}
	}
	f.Add([]byte("\n"))
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, record []byte) {
		for _, opts := range []Options{{}, {TrustStore: &TrustStore{}}} {
			res := Verify(bytes.NewReader(record), opts)
			if res.Err != nil {
				t.Fatalf("Verify of in-memory input: %v", res.Err)
			}
			out := Render(res)
			first, _, _ := strings.Cut(out, "\n")
			switch {
			case strings.HasPrefix(first, "Verified ("):
				if ExitCode(res) != 0 || res.Reason != nil {
					t.Fatalf("label %q with exit %d reason %v", first, ExitCode(res), res.Reason)
				}
			case strings.HasPrefix(first, "Tampered: "):
				if ExitCode(res) != 1 {
					t.Fatalf("label %q with exit %d", first, ExitCode(res))
				}
			case strings.HasPrefix(first, "Indeterminate: "):
				if ExitCode(res) != 3 {
					t.Fatalf("label %q with exit %d", first, ExitCode(res))
				}
			default:
				t.Fatalf("label %q", first)
			}
			if res.Verdict == Verified && opts.TrustStore != nil {
				t.Fatalf("an empty trust store verified %q", record)
			}
		}
	})
}

func FuzzParseTrustStore(f *testing.F) {
	f.Add([]byte("# c\n\n" + devPubHex + "\n"))
	f.Add([]byte(devPubHex + " x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		ts, err := ParseTrustStore(bytes.NewReader(in))
		if (ts == nil) == (err == nil) {
			t.Fatalf("ParseTrustStore = %v, %v", ts, err)
		}
	})
}

// seedRecords returns the tamper corpus and the upstream golden record, the
// seeds of the verifier's fuzz targets.
func seedRecords(f *testing.F) [][]byte {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*.aarl"))
	files = append(files, filepath.Join("testdata", "upstream-golden-session.aarl"))
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
