package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file that is no audit record at all is said to be none, with exit 4,
// not called Tampered or a torn write; a record whose first line was
// damaged still has audit lines, and stays Tampered, so that damage is
// never passed off as "the wrong file".
func TestVerifySaysWhatIsNotARecord(t *testing.T) {
	dir := t.TempDir()
	verified, err := os.ReadFile(filepath.Join("..", "..", "verifier", "testdata", "corpus", "verified.aarl"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(verified), "\n")
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"a text file", "hello world\n", 4, "Not an aegis record: FILE: no line of it is an audit line (the first: invalid character 'h'"},
		{"a YAML file", "# aegis.yaml\nversion: 1\nservers: {}\n", 4, "Not an aegis record: FILE: no line of it is an audit line"},
		{"JSON lines of another program", "{\"level\":\"info\",\"msg\":\"started\"}\n{\"level\":\"info\"}\n", 4, "(the first: missing schema_version)"},
		{"a text file without a final newline", "just one line", 4, "Not an aegis record: FILE"},
		{"a record whose first line was overwritten", "garbage that was the open line\n" + rest, 1, "Tampered: line 1: "},
		{"a record whose first line was blanked", "{}\n" + rest, 1, "Tampered: line 1: "},
		{"a whole record", string(verified), 0, "Verified (unpinned)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(file, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, stderr := run(t, nil, "verify", file)
			want := strings.ReplaceAll(tc.want, "FILE", file)
			if code != tc.code || !strings.Contains(out, want) {
				t.Errorf("exit %d, want %d\nstdout: %s\nwant: %s\nstderr: %s", code, tc.code, out, want, stderr)
			}
			if tc.code == 4 && !strings.Contains(stderr, "aegis: hint: name an audit record") {
				t.Errorf("no hint: %s", stderr)
			}
		})
	}
}
